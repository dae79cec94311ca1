// Training checkpoints: a run interrupted after N steps, saved, loaded into
// fresh objects and continued for M steps ends bit for bit where the
// uninterrupted N+M-step run does (weights, optimizer buffers, scaler, LR
// schedule, RNG); CheckpointManager keeps the last K; a failed save leaves
// the previous checkpoint; broken checkpoints are Errors.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <set>

#include <halfgrad.h>

#include "temp_dir.h"
#include "test_util.h"
#include "tutorial_mlp.h"

namespace hg = halfgrad;
namespace fs = std::filesystem;
using hgtest::TempDir;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<hg::optim::Optimizer>(std::vector<hg::Tensor>)>;

// The tutorial MLP trained under bf16 autocast with a GradScaler and StepLR;
// every step draws its batch from the global generator, so a resume that
// missed the RNG state would see other data.
struct Run {
  hgtest::MLP model;
  std::unique_ptr<hg::optim::Optimizer> optimizer;
  hg::optim::StepLR scheduler;
  hg::amp::GradScaler scaler{{.init_scale = 1024.0, .growth_interval = 2}};
  hg::nn::CrossEntropyLoss criterion;

  explicit Run(const MakeOptimizer& make) : optimizer(make(model.parameters())), scheduler(*optimizer, 3, 0.5) {}

  void step() {
    const hg::Tensor x = hg::randn({16, 10}), y = hg::randint(0, 10, {16});
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::DeviceType::CPU, hg::bfloat16);
      loss = criterion(model.forward(x), y);
    }
    optimizer->zero_grad();
    scaler.scale(loss).backward();
    scaler.step(*optimizer);
    scaler.update();
    scheduler.step();
  }

  hg::optim::CheckpointParts parts() { return {.model = &model, .optimizer = optimizer.get(), .scheduler = &scheduler, .scaler = &scaler}; }
};

void check_same(Run& a, Run& b) {
  for (const auto& [name, t] : a.model.state_dict()) {
    INFO(name);
    CHECK(hgtest::same_bits(b.model.state_dict().at(name), t));
  }
  const auto sa = a.optimizer->state_dict(), sb = b.optimizer->state_dict();
  REQUIRE(sa.state.size() == sb.state.size());
  CHECK(!sa.state.empty());
  for (const auto& [index, buffers] : sa.state) {
    REQUIRE(sb.state.count(index) == 1);
    REQUIRE(sb.state.at(index).size() == buffers.size());
    for (const auto& [name, t] : buffers) {
      INFO(index << "." << name);
      CHECK(hgtest::same_bits(sb.state.at(index).at(name), t));
    }
  }
  REQUIRE(sa.param_groups.size() == sb.param_groups.size());
  for (size_t g = 0; g < sa.param_groups.size(); ++g) {
    CHECK(sa.param_groups[g].options == sb.param_groups[g].options);
    CHECK(sa.param_groups[g].params == sb.param_groups[g].params);
  }
  CHECK(a.scaler.state_dict() == b.scaler.state_dict());
  CHECK(a.scheduler.get_last_lr() == b.scheduler.get_last_lr());
  CHECK(a.scheduler.state_dict().scalars == b.scheduler.state_dict().scalars);
}

void exact_resume(const MakeOptimizer& make, int n, int m) {
  TempDir dir;
  hg::manual_seed(0);
  Run reference(make);
  const hg::Tensor initial = reference.model.linear1.weight.clone();
  for (int i = 0; i < n + m; ++i) reference.step();
  const auto rng_after = hg::get_rng_state();

  hg::manual_seed(0);
  Run first(make);
  for (int i = 0; i < n; ++i) first.step();
  auto parts = first.parts();
  parts.epoch = 1;
  parts.step = n;
  parts.extra = {{"loader", R"({"epoch":1,"position":48})"}};
  hg::optim::save_checkpoint(dir / "ckpt", parts);

  hg::manual_seed(12345);  // fresh objects from other numbers
  (void)hg::randn({100});
  Run resumed(make);
  REQUIRE(!hgtest::same_bits(resumed.model.linear1.weight, initial));
  auto loaded = resumed.parts();
  hg::optim::load_checkpoint(dir / "ckpt", loaded);
  CHECK(loaded.epoch == 1);
  CHECK(loaded.step == n);
  CHECK(loaded.extra == parts.extra);
  for (int i = 0; i < m; ++i) resumed.step();

  check_same(reference, resumed);
  CHECK(hg::get_rng_state() == rng_after);
  CHECK(!hgtest::same_bits(reference.model.linear1.weight, initial));  // it trained
  CHECK(reference.scaler.get_scale() > 1024.0);                         // and the scale grew
}

}  // namespace

