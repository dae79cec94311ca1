#pragma once
// Sequential: runs its modules in order, each one's output the next one's
// input. Children are named "0", "1", ... as in PyTorch, so state_dict keys
// ("0.weight") match a PyTorch nn.Sequential's.
//
//   hg::nn::Sequential model(hg::nn::Linear(10, 100), hg::nn::ReLU(), hg::nn::Linear(100, 10));
//   (or std::make_shared<hg::nn::Linear>(10, 100), ...: shared_ptrs are shared, not copied)
//   model.emplace_back<hg::nn::Dropout>(0.1);   // or add one by one
#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <halfgrad/nn/module.h>

namespace halfgrad::nn {

// A module that maps one tensor to one tensor.
template <typename M>
concept TensorModule = std::derived_from<M, Module> && requires(M& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};

namespace detail {
template <typename T>
struct is_module_ptr : std::false_type {};
template <TensorModule M>
struct is_module_ptr<std::shared_ptr<M>> : std::true_type {};
}  // namespace detail

// What the constructor takes: a layer by value (a temporary, moved in and
// owned), a shared_ptr to one (owned), or a layer lvalue (held by reference).
template <typename A>
concept SequentialItem = TensorModule<std::remove_cvref_t<A>> || detail::is_module_ptr<std::remove_cvref_t<A>>::value;

class Sequential : public Module {
 public:
  Sequential() = default;
  // Sequential(Linear(5, 16), ReLU(), Linear(16, 3)), as PyTorch's and LibTorch's.
  template <SequentialItem... M>
    requires(sizeof...(M) > 0)
  explicit Sequential(M&&... modules) {
    (push_back(std::forward<M>(modules)), ...);
  }

  // Appends an owned module.
  template <TensorModule M>
  Sequential& push_back(std::shared_ptr<M> module) {
    HG_CHECK(module != nullptr, "Sequential::push_back: null module at position {}", size());
    M* m = module.get();
    append(m, [m](const Tensor& x) { return m->with_forward_hooks(Tensor(m->forward(x))); }, std::move(module));
    return *this;
  }
  // Appends a temporary layer, moved into an owned one (leaf layers move; see nn/module.h).
  template <TensorModule M>
    requires(!std::is_reference_v<M>)
  Sequential& push_back(M&& module) {
    return push_back(std::make_shared<M>(std::move(module)));
  }
  // Appends a module owned elsewhere (a member of the caller): it must outlive this one.
  template <TensorModule M>
  Sequential& push_back(M& module) {
    M* m = &module;
    append(m, [m](const Tensor& x) { return m->with_forward_hooks(Tensor(m->forward(x))); }, nullptr);
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
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }

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
