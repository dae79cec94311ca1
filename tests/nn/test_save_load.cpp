// hg::save / hg::load (PyTorch's torch.save / torch.load, LibTorch's
// torch::save / torch::load): a tensor, a list and a dict of tensors and a
// module round trip bit for bit; a file read as another kind than it holds,
// a truncated file and a mis-shaped state dict are Errors naming the file,
// what it holds and what was asked, and change nothing. The optimizer's
// overloads: tests/optim/test_save_load_optimizer.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <halfgrad.h>

#include "temp_dir.h"
#include "test_util.h"
#include "tutorial_mlp.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;
using hgtest::TempDir;

namespace {

// Values that show a bit-exact round trip: signed zeros, inf, NaN, a
// subnormal of each type, and ordinary numbers.
hg::Tensor specials(hg::DType dt) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const double tiny = dt == hg::float16 ? 6e-8 : 1e-40;  // float16's, else bfloat16's and float32's subnormals
  return hgtest::make({0.0, -0.0, inf, -inf, nan, tiny, 1.0 / 3.0, -2.5e4}, {2, 4}, dt);
}

}  // namespace

TEST_CASE("hg::save / hg::load: a tensor round trips bit for bit (fp32, fp16, bf16, int64)", "[nn][save]") {
  TempDir dir;
  hg::manual_seed(0);
  std::vector<hg::Tensor> cases;
  for (hg::DType dt : {hg::float32, hg::float16, hg::bfloat16}) {
    cases.push_back(specials(dt));
    cases.push_back(hg::randn({3, 5, 2}).to(dt));
  }
  cases.push_back(hgtest::make({0, -1, 9007199254740993.0, -9223372036854775807.0 - 1}, {4}, hg::int64));
  cases.push_back(hg::randn({4, 6}).t());       // not contiguous: saved in logical order
  cases.push_back(hg::full({}, 7.0, hg::float64));  // 0-d
  cases.push_back(hg::zeros({0, 3}, hg::bfloat16));  // empty
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i << ": " << cases[i].describe());
    const std::string path = dir / ("t" + std::to_string(i) + ".safetensors");
    hg::save(cases[i], path);
    const hg::Tensor back = hg::load<hg::Tensor>(path);
    CHECK(back.device().is_cpu());
    CHECK(back.dtype() == cases[i].dtype());
    CHECK(back.shape() == cases[i].shape());
    CHECK(hgtest::same_bits(back, cases[i]));
  }
  // gradients are not saved; requires_grad is not either (torch.save keeps it: set it again)
  auto w = hg::randn({3}).requires_grad_();
  hg::sum(w).backward();
  hg::save(w, dir / "w.safetensors");
  const hg::Tensor wb = hg::load<hg::Tensor>(dir / "w.safetensors");
  CHECK(hgtest::same_bits(wb, w));
  CHECK_FALSE(wb.requires_grad());
  CHECK_FALSE(wb.grad().defined());
}

TEST_CASE("hg::save / hg::load: lists and dicts of tensors round trip in order", "[nn][save]") {
  TempDir dir;
  hg::manual_seed(1);
  const std::vector<hg::Tensor> list = {specials(hg::float32), specials(hg::float16), specials(hg::bfloat16),
                                        hg::randint(-5, 5, {7}), hg::randn({2, 2}).to(hg::float64)};
  hg::save(list, dir / "list.safetensors");
  const auto back = hg::load<std::vector<hg::Tensor>>(dir / "list.safetensors");
  REQUIRE(back.size() == list.size());
  for (size_t i = 0; i < list.size(); ++i) CHECK(hgtest::same_bits(back[i], list[i]));
  hg::save(std::vector<hg::Tensor>{}, dir / "none.safetensors");
  CHECK(hg::load<std::vector<hg::Tensor>>(dir / "none.safetensors").empty());

  const std::map<std::string, hg::Tensor> dict = {
      {"weight", specials(hg::bfloat16)}, {"steps", hg::full({}, 3.0, hg::int64)}, {"a.b", hg::randn({4})}};
  hg::save(dict, dir / "dict.safetensors");
  const auto dback = hg::load<std::map<std::string, hg::Tensor>>(dir / "dict.safetensors");
  REQUIRE(dback.size() == dict.size());
  for (const auto& [k, v] : dict) {
    INFO(k);
    REQUIRE(dback.count(k) == 1);
    CHECK(hgtest::same_bits(dback.at(k), v));
  }
  // an nn::StateDict keeps its order (PyTorch's OrderedDict)
  hg::nn::StateDict sd;
  sd.insert("z", hg::ones({2}));
  sd.insert("a", hg::zeros({3}, hg::float16));
  hg::save(sd, dir / "sd.safetensors");
  const auto sdback = hg::load<hg::nn::StateDict>(dir / "sd.safetensors");
  CHECK(sdback.keys() == std::vector<std::string>{"z", "a"});
  CHECK(hgtest::same_bits(sdback.at("a"), sd.at("a")));
}

