// Training checkpoints (optim/checkpoint.h): the pieces' state dicts turned
// into two safetensors files and one JSON file, assembled in a hidden temp
// folder and renamed into place.
#include <halfgrad/optim/checkpoint.h>

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <halfgrad/core/atomic_file.h>
#include <halfgrad/core/device.h>
#include <halfgrad/core/file_input.h>
#include <halfgrad/core/json_input.h>
#include <halfgrad/core/random.h>
#include <halfgrad/nn/safetensors.h>
#include <nlohmann/json.hpp>

namespace halfgrad::optim {

namespace fs = std::filesystem;
using json = nlohmann::json;
using json_input::quote;

namespace {

constexpr const char* kFormat = "halfgrad-checkpoint";
constexpr int64_t kVersion = 1;
constexpr uint64_t kMaxJson = 100'000'000;  // trainer.json is small; never read an unbounded file
// The deepest JSON a checkpoint holds is a chain of nested SequentialLRs (two
// levels each); anything deeper is refused while parsing, so nothing here
// recurses more than kMaxJsonDepth / 2 times.
constexpr size_t kMaxJsonDepth = 64;
// The fields trainer.json and its scheduler objects may have.
constexpr std::string_view kTrainerFields[] = {"format", "version", "epoch", "step", "extra", "scheduler", "scaler", "rng"};
constexpr std::string_view kSchedulerFields[] = {"kind", "scalars", "lists", "schedulers"};

template <size_t N>
void only_fields(const json& j, const std::string_view (&allowed)[N], const std::string& file, const char* what) {
  for (const auto& [key, value] : j.items()) {
    (void)value;
    HG_CHECK(std::find(std::begin(allowed), std::end(allowed), key) != std::end(allowed),
             "load_checkpoint: '{}': {} has an unknown field \"{}\" (written by a newer halfgrad, or edited?)", file,
             what, json_input::clip(key));
  }
}

// Doubles go through JSON exactly (nlohmann writes the shortest text that
// reads back bit for bit); inf and NaN, which JSON has no numbers for, as strings.
json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

double to_double(const json& v, const std::string& file, const std::string& what) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  fail("checkpoint '{}': {} must be a number, got {}", file, what, quote(v));
}

json doubles(const std::map<std::string, double>& m) {
  json out = json::object();
  for (const auto& [k, v] : m) out[k] = number(v);
  return out;
}

std::map<std::string, double> doubles(const json& j, const std::string& file, const std::string& what) {
  HG_CHECK(j.is_object(), "checkpoint '{}': {} must be an object, got {}", file, what, quote(j));
  std::map<std::string, double> out;
  for (const auto& [k, v] : j.items()) out[k] = to_double(v, file, what + "." + k);
  return out;
}

json scheduler_json(const LRSchedulerState& s) {
  json lists = json::object();
  for (const auto& [k, v] : s.lists) {
    json a = json::array();
    for (double x : v) a.push_back(number(x));
    lists[k] = a;
  }
  json children = json::array();
  for (const auto& c : s.schedulers) children.push_back(scheduler_json(c));
  return {{"scalars", doubles(s.scalars)}, {"lists", lists}, {"schedulers", children}};
}

// Recursion once per nested scheduler: bounded by the parse's depth cap.


LRSchedulerState scheduler_state(const json& j, const std::string& file) {
  HG_CHECK(j.is_object() && j.contains("scalars") && j.contains("lists") && j.contains("schedulers") &&
               j["lists"].is_object() && j["schedulers"].is_array(),
           "checkpoint '{}': the scheduler state must have scalars, lists and schedulers, got {}", file, quote(j));
  only_fields(j, kSchedulerFields, file, "the scheduler state");
  LRSchedulerState s;
  s.scalars = doubles(j["scalars"], file, "scheduler.scalars");
  for (const auto& [k, v] : j["lists"].items()) {
    HG_CHECK(v.is_array(), "checkpoint '{}': scheduler.lists.{} must be an array", file, json_input::clip(k));
    for (const json& x : v) s.lists[k].push_back(to_double(x, file, "scheduler.lists." + json_input::clip(k)));
  }
  for (const json& c : j["schedulers"]) s.schedulers.push_back(scheduler_state(c, file));
  return s;
}

std::string param_groups_json(const std::vector<ParamGroupState>& groups) {
  json out = json::array();
  for (const auto& g : groups) out.push_back({{"params", g.params}, {"options", doubles(g.options)}});
  return out.dump();
}

std::vector<ParamGroupState> param_groups(const std::string& text, const std::string& file) {
  json_input::Parsed parsed = json_input::parse(text, kMaxJsonDepth, kMaxJson);
  HG_CHECK(parsed.ok(), "checkpoint '{}': __metadata__[\"param_groups\"] {}", file, parsed.error);
  const json j = std::move(parsed.value);
  HG_CHECK(j.is_array(), "checkpoint '{}': param_groups must be a JSON array", file);
  std::vector<ParamGroupState> out;
  for (const json& g : j) {
    HG_CHECK(g.is_object() && g.contains("params") && g.contains("options") && g["params"].is_array(),
             "checkpoint '{}': a param group must have params and options, got {}", file, quote(g));
    ParamGroupState s;
    for (const json& p : g["params"]) {
      HG_CHECK(p.is_number_integer() && (!p.is_number_unsigned() || p.get<uint64_t>() <= uint64_t{INT64_MAX}),
               "checkpoint '{}': param group indices must be integers below 2^63, got {}", file, quote(p));
      s.params.push_back(p.get<int64_t>());
    }
    s.options = doubles(g["options"], file, "param_groups.options");
    out.push_back(std::move(s));
  }
  return out;
}

// "state.<index>.<buffer>" -> (index, buffer).
std::pair<int64_t, std::string> state_key(const std::string& name, const std::string& file) {
  const size_t dot = name.find('.', 6);
  int64_t index = -1;
  bool ok = name.rfind("state.", 0) == 0 && dot != std::string::npos && dot > 6 && dot + 1 < name.size();
  if (ok) {
    const std::string digits = name.substr(6, dot - 6);
    ok = digits.size() < 19 && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (ok) index = std::stoll(digits);
  }
  HG_CHECK(ok, "checkpoint '{}': the optimizer tensor \"{}\" is not named state.<index>.<buffer>", file,
           json_input::clip(name));
  return {index, name.substr(dot + 1)};
}

// The optimizer's file (optimizer.safetensors in a checkpoint, hg::save's
// optimizer file): its buffers as "state.<index>.<buffer>", its param groups
// as JSON and its name in __metadata__ (plus `metadata`).
void write_optimizer(const Optimizer& optimizer, const std::string& path, std::map<std::string, std::string> metadata) {
  const OptimizerStateDict sd = optimizer.state_dict();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [index, buffers] : sd.state)
    for (const auto& [name, t] : buffers) tensors.emplace_back(fmt::format("state.{}.{}", index, name), t);
  metadata["param_groups"] = param_groups_json(sd.param_groups);
  metadata["optimizer"] = optimizer.name();
  nn::save_safetensors(path, tensors, metadata);
}

