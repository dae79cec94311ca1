#pragma once
// halfgrad::nn: modules, layers, losses and initialisers.
#include <halfgrad/nn/activation.h>
#include <halfgrad/nn/conv.h>
#include <halfgrad/nn/batchnorm.h>
#include <halfgrad/nn/dropout.h>
#include <halfgrad/nn/flatten.h>
#include <halfgrad/nn/functional.h>
#include <halfgrad/nn/init.h>
#include <halfgrad/nn/linear.h>
#include <halfgrad/nn/loss.h>
#include <halfgrad/nn/module.h>
#include <halfgrad/nn/pooling.h>
#include <halfgrad/nn/safetensors.h>
#include <halfgrad/nn/sequential.h>
#include <halfgrad/nn/state_dict.h>
#include <halfgrad/nn/utils.h>
