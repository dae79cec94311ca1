#include <halfgrad/optim/lr_scheduler.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include <halfgrad/optim/adam.h>
#include <halfgrad/optim/sgd.h>

namespace halfgrad::optim {

namespace {

constexpr double kPi = std::numbers::pi;  // == Python's math.pi

// A state dict holds counts as doubles: check before converting (a NaN or
// 1e300 converted to int64 is undefined behaviour).
int64_t whole_number(const std::string& where, const std::string& key, double v) {
  HG_CHECK(std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 9.0e15,
           "{}.load_state_dict: \"{}\" should be a whole number, got {}", where, key, v);
  return static_cast<int64_t>(v);
}

double scalar(const std::string& where, const LRSchedulerState& s, const std::string& key) {
  auto it = s.scalars.find(key);
  HG_CHECK(it != s.scalars.end(), "{}.load_state_dict: missing key \"{}\" (pass a state_dict() of the same scheduler)",
           where, key);
  return it->second;
}

const std::vector<double>& list(const std::string& where, const LRSchedulerState& s, const std::string& key,
                                size_t size) {
  auto it = s.lists.find(key);
  HG_CHECK(it != s.lists.end(), "{}.load_state_dict: missing key \"{}\" (pass a state_dict() of the same scheduler)",
           where, key);
  HG_CHECK(it->second.size() == size, "{}.load_state_dict: \"{}\" has {} values but the optimizer has {} param groups",
           where, key, it->second.size(), size);
  return it->second;
}

// A state with a key this scheduler does not save (a StepLR's "step_size"
// offered to a MultiStepLR), or without one it does, is another scheduler's
// (or edited): an Error naming the key, not a silent partial load.
void same_keys(const std::string& where, const LRSchedulerState& state, const LRSchedulerState& mine) {
  const auto unknown = [&](const auto& theirs, const auto& ours, const char* kind) {
    for (const auto& [key, value] : theirs) {
      (void)value;
      HG_CHECK(ours.count(key) != 0,
               "{}.load_state_dict: the state has the unknown {} \"{}\", which a {} does not save; pass a state_dict() "
               "of the same kind of scheduler",
               where, kind, key.size() > 200 ? key.substr(0, 200) + "..." : key, where);
    }
  };
  const auto missing = [&](const auto& theirs, const auto& ours) {
    for (const auto& [key, value] : ours) {
      (void)value;
      HG_CHECK(theirs.count(key) != 0,
               "{}.load_state_dict: missing key \"{}\" (pass a state_dict() of the same kind of scheduler)", where,
               key);
    }
  };
  unknown(state.scalars, mine.scalars, "scalar");
  unknown(state.lists, mine.lists, "list");
  missing(state.scalars, mine.scalars);
  missing(state.lists, mine.lists);
}

// OneCycleLR's per-group arguments: one value for all groups or one per group.
std::vector<double> per_group(const char* what, const std::vector<double>& v, size_t groups) {
  HG_CHECK(v.size() == 1 || v.size() == groups,
           "OneCycleLR: expected {} values for {} (one per param group) or one for all, got {}", groups, what,
           v.size());
  return v.size() == 1 ? std::vector<double>(groups, v[0]) : v;
}

// Cycling momentum needs to know which option is "momentum": SGD's momentum
// or Adam's beta1 (PyTorch: 'momentum' or 'betas' in optimizer.defaults).
double* momentum_slot(Optimizer& opt, size_t group) {
  if (auto* sgd = dynamic_cast<SGD*>(&opt)) return &sgd->param_groups()[group].options.momentum;
  if (auto* adam = dynamic_cast<Adam*>(&opt)) return &adam->param_groups()[group].options.betas[0];
  if (auto* adamw = dynamic_cast<AdamW*>(&opt)) return &adamw->param_groups()[group].options.betas[0];
  return nullptr;
}

}  // namespace

// ---- LRScheduler ----------------------------------------------------------

LRScheduler::LRScheduler(std::string name, Optimizer& optimizer) : name_(std::move(name)), optimizer_(optimizer) {
  HG_CHECK(optimizer.num_param_groups() > 0, "{}: the optimizer has no param groups", name_);
  // group.setdefault('initial_lr', group['lr'])
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    if (!optimizer.initial_lr(g)) optimizer.set_initial_lr(g, optimizer.lr(g));
    base_lrs_.push_back(*optimizer.initial_lr(g));
  }
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

void LRScheduler::step() { apply(last_epoch_ + 1, false); }

void LRScheduler::step_to(int64_t epoch) { apply(epoch, true); }

void LRScheduler::apply(int64_t epoch, bool closed_form) {
  HG_CHECK(optimizer_.num_param_groups() == num_groups(),
           "{}.step: the optimizer has {} param groups but the scheduler was made for {}; make the scheduler after "
           "adding every group",
           name_, optimizer_.num_param_groups(), num_groups());
  // get_lr reads the advanced counters. Unlike PyTorch, a step that throws
  // (OneCycleLR past its end) leaves the scheduler as it was.
  const int64_t old_epoch = last_epoch_, old_count = step_count_;
  ++step_count_;
  last_epoch_ = epoch;
  std::vector<double> lrs;
  try {
    lrs = closed_form ? closed_form_lr() : get_lr();
    // PyTorch would write any value; halfgrad's optimizers reject a negative
    // lr, so say here which scheduler made it (OneCycleLR's linear annealing
    // extrapolates below 0 on the extra step PyTorch allows at total_steps).
    for (size_t g = 0; g < lrs.size(); ++g)
      HG_CHECK(lrs[g] >= 0,
               "{}.step: epoch {} gives group {} the negative learning rate {}; check the scheduler's "
               "arguments (for OneCycleLR: do not step more than total_steps times)",
               name_, epoch, g, lrs[g]);
  } catch (...) {
    last_epoch_ = old_epoch;
    step_count_ = old_count;
    throw;
  }
  for (size_t g = 0; g < lrs.size(); ++g) optimizer_.set_lr(g, lrs[g]);
  commit_step();
  last_lr_.clear();
  for (size_t g = 0; g < num_groups(); ++g) last_lr_.push_back(optimizer_.lr(g));
}

LRSchedulerState LRScheduler::state_dict() const {
  LRSchedulerState s;
  s.scalars["last_epoch"] = static_cast<double>(last_epoch_);
  s.scalars["_step_count"] = static_cast<double>(step_count_);
  s.lists["base_lrs"] = base_lrs_;
  s.lists["_last_lr"] = last_lr_;
  save_extra(s);
  return s;
}

void LRScheduler::load_state_dict(const LRSchedulerState& state) {
  // Everything is read and checked before anything changes.
  const int64_t last_epoch = whole_number(name_, "last_epoch", scalar(name_, state, "last_epoch"));
  const int64_t step_count = whole_number(name_, "_step_count", scalar(name_, state, "_step_count"));
  const auto& base_lrs = list(name_, state, "base_lrs", num_groups());
  const auto& last_lr = list(name_, state, "_last_lr", num_groups());
  // The hyperparameters come from the constructor (PyTorch would take the
  // saved ones): a state saved with other ones is an error, not a silent mix.
  const LRSchedulerState mine = state_dict();
  same_keys(name_, state, mine);
  HG_CHECK(state.schedulers.empty(), "{}.load_state_dict: the state has {} nested scheduler states; a {} has none", name_,
           state.schedulers.size(), name_);
  for (const auto& [key, value] : mine.scalars) {
    if (key == "last_epoch" || key == "_step_count") continue;
    auto it = state.scalars.find(key);
    HG_CHECK(it == state.scalars.end() || it->second == value,
             "{}.load_state_dict: the state was saved with {} = {} but this scheduler has {}; construct it with the "
             "same arguments",
             name_, key, it->second, value);
  }
  if (auto it = state.lists.find("milestones"); it != state.lists.end())
    HG_CHECK(it->second == mine.lists.at("milestones"),
             "{}.load_state_dict: the state was saved with other milestones; construct it with the same arguments",
             name_);
  load_extra(state);
  last_epoch_ = last_epoch;
  step_count_ = step_count;
  base_lrs_ = base_lrs;
  last_lr_ = last_lr;
}

// ---- StepLR ---------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler("StepLR", optimizer), step_size_(step_size), gamma_(gamma) {
  HG_CHECK(step_size > 0, "StepLR: step_size should be a positive number of epochs, got {}", step_size);
  HG_CHECK(gamma > 0 && std::isfinite(gamma), "StepLR: gamma should be a finite number > 0 (e.g. 0.1), got {}", gamma);
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> lrs;
  for (size_t g = 0; g < num_groups(); ++g)
    lrs.push_back(last_epoch_ == 0 || last_epoch_ % step_size_ != 0 ? group_lr(g) : group_lr(g) * gamma_);
  return lrs;
}

