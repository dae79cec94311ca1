#pragma once
// Training checkpoints that resume exactly: one folder per checkpoint,
//   ckpt-<step>/model.safetensors      the model's state_dict (nn::save)
//               optimizer.safetensors  the optimizer's buffers as
//                                      "state.<index>.<buffer>", its param
//                                      groups as JSON in __metadata__
//               trainer.json           epoch, step, the LR scheduler's and
//                                      GradScaler's state dicts, the CPU RNG
//                                      state, the caller's `extra` strings
// Every file is written atomically (core/atomic_file.h) into a hidden temp
// folder next to the target, which is renamed into place only when complete
// (an existing checkpoint of that name is swapped out atomically), so a
// folder named ckpt-<step> is always a whole checkpoint; trainer.json is
// written last and a load requires it. CheckpointManager keeps the last K.
// Here, above nn, optim and amp, because it needs all three.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <halfgrad/amp/grad_scaler.h>
#include <halfgrad/nn/module.h>
#include <halfgrad/optim/lr_scheduler.h>
#include <halfgrad/optim/optimizer.h>

namespace halfgrad::optim {

// What a checkpoint holds. A null part is not saved (and not loaded); on
// load every non-null part must be in the checkpoint (an Error otherwise),
// and parts the checkpoint has but the caller leaves null are ignored.
struct CheckpointParts {
  nn::Module* model = nullptr;
  Optimizer* optimizer = nullptr;
  LRScheduler* scheduler = nullptr;
  amp::GradScaler* scaler = nullptr;
  int64_t epoch = 0;
  int64_t step = 0;
  // Save the CPU generator's state (get_rng_state) and, where CUDA is
  // available, every CUDA device's (cuda::get_rng_state, which initialises
  // each device's generator); restore them on load (the CUDA ones for the
  // devices this process has).
  bool rng = true;
  // Free-form state of the caller's own (the data loader's position, ...);
  // load replaces it with the saved map.
  std::map<std::string, std::string> extra;
};

// Writes the checkpoint folder `dir` (its parent is created when missing).
void save_checkpoint(const std::string& dir, const CheckpointParts& parts);
// Loads `dir` into the non-null parts and sets epoch, step and extra. The files
// are read and checked before anything is changed; an Error while applying
// them (an optimizer built with other parameter shapes, say) can still leave
// the parts partly loaded: do not train on after an Error.
void load_checkpoint(const std::string& dir, CheckpointParts& parts);

// Checkpoints `root`/ckpt-<step>, keeping `keep_last` of them (0 keeps all):
// the one just saved and the highest steps of the others. Folders it did not name (other files, hidden temp folders of
// a save that crashed) are left alone.
class CheckpointManager {
 public:
  explicit CheckpointManager(std::string root, int64_t keep_last = 0);

  // save_checkpoint(path(step), parts with .step = step), then the pruning.
  std::string save(int64_t step, const CheckpointParts& parts);
  // The complete checkpoints there are, by step (ascending).
  std::vector<int64_t> steps() const;
  // The newest checkpoint's folder, if any.
  std::optional<std::string> latest() const;
  // load_checkpoint(latest()) when there is one; false when there is none.
  bool load_latest(CheckpointParts& parts) const;
  std::string path(int64_t step) const;
  const std::string& root() const { return root_; }

 private:
  std::string root_;
  int64_t keep_last_;
};

}  // namespace halfgrad::optim

namespace halfgrad {

// torch.save(optimizer.state_dict(), path) / optimizer.load_state_dict(
// torch.load(path)), LibTorch's torch::save(optimizer, path) /
// torch::load(optimizer, path): the optimizer's state dict as a checkpoint's
// optimizer file (its buffers as tensors, its param groups as JSON), written
// atomically. load reads the file as hostile and loads through
// load_state_dict into an optimizer of the same kind on the same parameters
// (nothing changes on an Error). Tensors, modules: nn/safetensors.h.
void save(const optim::Optimizer& optimizer, const std::string& path);
void load(optim::Optimizer& optimizer, const std::string& path);

}  // namespace halfgrad
