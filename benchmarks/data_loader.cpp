// How long one epoch of Fashion-MNIST batches (128, shuffled) takes on the
// CPU with and without the DataLoader's background thread, while a fake
// training step either sleeps (the host waiting for a GPU) or spins (a CPU
// step competing for the cores). Two data sets: the TensorDataset (a batch is
// one gather) and a per-sample one (a batch stacks 128 get(i) results, as a
// data set without get_batch of its own does). Prints the epoch time and what
// the loader added to the same steps run alone.
// Usage: data_loader [fashion-mnist folder].
#include <chrono>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include <halfgrad.h>

namespace hg = halfgrad;
using clock_type = std::chrono::steady_clock;

namespace {
// The same samples, one at a time (the default get_batch: hg::stack).
class PerSample : public hg::data::Dataset {
 public:
  explicit PerSample(hg::data::TensorDataset d) : d_(std::move(d)) {}
  int64_t size() const override { return d_.size(); }
  hg::data::Example get(int64_t i) const override { return d_.get(i); }

 private:
  hg::data::TensorDataset d_;
};

void step(bool spin, int us) {
  if (us == 0) return;
  if (!spin) {
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    return;
  }
  const auto until = clock_type::now() + std::chrono::microseconds(us);
  while (clock_type::now() < until) {
  }
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  auto train = hg::data::fashion_mnist(argc > 1 ? argv[1] : hg::data::kFashionMnistRoot, true);
  const std::shared_ptr<const hg::data::Dataset> sets[] = {std::make_shared<hg::data::TensorDataset>(train),
                                                           std::make_shared<PerSample>(train)};
  const char* set_names[] = {"gather", "per-sample"};
  for (int s = 0; s < 2; ++s) {
    for (bool spin : {false, true}) {
      for (int step_us : {0, 500, 2000}) {
        if (step_us == 0 && spin) continue;
        const int64_t batches = (sets[s]->size() + 127) / 128;
        const auto t_alone = clock_type::now();
        for (int64_t k = 0; k < batches; ++k) step(spin, step_us);
        const double alone = seconds_since(t_alone);
        for (int64_t prefetch : {0, 2}) {
          hg::data::DataLoader loader(sets[s], {.batch_size = 128, .shuffle = true, .seed = 1, .prefetch = prefetch});
          double checksum = 0;
          const auto t0 = clock_type::now();
          for (auto& b : loader) {
            checksum += b.target[0].item<double>();
            step(spin, step_us);
          }
          const double epoch = seconds_since(t0);
          fmt::print("{:10s} {:5s} step {:4d} us, prefetch {}: epoch {:.3f} s, steps alone {:.3f} s, loader adds {:.3f} s "
                     "({} batches, {})\n",
                     set_names[s], spin ? "spin" : "sleep", step_us, prefetch, epoch, alone, epoch - alone,
                     loader.size(), checksum);
        }
      }
    }
  }
}
