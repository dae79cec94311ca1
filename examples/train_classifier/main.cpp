// train_classifier: train an image classifier on Fashion-MNIST (or any folder
// of IDX files) the way PyTorch's AMP examples do: a loader, an autocast
// forward, a scaled backward, a scaler-consulted step, a progress bar with the
// learning rate, the mean loss, the loss scale and the skipped steps, an
// evaluation and a checkpoint per epoch, a CSV of metrics and its plot, and a
// clean stop when the loss stops being finite.
//
//   build/examples/train_classifier --data fashion-mnist --amp on
//   build/examples/train_classifier --help
//
// The loop below reads top to bottom as one training run; docs/training.md
// explains each piece and shows a real run.
#include <halfgrad.h>
#if HALFGRAD_WITH_DISTRIBUTED
#include <halfgrad/distributed/ddp.h>
#include <halfgrad/distributed/sampler.h>
using ProcessGroupPtr = halfgrad::distributed::ProcessGroup*;
#else
using ProcessGroupPtr = void*;  // built without MPI: always one process
#endif

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#ifndef HALFGRAD_PLOT_METRICS
#define HALFGRAD_PLOT_METRICS "scripts/plot-metrics"
#endif
#ifndef HALFGRAD_REPORT
#define HALFGRAD_REPORT "halfgrad-report"
#endif

namespace hg = halfgrad;

