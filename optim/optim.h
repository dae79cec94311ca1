#pragma once
// halfgrad::optim: optimizers.
#include "optim/adam.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
