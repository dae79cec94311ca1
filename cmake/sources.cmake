# Library sources outside core/ops/autograd/amp, listed per folder.
set(HALFGRAD_EXTRA_SOURCES
  nn/module.cpp nn/state_dict.cpp nn/init.cpp nn/linear.cpp nn/sequential.cpp
  optim/optimizer.cpp optim/sgd.cpp optim/adam.cpp optim/fused_cpu.cpp
)