std::vector<double> StepLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch_ / step_size_)));
  return lrs;
}

void StepLR::save_extra(LRSchedulerState& s) const {
  s.scalars["step_size"] = static_cast<double>(step_size_);
  s.scalars["gamma"] = gamma_;
}

// ---- MultiStepLR ----------------------------------------------------------

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler("MultiStepLR", optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  for (size_t i = 0; i < milestones_.size(); ++i) {
    HG_CHECK(milestones_[i] >= 0, "MultiStepLR: milestone {} is {}; milestones are epochs, >= 0", i, milestones_[i]);
    HG_CHECK(i == 0 || milestones_[i] > milestones_[i - 1],
             "MultiStepLR: milestones should be strictly increasing, got {} after {} (at index {})", milestones_[i],
             milestones_[i - 1], i);
  }
  HG_CHECK(gamma > 0 && std::isfinite(gamma), "MultiStepLR: gamma should be a finite number > 0 (e.g. 0.1), got {}",
           gamma);
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() const {
  const bool at_milestone = std::binary_search(milestones_.begin(), milestones_.end(), last_epoch_);
  std::vector<double> lrs;
  for (size_t g = 0; g < num_groups(); ++g) lrs.push_back(at_milestone ? group_lr(g) * gamma_ : group_lr(g));
  return lrs;
}

std::vector<double> MultiStepLR::closed_form_lr() const {
  // gamma ** bisect_right(milestones, last_epoch)
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(passed)));
  return lrs;
}

