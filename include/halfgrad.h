#pragma once
// The umbrella header: `#include <halfgrad.h>` and `namespace hg = halfgrad;`.
#include "core/dtype.h"
#include "core/device.h"
#include "core/error.h"
#include "core/format.h"
#include "core/half.h"
#include "core/random.h"
#include "core/tensor.h"
#include "autograd/grad_mode.h"
#include "amp/autocast.h"
#include "ops/ops.h"
#if __has_include("nn/nn.h")
#include "nn/nn.h"
#endif
#if __has_include("optim/optim.h")
#include "optim/optim.h"
#endif
#include "amp/grad_scaler.h"
#include "amp/policy.h"
