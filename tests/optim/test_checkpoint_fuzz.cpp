// The checkpoint loader against damaged files (tests/fuzz/mutate.h): a saved
// checkpoint of the tutorial MLP (AdamW, StepLR, GradScaler) with one of its
// three files mutated loads cleanly or is a halfgrad::Error, within a second;
// and what loads cleanly trains a step without a crash.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>

#include <halfgrad.h>

#include "fuzz/mutate.h"
#include "temp_dir.h"
#include "test_util.h"
#include "tutorial_mlp.h"

namespace hg = halfgrad;
namespace fs = std::filesystem;

namespace {

struct Run {
  hgtest::MLP model;
  hg::optim::AdamW optimizer{model.parameters(), {.lr = 1e-3}};
  hg::optim::StepLR scheduler{optimizer, 3, 0.5};
  hg::amp::GradScaler scaler{{.init_scale = 1024.0}};

  void step() {
    const hg::Tensor x = hg::randn({8, 10}), y = hg::randint(0, 10, {8});
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::DeviceType::CPU, hg::bfloat16);
      loss = hg::cross_entropy(model.forward(x), y);
    }
    optimizer.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(optimizer);
    scaler.update();
    scheduler.step();
  }
  hg::optim::CheckpointParts parts() {
    return {.model = &model, .optimizer = &optimizer, .scheduler = &scheduler, .scaler = &scaler};
  }
};

}  // namespace

TEST_CASE("Checkpoint fuzz: a mutated file loads or is an Error, within a second", "[optim][checkpoint][fuzz]") {
  // HALFGRAD_FUZZ_SECONDS=N runs N seconds instead of 300 inputs.
  hgtest::TempDir dir;
  hg::manual_seed(0);
  {
    Run run;
    run.step();
    hg::optim::save_checkpoint(dir / "good", run.parts());
  }
  const char* files[] = {"trainer.json", "optimizer.safetensors", "model.safetensors"};
  std::string good[3];
  for (int f = 0; f < 3; ++f) good[f] = hgtest::read_bytes(dir / ("good/" + std::string(files[f])));
  const std::string progress = dir / "progress";
  const auto r = hgtest::run_in_child([&] {
    hgfuzz::Mutator mutate(hgfuzz::seed());
    fs::copy(dir.path / "good", dir.path / "in", fs::copy_options::recursive);
    double slowest = 0;
    int64_t loaded = 0;
    const int64_t ran = hgfuzz::loop(300, [&](int64_t i) {
      const int f = static_cast<int>(i % 3);
      const std::string in = mutate(good[f]);
      for (int g = 0; g < 3; ++g) hgtest::write_bytes(dir / ("in/" + std::string(files[g])), g == f ? in : good[g]);
      hgtest::write_bytes(progress, fmt::format("input {} ({}, {} bytes, seed {})", i, files[f], in.size(), hgfuzz::seed()));
      Run run;
      auto parts = run.parts();
      const auto t0 = std::chrono::steady_clock::now();
      bool ok = true;
      try {
        hg::optim::load_checkpoint(dir / "in", parts);
      } catch (const hg::Error& e) {
        ok = false;
        if (std::string_view(e.what()).size() > 2000)
          throw std::logic_error(fmt::format("input {}: an Error message of {} bytes", i, std::string_view(e.what()).size()));
      }
      slowest = std::max(slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (!ok) return;
      ++loaded;
      // What loaded is consistent enough to train on (values may be odd: a
      // flipped bit in a weight is a valid file).
      try {
        run.step();
      } catch (const hg::Error&) {
      }
    });
    if (slowest > 1.0) throw std::logic_error(fmt::format("the slowest of {} loads took {:.2f} s", ran, slowest));
    hgtest::write_bytes(progress,
                        fmt::format("checkpoint fuzz: {} inputs, {} loaded, slowest {:.4f} s", ran, loaded, slowest));
  });
  INFO(r.describe() << " at " << hgtest::read_bytes(progress));
  CHECK(r.returned);
  fmt::print("{}\n", hgtest::read_bytes(progress));  // how many ran (the child's output is discarded)
}
