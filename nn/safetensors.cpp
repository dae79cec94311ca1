// safetensors files of Tensors: the header logic is in nn/safetensors_format
// (shared with the fuzzer); here the bytes move between files and tensors. A
// load reads the 8-byte length, then the bounded header, and only after the
// whole header checks out allocates each tensor and reads its bytes straight
// into it (pread), so nothing is allocated from an unchecked size.
#include <halfgrad/nn/safetensors.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include <fmt/ranges.h>

#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/core/atomic_file.h>
#include <halfgrad/core/file_input.h>
#include <halfgrad/core/json_input.h>
#include <halfgrad/nn/safetensors_format.h>

namespace halfgrad::nn {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so must the host be");

namespace {

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }
};

void read_at(int fd, void* out, uint64_t size, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    HG_CHECK(n > 0, "safetensors file '{}': reading failed at byte {}: {}", path, offset,
             n < 0 ? std::strerror(errno) : "the file ended early (changed while reading?)");
    p += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

}  // namespace

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  const Tensor* t = find(name);
  if (t == nullptr) {
    std::vector<std::string> names;
    for (const auto& [n, v] : tensors) names.push_back(n);
    fail("SafetensorsFile: no tensor \"{}\"; the file has [{}]", name, fmt::join(names, ", "));
  }
  return *t;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<safetensors::Entry> entries;
  std::vector<Tensor> host;
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    HG_CHECK(t.defined(), "save_safetensors('{}'): the tensor \"{}\" is undefined", path, name);
    host.push_back(t.detach().cpu().contiguous());
    const uint64_t n = static_cast<uint64_t>(host.back().numel()) * itemsize(t.dtype());
    entries.push_back({name, t.dtype(), t.shape(), at, at + n});
    at += n;
  }
  const std::string header = safetensors::serialize_header(entries, metadata);
  atomic_write_file(path, [&](AtomicFile& f) {
    f.write(header);
    for (size_t i = 0; i < host.size(); ++i)
      if (host[i].numel() > 0) f.write(host[i].data_ptr(), entries[i].end - entries[i].begin);
  });
}

SafetensorsFile load_safetensors(const std::string& path) {
  // Regular files only, checked before any read (a FIFO would block forever).
  uint64_t size = 0;
  const Fd fd{open_regular_file(path, "load_safetensors", &size)};

  unsigned char prefix[8] = {};
  if (size >= 8) read_at(fd.fd, prefix, 8, 0, path);
  const uint64_t n = safetensors::header_length(prefix, size, path);  // bounded by the cap and the size
  std::string text(n, '\0');
  read_at(fd.fd, text.data(), n, 8, path);
  const safetensors::Header header = safetensors::parse_header(text, size - 8 - n, path);

  SafetensorsFile out;
  out.metadata = header.metadata;
  const uint64_t data_start = 8 + n;
  for (const safetensors::Entry& e : header.entries) {
    Tensor t = make_tensor(e.shape, e.dtype);
    if (e.end > e.begin) read_at(fd.fd, t.data_ptr(), e.end - e.begin, data_start + e.begin, path);
    if (e.dtype == DType::Bool) {
      // A byte other than 0/1 is not a C++ bool: reject rather than compute garbage.
      const auto* b = static_cast<const unsigned char*>(t.data_ptr());
      for (uint64_t i = 0; i < e.end - e.begin; ++i)
        HG_CHECK(b[i] <= 1, "safetensors file '{}': tensor \"{}\" (BOOL) has the byte {} at element {}; a bool is 0 or 1",
                 path, e.name, int{b[i]}, i);
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : module.state_dict()) tensors.emplace_back(name, t);
  save_safetensors(path, tensors, metadata);
}

namespace {
LoadResult load_into(Module& module, SafetensorsFile file, const std::string& path, bool strict, const char* op) {
  StateDict state;
  for (auto& [name, t] : file.tensors) state.insert(name, t);
  try {
    return module.load_state_dict(state, strict);
  } catch (const Error& e) {
    fail("{}('{}'): {}", op, path, e.what());
  }
}
}  // namespace

LoadResult load(Module& module, const std::string& path, bool strict) {
  return load_into(module, load_safetensors(path), path, strict, "nn::load");
}

}  // namespace halfgrad::nn

