#pragma once
// halfgrad::optim: optimizers and learning-rate schedulers.
#include <halfgrad/optim/adam.h>
#include <halfgrad/optim/checkpoint.h>
#include <halfgrad/optim/lr_scheduler.h>
#include <halfgrad/optim/optimizer.h>
#include <halfgrad/optim/sgd.h>