// The state dict a file of write_optimizer holds, checked as far as it goes
// without the optimizer (load_state_dict checks the rest).
OptimizerStateDict read_optimizer(const nn::SafetensorsFile& f, const std::string& file) {
  auto it = f.metadata.find("param_groups");
  HG_CHECK(it != f.metadata.end(), "checkpoint '{}': no \"param_groups\" in __metadata__", file);
  OptimizerStateDict sd;
  sd.param_groups = param_groups(it->second, file);
  for (const auto& [name, t] : f.tensors) {
    auto [index, buffer] = state_key(name, file);
    sd.state[index][buffer] = t;
  }
  return sd;
}

json read_json(const std::string& path) {
  std::error_code ec;
  HG_CHECK(fs::exists(fs::symlink_status(path, ec)), "load_checkpoint: '{}' is missing, so this is not a complete checkpoint",
           path);
  // Regular files only (a FIFO would block), at most kMaxJson bytes, at most
  // kMaxJsonDepth levels, duplicate keys refused, a short message.
  const std::string text = read_regular_file(path, "load_checkpoint", kMaxJson);
  json_input::Parsed parsed = json_input::parse(text, kMaxJsonDepth, kMaxJson);
  HG_CHECK(parsed.ok(), "load_checkpoint: '{}' {}", path, parsed.error);
  return std::move(parsed.value);
}

const json& field(const json& j, const char* key, const std::string& file) {
  HG_CHECK(j.contains(key), "checkpoint '{}': no \"{}\" (saved without it? pass a null part to skip it)", file, key);
  return j[key];
}

// A part the caller asks for that the checkpoint was saved without.
const json& part_field(const json& j, const char* key, const char* part, const char* remedy, const std::string& file) {
  HG_CHECK(j.contains(key),
           "load_checkpoint: this checkpoint has no {} state ('{}' has no \"{}\": it was saved without one); {} to "
           "load the rest",
           part, file, key, remedy);
  return j[key];
}