namespace {

struct Options {
  std::string data = "fashion-mnist";
  std::string data_dir = hg::data::kFashionMnistRoot;
  std::string model = "mlp";
  std::string memory_format = "channels_last";  // of the convolutional model's images
  std::string device = "auto";
  std::string amp = "on";
  std::string dtype = "auto";  // float16 on CUDA, bfloat16 on the CPU (autocast's defaults)
  int64_t epochs = 5;
  int64_t batch_size = 128;
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double momentum = 0.9;
  double weight_decay = 1e-2;
  std::string schedule = "cosine";
  double clip_grad_norm = 0;  // 0: no clipping
  uint64_t seed = 0;
  std::string checkpoint_dir;  // empty: no checkpoints
  int64_t keep_checkpoints = 3;
  int64_t checkpoint_every = 0;  // steps; 0: at the end of each epoch only
  bool resume = false;
  std::string metrics;  // CSV file; empty: none
  int64_t max_steps = 0;  // 0: all epochs
  int64_t log_every = 50;  // steps between reads of the loss (the loop's only host syncs)
  int64_t inject_nan_at = -1;  // testing: make the input NaN at this step
  int inject_nan_rank = -1;    // ... on this rank only (-1: every rank)
  std::string report;          // run folder for halfgrad-report; empty: none
  int64_t monitor_every = 0;   // amp::Monitor records every N steps (0: off; 100 with --report)
  bool detect_anomaly = false;  // name the op that first produced inf/NaN when a step is skipped
  bool explain_skips = false;   // name the gradient of a skipped step on CUDA too (a sync per step)
  bool evaluate = false;        // only evaluate (the latest checkpoint with --resume) and exit
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"Train a classifier with automatic mixed precision (halfgrad)", "train_classifier"};
  app.get_formatter()->column_width(34);
  app.add_option("--data", o.data, "data set")->check(CLI::IsMember({"fashion-mnist"}))->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "folder with the IDX files (MNIST, KMNIST, ... work too)")
      ->capture_default_str();
  app.add_option("--model", o.model,
                 "model: mlp (784-256-10) or mobilenet_v3_small (torchvision's, on 32x32 images: 28x28 padded by 2, "
                 "the grey channel repeated 3 times)")
      ->check(CLI::IsMember({"mlp", "mobilenet_v3_small"}))
      ->capture_default_str();
  app.add_option("--memory-format", o.memory_format,
                 "layout of mobilenet_v3_small's images: channels_last (NHWC memory, what the conv kernels run "
                 "fastest) or contiguous (NCHW)")
      ->check(CLI::IsMember({"channels_last", "contiguous"}))
      ->capture_default_str();
  app.add_option("--device", o.device, "cpu, cuda, or auto (cuda when available)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--amp", o.amp, "autocast the forward pass")->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  app.add_option("--dtype", o.dtype, "autocast's lower precision: float16, bfloat16, or auto")
      ->check(CLI::IsMember({"auto", "float16", "bfloat16"}))
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "epochs")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "weight decay")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--schedule", o.schedule, "learning-rate schedule: none, step, cosine, onecycle (per step)")
      ->check(CLI::IsMember({"none", "step", "cosine", "onecycle"}))
      ->capture_default_str();
  app.add_option("--clip-grad-norm", o.clip_grad_norm, "clip the gradients' 2-norm to this (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the model, dropout and the loader's shuffle")->capture_default_str();
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "save checkpoints here (ckpt-<step>/)");
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "checkpoints to keep (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--checkpoint-every", o.checkpoint_every, "also save every N steps (0: per epoch only)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the newest checkpoint in --checkpoint-dir");
  app.add_option("--metrics", o.metrics, "write metrics to this CSV file (and plot it with gnuplot)");
  app.add_option("--max-steps", o.max_steps, "stop after this many steps in all (0: run every epoch)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--log-every", o.log_every, "steps between reads of the loss and log lines")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--inject-nan-at", o.inject_nan_at, "testing: feed a NaN input at this step");
  app.add_option("--inject-nan-rank", o.inject_nan_rank, "testing: ... on this rank only (-1: all; under mpirun)");
  app.add_option("--report", o.report,
                 "write a run folder (metrics.csv, numerics.json, dtypes.json, run.json) and its report.html "
                 "(halfgrad-report)");
  app.add_option("--monitor-every", o.monitor_every,
                 "record gradient and activation statistics every N steps (amp::Monitor; 0: off, 100 with --report)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--detect-anomaly", o.detect_anomaly,
               "check every op for inf/NaN, so a skipped step names the op (slow: a debugging mode)");
  app.add_flag("--evaluate", o.evaluate,
               "only evaluate on the test set and exit (with --checkpoint-dir DIR --resume: the latest checkpoint)");
  app.add_flag("--explain-skips", o.explain_skips,
               "say which gradient held inf/NaN when a step is skipped (on by default on the CPU; on CUDA it costs "
               "a sync per step)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  if (o.resume && o.checkpoint_dir.empty()) {
    std::cerr << "train_classifier: --resume needs --checkpoint-dir\n";
    std::exit(2);
  }
  return o;
}

// The model and how a batch goes through it.
struct Model {
  std::shared_ptr<hg::nn::Module> module;
  std::function<hg::Tensor(const hg::Tensor&)> forward;
  int64_t image_size;  // the side its inputs are padded to
};

// mlp: [N, 1, 28, 28] -> 784 -> 256 -> 10.
// mobilenet_v3_small: torchvision's network for 10 classes. Its five stride-2
// stages divide the side by 32, so the 28x28 images are padded to 32x32 (zeros
// before normalisation: the images' own background) and the grey channel is
// repeated to the 3 channels the model (and a torchvision state dict) expects.
// Its forward runs under autocast by itself (amp::autocast_forward). With
// channels_last the batch is copied once into NHWC memory (with the channel
// repeat), and every layer after it keeps that layout (docs/convnets.md).
Model make_model(const std::string& name, bool channels_last) {
  if (name == "mobilenet_v3_small") {
    auto net = hg::nn::models::mobilenet_v3_small({.num_classes = 10});
    const hg::MemoryFormat f = channels_last ? hg::MemoryFormat::ChannelsLast : hg::MemoryFormat::Contiguous;
    return {net, [net, f](const hg::Tensor& x) { return (*net)(x.expand({-1, 3, -1, -1}).contiguous(f)); },
            32};
  }
  auto mlp = std::make_shared<hg::nn::Sequential>(hg::nn::Flatten(), hg::nn::Linear(784, 256), hg::nn::ReLU(),
                                                  hg::nn::Linear(256, 10));
  return {mlp, [mlp](const hg::Tensor& x) { return (*mlp)(x); }, 28};
}

