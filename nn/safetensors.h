#pragma once
// Tensors to and from safetensors files (Hugging Face's format, which
// PyTorch's `safetensors.torch.save_file` / `load_file` read and write), and
// a module's state_dict through them (nn::save / nn::load). Hostile files are
// an Error naming the file and the problem, never an out-of-bounds read or an
// unbounded allocation (the rules: nn/safetensors_format.h). Files are
// written atomically (core/atomic_file.h).
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
