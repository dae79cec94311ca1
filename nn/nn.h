#pragma once
// halfgrad::nn: modules, layers, losses and initialisers.
#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/flatten.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/sequential.h"
#include "nn/state_dict.h"