void MultiStepLR::save_extra(LRSchedulerState& s) const {
  s.lists["milestones"].assign(milestones_.begin(), milestones_.end());
  s.scalars["gamma"] = gamma_;
}

// ---- ExponentialLR --------------------------------------------------------

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler("ExponentialLR", optimizer), gamma_(gamma) {
  HG_CHECK(gamma > 0 && std::isfinite(gamma), "ExponentialLR: gamma should be a finite number > 0 (e.g. 0.95), got {}",
           gamma);
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() const {
  std::vector<double> lrs;
  for (size_t g = 0; g < num_groups(); ++g) lrs.push_back(last_epoch_ == 0 ? group_lr(g) : group_lr(g) * gamma_);
  return lrs;
}

std::vector<double> ExponentialLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch_)));
  return lrs;
}

void ExponentialLR::save_extra(LRSchedulerState& s) const { s.scalars["gamma"] = gamma_; }

// ---- CosineAnnealingLR ----------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler("CosineAnnealingLR", optimizer), T_max_(T_max), eta_min_(eta_min) {
  HG_CHECK(T_max > 0, "CosineAnnealingLR: T_max should be a positive number of epochs, got {}", T_max);
  HG_CHECK(eta_min >= 0 && std::isfinite(eta_min), "CosineAnnealingLR: eta_min should be a finite lr >= 0, got {}",
           eta_min);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  // PyTorch's four cases, each with its own rounding.
  const double T = static_cast<double>(T_max_), e = static_cast<double>(last_epoch_);
  std::vector<double> lrs;
  for (size_t g = 0; g < num_groups(); ++g) {
    const double lr = group_lr(g), base = base_lrs_[g];
    if (last_epoch_ == 0)
      lrs.push_back(lr);
    else if (step_count_ == 1 && last_epoch_ > 0)  // the first step lands past 0: closed form
      lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(e * kPi / T)) / 2);
    else if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0)  // at the bottom: the cosine turns up again
      lrs.push_back(lr + (base - eta_min_) * (1 - std::cos(kPi / T)) / 2);
    else
      lrs.push_back((1 + std::cos(kPi * e / T)) / (1 + std::cos(kPi * (e - 1) / T)) * (lr - eta_min_) + eta_min_);
  }
  return lrs;
}

std::vector<double> CosineAnnealingLR::closed_form_lr() const {
  const double T = static_cast<double>(T_max_), e = static_cast<double>(last_epoch_);
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(kPi * e / T)) / 2);
  return lrs;
}

void CosineAnnealingLR::save_extra(LRSchedulerState& s) const {
  s.scalars["T_max"] = static_cast<double>(T_max_);
  s.scalars["eta_min"] = eta_min_;
}

// ---- LinearLR -------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler("LinearLR", optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  // PyTorch allows start_factor 0 but then divides by zero on the second step.
  HG_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor should be in (0, 1], got {}", start_factor);
  HG_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor should be in [0, 1], got {}", end_factor);
  HG_CHECK(total_iters > 0, "LinearLR: total_iters should be a positive number of epochs, got {}", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() const {
  std::vector<double> lrs;
  for (size_t g = 0; g < num_groups(); ++g) {
    const double lr = group_lr(g);
    if (last_epoch_ == 0)
      lrs.push_back(lr * start_factor_);
    else if (last_epoch_ > total_iters_)
      lrs.push_back(lr);
    else  // the ratio of this epoch's factor to the last one's
      lrs.push_back(lr * (1. + (end_factor_ - start_factor_) /
                                   (static_cast<double>(total_iters_) * start_factor_ +
                                    static_cast<double>(last_epoch_ - 1) * (end_factor_ - start_factor_))));
  }
  return lrs;
}

std::vector<double> LinearLR::closed_form_lr() const {
  const double done = static_cast<double>(std::min(total_iters_, last_epoch_));
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * done / static_cast<double>(total_iters_)));
  return lrs;
}