TEST_CASE("Checkpoint: SGD with momentum + StepLR + GradScaler + bf16 autocast resumes bit for bit", "[optim][checkpoint]") {
  exact_resume([](std::vector<hg::Tensor> p) {
    return std::make_unique<hg::optim::SGD>(std::move(p), hg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
  }, 5, 4);
}

TEST_CASE("Checkpoint: Adam + StepLR + GradScaler + bf16 autocast resumes bit for bit", "[optim][checkpoint]") {
  exact_resume([](std::vector<hg::Tensor> p) {
    return std::make_unique<hg::optim::Adam>(std::move(p), hg::optim::AdamOptions{.lr = 1e-2});
  }, 4, 5);
}

namespace {
MakeOptimizer sgd = [](std::vector<hg::Tensor> p) {
  return std::make_unique<hg::optim::SGD>(std::move(p), hg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
};
}  // namespace

TEST_CASE("Checkpoint: the folder holds the three files, optimizer tensors named state.<index>.<buffer>", "[optim][checkpoint]") {
  TempDir dir;
  hg::manual_seed(0);
  Run run(sgd);
  run.step();
  hg::optim::save_checkpoint(dir / "c", run.parts());
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dir.path / "c")) files.insert(e.path().filename().string());
  CHECK(files == std::set<std::string>{"model.safetensors", "optimizer.safetensors", "trainer.json"});
  CHECK(hgtest::entries_named(dir.path, ".").empty());  // no temp folder left
  const auto opt = hg::nn::load_safetensors(dir / "c/optimizer.safetensors");
  CHECK(opt.find("state.0.momentum_buffer") != nullptr);
  CHECK(opt.find("state.3.momentum_buffer") != nullptr);
  CHECK(opt.metadata.at("optimizer") == "SGD");
  CHECK(opt.metadata.at("param_groups").find("\"momentum\":0.9") != std::string::npos);
  const auto model = hg::nn::load_safetensors(dir / "c/model.safetensors");
  CHECK(model.find("linear2.bias") != nullptr);
}

TEST_CASE("CheckpointManager keeps the last K and finds the latest complete one", "[optim][checkpoint]") {
  TempDir dir;
  hg::manual_seed(0);
  Run run(sgd);
  hg::optim::CheckpointManager manager(dir.path.string(), 2);
  CHECK(!manager.latest());
  auto parts = run.parts();
  CHECK(!manager.load_latest(parts));
  for (int step = 1; step <= 4; ++step) {
    run.step();
    CHECK(manager.save(step * 10, run.parts()) == manager.path(step * 10));
  }
  CHECK(manager.steps() == std::vector<int64_t>{30, 40});
  CHECK(manager.latest() == manager.path(40));
  // Not a checkpoint of its: other names, an incomplete folder, a crashed save's temp folder.
  fs::create_directory(dir.path / "ckpt-99");  // no trainer.json
  fs::create_directory(dir.path / "ckpt-007");
  fs::create_directory(dir.path / "notes");
  fs::create_directory(dir.path / ".ckpt-50.partial-1-0");
  hgtest::write_bytes(dir / ".ckpt-50.partial-1-0/trainer.json", "{}");
  CHECK(manager.steps() == std::vector<int64_t>{30, 40});
  hg::manual_seed(3);
  Run other(sgd);
  auto loaded = other.parts();
  REQUIRE(manager.load_latest(loaded));
  CHECK(loaded.step == 40);
  CHECK(hgtest::same_bits(other.model.linear1.weight, run.model.linear1.weight));
  // A step saved again replaces its folder.
  run.step();
  manager.save(40, run.parts());
  CHECK(manager.steps() == std::vector<int64_t>{30, 40});
  hg::optim::load_checkpoint(manager.path(40), loaded);
  CHECK(hgtest::same_bits(other.model.linear1.weight, run.model.linear1.weight));
  // Saving a lower step (a run restarted from an earlier checkpoint) keeps it.
  manager.save(20, run.parts());
  CHECK(manager.steps() == std::vector<int64_t>{20, 40});
  CHECK(manager.latest() == manager.path(40));
  hgtest::expect_errors({
      {"keep_last < 0", [&] { hg::optim::CheckpointManager(dir.path.string(), -1); }, {"keep_last must be >= 0"}},
      {"negative step", [&] { manager.save(-1, run.parts()); }, {"the step must be >= 0"}},
  });
}

