#pragma once
// Grad mode (NoGradGuard, hg::no_grad), under the name users include. It lives
// in dispatch/grad_mode.h: the dispatcher reads it to decide whether a call
// records, below the autograd engine.
#include <halfgrad/dispatch/grad_mode.h>
