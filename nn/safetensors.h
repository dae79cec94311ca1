#pragma once
// Tensors to and from safetensors files (Hugging Face's format, which
// PyTorch's `safetensors.torch.save_file` / `load_file` read and write), a
// module's state_dict through them (nn::save / nn::load), and PyTorch's
// torch.save / torch.load habit on top (hg::save / hg::load). Hostile files are
// an Error naming the file and the problem, never an out-of-bounds read or an
// unbounded allocation (the rules: nn/safetensors_format.h). Files are
// written atomically (core/atomic_file.h).
#include <concepts>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <halfgrad/core/tensor.h>
#include <halfgrad/nn/module.h>

namespace halfgrad::nn {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file (data) order, on the CPU
  std::map<std::string, std::string> metadata;          // "__metadata__"
  // The tensor named `name`, or an Error listing the names there are.
  const Tensor& at(const std::string& name) const;
  const Tensor* find(const std::string& name) const;
};

// Writes the tensors in the given order (data offsets follow it), each copied
// to the host and made contiguous; names must be unique and not
// "__metadata__". Undefined tensors are an Error. Gradients are not saved.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
SafetensorsFile load_safetensors(const std::string& path);

// The module's state_dict() (PyTorch's key names: "linear1.weight", ...).
void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata = {});
// Loads a file written by save (or by PyTorch from model.state_dict()) into
// the module through load_state_dict: values are copied into the module's own
// tensors, on their device, converted to their dtype as PyTorch's
// load_state_dict (copy_) does; a shape mismatch is an Error. strict: a key
// missing from the file or unknown to the module is an Error; otherwise they
// are returned. Nothing is copied when there is an Error.
LoadResult load(Module& module, const std::string& path, bool strict = true);

}  // namespace halfgrad::nn

namespace halfgrad {

// PyTorch's torch.save(obj, path) / torch.load(path) (LibTorch's torch::save /
// torch::load), as safetensors files that say what they hold in __metadata__
// ("halfgrad.kind"). Tensors are saved without their gradients and loaded on
// the CPU (torch.load's map_location="cpu"; `.to(device)` after), in their
// dtypes, bit for bit. Writes are atomic (the old file stays whole when a save
// fails). A load reads the file as hostile: a truncated or malformed file, or
// one that holds another kind of object than asked for, is an Error naming
// the file, what it holds and what was asked. The optimizer's overloads are in
// optim/checkpoint.h.
void save(const Tensor& tensor, const std::string& path);
void save(const std::vector<Tensor>& tensors, const std::string& path);
void save(const std::map<std::string, Tensor>& tensors, const std::string& path);
void save(const nn::StateDict& tensors, const std::string& path);  // torch.save(model.state_dict(), path)
void save(const nn::Module& module, const std::string& path);      // its state_dict (LibTorch: torch::save(model, path))

namespace detail {
// What hg::save writes into __metadata__ for a `kind` of object ("tensor",
// "tensor_list", "tensor_dict", "module", "optimizer").
std::map<std::string, std::string> kind_metadata(const char* kind);
// The file at `path`, which must hold one of `kinds` ("": a plain safetensors
// file, without a kind); an Error naming `call`, the file, what it holds and
// `asked` otherwise, or when it is not a well-formed safetensors file.
nn::SafetensorsFile read_kind(const std::string& path, const char* call, const std::string& asked,
                              std::initializer_list<const char*> kinds);
Tensor load_tensor(const std::string& path);
std::vector<Tensor> load_tensor_list(const std::string& path);
nn::StateDict load_state_dict_file(const std::string& path, const char* call);
}  // namespace detail

// `auto t = hg::load<hg::Tensor>(path);`, `hg::load<std::vector<hg::Tensor>>`,
// `hg::load<std::map<std::string, hg::Tensor>>` or `hg::load<hg::nn::StateDict>`
// (a dict in file order: `model.load_state_dict(hg::load<hg::nn::StateDict>(path))`).
// A dict loads from a saved dict, a saved module or a plain safetensors file.
template <typename T>
  requires std::same_as<T, Tensor> || std::same_as<T, std::vector<Tensor>> ||
           std::same_as<T, std::map<std::string, Tensor>> || std::same_as<T, nn::StateDict>
T load(const std::string& path) {
  if constexpr (std::same_as<T, Tensor>) {
    return detail::load_tensor(path);
  } else if constexpr (std::same_as<T, std::vector<Tensor>>) {
    return detail::load_tensor_list(path);
  } else if constexpr (std::same_as<T, nn::StateDict>) {
    return detail::load_state_dict_file(path, "hg::load<nn::StateDict>");
  } else {
    std::map<std::string, Tensor> out;
    for (const auto& [name, t] : detail::load_state_dict_file(path, "hg::load<std::map<std::string, Tensor>>"))
      out.emplace(name, t);
    return out;
  }
}

// Into an existing module (LibTorch's torch::load(model, path)): a file of
// hg::save(module) or of a dict, or a plain safetensors state dict, through
// load_state_dict (copied into the module's tensors, on their devices; a
// shape mismatch is an Error and nothing is copied).
nn::LoadResult load(nn::Module& module, const std::string& path, bool strict = true);

}  // namespace halfgrad