TEST_CASE("Checkpoint: a save that fails midway leaves the previous checkpoint and no temp folder", "[optim][checkpoint]") {
  TempDir dir;
  hg::manual_seed(0);
  Run run(sgd);
  run.step();
  const std::string c = dir / "c";
  hg::optim::save_checkpoint(c, run.parts());
  const std::string model_before = hgtest::read_bytes(c + "/model.safetensors");
  const std::string trainer_before = hgtest::read_bytes(c + "/trainer.json");
  run.step();
  auto parts = run.parts();
  parts.extra = {{"bad", "\xff\xfe"}};  // fails at trainer.json, after the two safetensors files
  hgtest::expect_errors({{"invalid UTF-8 in extra", [&] { hg::optim::save_checkpoint(c, parts); }, {"not valid UTF-8"}}});
  CHECK_THROWS_AS(hg::optim::save_checkpoint(c, parts), hg::Error);
  CHECK(hgtest::read_bytes(c + "/model.safetensors") == model_before);
  CHECK(hgtest::read_bytes(c + "/trainer.json") == trainer_before);
  CHECK(hgtest::entries_named(dir.path, ".").empty());
}

TEST_CASE("Checkpoint: the RNG is restored only when asked; parts left null are skipped", "[optim][checkpoint]") {
  TempDir dir;
  hg::manual_seed(0);
  Run run(sgd);
  run.step();
  auto parts = run.parts();
  hg::optim::save_checkpoint(dir / "c", parts);
  hg::manual_seed(77);
  const auto before = hg::get_rng_state();
  hg::optim::CheckpointParts only_model{.model = &run.model, .rng = false};
  hg::optim::load_checkpoint(dir / "c", only_model);
  CHECK(hg::get_rng_state() == before);
  parts.rng = false;
  parts.scheduler = nullptr;
  hg::optim::save_checkpoint(dir / "no_rng", parts);
  hg::optim::CheckpointParts wants_rng{.model = &run.model};
  hg::optim::CheckpointParts wants_scheduler{.model = &run.model, .scheduler = &run.scheduler, .rng = false};
  hgtest::expect_errors({
      {"no rng saved", [&] { hg::optim::load_checkpoint(dir / "no_rng", wants_rng); }, {"no \"rng\"", "trainer.json"}},
      {"no scheduler saved", [&] { hg::optim::load_checkpoint(dir / "no_rng", wants_scheduler); }, {"no \"scheduler\""}},
  });
}

// One SGD step of the tutorial MLP saved to dir/c (seed 0), and copies of that
// folder for a test to break: the set-up the hostile-file tests share.
struct Saved {
  TempDir dir;
  Run run{(hg::manual_seed(0), sgd)};
  hg::optim::CheckpointParts parts;
  Saved() {
    run.step();
    hg::optim::save_checkpoint(dir / "c", run.parts());
    parts = run.parts();
  }
  // A copy of the saved folder under `name`: its path.
  std::string copy(const std::string& name) {
    fs::copy(dir.path / "c", dir.path / name, fs::copy_options::recursive);
    return dir / name;
  }
  // A copy whose trainer.json has its first `from` replaced by `to`.
  std::string edited(const std::string& name, const std::string& from, const std::string& to) {
    const std::string d = copy(name), path = d + "/trainer.json";
    std::string t = hgtest::read_bytes(path);
    const size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    hgtest::write_bytes(path, t.replace(at, from.size(), to));
    return d;
  }
};

