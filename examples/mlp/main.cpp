// The program of PyTorch's AMP tutorial, in halfgrad:
//
//   mlp [--epochs N] [--device cpu|cuda] [--dtype float16|bfloat16]
//       [--amp on|off] [--scaler on|off] [--trace]
//
// Linear(10, 100) -> ReLU -> Linear(100, 10), CrossEntropyLoss, SGD (lr 0.01)
// on random inputs and class targets. The forward pass and the loss run under
// autocast; the GradScaler scales the loss, and the optimizer consults it.
// `--amp off --scaler off` is the float32 baseline; `--trace` prints the
// autocast decision for every op of the first step.
#include <halfgrad.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace hg = halfgrad;

struct MLP : hg::nn::Module {
  hg::nn::Linear linear1{10, 100}, linear2{100, 10};
  MLP() {
    register_module("linear1", linear1);
    register_module("linear2", linear2);
  }
  hg::Tensor forward(const hg::Tensor& x) { return linear2(hg::relu(linear1(x))); }
};

struct Args {
  int epochs = 20;
  hg::Device device = hg::cuda::is_available() ? hg::Device::cuda() : hg::Device::cpu();
  std::optional<hg::DType> dtype;  // default: float16 on CUDA, bfloat16 on the CPU
  bool amp = true, scaler = true, trace = false;
};

bool on_off(std::string_view flag, const std::string& v) {
  HG_CHECK(v == "on" || v == "off", "{} takes on or off, got \"{}\"", flag, v);
  return v == "on";
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--trace") {
      a.trace = true;
      continue;
    }
    HG_CHECK(i + 1 < argc, "{} needs a value; usage: mlp [--epochs N] [--device cpu|cuda] "
             "[--dtype float16|bfloat16] [--amp on|off] [--scaler on|off] [--trace]", flag);
    const std::string v = argv[++i];
    if (flag == "--epochs") {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      HG_CHECK(*end == '\0' && n >= 0, "--epochs needs a non-negative integer, got \"{}\"", v);
      a.epochs = static_cast<int>(n);
    } else if (flag == "--device") {
      a.device = hg::Device::parse(v);
    } else if (flag == "--dtype") {
      HG_CHECK(v == "float16" || v == "bfloat16", "--dtype takes float16 or bfloat16, got \"{}\"", v);
      a.dtype = v == "float16" ? hg::float16 : hg::bfloat16;
    } else if (flag == "--amp") {
      a.amp = on_off(flag, v);
    } else if (flag == "--scaler") {
      a.scaler = on_off(flag, v);
    } else {
      hg::fail("unknown option \"{}\"", flag);
    }
  }
  return a;
}

int main(int argc, char** argv) try {
  const Args args = parse_args(argc, argv);
  const hg::Device device = args.device;

  hg::manual_seed(0);
  MLP model;
  model.to(device);
  hg::nn::CrossEntropyLoss criterion;
  hg::optim::SGD optimizer(model.parameters(), {.lr = 0.01});
  hg::amp::GradScaler scaler({.enabled = args.scaler});

  // Drawn on the CPU's generator and moved, like the model's initial weights:
  // every device then trains on the same numbers, so the CPU's and the GPU's
  // losses agree to the dtype's precision (each device has its own generator).
  auto inputs = hg::randn({100, 10}).to(device);
  auto targets = hg::randint(0, 10, {100}).to(device);

  for (int epoch = 0; epoch < args.epochs; ++epoch) {
    std::optional<hg::amp::trace> trace;  // --trace: every autocast decision of the first step
    if (args.trace && epoch == 0) trace.emplace();
    hg::Tensor outputs, loss;
    {
      hg::amp::autocast region(device.type(), args.dtype, /*enabled=*/args.amp);  // `with autocast():`
      outputs = model.forward(inputs);
      loss = criterion(outputs, targets);
    }
    if (epoch == 0) {
      fmt::print("inputs dtype:{}\n", hg::dtype_name(inputs.dtype()));
      fmt::print("outputs dtype:{}\n", hg::dtype_name(outputs.dtype()));
      fmt::print("loss dtype:{}\n", hg::dtype_name(loss.dtype()));
    }
    optimizer.zero_grad(/*set_to_none=*/true);
    scaler.scale(loss).backward();
    scaler.step(optimizer);  // the optimizer consults the scaler: unscale, check, update
    scaler.update();
    trace.reset();
    fmt::print("Epoch {}, Loss: {:.4f}\n", epoch + 1, loss.item<float>());
  }
  return 0;
} catch (const hg::Error& e) {
  fmt::print(stderr, "mlp: {}\n", e.what());
  return 1;
}