// A count (epoch, step): an integer in [0, 2^63).
int64_t int_field(const json& j, const char* key, const std::string& file) {
  const json& v = field(j, key, file);
  HG_CHECK(v.is_number_integer(), "checkpoint '{}': \"{}\" must be an integer, got {}", file, key, quote(v));
  HG_CHECK(v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{INT64_MAX} : v.get<int64_t>() >= 0,
           "checkpoint '{}': \"{}\" must be an integer in [0, 2^63), got {}", file, key, quote(v));
  return v.get<int64_t>();
}

// Puts the complete folder `from` at `to`: a plain rename when `to` is new,
// else an atomic swap (renameat2 RENAME_EXCHANGE) and the old one removed;
// where the file system has no swap, the old folder is moved aside first.
void install_folder(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::exists(to, ec)) {
    HG_CHECK(::rename(from.c_str(), to.c_str()) == 0, "save_checkpoint: renaming '{}' to '{}' failed: {}",
             from.string(), to.string(), std::strerror(errno));
    return;
  }
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(from, ec);  // now the old checkpoint
    return;
  }
  const fs::path aside = from.string() + ".old";
  HG_CHECK(::rename(to.c_str(), aside.c_str()) == 0, "save_checkpoint: moving the old '{}' aside failed: {}",
           to.string(), std::strerror(errno));
  HG_CHECK(::rename(from.c_str(), to.c_str()) == 0, "save_checkpoint: renaming '{}' to '{}' failed: {}",
           from.string(), to.string(), std::strerror(errno));
  fs::remove_all(aside, ec);
}

}  // namespace

void save_checkpoint(const std::string& dir, const CheckpointParts& parts) {
  HG_CHECK(parts.epoch >= 0 && parts.step >= 0, "save_checkpoint('{}'): epoch and step must be >= 0, got {} and {}", dir,
           parts.epoch, parts.step);
  const fs::path target = fs::path(dir).lexically_normal();
  HG_CHECK(!target.filename().empty(), "save_checkpoint: '{}' does not name a folder", dir);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  HG_CHECK(!ec, "save_checkpoint: cannot create the folder '{}': {}", parent.string(), ec.message());
  // Temp folders of saves whose process was killed (".<name>.partial-<pid>-<n>",
  // ".old" ones moved aside, and CheckpointManager's ".ckpt-<step>.removing-<pid>-<n>"
  // half-removed ones) go first, as atomic_write_file's temp files do.
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || name[0] != '.' || !entry.is_directory(ec)) continue;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".old") == 0) name.resize(name.size() - 4);
    std::error_code ec2;
    if (writer_is_gone(name, ".partial-") || writer_is_gone(name, ".removing-")) fs::remove_all(entry.path(), ec2);
  }
  ec.clear();
  static std::atomic<uint64_t> counter{0};
  const fs::path temp =
      parent / fmt::format(".{}.partial-{}-{}", target.filename().string(), ::getpid(), counter++);
  fs::create_directory(temp, ec);
  HG_CHECK(!ec, "save_checkpoint: cannot create the temp folder '{}': {}", temp.string(), ec.message());
  try {
    json trainer = {{"format", kFormat}, {"version", kVersion}, {"epoch", parts.epoch}, {"step", parts.step},
                    {"extra", parts.extra}};
    if (parts.model != nullptr) nn::save(*parts.model, (temp / "model.safetensors").string());
    if (parts.optimizer != nullptr) write_optimizer(*parts.optimizer, (temp / "optimizer.safetensors").string(), {});
    if (parts.scheduler != nullptr) {
      trainer["scheduler"] = scheduler_json(parts.scheduler->state_dict());
      trainer["scheduler"]["kind"] = parts.scheduler->name();
    }
    if (parts.scaler != nullptr) trainer["scaler"] = doubles(parts.scaler->state_dict());
    if (parts.rng) {
      const rng::PhiloxState s = get_rng_state();
      json cuda_states = json::array();
      if (cuda::is_available())
        for (int d = 0; d < cuda::device_count(); ++d) {
          const rng::PhiloxState c = cuda::get_rng_state(d);
          cuda_states.push_back({{"seed", c.seed}, {"offset", c.offset}});
        }
      trainer["rng"] = {{"cpu", {{"seed", s.seed}, {"offset", s.offset}}}, {"cuda", cuda_states}};
    }
    std::string text;
    try {
      text = trainer.dump(1) + "\n";
    } catch (const json::exception& e) {
      fail("save_checkpoint('{}'): an `extra` key or value is not valid UTF-8 ({})", dir, e.what());
    }
    atomic_write_file((temp / "trainer.json").string(), text);  // last: the completion marker
    fsync_directory(temp.string());
    install_folder(temp, target);
    fsync_directory(parent.string());
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
}

