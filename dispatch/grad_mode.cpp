#include <halfgrad/dispatch/grad_mode.h>

namespace halfgrad::autograd {

namespace {
thread_local bool g_grad_enabled = true;
}
bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool enabled) { g_grad_enabled = enabled; }

}  // namespace halfgrad::autograd
