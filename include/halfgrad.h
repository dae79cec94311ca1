#pragma once
// The umbrella header: `#include <halfgrad.h>` and `namespace hg = halfgrad;`.
// It reaches only the public API; every header it pulls in is installed under
// <halfgrad/...>, so names like core/tensor.h in a user's project cannot collide.
#include <halfgrad/core/atomic_file.h>
#include <halfgrad/core/device.h>
#include <halfgrad/core/dtype.h>
#include <halfgrad/core/error.h>
#include <halfgrad/core/format.h>
#include <halfgrad/core/generator.h>
#include <halfgrad/core/half.h>
#include <halfgrad/core/host_cache.h>
#include <halfgrad/core/indexing.h>
#include <halfgrad/core/random.h>
#include <halfgrad/core/tensor.h>
#include <halfgrad/autograd/function.h>
#include <halfgrad/autograd/grad.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/autograd/hooks.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/operators.h>
#include <halfgrad/amp/anomaly.h>
#include <halfgrad/amp/autocast.h>
#include <halfgrad/amp/custom_function.h>
#include <halfgrad/amp/fp8.h>
#include <halfgrad/amp/grad_scaler.h>
#include <halfgrad/amp/monitor.h>
#include <halfgrad/amp/numerics.h>
#include <halfgrad/amp/policy.h>
#include <halfgrad/nn/nn.h>
#include <halfgrad/nn/models/mobilenet_v3.h>
#include <halfgrad/optim/optim.h>
#include <halfgrad/data/data.h>
#include <halfgrad/train/train.h>
