// How long one epoch of Fashion-MNIST batches (128, shuffled) takes on the
// CPU with and without the DataLoader's background thread, while a fake
// training step either sleeps (the host waiting for a GPU) or spins (a CPU
// step competing for the cores). Prints the epoch time and what the loader
// added on top of the steps. Usage: data_loader [fashion-mnist folder].
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include <halfgrad.h>

namespace hg = halfgrad;

int main(int argc, char** argv) {
  const auto train = hg::data::fashion_mnist(argc > 1 ? argv[1] : hg::data::kFashionMnistRoot, true);
  using clock = std::chrono::steady_clock;
  for (const char* kind : {"sleep", "spin"}) {
    for (int step_us : {0, 500, 2000}) {
      if (step_us == 0 && kind[1] == 'p') continue;
      for (int64_t prefetch : {0, 2}) {
        hg::data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 1, .prefetch = prefetch});
        double checksum = 0;
        const auto t0 = clock::now();
        for (auto& b : loader) {
          checksum += b.target[0].item<double>();
          if (step_us == 0) continue;
          if (kind[1] == 'l') {
            std::this_thread::sleep_for(std::chrono::microseconds(step_us));
          } else {
            const auto until = clock::now() + std::chrono::microseconds(step_us);
            while (clock::now() < until) {
            }
          }
        }
        const double s = std::chrono::duration<double>(clock::now() - t0).count();
        const double steps = static_cast<double>(loader.size()) * step_us * 1e-6;
        fmt::print("{:5s} step {:4d} us, prefetch {}: epoch {:.3f} s, loader on top of the steps {:.3f} s ({} batches; {})\n",
                   kind, step_us, prefetch, s, s - steps, loader.size(), checksum);
      }
    }
  }
}
