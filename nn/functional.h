#pragma once
// halfgrad::nn::functional, as LibTorch's torch::nn::functional (Python's
// torch.nn.functional): the activations, dropout, linear, every loss, layer_norm,
// embedding and scaled_dot_product_attention, with the option structs
// (ops/loss_options.h) beside the positional forms.
//
//   namespace F = halfgrad::nn::functional;
//   F::cross_entropy(logits, target, {.label_smoothing = 0.1});
//   F::smooth_l1_loss(pred, target, {.beta = 0.5});
//
// These are the same functions as halfgrad::cross_entropy etc. (using
// declarations), so both spellings name one op.
#include <halfgrad/ops/loss_options.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn::functional {

// activations, softmax, dropout, linear
using halfgrad::dropout;
using halfgrad::gelu;
using halfgrad::hardsigmoid;
using halfgrad::hardswish;
using halfgrad::linear;
using halfgrad::log_softmax;
using halfgrad::prelu;
using halfgrad::relu;
using halfgrad::relu6;
using halfgrad::sigmoid;
using halfgrad::softmax;
using halfgrad::tanh;

// losses
using halfgrad::binary_cross_entropy;
using halfgrad::binary_cross_entropy_with_logits;
using halfgrad::cross_entropy;
using halfgrad::l1_loss;
using halfgrad::mse_loss;
using halfgrad::nll_loss;
using halfgrad::smooth_l1_loss;

// convolutions (ops/conv_ops.h)
using halfgrad::conv1d;
using halfgrad::conv2d;
using halfgrad::conv3d;
using halfgrad::conv_transpose1d;
using halfgrad::conv_transpose2d;
using halfgrad::conv_transpose3d;

// the transformer's ops (ops/transformer_ops.h)
using halfgrad::embedding;
using halfgrad::layer_norm;
using halfgrad::scaled_dot_product_attention;

// options
using halfgrad::BCEWithLogitsOptions;
using halfgrad::BinaryCrossEntropyOptions;
using halfgrad::CrossEntropyOptions;
using halfgrad::L1LossOptions;
using halfgrad::MSELossOptions;
using halfgrad::NLLLossOptions;
using halfgrad::Reduction;
using halfgrad::SmoothL1LossOptions;

}  // namespace halfgrad::nn::functional
