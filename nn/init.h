#pragma once
// Initialisers (torch.nn.init): fill a tensor in place under no_grad, drawing
// from the global generator, so manual_seed makes a model reproducible.
#include <string_view>
#include <utility>

#include <halfgrad/core/tensor.h>

namespace halfgrad::nn::init {

enum class FanMode { FanIn, FanOut };

// PyTorch's calculate_gain for "linear", "conv*", "sigmoid", "tanh", "relu",
// "leaky_relu" (param = negative slope, default 0.01) and "selu".
double calculate_gain(std::string_view nonlinearity, double param = 0.01);
// (fan_in, fan_out) of a weight [out, in, *kernel]; needs at least 2 dims.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
// bound = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                         std::string_view nonlinearity = "leaky_relu");
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        std::string_view nonlinearity = "leaky_relu");
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0);

}  // namespace halfgrad::nn::init
