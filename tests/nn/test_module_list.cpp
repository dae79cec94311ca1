// nn::ModuleList (torch.nn.ModuleList): children named "0", "1", ... so that
// parameter and state_dict keys are PyTorch's; push_back/append/emplace_back/
// extend, size, indexing (negative too), typed access, iteration, to(),
// train()/eval(), printing, and its errors.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <sstream>

#include "test_util.h"

namespace hg = halfgrad;
namespace nn = halfgrad::nn;

namespace {
std::vector<std::string> keys_of(const hg::nn::StateDict& sd) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : sd) keys.push_back(k);
  return keys;
}

// A model that keeps its layers in a ModuleList, as a transformer keeps its blocks.
struct Stack : nn::Module {
  nn::Linear first{3, 4};
  nn::ModuleList layers;
  Stack() {
    register_module("first", first);
    for (int i = 0; i < 2; ++i) layers.append(std::make_shared<nn::Linear>(4, 4));
    layers.push_back(nn::Dropout(0.5));
    register_module("layers", layers);
  }
  hg::Tensor forward(const hg::Tensor& x) const {
    hg::Tensor h = first(x);
    for (const nn::Module& m : layers)
      if (const auto* lin = dynamic_cast<const nn::Linear*>(&m)) h = (*lin)(h);
    return h;
  }
};
}  // namespace

TEST_CASE("ModuleList registers its modules as children 0, 1, ...", "[nn][module_list]") {
  Stack model;
  CHECK(model.layers.size() == 3);
  CHECK_FALSE(model.layers.empty());
  CHECK(keys_of(model.state_dict()) ==
        std::vector<std::string>{"first.weight", "first.bias", "layers.0.weight", "layers.0.bias", "layers.1.weight",
                                 "layers.1.bias"});
  CHECK(model.parameters().size() == 6);
  const auto children = model.layers.named_children();
  REQUIRE(children.size() == 3);
  CHECK(children[2].first == "2");
  CHECK(children[2].second == &model.layers[2]);
  // indexing, negative from the end, typed access
  CHECK(&model.layers[-1] == &model.layers[2]);
  CHECK(model.layers.at<nn::Linear>(1).weight.shape() == hg::Shape{4, 4});
  CHECK(model.layers.at<nn::Dropout>(-1).type_name() == "Dropout");
  // iteration in order
  std::vector<std::string> types;
  for (nn::Module& m : model.layers) types.push_back(m.type_name());
  CHECK(types == std::vector<std::string>{"Linear", "Linear", "Dropout"});
  // train()/eval() and to() reach the children
  model.eval();
  CHECK_FALSE(model.layers[2].is_training());
  model.to(hg::kDouble);
  CHECK(model.layers.at<nn::Linear>(0).weight.dtype() == hg::kDouble);
  CHECK(model.forward(hg::randn({2, 3}, hg::kDouble)).shape() == hg::Shape{2, 4});
}

TEST_CASE("ModuleList: state dicts round-trip, printing, emplace_back, extend, members", "[nn][module_list]") {
  Stack a, b;
  b.load_state_dict(a.state_dict());
  CHECK(hgtest::same_bits(b.layers.at<nn::Linear>(1).weight, a.layers.at<nn::Linear>(1).weight));

  std::ostringstream printed;
  printed << a.layers;
  CHECK_THAT(printed.str(), Catch::Matchers::StartsWith("ModuleList("));
  CHECK_THAT(printed.str(), Catch::Matchers::Contains("(1): Linear(in_features=4, out_features=4, bias=True)"));
  CHECK_THAT(printed.str(), Catch::Matchers::Contains("(2): Dropout(p=0.5"));

  nn::ModuleList list(std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::ReLU>());
  nn::Linear& added = list.emplace_back<nn::Linear>(2, 5);
  CHECK(&list[2] == &added);
  nn::Linear member(5, 1);
  list.push_back(member);  // held by reference: the caller's object
  CHECK(&list[3] == &member);
  nn::ModuleList more;
  more.extend(list);  // shares the modules, renumbered from 0 here
  more.extend(list);
  CHECK(more.size() == 8);
  CHECK(&more[5] == &list[1]);
  CHECK(keys_of(more.state_dict()).back() == "7.bias");
  CHECK(more.parameters().size() == list.parameters().size());  // each shared tensor once
}

TEST_CASE("ModuleList errors name the index and the count", "[nn][module_list][errors]") {
  hgtest::expect_errors({
      {"index past the end", [] { nn::ModuleList l(std::make_shared<nn::ReLU>()); (void)l[1]; },
       {"index 1 is out of range for 1 modules"}},
      {"negative past the start", [] { nn::ModuleList l(std::make_shared<nn::ReLU>()); (void)l[-2]; },
       {"index -2", "-1 to 0"}},
      {"wrong type", [] { nn::ModuleList l(std::make_shared<nn::ReLU>()); (void)l.at<nn::Linear>(0); },
       {"module 0 is a ReLU"}},
      {"null", [] { nn::ModuleList l; l.push_back(std::shared_ptr<nn::Linear>()); }, {"null module at position 0"}},
      {"itself", [] { nn::ModuleList l; l.extend(l); }, {"cannot extend itself"}},
  });
}