TEST_CASE("hg::save / hg::load: a module's state_dict round trips bit for bit", "[nn][save]") {
  TempDir dir;
  hg::manual_seed(2);
  hgtest::MLP trained;
  hg::nn::BatchNorm1d bn(4);  // buffers (running statistics, num_batches_tracked) too
  (void)bn(hg::randn({8, 4}));
  hg::save(trained, dir / "mlp.safetensors");
  hg::save(bn, dir / "bn.safetensors");

  hg::manual_seed(3);
  hgtest::MLP fresh;
  hg::nn::BatchNorm1d bn2(4);
  REQUIRE_FALSE(hgtest::same_bits(fresh.linear1.weight, trained.linear1.weight));
  const hg::nn::LoadResult r = hg::load(fresh, dir / "mlp.safetensors");
  CHECK(r.missing_keys.empty());
  CHECK(r.unexpected_keys.empty());
  hg::load(bn2, dir / "bn.safetensors");
  for (const auto& [name, t] : trained.state_dict()) {
    INFO(name);
    CHECK(hgtest::same_bits(fresh.state_dict().at(name), t));
  }
  for (const auto& [name, t] : bn.state_dict()) {
    INFO(name);
    CHECK(hgtest::same_bits(bn2.state_dict().at(name), t));
  }
  const hg::Tensor x = hg::randn({5, 10});
  CHECK(hgtest::same_bits(fresh.forward(x), trained.forward(x)));
  // PyTorch's habit: model.load_state_dict(torch.load(path)), and a module's
  // file read as a dict of tensors
  hgtest::MLP third;
  third.load_state_dict(hg::load<hg::nn::StateDict>(dir / "mlp.safetensors"));
  CHECK(hgtest::same_bits(third.linear2.bias, trained.linear2.bias));
  const auto as_map = hg::load<std::map<std::string, hg::Tensor>>(dir / "mlp.safetensors");
  CHECK(as_map.size() == 4);
  // and a plain safetensors state dict (PyTorch's safetensors.torch.save_file) loads into a module
  hg::nn::save(trained, dir / "plain.safetensors");
  hgtest::MLP fourth;
  hg::load(fourth, dir / "plain.safetensors");
  CHECK(hgtest::same_bits(fourth.linear1.weight, trained.linear1.weight));
}

TEST_CASE("hg::load: a file of another kind is an Error naming the file, what it holds and what was asked",
          "[nn][save][hostile]") {
  TempDir dir;
  hg::manual_seed(4);
  const std::string tensor = dir / "tensor.safetensors", list = dir / "list.safetensors",
                    module = dir / "module.safetensors";
  hg::save(hg::randn({2, 3}), tensor);
  hg::save(std::vector<hg::Tensor>{hg::ones({1}), hg::ones({2})}, list);
  hgtest::MLP model;
  hg::save(model, module);
  const hg::Tensor before = model.linear1.weight.clone();

  REQUIRE_THROWS_WITH(hg::load(model, tensor), Contains(tensor) && Contains("holds a tensor (float32[2, 3]") &&
                                                   Contains("not a state_dict for") &&
                                                   Contains("hg::load<hg::Tensor>(path)"));
  CHECK(hgtest::same_bits(model.linear1.weight, before));
  REQUIRE_THROWS_WITH(hg::load(model, list), Contains(list) && Contains("holds a list of 2 tensors"));
  REQUIRE_THROWS_WITH(hg::load<hg::Tensor>(module), Contains(module) && Contains("a module's state_dict (4 tensors)") &&
                                                        Contains("not a tensor") && Contains("hg::load(module, path)"));
  REQUIRE_THROWS_WITH(hg::load<hg::Tensor>(list), Contains("holds a list of 2 tensors, not a tensor"));
  REQUIRE_THROWS_WITH(hg::load<std::vector<hg::Tensor>>(tensor), Contains("not a list of tensors"));
  REQUIRE_THROWS_WITH((hg::load<std::map<std::string, hg::Tensor>>(tensor)), Contains("not a dict of tensors"));
  // a plain safetensors file is a dict (or a state dict), never a tensor or a list
  hg::nn::save_safetensors(dir / "plain.safetensors", {{"tensor", hg::ones({1})}});
  REQUIRE_THROWS_WITH(hg::load<hg::Tensor>(dir / "plain.safetensors"),
                      Contains("a plain safetensors file of 1 tensor") && Contains("not a tensor"));
  // a kind from the future, a version from the future
  hg::nn::save_safetensors(dir / "future.safetensors", {{"tensor", hg::ones({1})}},
                           {{"halfgrad.kind", "sparse_tensor"}, {"halfgrad.version", "1"}});
  REQUIRE_THROWS_WITH(hg::load<hg::Tensor>(dir / "future.safetensors"), Contains("unknown kind \"sparse_tensor\""));
  hg::nn::save_safetensors(dir / "v2.safetensors", {{"tensor", hg::ones({1})}},
                           {{"halfgrad.kind", "tensor"}, {"halfgrad.version", "2"}});
  REQUIRE_THROWS_WITH(hg::load<hg::Tensor>(dir / "v2.safetensors"), Contains("this halfgrad reads version 1"));
  // the kind says tensor / list, the tensors do not fit it
  hg::nn::save_safetensors(dir / "two.safetensors", {{"tensor", hg::ones({1})}, {"x", hg::ones({1})}},
                           {{"halfgrad.kind", "tensor"}});
  REQUIRE_THROWS_WITH(hg::load<hg::Tensor>(dir / "two.safetensors"), Contains("this one holds [\"tensor\", \"x\"]"));
  hg::nn::save_safetensors(dir / "gap.safetensors", {{"0", hg::ones({1})}, {"2", hg::ones({1})}},
                           {{"halfgrad.kind", "tensor_list"}});
  REQUIRE_THROWS_WITH(hg::load<std::vector<hg::Tensor>>(dir / "gap.safetensors"),
                      Contains("tensor 1 of the list is named \"2\", expected \"1\""));
}