void load_checkpoint(const std::string& dir, CheckpointParts& parts) {
  const fs::path root(dir);
  const std::string trainer_path = (root / "trainer.json").string();
  // Read and check everything first.
  const json trainer = read_json(trainer_path);
  HG_CHECK(trainer.is_object() && trainer.contains("format") && trainer["format"] == kFormat,
           "load_checkpoint: '{}' is not a halfgrad checkpoint (no \"format\": \"{}\")", trainer_path, kFormat);
  only_fields(trainer, kTrainerFields, trainer_path, "trainer.json");
  const int64_t version = int_field(trainer, "version", trainer_path);
  HG_CHECK(version == kVersion, "load_checkpoint: '{}' has format version {}; this halfgrad reads version {}",
           trainer_path, version, kVersion);
  const int64_t epoch = int_field(trainer, "epoch", trainer_path), step = int_field(trainer, "step", trainer_path);
  std::map<std::string, std::string> extra;
  const json& extra_json = field(trainer, "extra", trainer_path);
  HG_CHECK(extra_json.is_object(), "checkpoint '{}': extra must be an object of strings", trainer_path);
  for (const auto& [k, v] : extra_json.items()) {
    HG_CHECK(v.is_string(), "checkpoint '{}': extra[\"{}\"] must be a string, got {}", trainer_path,
             json_input::clip(k), quote(v));
    extra[k] = v.get<std::string>();
  }

  // A part the caller asks for but the checkpoint was saved without is named
  // as such, not as a file that cannot be opened.
  const auto saved_part = [&](const char* name, const char* part) {
    const fs::path file = root / name;
    std::error_code ec;
    HG_CHECK(fs::exists(fs::symlink_status(file, ec)),
             "load_checkpoint('{}'): this checkpoint has no {} state (no {}: it was saved without one); pass a null {} "
             "to load the rest",
             dir, part, name, part);
    return file.string();
  };
  std::optional<nn::SafetensorsFile> model_file;
  if (parts.model != nullptr) model_file = nn::load_safetensors(saved_part("model.safetensors", "model"));
  std::optional<OptimizerStateDict> optimizer_state;
  if (parts.optimizer != nullptr) {
    const std::string file = saved_part("optimizer.safetensors", "optimizer");
    optimizer_state = read_optimizer(nn::load_safetensors(file), file);
  }
  std::optional<LRSchedulerState> scheduler_st;
  if (parts.scheduler != nullptr) {
    const json& j = part_field(trainer, "scheduler", "scheduler", "pass a null scheduler", trainer_path);
    // The kind (saved since the field was added): a StepLR's state does not load into a MultiStepLR.
    if (j.is_object() && j.contains("kind"))
      HG_CHECK(j["kind"].is_string() && j["kind"].get_ref<const std::string&>() == parts.scheduler->name(),
               "load_checkpoint: '{}' holds the state of a {} scheduler, which does not load into a {}; construct the "
               "scheduler the checkpoint was saved with",
               trainer_path, quote(j["kind"]), parts.scheduler->name());
    scheduler_st = scheduler_state(j, trainer_path);
  }
  std::optional<std::map<std::string, double>> scaler_st;
  if (parts.scaler != nullptr)
    scaler_st = doubles(part_field(trainer, "scaler", "GradScaler", "pass a null scaler", trainer_path), trainer_path, "scaler");
  std::optional<rng::PhiloxState> rng_st;
  std::vector<rng::PhiloxState> cuda_rng;
  if (parts.rng) {
    const auto philox = [&](const json& r, const char* what) {
      HG_CHECK(r.is_object() && r.contains("seed") && r.contains("offset") && r["seed"].is_number_unsigned() &&
                   r["offset"].is_number_unsigned(),
               "checkpoint '{}': {} must hold an unsigned seed and offset, got {}", trainer_path, what, quote(r));
      return rng::PhiloxState{r["seed"].get<uint64_t>(), r["offset"].get<uint64_t>()};
    };
    const json& r = part_field(trainer, "rng", "RNG", "set rng = false", trainer_path);
    rng_st = philox(field(r, "cpu", trainer_path), "rng.cpu");
    if (r.contains("cuda")) {
      HG_CHECK(r["cuda"].is_array(), "checkpoint '{}': rng.cuda must be an array", trainer_path);
      for (const json& c : r["cuda"]) cuda_rng.push_back(philox(c, "rng.cuda[]"));
    }
  }

  // Then apply, model first (its load is all-or-nothing).
  if (model_file) {
    nn::StateDict state;
    for (auto& [name, t] : model_file->tensors) state.insert(name, t);
    try {
      parts.model->load_state_dict(state, true);
    } catch (const Error& e) {
      fail("load_checkpoint('{}'): model.safetensors: {}", dir, e.what());
    }
  }
  if (optimizer_state) parts.optimizer->load_state_dict(*optimizer_state);
  if (scheduler_st) parts.scheduler->load_state_dict(*scheduler_st);
  if (scaler_st) parts.scaler->load_state_dict(*scaler_st);
  if (rng_st) set_rng_state(*rng_st);
  // CUDA generators: those of the devices this process has (a checkpoint
  // from a bigger or CUDA machine loads on a smaller or CPU-only one).
  const int devices = cuda::is_available() ? cuda::device_count() : 0;
  for (int d = 0; d < std::min<int>(devices, static_cast<int>(cuda_rng.size())); ++d) cuda::set_rng_state(cuda_rng[d], d);
  parts.epoch = epoch;
  parts.step = step;
  parts.extra = std::move(extra);
}