std::unique_ptr<hg::optim::Optimizer> make_optimizer(const Options& o, const std::vector<hg::Tensor>& params) {
  if (o.optimizer == "sgd")
    return std::make_unique<hg::optim::SGD>(params, hg::optim::SGDOptions{
                                                        .lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  if (o.optimizer == "adam")
    return std::make_unique<hg::optim::Adam>(params, hg::optim::AdamOptions{.lr = o.lr, .weight_decay = o.weight_decay});
  return std::make_unique<hg::optim::AdamW>(params, hg::optim::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
}

// Schedules step once per optimizer step (OneCycleLR's convention, applied to all).
std::unique_ptr<hg::optim::LRScheduler> make_scheduler(const Options& o, hg::optim::Optimizer& opt, int64_t total) {
  if (o.schedule == "step") return std::make_unique<hg::optim::StepLR>(opt, std::max<int64_t>(total / 3, 1), 0.1);
  if (o.schedule == "cosine") return std::make_unique<hg::optim::CosineAnnealingLR>(opt, total);
  if (o.schedule == "onecycle")
    return std::make_unique<hg::optim::OneCycleLR>(opt, hg::optim::OneCycleLROptions{.max_lr = {o.lr}, .total_steps = total});
  return nullptr;
}

// The first step's forward, one row per distinct autocast decision, with how often it was made.
void write_dtypes_json(const std::string& path, const std::vector<hg::amp::OpTrace>& trace) {
  nlohmann::json rows = nlohmann::json::array();
  std::map<std::string, size_t> index;
  for (const auto& t : trace) {
    const std::string key = t.op + "|" + t.inputs + "|" + t.policy + "|" + t.ran_in;
    auto [it, fresh] = index.emplace(key, rows.size());
    if (fresh)
      rows.push_back({{"op", t.op}, {"inputs", t.inputs}, {"policy", t.policy}, {"ran_in", t.ran_in}, {"calls", 0}});
    rows[it->second]["calls"] = rows[it->second]["calls"].get<int64_t>() + 1;
  }
  hg::atomic_write_file(path, nlohmann::json({{"format", "halfgrad-dtypes-1"}, {"ops", rows}}).dump(1));
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

// How the forward runs: autocast on `device` in `dtype`, or not at all.
struct Precision {
  hg::DeviceType device;
  hg::DType dtype;
  bool enabled;
};

struct Evaluation {
  double loss = 0, accuracy = 0;
};

// Test loss and accuracy, under the same autocast as training, without grad.
// Under data parallelism each rank evaluates its own shard (no sample twice)
// and the sums are added across ranks: every rank gets the same numbers.
Evaluation evaluate(Model& model, hg::data::DataLoader& loader, const Precision& ac, ProcessGroupPtr pg) {
  model.module->eval();
  hg::NoGradGuard no_grad;
  hg::Tensor loss_sum = hg::zeros({}, hg::TensorOptions(hg::kDouble, loader.options().device));
  hg::Tensor correct = hg::zeros({}, hg::TensorOptions(hg::kLong, loader.options().device));
  int64_t n = 0;
  for (auto& batch : loader) {
    hg::Tensor logits;
    {
      hg::amp::autocast region(ac.device, ac.dtype, ac.enabled);
      logits = model.forward(batch.input);
    }
    auto loss = hg::cross_entropy(logits.to(hg::kFloat), batch.target, hg::Reduction::Sum);
    loss_sum += loss.to(hg::kDouble);
    correct += (logits.argmax(1) == batch.target).sum();
    n += batch.target.size(0);
  }
  model.module->train();
  hg::Tensor count = hg::full({}, static_cast<double>(n), hg::TensorOptions(hg::kDouble, loss_sum.device()));
  (void)pg;
#if HALFGRAD_WITH_DISTRIBUTED
  if (pg) {
    pg->all_reduce(loss_sum, hg::distributed::ReduceOp::Sum);
    pg->all_reduce(correct, hg::distributed::ReduceOp::Sum);
    pg->all_reduce(count, hg::distributed::ReduceOp::Sum);
  }
#endif
  const double total = count.item();
  return {loss_sum.item() / total, static_cast<double>(correct.item<int64_t>()) / total};
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  // ---- ranks: under mpirun (or any MPI launcher) each process is one data-parallel replica
  int rank = 0, world = 1;
  ProcessGroupPtr pg = nullptr;
#if HALFGRAD_WITH_DISTRIBUTED
  const bool launched_by_mpi = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
  if (launched_by_mpi) pg = &hg::distributed::init();  // picks this rank's GPU
  if (pg) {
    rank = pg->rank();
    world = pg->world_size();
  }
#endif
  const bool main_rank = rank == 0;  // draws the progress bar, writes metrics, checkpoints and the report
  const hg::Device device = o.device == "cuda" || (o.device == "auto" && hg::cuda::is_available())
                                ? hg::Device::cuda()
                                : hg::Device::cpu();
  hg::manual_seed(o.seed);

  // ---- model ---------------------------------------------------------------------------
  Model net = make_model(o.model, o.memory_format == "channels_last");
  auto& model = net.module;
  model->to(device);

  // ---- data: Fashion-MNIST, padded to the model's size, normalised; batches arrive on `device`
  const hg::data::Normalize normalize({hg::data::kFashionMnistMean}, {hg::data::kFashionMnistStd});
  const hg::data::Pad pad((net.image_size - 28) / 2);
  auto train_set = hg::data::fashion_mnist(o.data_dir, /*train=*/true);
  auto test_set = hg::data::fashion_mnist(o.data_dir, /*train=*/false);
  train_set = hg::data::TensorDataset(normalize(pad(train_set.inputs())), train_set.targets());
  test_set = hg::data::TensorDataset(normalize(pad(test_set.inputs())), test_set.targets());
  // With several ranks each takes its shard of every epoch (--batch-size is per rank, as in PyTorch's DDP).
  std::shared_ptr<const hg::data::Sampler> shard;
#if HALFGRAD_WITH_DISTRIBUTED
  if (world > 1)
    shard = std::make_shared<hg::distributed::DistributedSampler>(world, rank,
                                                                 hg::distributed::DistributedSamplerOptions{.seed = o.seed});
#endif
  hg::data::DataLoader train_loader(train_set, {.batch_size = o.batch_size, .shuffle = shard == nullptr, .seed = o.seed,
                                                .device = device, .sampler = shard});
  std::shared_ptr<const hg::data::Sampler> test_shard;
#if HALFGRAD_WITH_DISTRIBUTED
  if (world > 1)
    test_shard = std::make_shared<hg::distributed::DistributedSampler>(
        world, rank, hg::distributed::DistributedSamplerOptions{.shuffle = false, .pad = false});
#endif
  hg::data::DataLoader test_loader(test_set, {.batch_size = 1000, .device = device, .sampler = test_shard});

  // ---- optimizer, schedule, scaler --------------------------------------------------
  auto optimizer = make_optimizer(o, model->parameters());
  const int64_t steps_per_epoch = train_loader.size();
  // The schedule spans every epoch; --max-steps only stops the run early (so a
  // short run and its resumed continuation follow the same schedule).
  auto scheduler = make_scheduler(o, *optimizer, o.epochs * steps_per_epoch);
  const int64_t total_steps = o.max_steps > 0 ? std::min(o.max_steps, o.epochs * steps_per_epoch)
                                              : o.epochs * steps_per_epoch;
  // Autocast picks the lower precision; the GradScaler is for float16, whose
  // range is small. bfloat16 has float32's range: no scaling (as in PyTorch).
  const bool amp = o.amp == "on";
  const hg::DType low = o.dtype == "float16"    ? hg::kHalf
                        : o.dtype == "bfloat16" ? hg::kBFloat16
                        : device.is_cuda()      ? hg::kHalf
                                                : hg::kBFloat16;
  const Precision ac{device.type(), low, amp};
  hg::amp::GradScaler scaler({.enabled = amp && low == hg::kHalf});
  hg::nn::CrossEntropyLoss criterion;
#if HALFGRAD_WITH_DISTRIBUTED
  // Rank 0's weights everywhere, gradients averaged during backward, one scaler decision for all ranks.
  std::optional<hg::distributed::DistributedDataParallel> ddp;
  if (world > 1) {
    ddp.emplace(*model, *pg);
    ddp->sync_scaler(scaler);
  }
#endif

  // ---- resume ---------------------------------------------------------------------
  std::optional<hg::optim::CheckpointManager> checkpoints;
  if (!o.checkpoint_dir.empty()) checkpoints.emplace(o.checkpoint_dir, o.keep_checkpoints);
  hg::optim::CheckpointParts parts{.model = model.get(), .optimizer = optimizer.get(), .scheduler = scheduler.get(),
                                   .scaler = &scaler};
  int64_t step = 0;
  if (o.resume && checkpoints->load_latest(parts)) {
    step = parts.step;
    hg::data::restore_position(train_loader, parts.extra);
    if (main_rank)
      fmt::print("resumed from {} (step {}, epoch {})\n", *checkpoints->latest(), step, train_loader.state().epoch);
  }
  if (o.evaluate) {  // the test set only: the latest checkpoint's weights (with --resume), sharded under mpirun
    const auto eval = evaluate(net, test_loader, ac, pg);
    if (main_rank)
      fmt::print("evaluation (step {}): test loss {:.6f}, accuracy {:.2f}%\n", step, eval.loss, 100 * eval.accuracy);
    return 0;
  }
  auto save = [&](int64_t at_step) {
    if (!checkpoints || !main_rank) return std::string();
    parts.extra.clear();
    hg::data::save_position(train_loader, parts.extra);
    return checkpoints->save(at_step, parts);
  };

  // ---- what this run is -------------------------------------------------------------
  if (!main_rank) {
  } else if (o.model == "mlp") fmt::print("{}\n", model->repr());  // MobileNet's is 300 lines
  else
    fmt::print("model: {} (torchvision's architecture, 10 classes, {}x{} inputs, {} memory)\n", o.model,
               net.image_size, net.image_size, o.memory_format == "channels_last" ? "channels-last" : "row-major");
  if (main_rank) {
    fmt::print("parameters: {}\n", with_commas(model->num_parameters()));
    fmt::print("device: {}\n", device.str());
    if (world > 1)
      fmt::print("ranks: {} (data parallel: {} samples per rank per step, gradients averaged)\n", world,
                 o.batch_size);
    fmt::print("precision: {}\n", amp ? fmt::format("autocast {} (float32 master weights), GradScaler {}",
                                                    hg::dtype_name(low), scaler.is_enabled() ? "on" : "off")
                                      : std::string("float32"));
    fmt::print("data: {} train, {} test examples from {}\n", train_set.size(), test_set.size(), o.data_dir);
  }

  // ---- the run folder for the report, and the numerics monitor ---------------------------
  const std::string report_dir = main_rank ? o.report : std::string();
  if (!report_dir.empty()) std::filesystem::create_directories(report_dir);
  const std::string metrics_path =
      !main_rank ? std::string() : o.metrics.empty() && !report_dir.empty() ? report_dir + "/metrics.csv" : o.metrics;
  std::optional<hg::train::MetricsCsv> csv;
  if (!metrics_path.empty()) csv.emplace(metrics_path, /*append=*/o.resume);
  hg::train::ProgressBar* bar_now = nullptr;  // where a skipped step's line goes
  std::optional<hg::amp::Monitor> numerics;
  const int64_t monitor_every = o.monitor_every > 0 ? o.monitor_every : report_dir.empty() ? 0 : 100;
  // Skips are explained by default on the CPU (free) and on request on CUDA (a sync per step).
  std::optional<bool> explain;
  if (o.explain_skips || o.detect_anomaly) explain = true;
  if (main_rank && (monitor_every > 0 || o.detect_anomaly || o.explain_skips))
    numerics.emplace(*model, scaler,
                     hg::amp::MonitorOptions{.every = monitor_every,
                                             .explain_skips = explain,
                                             .detect_anomaly = o.detect_anomaly,
                                             .on_skip = [&](const std::string& line) {
                                               if (bar_now) bar_now->write(line);
                                               else fmt::print("{}\n", line);
                                             }});
  else if (o.detect_anomaly)
    // Other ranks: gradients are averaged before the scaler's check, so an inf
    // on any rank is an inf on all and rank 0's line names the parameter; the
    // op that made it ran on one rank only, and that rank says which.
    numerics.emplace(*model, scaler,
                     hg::amp::MonitorOptions{.every = 0, .activations = false, .explain_skips = true,
                                             .detect_anomaly = true, .on_skip = [&, rank](const std::string& line) {
                                               if (!numerics->skips().back().op.empty())
                                                 fmt::print(stderr, "rank {}: {}\n", rank, line);
                                             }});
  // The first step's forward, op by op, as autocast decided it: the report's dtype table.
  std::vector<hg::amp::OpTrace> op_trace;
  bool trace_first_step = !report_dir.empty();
  hg::train::NonFiniteMonitor monitor(step);
  hg::train::OverflowWarning overflow;
  int64_t skipped_total = 0;
  // The state at the last read that found every loss finite: what a stop on a
  // non-finite loss saves (the weights after it may already hold NaN).
  struct Good {
    hg::nn::StateDict model;
    hg::optim::OptimizerStateDict optimizer;
    std::optional<hg::optim::LRSchedulerState> scheduler;
    std::map<std::string, double> scaler;
    hg::data::DataLoaderState loader;
    int64_t step = 0, epoch = 0;
  } good;
  const auto snapshot = [&](int64_t epoch) {
    good.model = hg::nn::StateDict();
    for (const auto& [k, v] : model->state_dict()) good.model.insert(k, v.clone());
    good.optimizer = optimizer->state_dict();
    if (scheduler) good.scheduler = scheduler->state_dict();
    good.scaler = scaler.state_dict();
    good.loader = train_loader.state();
    good.step = step;
    good.epoch = epoch;
  };
  const auto restore_good = [&] {
    model->load_state_dict(good.model);
    optimizer->load_state_dict(good.optimizer);
    if (scheduler) scheduler->load_state_dict(*good.scheduler);
    scaler.load_state_dict(good.scaler);
    train_loader.set_state(good.loader);
    parts.epoch = good.epoch;
  };
  snapshot(train_loader.state().epoch);
  const auto run_start = std::chrono::steady_clock::now();
  int64_t samples = 0, samples_at_read = 0;  // for the CSV's samples/s between reads
  double seconds_at_read = 0;
  const auto seconds_since = [](auto t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  std::optional<double> last_accuracy;
  // The run folder's JSON files, then the page (halfgrad-report).
  const auto write_report = [&](int64_t steps_done, std::optional<double> accuracy) {
    if (numerics && !report_dir.empty()) numerics->write_json(report_dir + "/numerics.json");
    if (report_dir.empty()) return;
    if (csv) csv->close();
    write_dtypes_json(report_dir + "/dtypes.json", op_trace);
    const nlohmann::json run = {
        {"format", "halfgrad-run-1"},
        {"model", o.model},
        {"device", device.str()},
        {"precision", amp ? fmt::format("autocast {}", hg::dtype_name(low)) : std::string("float32")},
        {"amp", amp},
        {"scaler", scaler.is_enabled()},
        {"batch_size", o.batch_size},
        {"parameters", model->num_parameters()},
        {"steps", steps_done},
        {"skipped_steps", skipped_total},
        {"test_accuracy", accuracy ? nlohmann::json(*accuracy) : nlohmann::json(nullptr)},
        {"peak_memory_bytes", hg::train::peak_memory_bytes(device)},
        {"seconds", seconds_since(run_start)},
        {"monitor_every", monitor_every}};
    hg::atomic_write_file(report_dir + "/run.json", run.dump(1));
    std::fflush(stdout);
    const std::string cmd = fmt::format("'{}' '{}'", HALFGRAD_REPORT, report_dir);
    if (std::system(cmd.c_str()) != 0) fmt::print(stderr, "train_classifier: halfgrad-report failed ({})\n", cmd);
  };

  // ---- the training loop --------------------------------------------------------------
  for (int64_t epoch = train_loader.state().epoch; epoch < o.epochs && step < total_steps; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    hg::train::ProgressBar bar(steps_per_epoch, {.desc = fmt::format("epoch {}/{}", epoch + 1, o.epochs),
                                                 .samples_per_step = o.batch_size,
                                                 .disable = !main_rank});
    bar_now = &bar;
    bar.update(train_loader.state().batch, train_loader.state().batch * o.batch_size);  // resumed mid-epoch
    double epoch_loss_sum = 0;
    int64_t epoch_reads = 0;
    for (auto& batch : train_loader) {
      hg::Tensor input = batch.input;
      if (step == o.inject_nan_at && (o.inject_nan_rank < 0 || o.inject_nan_rank == rank)) input = input * std::nan("");
      hg::Tensor loss;
      std::optional<hg::amp::trace> tracing;
      if (trace_first_step) {
        hg::amp::set_op_trace_sink([&](const hg::amp::OpTrace& t) { op_trace.push_back(t); });
        tracing.emplace();
      }
      {
        hg::amp::autocast region(ac.device, ac.dtype, ac.enabled);  // `with autocast():` the forward only
        loss = criterion(net.forward(input), batch.target);
      }
      if (trace_first_step) {
        tracing.reset();
        hg::amp::set_op_trace_sink(nullptr);
        trace_first_step = false;
      }
      optimizer->zero_grad(/*set_to_none=*/true);
      scaler.scale(loss).backward();
      if (o.clip_grad_norm > 0) {
        scaler.unscale_(*optimizer);  // clip the true gradients (PyTorch's recipe)
        hg::nn::utils::clip_grad_norm_(model->parameters(), o.clip_grad_norm);
      }
      const auto result = scaler.step(*optimizer);  // skipped after an inf/NaN gradient
      scaler.update();
      if (scheduler) scheduler->step();
      monitor.observe(loss, result);  // device-side: no sync
      ++step;
      samples += batch.target.size(0);
      bar.update(1, batch.target.size(0));

      const bool end = step == total_steps || train_loader.state().batch == 0 ||
                       train_loader.state().batch == steps_per_epoch;
      if (step % o.log_every == 0 || end) {
        const auto r = monitor.read(&scaler);  // the one host sync every log_every steps
        skipped_total += r.skipped_steps;
        // every rank checks its own loss; all stop together when any saw a non-finite one
        bool stop = !r.finite();
#if HALFGRAD_WITH_DISTRIBUTED
        if (world > 1) {
          hg::Tensor any = hg::full({1}, stop ? 1.0 : 0.0);
          pg->all_reduce(any, hg::distributed::ReduceOp::Max);
          stop = any.item<float>() != 0.0f;
        }
#endif
        if (stop && r.finite()) {  // another rank's loss
          bar.close();
          fmt::print(stderr, "train_classifier: rank {} stops at step {}: another rank's loss is not finite\n", rank,
                     step);
          return 3;
        }
        if (stop) {
          bar.close();
          bar_now = nullptr;
          fmt::print(stderr,
                     "\ntrain_classifier: {}the loss is not finite at step {} (last finite loss {:.4f}, loss scale {}, "
                     "{} skipped steps so far).\n",
                     world > 1 ? fmt::format("rank {}: ", rank) : std::string(), r.first_nonfinite_step.value_or(step), r.last_finite_loss.value_or(std::nan("")),
                     scaler.is_enabled() ? fmt::format("{:g}", scaler.get_scale()) : std::string("off"),
                     skipped_total);
          if (checkpoints && main_rank) {
            restore_good();  // back to the last finite read, and save that state
            fmt::print(stderr, "saved the last good state (step {}) to {}\n", good.step, save(good.step));
          }
          fmt::print(stderr, "Lower the learning rate (about 10x), and check the model and the data.\n");
          write_report(step, std::nullopt);
          return 3;
        }
        snapshot(epoch);
        epoch_loss_sum += r.mean_loss;
        ++epoch_reads;
        bar.set_postfix("lr", fmt::format("{:.2e}", optimizer->lr(0)));
        bar.set_postfix("loss", fmt::format("{:.4f}", r.mean_loss));
        if (scaler.is_enabled()) bar.set_postfix("scale", fmt::format("{:g}", *r.loss_scale));
        bar.set_postfix("skipped", skipped_total);
        if (auto warning = overflow.update(step, skipped_total, r.loss_scale)) bar.write(*warning);
        const double now = seconds_since(run_start);
        const double samples_per_s = static_cast<double>(samples - samples_at_read) / (now - seconds_at_read);
        samples_at_read = samples;
        seconds_at_read = now;
        if (csv)
          csv->write({.kind = hg::train::RowKind::Step, .step = step, .epoch = epoch, .loss = r.mean_loss,
                      .lr = optimizer->lr(0), .loss_scale = r.loss_scale, .skipped = r.skipped_steps,
                      .samples_per_s = samples_per_s, .seconds = now});
      }
      if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) {
        parts.epoch = epoch;
        save(step);
      }
      if (step == total_steps) break;
    }
    bar.close();
    bar_now = nullptr;
    const auto eval = evaluate(net, test_loader, ac, pg);
    last_accuracy = eval.accuracy;
    const double seconds = seconds_since(epoch_start);
    if (main_rank)
      fmt::print("epoch {}: test loss {:.4f}, accuracy {:.2f}%, {:.1f} s\n", epoch + 1, eval.loss,
                 100 * eval.accuracy, seconds);
    if (csv)
      csv->write({.kind = hg::train::RowKind::Epoch, .step = step, .epoch = epoch,
                  .loss = epoch_reads ? epoch_loss_sum / epoch_reads : std::nan(""), .test_loss = eval.loss,
                  .accuracy = eval.accuracy, .seconds = seconds});
    parts.epoch = epoch + 1;
    save(step);
  }

  if (main_rank) fmt::print("peak memory: {}\n", hg::train::format_bytes(hg::train::peak_memory_bytes(device)));
  if (csv) {
    csv->close();
    std::fflush(stdout);  // our lines before the script's
    const std::string cmd = fmt::format("command -v gnuplot >/dev/null && {} '{}'", HALFGRAD_PLOT_METRICS, metrics_path);
    if (std::system(cmd.c_str()) == 0)
      fmt::print("plot: {}.png, {}.svg\n", metrics_path.substr(0, metrics_path.size() - 4),
                 metrics_path.substr(0, metrics_path.size() - 4));
  }
  write_report(step, last_accuracy);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "train_classifier: " << e.what() << "\n";
  return 1;
}