TEST_CASE("Checkpoint: broken or foreign folders are Errors naming the file", "[optim][checkpoint]") {
  Saved saved;
  const std::string no_marker = saved.copy("no_marker");
  fs::remove(no_marker + "/trainer.json");
  const std::string bad_json = saved.copy("bad_json");
  hgtest::write_bytes(bad_json + "/trainer.json", "{\"format\":");
  const std::string other = saved.copy("other");
  hgtest::write_bytes(other + "/trainer.json", R"({"format":"something-else"})");
  const std::string format_number = saved.copy("format_number");
  hgtest::write_bytes(format_number + "/trainer.json", R"({"format":3})");
  const std::string array = saved.copy("array");
  hgtest::write_bytes(array + "/trainer.json", "[1]");
  const std::string no_step = saved.copy("no_step");
  hgtest::write_bytes(no_step + "/trainer.json", R"({"format":"halfgrad-checkpoint","version":1,"epoch":0})");
  const std::string version = saved.copy("version");
  {
    std::string t = hgtest::read_bytes(version + "/trainer.json");
    t.replace(t.find("\"version\": 1"), 12, "\"version\": 9");
    hgtest::write_bytes(version + "/trainer.json", t);
  }
  const std::string opt_name = saved.copy("opt_name");
  hg::nn::save_safetensors(opt_name + "/optimizer.safetensors", {{"momentum", hg::ones({2})}}, {{"param_groups", "[]"}});
  const std::string no_groups = saved.copy("no_groups");
  hg::nn::save_safetensors(no_groups + "/optimizer.safetensors", {});
  const std::string truncated = saved.copy("truncated");
  {
    const std::string m = hgtest::read_bytes(truncated + "/model.safetensors");
    hgtest::write_bytes(truncated + "/model.safetensors", m.substr(0, m.size() - 3));
  }
  const std::string other_model = saved.copy("other_model");
  hg::nn::save_safetensors(other_model + "/model.safetensors", {{"linear1.weight", hg::ones({3})}});
  hgtest::expect_errors({
      {"no trainer.json", [&] { hg::optim::load_checkpoint(no_marker, saved.parts); }, {"not a complete checkpoint", "no_marker/trainer.json"}},
      {"missing folder", [&] { hg::optim::load_checkpoint(saved.dir / "nope", saved.parts); }, {"not a complete checkpoint"}},
      {"bad JSON", [&] { hg::optim::load_checkpoint(bad_json, saved.parts); }, {"bad_json/trainer.json", "not valid JSON"}},
      {"foreign format", [&] { hg::optim::load_checkpoint(other, saved.parts); }, {"not a halfgrad checkpoint"}},
      {"format not a string", [&] { hg::optim::load_checkpoint(format_number, saved.parts); }, {"not a halfgrad checkpoint"}},
      {"not an object", [&] { hg::optim::load_checkpoint(array, saved.parts); }, {"not a halfgrad checkpoint"}},
      {"no step", [&] { hg::optim::load_checkpoint(no_step, saved.parts); }, {"no \"step\""}},
      {"newer version", [&] { hg::optim::load_checkpoint(version, saved.parts); }, {"format version 9"}},
      {"optimizer tensor name", [&] { hg::optim::load_checkpoint(opt_name, saved.parts); }, {"\"momentum\" is not named state.<index>.<buffer>"}},
      {"no param_groups", [&] { hg::optim::load_checkpoint(no_groups, saved.parts); }, {"no \"param_groups\""}},
      {"truncated model", [&] { hg::optim::load_checkpoint(truncated, saved.parts); }, {"truncated/model.safetensors"}},
      {"another model", [&] { hg::optim::load_checkpoint(other_model, saved.parts); }, {"other_model", "model.safetensors"}},
  });
}

TEST_CASE("Checkpoint: the CUDA generators are saved and restored", "[optim][checkpoint][cuda]") {
  TempDir dir;
  hg::manual_seed(0);
  hgtest::MLP model;
  (void)hg::randn({9}, hg::Device::cuda());
  hg::optim::save_checkpoint(dir / "c", {.model = &model});
  const hg::Tensor cpu = hg::randn({4}), gpu = hg::randn({4}, hg::Device::cuda());
  (void)hg::randn({100}, hg::Device::cuda());
  hg::optim::CheckpointParts parts{.model = &model};
  hg::optim::load_checkpoint(dir / "c", parts);
  CHECK(hgtest::same_bits(hg::randn({4}), cpu));
  CHECK(hgtest::same_bits(hg::randn({4}, hg::Device::cuda()), gpu));
}

using hgtest::within;