TEST_CASE("hg::load: truncated files and mis-shaped state dicts are Errors that change nothing", "[nn][save][hostile]") {
  TempDir dir;
  hg::manual_seed(5);
  hgtest::MLP model;
  const std::string path = dir / "mlp.safetensors";
  hg::save(model, path);
  const std::string bytes = hgtest::read_bytes(path);
  const hg::Tensor before = model.linear2.weight.clone();
  // cut anywhere: in the length, in the header, in the data, one byte short
  for (size_t keep : {size_t{0}, size_t{5}, size_t{8}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    INFO("kept " << keep << " of " << bytes.size() << " bytes");
    const std::string cut = dir / "cut.safetensors";
    hgtest::write_bytes(cut, bytes.substr(0, keep));
    REQUIRE_THROWS_WITH(hg::load(model, cut), Contains(cut) && Contains("a state_dict for"));
    REQUIRE_THROWS_WITH(hg::load<hg::Tensor>(cut), Contains(cut) && Contains("asked for a tensor"));
    CHECK(hgtest::same_bits(model.linear2.weight, before));
  }
  // a missing file
  REQUIRE_THROWS_WITH(hg::load<hg::Tensor>(dir / "nothing.safetensors"), Contains("nothing.safetensors"));

  // the tutorial MLP's file into one with other layer sizes
  struct Wider : hg::nn::Module {
    hg::nn::Linear linear1{10, 64}, linear2{64, 10};
    Wider() {
      register_module("linear1", linear1);
      register_module("linear2", linear2);
    }
  } wider;
  const hg::Tensor wider_before = wider.linear2.weight.clone();
  REQUIRE_THROWS_WITH(hg::load(wider, path), Contains("hg::load('" + path + "')") && Contains("linear1.weight") &&
                                                 Contains("[100, 10]") && Contains("[64, 10]"));
  CHECK(hgtest::same_bits(wider.linear2.weight, wider_before));  // nothing was copied
  // keys the module lacks (strict) and keys the file lacks
  hg::nn::Linear single(10, 100);
  REQUIRE_THROWS_WITH(hg::load(single, path), Contains("linear1.weight"));
  const hg::nn::LoadResult r = hg::load(single, path, /*strict=*/false);
  CHECK(r.missing_keys == std::vector<std::string>{"weight", "bias"});
  CHECK(r.unexpected_keys.size() == 4);
}

TEST_CASE("hg::save: a failed save leaves the old file whole", "[nn][save]") {
  TempDir dir;
  const std::string path = dir / "d.safetensors";
  hg::save(std::map<std::string, hg::Tensor>{{"a", hg::ones({3})}}, path);
  const std::string old_bytes = hgtest::read_bytes(path);
  REQUIRE_THROWS_WITH(hg::save(std::map<std::string, hg::Tensor>{{"\xff\xfe", hg::zeros({3})}}, path),
                      Contains("not valid UTF-8"));
  REQUIRE_THROWS_WITH(hg::save(std::vector<hg::Tensor>{hg::ones({1}), hg::Tensor()}, path),
                      Contains("tensor 1 of the list is undefined"));
  REQUIRE_THROWS_WITH(hg::save(hg::Tensor(), path), Contains("the tensor is undefined"));
  CHECK(hgtest::read_bytes(path) == old_bytes);
  CHECK(hgtest::entries_named(dir.path, "d.safetensors.tmp-").empty());
}
