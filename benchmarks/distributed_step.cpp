// Data parallelism on this machine, run under mpirun (docs/distributed.md has
// the numbers): the all-reduce bandwidth of the process group for message
// sizes from 4 KB to 64 MB, and a data-parallel MLP training step at a fixed
// global batch. Run it with 1 rank and with 2, and compare:
//
//   OMP_NUM_THREADS=2 build/benchmarks/distributed_step
//   OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 build/benchmarks/distributed_step
//     [--bucket-cap-mb 25] [--gradient-as-bucket-view 0|1] [--global-batch 256] [--steps 30]
//
// Bus bandwidth is nccl-tests' measure: bytes x 2 (n - 1) / n per second,
// what each link carries in a ring all-reduce. On CUDA tensors (--device cuda,
// a GPU machine) the same calls go through NCCL.
#include <halfgrad.h>
#include <halfgrad/distributed/ddp.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace hg = halfgrad;
namespace dist = halfgrad::distributed;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  int64_t global_batch = 256, steps = 30;
  dist::DistributedDataParallelOptions ddp_options;
  CLI::App app{"all_reduce bandwidth and a data-parallel MLP step over the ranks (docs/distributed.md)"};
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--global-batch", global_batch, "samples per step over all ranks")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", steps)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--bucket-cap-mb", ddp_options.bucket_cap_mb)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--gradient-as-bucket-view", ddp_options.gradient_as_bucket_view)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto& pg = dist::init();
  const int w = pg.world_size(), r = pg.rank();
  const hg::Device device = device_name == "cuda" ? hg::Device::cuda() : hg::Device::cpu();
  const hg::Tensor probe = hg::zeros({1}, hg::TensorOptions(hg::kFloat, device));
  auto sync = [&] {
    if (device.is_cuda()) (void)(probe + 1.0).item<float>();  // waits for the stream's queued work
    pg.barrier();
  };
  if (r == 0) fmt::print("{} rank(s), {} tensors\n\nall_reduce (sum, float32)\n{:>10} {:>12} {:>14}\n", w,
                         device.str(), "size", "time us", "bus GB/s");
  double best_bus = 0, best_bytes = 0;
  for (int64_t bytes = 4096; bytes <= (int64_t{64} << 20); bytes *= 4) {
    hg::Tensor t = hg::ones({bytes / 4}, hg::TensorOptions(hg::kFloat, device));
    std::vector<double> times;
    for (int i = 0; i < 12; ++i) {
      sync();
      const double t0 = now_s();
      pg.all_reduce(t);
      sync();
      if (i >= 2) times.push_back(now_s() - t0);
    }
    const double s = median(times);
    const double bus = w > 1 ? static_cast<double>(bytes) * 2.0 * (w - 1) / w / s / 1e9 : 0.0;
    if (bus >= best_bus) best_bus = bus, best_bytes = static_cast<double>(bytes);
    if (r == 0) fmt::print("{:>10} {:>12.1f} {:>14.2f}\n", hg::train::format_bytes(static_cast<uint64_t>(bytes)), s * 1e6, bus);
  }

  // A data-parallel step: MLP 784-1024-1024-10, global batch split over the ranks.
  hg::manual_seed(0);
  hg::nn::Sequential model(hg::nn::Linear(784, 1024), hg::nn::ReLU(), hg::nn::Linear(1024, 1024), hg::nn::ReLU(),
                           hg::nn::Linear(1024, 10));
  model.to(device);
  std::optional<dist::DistributedDataParallel> ddp;
  if (w > 1) ddp.emplace(model, pg, ddp_options);
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  const int64_t b = global_batch / w;
  const hg::Tensor x = hg::randn({b, 784}).to(device), y = hg::randint(0, 10, {b}).to(device);
  // The step three ways, interleaved: as DDP runs it; under no_sync (the same
  // compute on every rank at once, no all-reduce: what running the ranks side
  // by side costs); and the all-reduce of the gradients alone (one flat buffer).
  auto step = [&](bool reduce) {
    opt.zero_grad();
    hg::Tensor loss;
    {
      hg::amp::autocast region(device.type());
      loss = hg::cross_entropy(model(x), y);
    }
    if (ddp && !reduce) {
      auto local = ddp->no_sync();
      loss.backward();
    } else {
      loss.backward();
    }
    opt.step();
  };
  int64_t numel = 0;
  for (const auto& p : model.parameters()) numel += p.numel();
  hg::Tensor flat = hg::ones({numel}, hg::TensorOptions(hg::kFloat, device));
  std::vector<double> full, local, reduce_only;
  for (int64_t i = 0; i < steps + 3; ++i) {
    for (int variant = 0; variant < 3; ++variant) {
      if (variant > 0 && !ddp) continue;
      sync();
      const double t0 = now_s();
      if (variant == 2) pg.all_reduce(flat, dist::ReduceOp::Avg);
      else step(variant == 0);
      sync();
      if (i >= 3) (variant == 0 ? full : variant == 1 ? local : reduce_only).push_back(now_s() - t0);
    }
  }
  if (r == 0) {
    fmt::print("\nMLP 784-1024-1024-10 step, autocast, global batch {} ({} per rank), medians of {}:\n", global_batch, b,
               steps);
    if (ddp)
      fmt::print("  step (DDP, {} bucket(s) of <= {} MiB{}): {:.2f} ms\n", ddp->buckets().size(), ddp_options.bucket_cap_mb,
                 ddp_options.gradient_as_bucket_view ? ", gradient_as_bucket_view" : "", median(full) * 1e3);
    else
      fmt::print("  step: {:.2f} ms\n", median(full) * 1e3);
    // scripts/gpu-check's closing table (a world of 1 on one GPU: the step through NCCL, no bandwidth to speak of)
    if (device.is_cuda())
      fmt::print("SUMMARY|distributed_step|MLP step, {} rank(s) via NCCL{}|{:.3f} ms|||n/a\n", w,
                 w > 1 ? fmt::format(" (bus {:.1f} GB/s at {})", best_bus,
                                     hg::train::format_bytes(static_cast<uint64_t>(best_bytes)))
                       : std::string(),
                 median(full) * 1e3);
    if (ddp) {
      fmt::print("  the same step under no_sync (compute only, every rank at once): {:.2f} ms\n", median(local) * 1e3);
      fmt::print("  all_reduce avg of its {} gradients ({}) alone: {:.2f} ms\n", numel,
                 hg::train::format_bytes(static_cast<uint64_t>(numel * 4)), median(reduce_only) * 1e3);
    }
  }
  dist::finalize();
  return 0;
}
