#pragma once
// halfgrad::optim: optimizers.
#include <halfgrad/optim/adam.h>
#include <halfgrad/optim/optimizer.h>
#include <halfgrad/optim/sgd.h>
