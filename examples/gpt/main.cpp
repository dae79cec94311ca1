// gpt: a character-level GPT trained with automatic mixed precision, after
// nanoGPT's shakespeare-char (Karpathy), on the fortune cookies of Debian's
// `fortunes` package. One run reads top to bottom: the corpus, the model, the
// optimizer and its schedule, the loop (autocast forward, scaled backward,
// clipping, a scaler-consulted step), evaluation, checkpoints, and sampling.
//
//   build/examples/gpt                                  # CPU-friendly model, bf16 autocast on the CPU
//   build/examples/gpt --config shakespeare-char        # nanoGPT's 10.7M-parameter configuration
//   build/examples/gpt --precision fp32 --metrics fp32.csv
//   build/examples/gpt --help
//
// docs/gpt.md has a real run and the numbers.
#include <halfgrad.h>

#include "model.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef HALFGRAD_PLOT_METRICS
#define HALFGRAD_PLOT_METRICS "scripts/plot-metrics"
#endif

namespace hg = halfgrad;
namespace fs = std::filesystem;

namespace {

constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// ---- options ---------------------------------------------------------------------------

struct Options {
  std::string config = "cpu";  // cpu | shakespeare-char: the defaults below
  std::string data = kFortunesDir;
  std::string data_file;  // a plain text file instead of the fortune database
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 64, batch_size = 32;
  double dropout = 0.0;
  int64_t max_iters = 1000;  // the schedule's length
  int64_t stop_at = 0;       // stop at this step as if interrupted (0: at max_iters)
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup_iters = 50;
  double weight_decay = 0.1, beta2 = 0.99, grad_clip = 1.0;
  int64_t eval_interval = 100, eval_iters = 10, log_every = 10;
  std::string precision = "auto";  // fp32 | bf16 | fp16 | auto (bf16 on the CPU, fp16 on CUDA)
  std::string device = "cpu";
  uint64_t seed = 1337;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0, keep_checkpoints = 3;
  bool resume = false;
  std::string metrics;
  int64_t sample_chars = 500;
  double temperature = 0.8;
  int64_t top_k = 0;
  std::string prompt = "\n";
};

// nanoGPT's config/train_shakespeare_char.py, for the options not given on the command line.
void apply_preset(CLI::App& app, Options& o) {
  if (o.config != "shakespeare-char") return;
  auto set = [&](const char* flag, auto& field, auto value) {
    if (app.count(flag) == 0) field = value;
  };
  set("--n-layer", o.n_layer, 6);
  set("--n-head", o.n_head, 6);
  set("--n-embd", o.n_embd, 384);
  set("--block-size", o.block_size, 256);
  set("--batch-size", o.batch_size, 64);
  set("--dropout", o.dropout, 0.2);
  set("--max-iters", o.max_iters, 5000);
  set("--warmup-iters", o.warmup_iters, 100);
  set("--eval-interval", o.eval_interval, 250);
  set("--eval-iters", o.eval_iters, 200);
}

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"Train a character-level GPT with automatic mixed precision (halfgrad)", "gpt"};
  app.get_formatter()->column_width(30);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later --flag wins
  app.add_option("--config", o.config,
                 "defaults: cpu (4 layers, 4 heads, n_embd 128, context 64, batch 32: minutes on 2 cores) or "
                 "shakespeare-char (nanoGPT's: 6, 6, 384, 256, 64, dropout 0.2, 5000 iters)")
      ->check(CLI::IsMember({"cpu", "shakespeare-char"}))
      ->capture_default_str();
  app.add_option("--data", o.data, "folder of fortune files (Debian's `fortunes` package)")->capture_default_str();
  app.add_option("--data-file", o.data_file, "train on this plain text file instead");
  app.add_option("--n-layer", o.n_layer, "transformer blocks")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--n-head", o.n_head, "attention heads")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--n-embd", o.n_embd, "embedding width")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--block-size", o.block_size, "context length")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "sequences per step")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--dropout", o.dropout, "dropout")->check(CLI::Range(0.0, 0.99))->capture_default_str();
  app.add_option("--max-iters", o.max_iters, "training steps (the schedule's length)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--stop-at", o.stop_at, "stop at this step, as if interrupted (0: at --max-iters)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--lr", o.lr, "peak learning rate (AdamW)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--warmup-iters", o.warmup_iters, "linear warm-up steps")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay (2-d weights only)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW beta2")->check(CLI::Range(0.0, 0.999999))->capture_default_str();
  app.add_option("--grad-clip", o.grad_clip, "clip the gradients' 2-norm to this (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--eval-interval", o.eval_interval, "steps between evaluations")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--eval-iters", o.eval_iters, "batches per evaluation")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--log-every", o.log_every, "steps between reads of the loss")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--precision", o.precision,
                 "fp32, bf16 (autocast), fp16 (autocast + GradScaler), auto (bf16 on the CPU, fp16 on CUDA)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--device", o.device, "cpu, cuda, or auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the weights, dropout, the batches and the sampling")->capture_default_str();
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "save checkpoints here (ckpt-<step>/)");
  app.add_option("--checkpoint-every", o.checkpoint_every, "also save every N steps (0: at the end only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "checkpoints to keep (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the newest checkpoint in --checkpoint-dir");
  app.add_option("--metrics", o.metrics, "write metrics to this CSV file (and plot it with gnuplot)");
  app.add_option("--sample-chars", o.sample_chars, "characters to sample at the end (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "sampling temperature")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--top-k", o.top_k, "sample among the k likeliest characters (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--prompt", o.prompt, "text the sample starts from (characters of the vocabulary)");
  try {
    app.parse(argc, argv);
    apply_preset(app, o);
    if (o.resume && o.checkpoint_dir.empty()) throw CLI::ValidationError("--resume", "needs --checkpoint-dir");
    if (o.n_embd % o.n_head != 0)
      throw CLI::ValidationError("--n-embd", fmt::format("{} is not a multiple of --n-head {}", o.n_embd, o.n_head));
    if (o.stop_at > o.max_iters)
      throw CLI::ValidationError("--stop-at", fmt::format("{} is past --max-iters {}", o.stop_at, o.max_iters));
    if (o.warmup_iters >= o.max_iters)
      throw CLI::ValidationError("--warmup-iters",
                                 fmt::format("{} leaves no step of --max-iters {} to decay", o.warmup_iters, o.max_iters));
    if (o.min_lr > o.lr) throw CLI::ValidationError("--min-lr", fmt::format("{} is above --lr {}", o.min_lr, o.lr));
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  return o;
}

// ---- the corpus: read as hostile input ----------------------------------------------------

constexpr uint64_t kMaxFileBytes = 64ull << 20;   // one fortune file (the largest is ~400 KB)
constexpr uint64_t kMaxCorpusBytes = 512ull << 20;  // all of them

// The whole of `path` if it is a regular file of at most kMaxFileBytes (a FIFO,
// a device or a folder is refused before any read, never waited on).
std::string read_regular_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  HG_CHECK(fd >= 0, "gpt: cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st {};
  std::string data;
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const bool small = regular && static_cast<uint64_t>(st.st_size) <= kMaxFileBytes;
  if (small) {
    data.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < data.size()) {
      const ssize_t r = ::read(fd, data.data() + got, data.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    data.resize(got);  // a file that shrank while we read it
  }
  ::close(fd);
  HG_CHECK(regular, "gpt: {} is not a regular file", path.string());
  HG_CHECK(small, "gpt: {} holds {} bytes, more than a text file of this corpus may ({} MiB)", path.string(),
           static_cast<uint64_t>(st.st_size), kMaxFileBytes >> 20);
  return data;
}

struct Corpus {
  std::string text;
  std::string source;  // where it came from, for the log
  int64_t files = 0, records = 0, dropped_bytes = 0;
};

// The characters the model sees: printable ASCII, newline and tab. Anything
// else (fortune's backspace overstrikes, a bell, the odd UTF-8 or Latin-1
// byte) is dropped and counted.
bool kept(unsigned char c) { return (c >= 32 && c < 127) || c == '\n' || c == '\t'; }

// fortune's format: records separated by lines holding only '%'. Each record,
// its trailing blank space trimmed, joined by "\n%\n" (so the model learns
// where one fortune ends).
void append_records(const std::string& raw, Corpus& corpus) {
  std::string record;
  auto flush = [&] {
    while (!record.empty() && (record.back() == '\n' || record.back() == ' ' || record.back() == '\t'))
      record.pop_back();
    if (!record.empty()) {
      if (!corpus.text.empty()) corpus.text += "\n%\n";
      corpus.text += record;
      ++corpus.records;
    }
    record.clear();
  };
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\n', start);
    if (end == std::string::npos) end = raw.size();
    std::string_view line(raw.data() + start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == "%") {
      flush();
    } else {
      for (unsigned char c : line) {
        if (kept(c)) record += static_cast<char>(c);
        else ++corpus.dropped_bytes;
      }
      record += '\n';
    }
    start = end + 1;
  }
  flush();
}

// Every fortune file directly in `dir`: regular files, not links, not the
// strfile indexes (.dat) nor the UTF-8 copies (.u8), in name order.
Corpus read_fortunes(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw hg::Error(fmt::format(
        "gpt: no fortune database at {} (install Debian's `fortunes` package: sudo apt-get install fortunes; or "
        "give --data DIR, or --data-file FILE for any text file)",
        dir));
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto& p = entry.path();
    if (entry.is_symlink() || !entry.is_regular_file()) continue;
    if (p.extension() == ".dat" || p.extension() == ".u8" || p.filename().string().starts_with(".")) continue;
    files.push_back(p);
  }
  HG_CHECK(!ec, "gpt: cannot list {}: {}", dir, ec.message());
  std::sort(files.begin(), files.end());
  Corpus corpus;
  corpus.source = dir;
  uint64_t total = 0;
  for (const auto& f : files) {
    const std::string raw = read_regular_file(f);
    total += raw.size();
    HG_CHECK(total <= kMaxCorpusBytes, "gpt: the files in {} hold more than {} MiB of text; is it the right folder?",
             dir, kMaxCorpusBytes >> 20);
    append_records(raw, corpus);
    ++corpus.files;
  }
  HG_CHECK(corpus.records > 0,
           "gpt: {} has no fortune files (records separated by '%' lines); install Debian's `fortunes` package "
           "(sudo apt-get install fortunes) or give --data-file FILE",
           dir);
  return corpus;
}

Corpus read_text_file(const std::string& path) {
  std::error_code ec;
  HG_CHECK(fs::exists(path, ec), "gpt: --data-file {} does not exist", path);
  Corpus corpus;
  corpus.source = path;
  corpus.files = 1;
  append_records(read_regular_file(path), corpus);  // a file without '%' lines is one record
  return corpus;
}

// The character vocabulary: the sorted distinct characters (nanoGPT's
// `chars = sorted(list(set(data)))`), and the text as token ids.
struct Vocabulary {
  std::string chars;            // id -> character
  std::vector<int64_t> to_id;   // character (0..255) -> id, -1 if absent
  explicit Vocabulary(std::string c) : chars(std::move(c)), to_id(256, -1) {
    for (size_t i = 0; i < chars.size(); ++i) to_id[static_cast<unsigned char>(chars[i])] = static_cast<int64_t>(i);
  }
  static Vocabulary of(const std::string& text) {
    std::vector<bool> seen(256, false);
    for (unsigned char c : text) seen[c] = true;
    std::string chars;
    for (int c = 0; c < 256; ++c)
      if (seen[static_cast<size_t>(c)]) chars += static_cast<char>(c);
    return Vocabulary(chars);
  }
  int64_t size() const { return static_cast<int64_t>(chars.size()); }
  std::vector<int64_t> encode(const std::string& s) const {
    std::vector<int64_t> ids;
    ids.reserve(s.size());
    for (unsigned char c : s) {
      HG_CHECK(to_id[c] >= 0, "gpt: the character {} is not in the vocabulary (--prompt takes the text's characters)",
               c >= 32 && c < 127 ? fmt::format("'{}'", static_cast<char>(c)) : fmt::format("\\x{:02x}", c));
      ids.push_back(to_id[c]);
    }
    return ids;
  }
};

// ---- batches: random windows of the token stream ------------------------------------------

// A seeded counter-based generator: draw i of a stream is splitmix64 of
// (seed, stream, i), so its whole state is the counter, which a checkpoint
// saves. The batches do not share the library's generator (the weights' init
// and dropout), so changing the model does not change the data order.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
struct Stream {
  uint64_t seed, id, counter = 0;
  uint64_t next() { return splitmix64(splitmix64(seed ^ (id * 0xD1B54A32D192ED03ull)) + counter++); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

struct Batch {
  hg::Tensor x, y;  // int64 [B, T]: y is x shifted by one
};

// B windows of T + 1 tokens at random starts in `data`.
Batch get_batch(const std::vector<int64_t>& data, int64_t B, int64_t T, Stream& rng, hg::Device device) {
  const uint64_t starts = data.size() - static_cast<uint64_t>(T);  // data.size() > T, checked at startup
  std::vector<int64_t> x(static_cast<size_t>(B * T)), y(x.size());
  for (int64_t b = 0; b < B; ++b) {
    const size_t s = static_cast<size_t>(rng.next() % starts);
    std::copy_n(data.begin() + static_cast<ptrdiff_t>(s), T, x.begin() + b * T);
    std::copy_n(data.begin() + static_cast<ptrdiff_t>(s) + 1, T, y.begin() + b * T);
  }
  return {hg::tensor(x, {B, T}).to(device), hg::tensor(y, {B, T}).to(device)};
}

// ---- precision ---------------------------------------------------------------------------

struct Precision {
  std::string name;  // fp32, bf16, fp16
  hg::DType dtype;   // autocast's lower precision
  bool autocast;
  bool scaler;  // GradScaler: float16 only (bfloat16 has float32's range)
};

Precision precision_of(const std::string& name, const hg::Device& device) {
  const std::string n = name != "auto" ? name : device.is_cuda() ? "fp16" : "bf16";
  // fp32: autocast off, as PyTorch's autocast(dtype=float32, enabled=False).
  if (n == "fp32") return {n, hg::kFloat32, false, false};
  if (n == "bf16") return {n, hg::kBFloat16, true, false};
  return {n, hg::kHalf, true, true};
}

// The mean loss over `batches` fixed windows of `data` (the same windows at
// every evaluation, so that evaluations compare), without grad, in eval mode.
double estimate_loss(gpt::GPT& model, const std::vector<int64_t>& data, const Options& o, uint64_t stream_id,
                     const Precision& p, hg::Device device) {
  model.eval();
  hg::NoGradGuard no_grad;
  Stream rng{o.seed, stream_id};
  double sum = 0;
  for (int64_t i = 0; i < o.eval_iters; ++i) {
    const Batch b = get_batch(data, o.batch_size, o.block_size, rng, device);
    hg::amp::autocast region(device.type(), p.dtype, p.autocast);
    const hg::Tensor logits = model.forward(b.x);
    sum += hg::cross_entropy(logits.view({-1, logits.size(-1)}), b.y.view({-1})).item();
  }
  model.train();
  return sum / static_cast<double>(o.eval_iters);
}

// Autoregressive sampling: feed the last block_size characters, take the
// logits of the last position, divide by the temperature, keep the top k,
// softmax, and draw a character with hg::multinomial (torch.multinomial(probs,
// 1, generator=g)) from a generator of its own, so the sample depends on the
// seed and the model only, not on how far the global stream has gone.
std::string sample(gpt::GPT& model, const Vocabulary& vocab, const Options& o, const Precision& p, hg::Device device) {
  model.eval();
  hg::NoGradGuard no_grad;
  hg::Generator gen(device);
  gen.manual_seed(o.seed + 3);  // a stream apart from the global one, which --seed seeds
  std::vector<int64_t> ids = vocab.encode(o.prompt);
  std::string out;
  for (int64_t n = 0; n < o.sample_chars; ++n) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), o.block_size);
    std::vector<int64_t> context(ids.end() - T, ids.end());
    hg::Tensor logits;
    {
      hg::amp::autocast region(device.type(), p.dtype, p.autocast);
      logits = model.forward(hg::tensor(context, {1, T}).to(device));
    }
    hg::Tensor last = logits.select(1, T - 1).squeeze(0).to(hg::kFloat) / o.temperature;  // [vocab]
    if (o.top_k > 0 && o.top_k < vocab.size()) {
      auto [top, at] = last.topk(o.top_k);
      last = last.masked_fill(last < top.select(0, o.top_k - 1), -INFINITY);
    }
    const int64_t next = hg::multinomial(last.softmax(0), 1, /*replacement=*/false, gen).item<int64_t>();
    ids.push_back(next);
    out += vocab.chars[static_cast<size_t>(next)];
  }
  model.train();
  return out;
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

// What a checkpoint must agree on with this run: the model's shape and the vocabulary.
std::map<std::string, std::string> run_identity(const gpt::Config& c, const Vocabulary& v) {
  std::string hex;
  for (unsigned char ch : v.chars) hex += fmt::format("{:02x}", ch);
  return {{"gpt.n_layer", std::to_string(c.n_layer)}, {"gpt.n_head", std::to_string(c.n_head)},
          {"gpt.n_embd", std::to_string(c.n_embd)},   {"gpt.block_size", std::to_string(c.block_size)},
          {"gpt.vocab", hex}};
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const hg::Device device = o.device == "cuda" || (o.device == "auto" && hg::cuda::is_available())
                                ? hg::Device::cuda()
                                : hg::Device::cpu();
  const Precision prec = precision_of(o.precision, device);
  hg::manual_seed(o.seed);

  // ---- data: characters -> ids, 90% to train on, 10% to validate ----------------------------
  const Corpus corpus = o.data_file.empty() ? read_fortunes(o.data) : read_text_file(o.data_file);
  const Vocabulary vocab = Vocabulary::of(corpus.text);
  const std::vector<int64_t> ids = vocab.encode(corpus.text);
  const size_t n_train = ids.size() * 9 / 10;
  const std::vector<int64_t> train_data(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n_train));
  const std::vector<int64_t> val_data(ids.begin() + static_cast<ptrdiff_t>(n_train), ids.end());
  HG_CHECK(static_cast<int64_t>(val_data.size()) > o.block_size,
           "gpt: the text ({} characters) is too short for --block-size {}: its 10% validation split needs more "
           "than {} characters",
           ids.size(), o.block_size, o.block_size);
  HG_CHECK(vocab.encode(o.prompt).size() > 0, "gpt: --prompt must not be empty");

  // ---- model -------------------------------------------------------------------------------
  const gpt::Config config{.vocab_size = vocab.size(), .block_size = o.block_size, .n_layer = o.n_layer,
                           .n_head = o.n_head, .n_embd = o.n_embd, .dropout = o.dropout};
  gpt::GPT model(config);
  model.to(device);

  // ---- optimizer: AdamW, weight decay on the 2-d weights only (matmuls, embeddings) -------------
  std::vector<hg::Tensor> decay, no_decay;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const hg::optim::AdamWOptions adamw{.lr = o.lr, .betas = {0.9, o.beta2}, .weight_decay = o.weight_decay};
  hg::optim::AdamW optimizer(decay, adamw);
  auto no_decay_options = adamw;
  no_decay_options.weight_decay = 0.0;
  optimizer.add_param_group(no_decay, no_decay_options);

  // ---- schedule: linear warm-up, then cosine decay to min_lr over max_iters --------------------
  hg::optim::LinearLR warmup(optimizer, /*start_factor=*/1.0 / static_cast<double>(o.warmup_iters + 1), 1.0,
                             std::max<int64_t>(o.warmup_iters, 1));
  hg::optim::CosineAnnealingLR decay_lr(optimizer, o.max_iters - o.warmup_iters, o.min_lr);
  hg::optim::SequentialLR scheduler(optimizer, {&warmup, &decay_lr}, {o.warmup_iters});

  hg::amp::GradScaler scaler({.enabled = prec.scaler});

  // ---- resume: the model, optimizer, schedule, scaler, generator, step and data position --------
  std::optional<hg::optim::CheckpointManager> checkpoints;
  if (!o.checkpoint_dir.empty()) checkpoints.emplace(o.checkpoint_dir, o.keep_checkpoints);
  hg::optim::CheckpointParts parts{.model = &model, .optimizer = &optimizer, .scheduler = &scheduler,
                                   .scaler = &scaler};
  Stream data_rng{o.seed, /*stream=*/0};
  int64_t step = 0;
  const auto identity = run_identity(config, vocab);
  if (o.resume) {
    if (const auto latest = checkpoints->latest()) {
      hg::optim::CheckpointParts meta{.rng = false};  // the free-form part only, to check it first
      hg::optim::load_checkpoint(*latest, meta);
      for (const auto& [key, value] : identity) {
        const auto it = meta.extra.find(key);
        HG_CHECK(it != meta.extra.end() && it->second == value,
                 "gpt: {} was saved by another run: its {} is {}, this run's {}{}", *latest, key,
                 it == meta.extra.end() ? std::string("missing") : it->second, value,
                 key == "gpt.vocab" ? " (the text differs)" : " (give the same model options)");
      }
      HG_CHECK(meta.extra.count("data.counter"), "gpt: {} has no data position (data.counter)", *latest);
      checkpoints->load_latest(parts);
      step = parts.step;
      data_rng.counter = std::stoull(parts.extra.at("data.counter"));
      fmt::print("resumed from {} (step {})\n", *latest, step);
    } else {
      fmt::print("no checkpoint in {} yet: starting from step 0\n", o.checkpoint_dir);
    }
  }
  const auto save = [&](int64_t at_step) {
    if (!checkpoints) return;
    parts.extra = identity;
    parts.extra["data.counter"] = std::to_string(data_rng.counter);
    checkpoints->save(at_step, parts);
  };

  // ---- what this run is ---------------------------------------------------------------------
  fmt::print("data: {} characters, {} records from {} file(s) in {} ({} other bytes dropped); vocabulary {}\n",
             with_commas(static_cast<int64_t>(ids.size())), with_commas(corpus.records), corpus.files, corpus.source,
             corpus.dropped_bytes, vocab.size());
  fmt::print("split: {} train, {} val characters\n", with_commas(static_cast<int64_t>(train_data.size())),
             with_commas(static_cast<int64_t>(val_data.size())));
  fmt::print("model: {} layers, {} heads, n_embd {}, context {}, dropout {}; {} parameters ({} without positions)\n",
             o.n_layer, o.n_head, o.n_embd, o.block_size, o.dropout, with_commas(model.num_parameters()),
             with_commas(model.num_parameters_without_positions()));
  fmt::print("device: {}; precision: {}\n", device.str(),
             !prec.autocast ? std::string("float32")
                            : fmt::format("autocast {} (float32 master weights), GradScaler {}",
                                          hg::dtype_name(prec.dtype), prec.scaler ? "on" : "off"));
  fmt::print("training: {} steps of {} x {} tokens, AdamW lr {} (warm-up {}, cosine to {}), clip {}\n", o.max_iters,
             o.batch_size, o.block_size, o.lr, o.warmup_iters, o.min_lr, o.grad_clip);

  std::optional<hg::train::MetricsCsv> csv;
  if (!o.metrics.empty()) csv.emplace(o.metrics, /*append=*/o.resume && step > 0);
  const int64_t last_step = o.stop_at > 0 ? o.stop_at : o.max_iters;
  const int64_t tokens_per_step = o.batch_size * o.block_size;
  const auto run_start = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  };

  const auto evaluate = [&] {
    const double train_loss = estimate_loss(model, train_data, o, /*stream=*/1, prec, device);
    const double val_loss = estimate_loss(model, val_data, o, /*stream=*/2, prec, device);
    return std::pair{train_loss, val_loss};
  };
  const auto report_eval = [&](hg::train::ProgressBar* bar) {
    const auto [train_loss, val_loss] = evaluate();
    const std::string line = fmt::format("step {}: train loss {:.4f}, val loss {:.4f}", step, train_loss, val_loss);
    if (bar) bar->write(line);
    else fmt::print("{}\n", line);
    if (csv)
      csv->write({.kind = hg::train::RowKind::Epoch, .step = step,
                  .epoch = step * tokens_per_step / static_cast<int64_t>(train_data.size()), .loss = train_loss,
                  .test_loss = val_loss, .seconds = seconds()});
    return val_loss;
  };

  // ---- the training loop ------------------------------------------------------------------------
  if (step == 0 && step < last_step) report_eval(nullptr);
  hg::train::NonFiniteMonitor monitor(step);
  hg::train::ProgressBar bar(last_step, {.desc = "train", .sample_unit = "tok", .samples_per_step = tokens_per_step});
  bar.update(step, step * tokens_per_step);  // a resumed run's steps so far
  double seconds_at_read = seconds();
  int64_t steps_at_read = step, skipped_total = 0;
  while (step < last_step) {
    const Batch batch = get_batch(train_data, o.batch_size, o.block_size, data_rng, device);
    hg::Tensor loss;
    {
      hg::amp::autocast region(device.type(), prec.dtype, prec.autocast);  // the forward only
      const hg::Tensor logits = model.forward(batch.x);                  // [B, T, vocab]
      loss = hg::cross_entropy(logits.view({-1, vocab.size()}), batch.y.view({-1}));  // float32 by the policy
    }
    optimizer.zero_grad(/*set_to_none=*/true);
    scaler.scale(loss).backward();
    if (o.grad_clip > 0) {
      scaler.unscale_(optimizer);  // clip the true gradients
      hg::nn::utils::clip_grad_norm_(model.parameters(), o.grad_clip);
    }
    const auto result = scaler.step(optimizer);  // skipped after an inf/NaN gradient (fp16)
    scaler.update();
    scheduler.step();
    monitor.observe(loss, result);  // no host sync
    ++step;
    bar.update(1, tokens_per_step);

    if (step % o.log_every == 0 || step == last_step) {
      const auto r = monitor.read(&scaler);  // the one host sync every log_every steps
      skipped_total += r.skipped_steps;
      if (!r.finite()) {
        bar.close();
        fmt::print(stderr, "gpt: the loss is not finite at step {} (last finite loss {:.4f}); lower --lr\n",
                   r.first_nonfinite_step.value_or(step), r.last_finite_loss.value_or(std::nan("")));
        return 3;
      }
      const double now = seconds();
      const double tokens_per_s = static_cast<double>((step - steps_at_read) * tokens_per_step) / (now - seconds_at_read);
      seconds_at_read = now;
      steps_at_read = step;
      bar.set_postfix("lr", fmt::format("{:.2e}", optimizer.lr(0)));
      bar.set_postfix("loss", fmt::format("{:.4f}", r.mean_loss));
      if (scaler.is_enabled()) bar.set_postfix("scale", fmt::format("{:g}", *r.loss_scale));
      if (scaler.is_enabled()) bar.set_postfix("skipped", skipped_total);
      if (csv)
        csv->write({.kind = hg::train::RowKind::Step, .step = step,
                    .epoch = step * tokens_per_step / static_cast<int64_t>(train_data.size()), .loss = r.mean_loss,
                    .lr = optimizer.lr(0), .loss_scale = r.loss_scale, .skipped = r.skipped_steps,
                    .samples_per_s = tokens_per_s, .seconds = now});
    }
    if (step % o.eval_interval == 0 || step == o.max_iters) report_eval(&bar);
    if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) save(step);
  }
  bar.close();
  if (checkpoints && (o.checkpoint_every == 0 || step % o.checkpoint_every != 0)) save(step);
  fmt::print("{} steps in {:.1f} s; peak memory {}\n", step, seconds(),
             hg::train::format_bytes(hg::train::peak_memory_bytes(device)));

  if (csv) {
    csv->close();
    std::fflush(stdout);
    const std::string cmd = fmt::format("command -v gnuplot >/dev/null && {} '{}' >/dev/null", HALFGRAD_PLOT_METRICS,
                                        o.metrics);
    if (std::system(cmd.c_str()) == 0) fmt::print("plot: {}.png, {}.svg\n", o.metrics.substr(0, o.metrics.size() - 4),
                                                  o.metrics.substr(0, o.metrics.size() - 4));
  }

  // ---- a sample -----------------------------------------------------------------------------
  if (o.sample_chars > 0) {
    fmt::print("sample (temperature {}, top-k {}):\n", o.temperature, o.top_k > 0 ? std::to_string(o.top_k) : "off");
    fmt::print("{}{}\n", o.prompt, sample(model, vocab, o, prec, device));
  }
  return 0;
} catch (const std::exception& e) {
  std::fflush(stdout);
  const std::string what = e.what();
  std::cerr << (what.starts_with("gpt: ") ? "" : "gpt: ") << what << "\n";
  return 1;
}