void LinearLR::save_extra(LRSchedulerState& s) const {
  s.scalars["start_factor"] = start_factor_;
  s.scalars["end_factor"] = end_factor_;
  s.scalars["total_iters"] = static_cast<double>(total_iters_);
}

// ---- OneCycleLR -----------------------------------------------------------

namespace {
// The constructor's first job: check the options (before the base class
// records initial_lr from them).
const OneCycleLROptions& checked(const OneCycleLROptions& o) {
  if (o.total_steps == 0) {
    HG_CHECK(o.epochs > 0 && o.steps_per_epoch > 0,
             "OneCycleLR: give total_steps > 0, or epochs > 0 and steps_per_epoch > 0 (got total_steps {}, epochs {}, "
             "steps_per_epoch {})",
             o.total_steps, o.epochs, o.steps_per_epoch);
  } else {
    HG_CHECK(o.total_steps > 0, "OneCycleLR: expected a positive total_steps, got {}", o.total_steps);
  }
  HG_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR: expected pct_start between 0 and 1, got {}", o.pct_start);
  HG_CHECK(!o.max_lr.empty(), "OneCycleLR: max_lr is empty; give one value for all groups or one per group");
  HG_CHECK(o.div_factor > 0 && o.final_div_factor > 0,
           "OneCycleLR: div_factor and final_div_factor should be > 0, got {} and {}", o.div_factor,
           o.final_div_factor);
  return o;
}
}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options)
    : LRScheduler("OneCycleLR", optimizer), options_(checked(options)) {
  const OneCycleLROptions& o = options_;
  total_steps_ = o.total_steps != 0 ? o.total_steps : o.epochs * o.steps_per_epoch;
  const double n = static_cast<double>(total_steps_);
  if (o.three_phase)
    phases_ = {{o.pct_start * n - 1, 0, 1, 0, 1}, {2 * o.pct_start * n - 2, 1, 0, 1, 0}, {n - 1, 0, 2, 0, 0}};
  else
    phases_ = {{o.pct_start * n - 1, 0, 1, 0, 1}, {n - 1, 1, 2, 1, 0}};

  // initial_lr comes from max_lr, overwriting what the base class recorded.
  const size_t groups = num_groups();
  max_lrs_ = per_group("max_lr", o.max_lr, groups);
  for (size_t g = 0; g < groups; ++g) {
    const double initial = max_lrs_[g] / o.div_factor;
    optimizer.set_initial_lr(g, initial);
    base_lrs_[g] = initial;
    min_lrs_.push_back(initial / o.final_div_factor);
  }
  if (o.cycle_momentum) {
    HG_CHECK(momentum_slot(optimizer, 0) != nullptr,
             "OneCycleLR: cycle_momentum needs an optimizer with momentum (SGD) or betas (Adam, AdamW), got {}; "
             "pass .cycle_momentum = false",
             optimizer.name());
    max_momentums_ = per_group("max_momentum", o.max_momentum, groups);
    base_momentums_ = per_group("base_momentum", o.base_momentum, groups);
    for (size_t g = 0; g < groups; ++g) *momentum_slot(optimizer, g) = max_momentums_[g];
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == AnnealStrategy::Cos) return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
  return (end - start) * pct + start;
}

std::vector<double> OneCycleLR::get_lr() const {
  // PyTorch allows last_epoch == total_steps (one step more than total_steps
  // values) and counts steps from 1 in the message.
  HG_CHECK(last_epoch_ <= total_steps_,
           "OneCycleLR: Tried to step {} times. The specified number of total steps is {}; make total_steps (or "
           "epochs * steps_per_epoch) cover every step",
           last_epoch_ + 1, total_steps_);
  const double step_num = static_cast<double>(last_epoch_);
  std::vector<double> lrs;
  next_momentum_.clear();
  for (size_t g = 0; g < num_groups(); ++g) {
    const double lr_of[3] = {base_lrs_[g], max_lrs_[g], min_lrs_[g]};
    double start_step = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& p = phases_[i];
      if (step_num <= p.end_step || i == phases_.size() - 1) {
        const double pct = (step_num - start_step) / (p.end_step - start_step);
        lrs.push_back(anneal(lr_of[p.start_lr], lr_of[p.end_lr], pct));
        if (options_.cycle_momentum) {
          const double m_of[2] = {max_momentums_[g], base_momentums_[g]};
          next_momentum_.push_back(anneal(m_of[p.start_momentum], m_of[p.end_momentum], pct));
        }
        break;
      }
      start_step = p.end_step;
    }
  }
  return lrs;
}