CheckpointManager::CheckpointManager(std::string root, int64_t keep_last)
    : root_(std::move(root)), keep_last_(keep_last) {
  HG_CHECK(keep_last >= 0, "CheckpointManager: keep_last must be >= 0 (0 keeps all), got {}", keep_last);
}

std::string CheckpointManager::path(int64_t step) const {
  HG_CHECK(step >= 0, "CheckpointManager: the step must be >= 0, got {}", step);
  return (fs::path(root_) / fmt::format("ckpt-{}", step)).string();
}

std::vector<int64_t> CheckpointManager::steps() const {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) continue;
    const std::string digits = name.substr(5);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    if (fmt::format("ckpt-{}", std::stoll(digits)) != name) continue;  // only the names path() makes
    if (!fs::exists(entry.path() / "trainer.json", ec)) continue;
    out.push_back(std::stoll(digits));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> CheckpointManager::latest() const {
  const auto all = steps();
  if (all.empty()) return std::nullopt;
  return path(all.back());
}

bool CheckpointManager::load_latest(CheckpointParts& parts) const {
  const auto dir = latest();
  if (!dir) return false;
  load_checkpoint(*dir, parts);
  return true;
}

std::string CheckpointManager::save(int64_t step, const CheckpointParts& parts) {
  CheckpointParts at = parts;
  at.step = step;
  const std::string dir = path(step);
  save_checkpoint(dir, at);
  if (keep_last_ > 0) {
    // The one just saved always stays (even when it has a lower step than
    // older ones, as after restarting from an earlier checkpoint), plus the
    // keep_last - 1 highest steps of the others.
    std::vector<int64_t> all = steps();
    all.erase(std::remove(all.begin(), all.end(), step), all.end());
    for (size_t i = 0; i + static_cast<size_t>(keep_last_ - 1) < all.size(); ++i) {
      // Renamed out of the ckpt-<step> names first, so a crash mid-removal
      // never leaves a partial folder that latest() would pick.
      std::error_code ec;
      static std::atomic<uint64_t> removals{0};
      const fs::path doomed =
          fs::path(root_) / fmt::format(".ckpt-{}.removing-{}-{}", all[i], ::getpid(), removals++);
      fs::rename(path(all[i]), doomed, ec);
      if (!ec) fs::remove_all(doomed, ec);
    }
  }
  return dir;
}

}  // namespace halfgrad::optim

// hg::save / hg::load of an optimizer (optim/checkpoint.h): the checkpoint's
// optimizer file, with hg::save's kind in __metadata__.
namespace halfgrad {

void save(const optim::Optimizer& optimizer, const std::string& path) {
  optim::write_optimizer(optimizer, path, detail::kind_metadata("optimizer"));
}

void load(optim::Optimizer& optimizer, const std::string& path) {
  const nn::SafetensorsFile f =
      detail::read_kind(path, "hg::load", fmt::format("the state of an {} optimizer", optimizer.name()), {"optimizer"});
  const auto name = f.metadata.find("optimizer");
  HG_CHECK(name != f.metadata.end() && name->second == optimizer.name(),
           "hg::load('{}'): the file holds the state of {} optimizer, which does not load into an {}; build the "
           "optimizer the file was saved from (the same kind, on the same parameters) and load into that",
           path, name == f.metadata.end() ? "an unnamed" : "an " + json_input::clip(name->second), optimizer.name());
  const optim::OptimizerStateDict sd = optim::read_optimizer(f, path);
  try {
    optimizer.load_state_dict(sd);
  } catch (const Error& e) {
    fail("hg::load('{}'): {}", path, e.what());
  }
}

}  // namespace halfgrad