// hg::save / hg::load: the kinds of object a file can hold, in __metadata__.
namespace halfgrad {

namespace {

constexpr const char* kKindKey = "halfgrad.kind";
constexpr const char* kVersionKey = "halfgrad.version";
constexpr const char* kVersion = "1";
constexpr const char* kTensorName = "tensor";

// What a file holds, in words, for messages.
std::string holds(const nn::SafetensorsFile& f) {
  const size_t n = f.tensors.size();
  const auto kind = f.metadata.find(kKindKey);
  if (kind == f.metadata.end())
    return fmt::format("a plain safetensors file of {} tensor{} (no \"{}\" in its __metadata__)", n, n == 1 ? "" : "s",
                       kKindKey);
  const std::string& k = kind->second;
  if (k == "tensor") return n == 1 ? fmt::format("a tensor ({})", f.tensors[0].second.describe()) : "a tensor";
  if (k == "tensor_list") return fmt::format("a list of {} tensors", n);
  if (k == "tensor_dict") return fmt::format("a dict of {} tensors", n);
  if (k == "module") return fmt::format("a module's state_dict ({} tensors)", n);
  if (k == "optimizer") {
    const auto name = f.metadata.find("optimizer");
    return name == f.metadata.end() ? "an optimizer's state"
                                    : fmt::format("an optimizer's state ({})", json_input::clip(name->second));
  }
  return fmt::format("an object of the unknown kind \"{}\" (written by a newer halfgrad?)", json_input::clip(k));
}

// The first few names of a file's tensors, clipped (a hostile file's message stays short).
std::string names_of(const nn::SafetensorsFile& f) {
  std::string out;
  for (size_t i = 0; i < std::min<size_t>(f.tensors.size(), 4); ++i)
    out += fmt::format("{}\"{}\"", i ? ", " : "", json_input::clip(f.tensors[i].first));
  if (f.tensors.size() > 4) out += fmt::format(", ... ({} in all)", f.tensors.size());
  return "[" + out + "]";
}

// How to load what a file holds.
std::string remedy(const nn::SafetensorsFile& f) {
  const auto kind = f.metadata.find(kKindKey);
  const std::string k = kind == f.metadata.end() ? "" : kind->second;
  if (k == "tensor") return "load it with hg::load<hg::Tensor>(path)";
  if (k == "tensor_list") return "load it with hg::load<std::vector<hg::Tensor>>(path)";
  if (k == "optimizer") return "load it into an optimizer of that kind, built on the same parameters: hg::load(optimizer, path)";
  if (k == "" || k == "tensor_dict" || k == "module")
    return "load it with hg::load(module, path) or hg::load<std::map<std::string, hg::Tensor>>(path)";
  return "save it again with this halfgrad";
}

}  // namespace

namespace detail {

std::map<std::string, std::string> kind_metadata(const char* kind) { return {{kKindKey, kind}, {kVersionKey, kVersion}}; }

nn::SafetensorsFile read_kind(const std::string& path, const char* call, const std::string& asked,
                              std::initializer_list<const char*> kinds) {
  nn::SafetensorsFile f;
  try {
    f = nn::load_safetensors(path);
  } catch (const Error& e) {
    fail("{}('{}'), asked for {}: {}", call, path, asked, e.what());
  }
  const auto version = f.metadata.find(kVersionKey);
  HG_CHECK(version == f.metadata.end() || version->second == kVersion,
           "{}('{}'): the file has {} \"{}\", this halfgrad reads version {}; load it with the halfgrad that wrote it",
           call, path, kVersionKey, json_input::clip(version->second), kVersion);
  const auto kind = f.metadata.find(kKindKey);
  const std::string k = kind == f.metadata.end() ? "" : kind->second;
  const bool ok = std::any_of(kinds.begin(), kinds.end(), [&](const char* want) { return k == want; });
  HG_CHECK(ok, "{}('{}'): the file holds {}, not {}; {}", call, path, holds(f), asked, remedy(f));
  return f;
}

}  // namespace detail

using detail::kind_metadata;
using detail::read_kind;

void save(const Tensor& tensor, const std::string& path) {
  HG_CHECK(tensor.defined(), "hg::save('{}'): the tensor is undefined; there is nothing to save", path);
  nn::save_safetensors(path, {{kTensorName, tensor}}, kind_metadata("tensor"));
}

void save(const std::vector<Tensor>& tensors, const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> named;
  for (size_t i = 0; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].defined(), "hg::save('{}'): tensor {} of the list is undefined; there is nothing to save for it",
             path, i);
    named.emplace_back(std::to_string(i), tensors[i]);
  }
  nn::save_safetensors(path, named, kind_metadata("tensor_list"));
}

void save(const std::map<std::string, Tensor>& tensors, const std::string& path) {
  nn::save_safetensors(path, {tensors.begin(), tensors.end()}, kind_metadata("tensor_dict"));
}

void save(const nn::StateDict& tensors, const std::string& path) {
  nn::save_safetensors(path, {tensors.begin(), tensors.end()}, kind_metadata("tensor_dict"));
}

void save(const nn::Module& module, const std::string& path) { nn::save(module, path, kind_metadata("module")); }

namespace detail {

Tensor load_tensor(const std::string& path) {
  const nn::SafetensorsFile f = read_kind(path, "hg::load<Tensor>", "a tensor", {"tensor"});
  HG_CHECK(f.tensors.size() == 1 && f.tensors[0].first == kTensorName,
           "hg::load<Tensor>('{}'): a tensor file holds one tensor named \"{}\", this one holds {}; it was not "
           "written by hg::save(tensor, path)",
           path, kTensorName, names_of(f));
  return f.tensors[0].second;
}

std::vector<Tensor> load_tensor_list(const std::string& path) {
  const nn::SafetensorsFile f = read_kind(path, "hg::load<std::vector<Tensor>>", "a list of tensors", {"tensor_list"});
  std::vector<Tensor> out;
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    // Names "0", "1", ... in data order, as save writes them.
    HG_CHECK(f.tensors[i].first == std::to_string(i),
             "hg::load<std::vector<Tensor>>('{}'): tensor {} of the list is named \"{}\", expected \"{}\"; it was not "
             "written by hg::save(tensors, path)",
             path, i, json_input::clip(f.tensors[i].first), i);
    out.push_back(f.tensors[i].second);
  }
  return out;
}

nn::StateDict load_state_dict_file(const std::string& path, const char* call) {
  const nn::SafetensorsFile f = read_kind(path, call, "a dict of tensors", {"tensor_dict", "module", ""});
  nn::StateDict out;
  for (const auto& [name, t] : f.tensors) out.insert(name, t);
  return out;
}

}  // namespace detail

nn::LoadResult load(nn::Module& module, const std::string& path, bool strict) {
  nn::SafetensorsFile f =
      read_kind(path, "hg::load", fmt::format("a state_dict for {}", module.type_name()), {"module", "tensor_dict", ""});
  return nn::load_into(module, std::move(f), path, strict, "hg::load");
}

}  // namespace halfgrad
