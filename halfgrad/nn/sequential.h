#pragma once
// Sequential: runs its modules in order, each one's output the next one's
// input. Children are named "0", "1", ... as in PyTorch, so state_dict keys
// ("0.weight") match a PyTorch nn.Sequential's.
//
//   hg::nn::Sequential model(std::make_shared<hg::nn::Linear>(10, 100),
//                            std::make_shared<hg::nn::ReLU>(),
//                            std::make_shared<hg::nn::Linear>(100, 10));
//   model.emplace_back<hg::nn::Dropout>(0.1);   // or add one by one
#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <halfgrad/nn/module.h>

namespace halfgrad::nn {

// A module that maps one tensor to one tensor.
template <typename M>
concept TensorModule = std::derived_from<M, Module> && requires(M& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};

class Sequential : public Module {
 public:
  Sequential() = default;
  template <TensorModule... M>
    requires(sizeof...(M) > 0)
  explicit Sequential(std::shared_ptr<M>... modules) {
    (push_back(std::move(modules)), ...);
  }

  // Appends an owned module.
  template <TensorModule M>
  Sequential& push_back(std::shared_ptr<M> module) {
    HG_CHECK(module != nullptr, "Sequential::push_back: null module at position {}", size());
    M* m = module.get();
    append(m, [m](const Tensor& x) { return Tensor(m->forward(x)); }, std::move(module));
    return *this;
  }
  // Appends a module owned elsewhere (a member of the caller): it must outlive this one.
  template <TensorModule M>
  Sequential& push_back(M& module) {
    M* m = &module;
    append(m, [m](const Tensor& x) { return Tensor(m->forward(x)); }, nullptr);
    return *this;
  }
  // Constructs an owned M in place and returns it.
  template <TensorModule M, typename... Args>
  M& emplace_back(Args&&... args) {
    auto m = std::make_shared<M>(std::forward<Args>(args)...);
    M& ref = *m;
    push_back(std::move(m));
    return ref;
  }

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  Module& operator[](size_t i) const;
  // The i-th module as an M, or an Error naming what it is.
  template <typename M>
  M& at(size_t i) const {
    auto* m = dynamic_cast<M*>(&(*this)[i]);
    HG_CHECK(m != nullptr, "Sequential::at: module {} is a {}, not the type asked for", i, (*this)[i].type_name());
    return *m;
  }

 private:
  void append(Module* m, std::function<Tensor(const Tensor&)> step, std::shared_ptr<Module> owned);

  std::vector<Module*> modules_;
  std::vector<std::function<Tensor(const Tensor&)>> steps_;
};

}  // namespace halfgrad::nn
