// The two-layer MLP of PyTorch's AMP tutorial, in float32:
//   mlp [--epochs N] [--device cpu|cuda]
// trains Linear(10, 100) -> ReLU -> Linear(100, 10) with SGD on random data
// and prints the loss of each epoch.
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include <halfgrad.h>

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
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    HG_CHECK(i + 1 < argc && (arg == "--epochs" || arg == "--device"),
             "unknown or incomplete argument \"{}\"; usage: mlp [--epochs N] [--device cpu|cuda]", arg);
    const std::string value = argv[++i];
    if (arg == "--epochs") {
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      HG_CHECK(*end == '\0' && n >= 0, "--epochs needs a non-negative integer, got \"{}\"", value);
      args.epochs = static_cast<int>(n);
    } else {
      args.device = hg::Device::parse(value);
    }
  }
  return args;
}

int main(int argc, char** argv) {
  bool on_cuda = false;
  try {
    const Args args = parse_args(argc, argv);
    on_cuda = args.device.is_cuda();
    hg::manual_seed(0);
    MLP model;
    model.to(args.device);
    hg::nn::CrossEntropyLoss criterion;
    hg::optim::SGD optimizer(model.parameters(), {.lr = 0.01});

    auto inputs = hg::randn({100, 10}, args.device);
    // The dtype is spelled out: a bare Device would make float32 targets.
    auto targets = hg::randint(0, 10, {100}, hg::TensorOptions(hg::int64, args.device));
    for (int epoch = 0; epoch < args.epochs; ++epoch) {
      optimizer.zero_grad(/*set_to_none=*/true);
      auto outputs = model.forward(inputs);
      auto loss = criterion(outputs, targets);
      loss.backward();
      optimizer.step();
      fmt::print("Epoch {}, Loss: {:.4f}\n", epoch, loss.item<float>());
    }
  } catch (const hg::Error& e) {
    fmt::print(stderr, "mlp: {}\n", e.what());
    // The CUDA math kernels arrive with the CUDA backend; until then say what to do.
    if (on_cuda) fmt::print(stderr, "mlp: the CUDA backend cannot train yet; run with --device cpu\n");
    return 1;
  }
  return 0;
}
