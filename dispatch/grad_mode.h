#pragma once
// Grad mode: a per-thread switch. Under NoGradGuard no op records history
// (optimizer updates, evaluation, and the backward formulas themselves).
namespace halfgrad::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Grad mode set to `enabled` while alive (PyTorch's torch.set_grad_enabled(b)
// as a context manager); the backward engine turns it on for create_graph.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace halfgrad::autograd

namespace halfgrad {
using autograd::NoGradGuard;
using no_grad = autograd::NoGradGuard;  // `hg::no_grad guard;` reads like `with torch.no_grad():`
}  // namespace halfgrad
