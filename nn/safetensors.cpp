// safetensors files of Tensors: the header logic is in nn/safetensors_format
// (shared with the fuzzer); here the bytes move between files and tensors. A
// load reads the 8-byte length, then the bounded header, and only after the
// whole header checks out allocates each tensor and reads its bytes straight
// into it (pread), so nothing is allocated from an unchecked size.
#include <halfgrad/nn/safetensors.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include <fmt/ranges.h>

#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/core/atomic_file.h>
#include <halfgrad/core/file_input.h>
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

LoadResult load(Module& module, const std::string& path, bool strict) {
  SafetensorsFile file = load_safetensors(path);
  StateDict state;
  for (auto& [name, t] : file.tensors) state.insert(name, t);
  try {
    return module.load_state_dict(state, strict);
  } catch (const Error& e) {
    fail("nn::load('{}'): {}", path, e.what());
  }
}

}  // namespace halfgrad::nn