void OneCycleLR::commit_step() {
  for (size_t g = 0; g < next_momentum_.size(); ++g) *momentum_slot(optimizer(), g) = next_momentum_[g];
}

void OneCycleLR::save_extra(LRSchedulerState& s) const {
  s.scalars["total_steps"] = static_cast<double>(total_steps_);
  s.scalars["cycle_momentum"] = options_.cycle_momentum ? 1.0 : 0.0;
  // PyTorch keeps these in the param groups; halfgrad's groups have no slot.
  s.lists["max_lr"] = max_lrs_;
  s.lists["min_lr"] = min_lrs_;
  if (options_.cycle_momentum) {
    s.lists["max_momentum"] = max_momentums_;
    s.lists["base_momentum"] = base_momentums_;
  }
}

void OneCycleLR::load_extra(const LRSchedulerState& s) {
  const std::string where = name();
  auto max_lrs = list(where, s, "max_lr", num_groups());
  auto min_lrs = list(where, s, "min_lr", num_groups());
  if (options_.cycle_momentum) {
    max_momentums_ = list(where, s, "max_momentum", num_groups());
    base_momentums_ = list(where, s, "base_momentum", num_groups());
  }
  max_lrs_ = std::move(max_lrs);
  min_lrs_ = std::move(min_lrs);
}

// ---- SequentialLR ---------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<LRScheduler*> schedulers, std::vector<int64_t> milestones)
    : LRScheduler("SequentialLR", optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  HG_CHECK(!schedulers_.empty(), "SequentialLR: got no schedulers");
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    HG_CHECK(schedulers_[i] != nullptr, "SequentialLR: scheduler {} is null", i);
    HG_CHECK(&schedulers_[i]->optimizer() == &optimizer,
             "SequentialLR: scheduler {} ({}) is on another optimizer; all schedulers must belong to the optimizer "
             "passed in",
             i, schedulers_[i]->name());
  }
  HG_CHECK(milestones_.size() + 1 == schedulers_.size(),
           "SequentialLR: expects one milestone fewer than schedulers, got {} schedulers and {} milestones",
           schedulers_.size(), milestones_.size());
  for (size_t i = 1; i < milestones_.size(); ++i)
    HG_CHECK(milestones_[i] > milestones_[i - 1],
             "SequentialLR: milestones should be strictly increasing, got {} after {} (at index {})", milestones_[i],
             milestones_[i - 1], i);
  // PyTorch: reset each lr to initial_lr, "undo" the step every child did
  // when it was made, and redo it for the first child only.
  last_epoch_ = 0;
  for (size_t g = 0; g < num_groups(); ++g) optimizer.set_lr(g, base_lrs_[g]);
  for (auto* s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

std::vector<double> SequentialLR::get_lr() const { return last_lr_; }  // not used: step() is its own

void SequentialLR::step() {
  ++last_epoch_;
  const size_t idx = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  LRScheduler* s = schedulers_[idx];
  // At its milestone a scheduler starts over from epoch 0 (closed form).
  if (idx > 0 && milestones_[idx - 1] == last_epoch_)
    s->step_to(0);
  else
    s->step();
  last_lr_ = s->get_last_lr();
}

LRSchedulerState SequentialLR::state_dict() const {
  LRSchedulerState s;
  s.scalars["last_epoch"] = static_cast<double>(last_epoch_);
  s.lists["_last_lr"] = last_lr_;
  s.lists["_milestones"].assign(milestones_.begin(), milestones_.end());
  for (auto* child : schedulers_) s.schedulers.push_back(child->state_dict());
  return s;
}

void SequentialLR::load_state_dict(const LRSchedulerState& state) {
  const std::string where = name();
  same_keys(where, state, state_dict());
  HG_CHECK(state.schedulers.size() == schedulers_.size(),
           "SequentialLR.load_state_dict: the state has {} schedulers, this SequentialLR has {}",
           state.schedulers.size(), schedulers_.size());
  const int64_t last_epoch = whole_number(where, "last_epoch", scalar(where, state, "last_epoch"));
  const auto& last_lr = list(where, state, "_last_lr", num_groups());
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(state.schedulers[i]);
  last_epoch_ = last_epoch;
  last_lr_ = last_lr;
}

}  // namespace halfgrad::optim
