#pragma once
// ModuleList: PyTorch's nn.ModuleList, a list of sub-modules that registers
// each one as a child named by its position ("0", "1", ...), so state_dict
// keys ("h.0.attn.c_attn.weight"), to(), parameters(), train()/eval() and
// printing reach them through the Module registry. It has no forward: the
// owner calls its modules as it likes.
//
//   hg::nn::ModuleList blocks;
//   for (int i = 0; i < 4; ++i) blocks.push_back(std::make_shared<Block>(config));  // or .append(...)
//   for (hg::nn::Module& m : blocks) ...;          // iteration, in order
//   x = blocks.at<Block>(2).forward(x);            // the module as its own type
//   blocks[0]                                      // a Module&
#include <concepts>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <halfgrad/nn/module.h>

namespace halfgrad::nn {

class ModuleList : public Module {
 public:
  ModuleList() = default;
  // ModuleList(std::make_shared<Linear>(2, 3), std::make_shared<ReLU>()), as nn.ModuleList([...]).
  template <typename... M>
    requires(sizeof...(M) > 0 && (std::derived_from<M, Module> && ...))
  explicit ModuleList(std::shared_ptr<M>... modules) {
    (push_back(std::move(modules)), ...);
  }

  // Appends an owned module (a shared_ptr: shared, not copied).
  template <typename M>
    requires std::derived_from<M, Module>
  ModuleList& push_back(std::shared_ptr<M> module) {
    HG_CHECK(module != nullptr, "ModuleList::push_back: null module at position {}", size());
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module.get());
    owned_.push_back(std::move(module));
    return *this;
  }
  // Appends a temporary layer, moved into an owned one (leaf layers move; see nn/module.h).
  template <typename M>
    requires std::derived_from<M, Module> && (!std::is_reference_v<M>)
  ModuleList& push_back(M&& module) {
    return push_back(std::make_shared<M>(std::move(module)));
  }
  // Appends a module owned elsewhere (a member of the caller): it must outlive this list.
  template <typename M>
    requires std::derived_from<M, Module>
  ModuleList& push_back(M& module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(&module);
    owned_.push_back(nullptr);
    return *this;
  }
  // PyTorch's name for push_back.
  template <typename A>
  ModuleList& append(A&& module) {
    return push_back(std::forward<A>(module));
  }
  // Constructs an owned M in place and returns it.
  template <typename M, typename... Args>
    requires std::derived_from<M, Module>
  M& emplace_back(Args&&... args) {
    auto m = std::make_shared<M>(std::forward<Args>(args)...);
    M& ref = *m;
    push_back(std::move(m));
    return ref;
  }
  // Appends the modules of `other` (shared with it: each is then a child of both), as nn.ModuleList.extend.
  ModuleList& extend(const ModuleList& other);

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // The i-th module; negative i counts from the end, as in Python. Out of range: an Error.
  Module& operator[](int64_t i) const;
  // The i-th module as an M, or an Error naming what it is.
  template <typename M>
  M& at(int64_t i) const {
    auto* m = dynamic_cast<M*>(&(*this)[i]);
    HG_CHECK(m != nullptr, "ModuleList::at: module {} is a {}, not the type asked for", i, (*this)[i].type_name());
    return *m;
  }

  // Iteration over the modules in order, as Module&.
  class iterator {
   public:
    using value_type = Module;
    using difference_type = std::ptrdiff_t;
    using reference = Module&;
    explicit iterator(std::vector<Module*>::const_iterator it) : it_(it) {}
    Module& operator*() const { return **it_; }
    Module* operator->() const { return *it_; }
    iterator& operator++() {
      ++it_;
      return *this;
    }
    iterator operator++(int) { return iterator(it_++); }
    bool operator==(const iterator&) const = default;

   private:
    std::vector<Module*>::const_iterator it_;
  };
  iterator begin() const { return iterator(modules_.begin()); }
  iterator end() const { return iterator(modules_.end()); }

 private:
  std::vector<Module*> modules_;
  std::vector<std::shared_ptr<Module>> owned_;  // per module: its owner handle, null for one held by reference
};

}  // namespace halfgrad::nn
