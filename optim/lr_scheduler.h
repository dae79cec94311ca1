#pragma once
// Learning-rate schedulers with PyTorch 1.13's formulas and behaviour
// (torch.optim.lr_scheduler):
//
//   hg::optim::SGD optimizer(model.parameters(), {.lr = 0.1});
//   hg::optim::StepLR scheduler(optimizer, /*step_size=*/10, /*gamma=*/0.1);
//   for (int epoch = 0; epoch < 30; ++epoch) {
//     train(...);  // optimizer.step() inside
//     scheduler.step();
//   }
//
// As in PyTorch, constructing a scheduler records each group's initial_lr
// (unless an earlier scheduler did) and performs the initial step, so
// last_epoch() is 0 and the optimizer already holds the epoch-0 lr. step()
// uses PyTorch's chainable form (the new lr is computed from the group's
// current lr), so the values match PyTorch's to the last bit.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <halfgrad/optim/optimizer.h>

namespace halfgrad::optim {

// A scheduler's state dict with PyTorch's keys: numbers in `scalars`
// ("last_epoch", "_step_count", "gamma", ...), lists in `lists` ("base_lrs",
// "_last_lr", "milestones", ...), and SequentialLR's children in `schedulers`
// (PyTorch's "_schedulers").
struct LRSchedulerState {
  std::map<std::string, double> scalars;
  std::map<std::string, std::vector<double>> lists;
  std::vector<LRSchedulerState> schedulers;
};

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advance one epoch (or iteration) and write the new lr into each group.
  virtual void step();
  // The lr step() last wrote, one per param group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }
  const std::string& name() const { return name_; }

  // The counters and lists, and the hyperparameters. load_state_dict
  // restores the counters and lists; the hyperparameters come from the
  // constructor, and a state saved with other ones is an Error. Like PyTorch
  // it does not touch the optimizer's lr: restore the optimizer (or set_lr
  // from get_last_lr()) as well.
  virtual LRSchedulerState state_dict() const;
  virtual void load_state_dict(const LRSchedulerState& state);

 protected:
  LRScheduler(std::string name, Optimizer& optimizer);
  // PyTorch's _initial_step(): the step every constructor ends with.
  void initial_step();
  // PyTorch's step(epoch): jump to `epoch`, using the closed form. Only
  // SequentialLR uses it (with 0, at a milestone), as PyTorch does.
  void step_to(int64_t epoch);
  friend class SequentialLR;

  // The lrs for last_epoch_ (already advanced), chainable form.
  virtual std::vector<double> get_lr() const = 0;
  // Called once a step's lrs are checked and written (OneCycleLR writes the
  // momentum get_lr() computed then, so a failed step changes nothing).
  virtual void commit_step() {}
  // The closed form; schedulers without one (OneCycleLR) use get_lr().
  virtual std::vector<double> closed_form_lr() const { return get_lr(); }
  // Hyperparameters and extra lists for state_dict / load_state_dict.
  virtual void save_extra(LRSchedulerState& state) const { (void)state; }
  virtual void load_extra(const LRSchedulerState& state) { (void)state; }

  // The group's current lr (the chainable forms start from it).
  double group_lr(size_t group) const { return optimizer_.lr(group); }
  size_t num_groups() const { return base_lrs_.size(); }

  std::vector<double> base_lrs_;  // PyTorch's base_lrs: each group's initial_lr
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;  // PyTorch's _step_count (CosineAnnealingLR reads it)
  std::vector<double> last_lr_;

 private:
  void apply(int64_t epoch, bool closed_form);

  std::string name_;
  Optimizer& optimizer_;
};

// lr = initial_lr * gamma ^ (epoch / step_size): decay by gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;
  void save_extra(LRSchedulerState& state) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Decay by gamma at each milestone (epochs, strictly increasing).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;
  void save_extra(LRSchedulerState& state) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// lr = initial_lr * gamma ^ epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;
  void save_extra(LRSchedulerState& state) const override;

 private:
  double gamma_;
};

// Cosine from initial_lr down to eta_min over T_max epochs (and back up, as in PyTorch, past T_max).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;
  void save_extra(LRSchedulerState& state) const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// Warm-up: the factor on initial_lr goes linearly from start_factor to
// end_factor over total_iters epochs, then stays.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;
  void save_extra(LRSchedulerState& state) const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

enum class AnnealStrategy { Cos, Linear };

// torch.optim.lr_scheduler.OneCycleLR's arguments. max_lr, max_momentum and
// base_momentum take one value for every group or one per group. Give
// total_steps, or epochs and steps_per_epoch.
//   hg::optim::OneCycleLR scheduler(optimizer, {.max_lr = {0.1}, .total_steps = 1000});
struct OneCycleLROptions {
  std::vector<double> max_lr;
  int64_t total_steps = 0;  // 0: epochs * steps_per_epoch
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  double pct_start = 0.3;
  AnnealStrategy anneal_strategy = AnnealStrategy::Cos;
  // Cycle SGD's momentum or Adam's/AdamW's beta1 opposite to the lr.
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.85};
  std::vector<double> max_momentum = {0.95};
  double div_factor = 25.0;       // initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;  // min_lr = initial_lr / final_div_factor
  bool three_phase = false;
};

// The 1cycle policy, stepped once per batch: lr from max_lr / div_factor up
// to max_lr, then down to min_lr. It overwrites each group's initial_lr (the
// optimizer's lr is not used), as PyTorch does. Stepping past total_steps is
// an error.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options);
  int64_t total_steps() const { return total_steps_; }

 protected:
  std::vector<double> get_lr() const override;
  void save_extra(LRSchedulerState& state) const override;
  void load_extra(const LRSchedulerState& state) override;
  void commit_step() override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr;              // 0: initial_lr, 1: max_lr, 2: min_lr
    int start_momentum, end_momentum;  // 0: max_momentum, 1: base_momentum
  };
  double anneal(double start, double end, double pct) const;

  OneCycleLROptions options_;
  int64_t total_steps_;
  std::vector<Phase> phases_;
  std::vector<double> max_lrs_, min_lrs_, max_momentums_, base_momentums_;
  mutable std::vector<double> next_momentum_;  // from get_lr(), written by commit_step()
};

// Runs `schedulers` one after another, switching at each milestone (one
// fewer milestone than schedulers). The schedulers must be on `optimizer`
// and outlive the SequentialLR.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<LRScheduler*> schedulers, std::vector<int64_t> milestones);
  void step() override;
  LRSchedulerState state_dict() const override;
  void load_state_dict(const LRSchedulerState& state) override;

 protected:
  std::vector<double> get_lr() const override;

 private:
  std::vector<LRScheduler*> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace halfgrad::optim
