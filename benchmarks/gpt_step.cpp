// CPU training-step benchmark of the character-level GPT of examples/gpt
// (its model.h: nanoGPT's decoder with tied head), float32 and bfloat16
// autocast, side by side with the same model in PyTorch 1.13 eager
// (pytorch_gpt_step.py, attention written out: 1.13 has no
// scaled_dot_product_attention). The step is the example's: autocast forward
// and cross-entropy, backward, clip_grad_norm_(1.0), AdamW (betas 0.9/0.99,
// weight decay 0.1 on the 2-d weights). Each variant runs in a process of its
// own, blocks of steps interleaved (cpu_bench.h); medians, tokens/s and ratios.
// PyTorch runs with tcmalloc preloaded where installed (bench::python_malloc).
//
//   build/benchmarks/gpt_step [--config cpu|shakespeare-char] [--steps 12] [--blocks 4] [--threads 2] [--ours-only 1]
//
// cpu: 4 layers, 4 heads, n_embd 128, context 64, batch 32 (examples/gpt's
// default); shakespeare-char: 6, 6, 384, 256, batch 64 (nanoGPT's; about 10
// seconds a step on 2 cores). The vocabulary is 96 characters (the fortunes').
#include <halfgrad.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#include "../examples/gpt/model.h"
#include "cpu_bench.h"

namespace hg = halfgrad;

namespace {

constexpr int64_t kVocab = 96;

struct Size {
  int64_t layers, heads, embd, block, batch;
};

std::function<void()> make_halfgrad_step(const Size& s, bool amp) {
  hg::manual_seed(0);
  auto model = std::make_shared<gpt::GPT>(gpt::Config{
      .vocab_size = kVocab, .block_size = s.block, .n_layer = s.layers, .n_head = s.heads, .n_embd = s.embd});
  std::vector<hg::Tensor> decay, no_decay;
  for (const auto& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const hg::optim::AdamWOptions adamw{.lr = 1e-3, .betas = {0.9, 0.99}, .weight_decay = 0.1};
  auto optimizer = std::make_shared<hg::optim::AdamW>(decay, adamw);
  auto no_decay_options = adamw;
  no_decay_options.weight_decay = 0.0;
  optimizer->add_param_group(no_decay, no_decay_options);
  auto x = hg::randint(0, kVocab, {s.batch, s.block});
  auto y = hg::randint(0, kVocab, {s.batch, s.block});
  return [=] {
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::DeviceType::CPU, hg::bfloat16, /*enabled=*/amp);
      const hg::Tensor logits = model->forward(x);
      loss = hg::cross_entropy(logits.view({-1, kVocab}), y.view({-1}));
    }
    optimizer->zero_grad(/*set_to_none=*/true);
    loss.backward();
    hg::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer->step();
  };
}

std::vector<double> time_pytorch(const Size& s, const char* mode, int steps, int threads) {
  return bench::time_python(fmt::format(
      "pytorch_gpt_step.py --mode {} --layers {} --heads {} --embd {} --block {} --batch {} --vocab {} --steps {} "
      "--warmup 2 --threads {}",
      mode, s.layers, s.heads, s.embd, s.block, s.batch, kVocab, steps, threads));
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 12, blocks = 4, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool ours_only = false;
  std::string config = "cpu";
  CLI::App app{"The char-level GPT's CPU training step, halfgrad vs PyTorch eager, float32 and bf16 autocast "
               "(docs/gpt.md)"};
  app.add_option("--config", config, "cpu or shakespeare-char")
      ->check(CLI::IsMember({"cpu", "shakespeare-char"}))
      ->capture_default_str();
  app.add_option("--steps", steps, "timed steps per variant")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--blocks", blocks, "rounds of interleaved blocks")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", threads)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--ours-only", ours_only, "1: no PyTorch children (profiling our step)");
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  const Size s = config == "cpu" ? Size{4, 4, 128, 64, 32} : Size{6, 6, 384, 256, 64};
  const int64_t tokens = s.batch * s.block;
  fmt::print("char-level GPT training step ({}: {} layers, {} heads, n_embd {}, context {}, batch {}, vocab {}; "
             "AdamW, clip 1.0); {} threads\n",
             config, s.layers, s.heads, s.embd, s.block, s.batch, kVocab, threads);
  fmt::print("each variant in its own process, blocks of steps interleaved; median over all steps\n");
  if (!ours_only)
    fmt::print("PyTorch's allocator: {}\n", bench::python_malloc().empty()
                                                 ? std::string("glibc malloc (scripts/setup --bench installs tcmalloc)")
                                                 : "LD_PRELOAD=" + bench::python_malloc());
  struct Variant {
    std::string name;
    std::function<std::vector<double>(int)> run;
  };
  std::vector<Variant> variants;
  for (const bool amp : {false, true}) {
    variants.push_back({amp ? "halfgrad bf16 AMP" : "halfgrad float32", [s, amp](int n) {
                          return bench::time_in_child([s, amp] { return make_halfgrad_step(s, amp); }, n, 2);
                        }});
    if (!ours_only)
      variants.push_back({amp ? "pytorch bf16 AMP" : "pytorch float32",
                          [s, threads, amp](int n) { return time_pytorch(s, amp ? "amp" : "float32", n, threads); }});
  }
  // Blocks of steps, every variant once per round, rounds interleaved; on a
  // shared machine a block can be several times slower than the next, so
  // besides the median over all steps the fastest block's median is shown
  // (the least disturbed measurement), with ratios for both.
  std::map<std::string, std::vector<double>> times, block_medians;
  for (int b = 0; b < blocks; ++b)
    for (auto& v : variants) {
      auto t = v.run((steps + blocks - 1) / blocks);
      if (!t.empty()) block_medians[v.name].push_back(bench::median(t));
      times[v.name].insert(times[v.name].end(), t.begin(), t.end());
    }
  fmt::print("\n{:<20} {:>14} {:>10} {:>20} {:>10}\n", "", "median ms/step", "tokens/s", "fastest block ms", "tokens/s");
  std::map<std::string, double> med, best;
  for (auto& v : variants) {
    if (times[v.name].empty()) {
      fmt::print("{:<20} {:>14}\n", v.name, "n/a");
      continue;
    }
    med[v.name] = bench::median(times[v.name]);
    best[v.name] = *std::min_element(block_medians[v.name].begin(), block_medians[v.name].end());
    fmt::print("{:<20} {:>14.1f} {:>10.0f} {:>20.1f} {:>10.0f}\n", v.name, med[v.name],
               static_cast<double>(tokens) * 1e3 / med[v.name], best[v.name],
               static_cast<double>(tokens) * 1e3 / best[v.name]);
  }
  auto ratio = [&](const std::string& what, const std::string& a, const std::string& b) {
    if (med[a] > 0 && med[b] > 0)
      fmt::print("{:<44} {:.2f}x (fastest blocks: {:.2f}x)\n", what, med[a] / med[b], best[a] / best[b]);
  };
  fmt::print("\n");
  ratio("float32: halfgrad time / pytorch time", "halfgrad float32", "pytorch float32");
  ratio("bf16 AMP: halfgrad time / pytorch time", "halfgrad bf16 AMP", "pytorch bf16 AMP");
  ratio("halfgrad: bf16 AMP speed-up over float32", "halfgrad float32", "halfgrad bf16 AMP");
  ratio("pytorch: bf16 AMP speed-up over float32", "pytorch float32", "pytorch bf16 AMP");
}