TEST_CASE("Checkpoint: hostile trainer.json and metadata are Errors in bounded time, stack and message size",
          "[optim][checkpoint][hostile]") {
  Saved saved;
  constexpr size_t kDeep = 100'000;
  const std::string deep_extra = saved.edited(
      "deep_extra", "\"extra\": {}", "\"extra\": {\"x\": " + std::string(kDeep, '[') + std::string(kDeep, ']') + "}");
  // 20k nested scheduler states (each a level of recursion in the reader before).
  std::string chain;
  for (int i = 0; i < 20'000; ++i) chain += R"({"scalars":{},"lists":{},"schedulers":[)";
  for (int i = 0; i < 20'000; ++i) chain += "]}";
  const std::string deep_scheduler = saved.edited("deep_scheduler", "\"scheduler\": {",
                                                  "\"scheduler\": {\"schedulers\": [" + chain + "], \"x\": {");
  const std::string deep_groups = saved.copy("deep_groups");
  hg::nn::save_safetensors(deep_groups + "/optimizer.safetensors", {},
                           {{"param_groups", std::string(kDeep, '[') + std::string(kDeep, ']')}, {"optimizer", "SGD"}});
  // A 10 MB invalid trainer.json: the message quotes a few hundred bytes.
  const std::string long_bad = saved.edited("long_bad", "\"extra\": {}", "\"extra\": \"" + std::string(10'000'000, 'x') + "\\q\"");
  const std::string twice = saved.edited("twice", "\"step\": 0", "\"step\": 0, \"step\": 5");
  const std::string unknown = saved.edited("unknown", "\"step\": 0", "\"step\": 0, \"bogus\": 1");

  hgtest::expect_errors({
      {"extra 100k deep", within(30, [&] { hg::optim::load_checkpoint(deep_extra, saved.parts); }),
       {"deep_extra/trainer.json", "nests deeper than 64 levels"}},
      {"20k nested schedulers", within(30, [&] { hg::optim::load_checkpoint(deep_scheduler, saved.parts); }),
       {"deep_scheduler/trainer.json", "nests deeper than 64 levels"}},
      {"param_groups 100k deep", within(30, [&] { hg::optim::load_checkpoint(deep_groups, saved.parts); }),
       {"deep_groups/optimizer.safetensors", "param_groups", "nests deeper than 64 levels"}},
      {"invalid 10 MB trainer.json", within(30, [&] { hg::optim::load_checkpoint(long_bad, saved.parts); }),
       {"long_bad/trainer.json", "not valid JSON", "bytes in all"}},
      {"a key twice", [&] { hg::optim::load_checkpoint(twice, saved.parts); }, {"twice/trainer.json", "the key \"step\" twice"}},
      {"unknown field", [&] { hg::optim::load_checkpoint(unknown, saved.parts); },
       {"unknown/trainer.json", "unknown field \"bogus\""}},
  });
  const auto r = hgtest::run_in_child(within(30, [&] { hg::optim::load_checkpoint(long_bad, saved.parts); }));
  CHECK(r.threw_error);
  CHECK(r.message.size() < 1000);
}

TEST_CASE("Checkpoint: numbers out of range, unknown scheduler fields, another scheduler's state, absent parts",
          "[optim][checkpoint][hostile]") {
  Saved saved;
  const std::string step_2_63 = saved.edited("step_2_63", "\"step\": 0", "\"step\": 9223372036854775808");
  const std::string step_negative = saved.edited("step_negative", "\"step\": 0", "\"step\": -1");
  const std::string epoch_huge = saved.edited("epoch_huge", "\"epoch\": 0", "\"epoch\": 18446744073709551615");
  const std::string scheduler_field = saved.edited("scheduler_field", "\"scheduler\": {", "\"scheduler\": {\"bogus\": 1, ");
  const std::string scheduler_scalar = saved.edited("scheduler_scalar", "\"scalars\": {", "\"scalars\": {\"bogus\": 1, ");
  // A checkpoint written before the scheduler's kind was saved: its keys still tell.
  const std::string no_kind = saved.edited("no_kind", "\"kind\": \"StepLR\",", "");

  hg::optim::MultiStepLR multi(*saved.run.optimizer, {2, 4}, 0.5);
  auto with_multi = saved.parts;
  with_multi.scheduler = &multi;

  auto no_optimizer = saved.run.parts();
  no_optimizer.optimizer = nullptr;
  no_optimizer.scheduler = nullptr;
  no_optimizer.scaler = nullptr;
  no_optimizer.model = nullptr;
  hg::optim::save_checkpoint(saved.dir / "bare", no_optimizer);

  hgtest::expect_errors({
      {"step 2^63", [&] { hg::optim::load_checkpoint(step_2_63, saved.parts); },
       {"step_2_63/trainer.json", "\"step\" must be an integer in [0, 2^63)", "9223372036854775808"}},
      {"step -1", [&] { hg::optim::load_checkpoint(step_negative, saved.parts); }, {"\"step\" must be an integer in [0, 2^63)"}},
      {"epoch 2^64 - 1", [&] { hg::optim::load_checkpoint(epoch_huge, saved.parts); },
       {"\"epoch\" must be an integer in [0, 2^63)"}},
      {"unknown scheduler field", [&] { hg::optim::load_checkpoint(scheduler_field, saved.parts); },
       {"scheduler_field/trainer.json", "the scheduler state has an unknown field \"bogus\""}},
      {"unknown scheduler scalar", [&] { hg::optim::load_checkpoint(scheduler_scalar, saved.parts); },
       {"StepLR.load_state_dict", "unknown scalar \"bogus\""}},
      {"StepLR's state into a MultiStepLR", [&] { hg::optim::load_checkpoint(saved.dir / "c", with_multi); },
       {"c/trainer.json", "\"StepLR\" scheduler, which does not load into a MultiStepLR"}},
      {"StepLR's state, without its kind, into a MultiStepLR", [&] { hg::optim::load_checkpoint(no_kind, with_multi); },
       {"MultiStepLR.load_state_dict", "unknown scalar \"step_size\""}},
      {"no model saved", [&] { hg::optim::load_checkpoint(saved.dir / "bare", saved.parts); },
       {"bare", "this checkpoint has no model state"}},
      {"no optimizer saved (model not asked for)",
       [&] {
         auto p = saved.parts;
         p.model = nullptr;
         hg::optim::load_checkpoint(saved.dir / "bare", p);
       },
       {"bare", "this checkpoint has no optimizer state", "pass a null optimizer"}},
      {"no scheduler saved",
       [&] {
         auto p = saved.parts;
         p.model = nullptr;
         p.optimizer = nullptr;
         hg::optim::load_checkpoint(saved.dir / "bare", p);
       },
       {"this checkpoint has no scheduler state"}},
      {"negative step on save",
       [&] {
         auto p = saved.parts;
         p.step = -3;
         hg::optim::save_checkpoint(saved.dir / "neg", p);
       },
       {"epoch and step must be >= 0"}},
  });
  // Nothing above loaded by mistake: the valid checkpoint still loads.
  hg::optim::load_checkpoint(saved.dir / "c", saved.parts);
}

TEST_CASE("Checkpoint: FIFOs in place of its files are refused, never waited on", "[optim][checkpoint][hostile]") {
  Saved saved;
  for (const char* name : {"model.safetensors", "optimizer.safetensors", "trainer.json"}) {
    INFO(name);
    const std::string d = saved.copy(std::string("fifo_") + name);
    fs::remove(d + "/" + name);
    REQUIRE(::mkfifo((d + "/" + name).c_str(), 0600) == 0);
    hgtest::expect_errors({{name, within(30, [&] { hg::optim::load_checkpoint(d, saved.parts); }),
                            {name, "is a FIFO (named pipe), not a regular file"}}});
  }
}

TEST_CASE("Checkpoint: temp folders of killed saves and prunings are removed by the next save in the folder",
          "[optim][checkpoint]") {
  TempDir dir;
  hg::manual_seed(0);
  Run run(sgd);
  run.step();
  const pid_t gone = [] {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return pid;
  }();
  const fs::path stale = dir.path / fmt::format(".ckpt-3.partial-{}-0", gone);
  const fs::path stale_old = dir.path / fmt::format(".ckpt-1.partial-{}-2.old", gone);
  const fs::path stale_removing = dir.path / fmt::format(".ckpt-2.removing-{}-0", gone);  // a pruning killed midway
  const fs::path live = dir.path / fmt::format(".ckpt-4.partial-{}-0", ::getppid());
  for (const auto& p : {stale, stale_old, stale_removing, live}) {
    fs::create_directory(p);
    hgtest::write_bytes((p / "model.safetensors").string(), "partial");
  }
  hg::optim::CheckpointManager manager(dir.path.string());
  manager.save(5, run.parts());
  CHECK(!fs::exists(stale));
  CHECK(!fs::exists(stale_old));
  CHECK(!fs::exists(stale_removing));
  CHECK(fs::exists(live));
  CHECK(manager.steps() == std::vector<int64_t>{5});
}
