// Module::num_parameters / parameter_count, named_modules on a deeper tree,
// apply's order (PyTorch's: children's subtrees first, then the module).
#include <catch2/catch.hpp>

#include <map>

#include <halfgrad.h>

namespace hg = halfgrad;

namespace {

struct Block : hg::nn::Module {
  hg::nn::Linear fc{3, 4}, proj{4, 3, /*bias=*/false};
  Block() {
    register_module("fc", fc);
    register_module("proj", proj);
  }
};

// gain, two blocks and a head that b2 also holds (a shared, tied module).
struct Deep : hg::nn::Module {
  hg::Tensor gain = hg::ones({2});
  Block b1, b2;
  hg::nn::Linear head{3, 2};
  Deep() {
    register_parameter("gain", gain);
    register_module("b1", b1);
    register_module("b2", b2);
    b2.register_module("tied", head);
    register_module("head", head);
  }
};

std::vector<std::string> module_names(const hg::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [k, mod] : m.named_modules()) out.push_back(k);
  return out;
}

}  // namespace

TEST_CASE("num_parameters counts elements, each shared tensor once", "[nn]") {
  Deep net;
  // gain 2, each block 3*4 + 4 + 4*3 = 28, head 3*2 + 2 = 8 (once, though held twice)
  CHECK(net.num_parameters() == 2 + 28 + 28 + 8);
  CHECK(net.parameter_count() == net.num_parameters());
  net.gain.requires_grad_(false);
  net.b1.fc.bias.requires_grad_(false);
  CHECK(net.num_parameters(/*only_trainable=*/true) == 66 - 2 - 4);
  CHECK(net.parameter_count(true) == 60);
  CHECK(net.num_parameters() == 66);
  CHECK(net.b2.num_parameters() == 28 + 8);
  CHECK(hg::nn::Linear(5, 7).num_parameters() == 42);
  hg::nn::Dropout drop(0.1);
  CHECK(drop.num_parameters() == 0);
}

TEST_CASE("named_modules: the module as \"\", then children depth first with dotted names", "[nn]") {
  Deep net;
  // as PyTorch's named_modules (memo): the shared head is listed once, at its first path
  CHECK(module_names(net) == std::vector<std::string>{"", "b1", "b1.fc", "b1.proj", "b2", "b2.fc", "b2.proj",
                                                        "b2.tied"});
  const auto mods = net.named_modules();
  CHECK(mods[0].second == &net);
  CHECK(mods[2].second == &net.b1.fc);
  CHECK(mods[7].second == &net.head);
  CHECK(module_names(net.b1) == std::vector<std::string>{"", "fc", "proj"});
  CHECK(module_names(net.head) == std::vector<std::string>{""});
}

TEST_CASE("apply calls fn on children's subtrees first, then on the module", "[nn]") {
  Deep net;
  std::map<const hg::nn::Module*, std::string> name;
  for (const auto& [k, m] : net.named_modules()) name[m] = k.empty() ? "<root>" : k;
  std::vector<std::string> seen;
  hg::nn::Module& r = net.apply([&](hg::nn::Module& m) { seen.push_back(name.at(&m)); });
  CHECK(&r == &net);
  // PyTorch's apply does not remember modules across parents: the tied head is visited twice
  CHECK(seen == std::vector<std::string>{"b1.fc", "b1.proj", "b1", "b2.fc", "b2.proj", "b2.tied", "b2", "b2.tied",
                                         "<root>"});

  // a child registered twice in one module is one child (PyTorch's children())
  struct Twice : hg::nn::Module {
    hg::nn::Linear lin{2, 2};
    Twice() {
      register_module("x", lin);
      register_module("y", lin);
    }
  } twice;
  int calls = 0;
  twice.apply([&](hg::nn::Module&) { ++calls; });
  CHECK(calls == 2);
  CHECK(module_names(twice) == std::vector<std::string>{"", "x"});
}
