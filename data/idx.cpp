// read_idx and fashion_mnist (data/idx.h). zlib's gz* functions read both
// gzip and plain files (a file without the gzip magic is passed through), so
// one reader serves both. Sizes are checked before anything is allocated: a
// plain file's data must fill it exactly; a gzip stream's announced size must
// be one its compressed length can produce (deflate expands at most ~1032:1),
// and its data is read in chunks as it arrives, so a lying header meets the
// end of the stream long before memory runs out.
#include <halfgrad/data/idx.h>

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>

#include <halfgrad/core/file_input.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::data {

namespace {
namespace fs = std::filesystem;

constexpr int kMaxDims = 8;
constexpr uint64_t kMaxDeflateRatio = 1032;  // deflate's worst case expansion on decompression
constexpr unsigned kChunk = 1u << 20;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

const char* type_name(unsigned t) {
  switch (t) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
  }
}

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    // Regular files only, checked on the open descriptor before any read (a
    // FIFO would block); zlib then reads from that descriptor.
    const int fd = open_regular_file(path, "read_idx", &file_size_);
    errno = 0;
    file_.reset(gzdopen(fd, "rb"));
    if (file_ == nullptr) {
      const int e = errno;
      ::close(fd);
      fail("read_idx: {}: cannot open it: {}", path, e ? std::strerror(e) : "zlib error");
    }
    gzbuffer(file_.get(), 1u << 16);
  }
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  bool compressed() { return gzdirect(file_.get()) == 0; }
  uint64_t consumed() const { return consumed_; }

  // Up to n bytes; fewer only at the end of the stream. A corrupt stream is an Error.
  size_t read_some(void* dst, unsigned n) {
    const int got = gzread(file_.get(), dst, n);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(file_.get(), &code);
      fail("read_idx: {}: the gzip stream is corrupt or cut short after {} bytes of data ({}); re-download the file",
           path_, consumed_, msg ? msg : "zlib error");
    }
    consumed_ += static_cast<uint64_t>(got);
    if (static_cast<unsigned>(got) < n) {
      // A short read: the end of the data, or (zlib's Z_BUF_ERROR, which
      // gzread itself does not report as a failure) the input ended inside
      // the gzip stream, its trailer included.
      int code = Z_OK;
      gzerror(file_.get(), &code);
      HG_CHECK(code != Z_BUF_ERROR,
               "read_idx: {}: the gzip stream is cut short after {} bytes of data (unexpected end of file); the file "
               "is truncated: re-download it",
               path_, consumed_);
    }
    return static_cast<size_t>(got);
  }
  // Exactly n bytes, or an Error saying what was being read.
  void read_exact(void* dst, unsigned n, const char* what) {
    auto* p = static_cast<unsigned char*>(dst);
    size_t have = 0;
    while (have < n) {
      const size_t got = read_some(p + have, n - static_cast<unsigned>(have));
      HG_CHECK(got > 0, "read_idx: {}: truncated: the file ends after {} bytes, inside {}", path_, consumed_, what);
      have += got;
    }
  }

 private:
  std::string path_;
  uint64_t file_size_ = 0;
  uint64_t consumed_ = 0;
  std::unique_ptr<gzFile_s, GzCloser> file_;
};

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

template <typename T>
Tensor convert(const std::vector<unsigned char>& bytes, const Shape& shape, DType dtype) {
  Tensor t = make_tensor(shape, TensorOptions(dtype));
  T* out = t.data<T>();
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<T>(bytes[i]);
  return t;
}
}  // namespace

Tensor read_idx(const std::string& path, DType dtype, uint64_t max_bytes) {
  HG_CHECK(dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Int64,
           "read_idx: dtype {} is not supported; ask for float32, float64 or int64", dtype_name(dtype));
  Reader r(path);
  unsigned char magic[4];
  r.read_exact(magic, 4, "the 4-byte magic number");
  HG_CHECK(magic[0] == 0 && magic[1] == 0,
           "read_idx: {}: bad magic number {:02x} {:02x} {:02x} {:02x}: an IDX file starts 00 00 <type> <ndims>; "
           "this is not an IDX file",
           path, magic[0], magic[1], magic[2], magic[3]);
  HG_CHECK(magic[2] == 0x08,
           "read_idx: {}: element type 0x{:02x} ({}) is not supported; only unsigned bytes (0x08), the type of "
           "(Fashion-)MNIST, are",
           path, magic[2], type_name(magic[2]));
  const int ndims = magic[3];
  HG_CHECK(ndims >= 1 && ndims <= kMaxDims, "read_idx: {}: the header announces {} dimensions; expected 1 to {}",
           path, ndims, kMaxDims);
  unsigned char dim_bytes[4 * kMaxDims];
  r.read_exact(dim_bytes, 4u * static_cast<unsigned>(ndims), "the dimension sizes");
  Shape shape;
  uint64_t total = 1;  // elements (= bytes)
  // Every size is below 2^32, so the product of each step stays below 2^95 ...
  // checked against 2^62 before each multiplication instead.
  for (int d = 0; d < ndims; ++d) {
    const uint64_t n = big_endian(dim_bytes + 4 * d);
    HG_CHECK(n == 0 || total <= (uint64_t{1} << 62) / n,
             "read_idx: {}: the dimension sizes overflow (dimension {} is {}, the product so far {})", path, d, n,
             total);
    total *= n;
    shape.push_back(static_cast<int64_t>(n));
  }
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(ndims);
  const bool gz = r.compressed();
  if (!gz) {
    HG_CHECK(r.file_size() - header == total,
             "read_idx: {}: the header's sizes {} ask for {} bytes of data, but the file holds {} after its {}-byte "
             "header ({})",
             path, shape_str(shape), total, r.file_size() - header, header,
             r.file_size() - header < total ? "truncated" : "trailing bytes");
  } else {
    HG_CHECK(total <= r.file_size() * kMaxDeflateRatio,
             "read_idx: {}: the header's sizes {} ask for {} bytes, more than a gzip file of {} bytes can hold "
             "(deflate expands at most {}:1); the header is corrupt",
             path, shape_str(shape), total, r.file_size(), kMaxDeflateRatio);
  }
  HG_CHECK(total <= max_bytes,
           "read_idx: {}: the header's sizes {} ask for {} bytes of data, above the limit of {} bytes (max_bytes); "
           "pass a larger max_bytes to read_idx if this file is meant to be that large",
           path, shape_str(shape), total, max_bytes);
  std::vector<unsigned char> bytes;
  if (!gz) bytes.reserve(total);  // known to be there
  while (bytes.size() < total) {
    const size_t have = bytes.size();
    const auto want = static_cast<unsigned>(std::min<uint64_t>(total - have, kChunk));
    bytes.resize(have + want);  // grows with what arrives, never to a size the stream has not backed
    const size_t got = r.read_some(bytes.data() + have, want);
    bytes.resize(have + got);
    HG_CHECK(got > 0, "read_idx: {}: truncated: {} of the {} data bytes the header's sizes {} ask for", path, have,
             total, shape_str(shape));
  }
  unsigned char extra;
  HG_CHECK(r.read_some(&extra, 1) == 0,
           "read_idx: {}: the data goes on after the {} bytes the header's sizes {} ask for; the file is not one "
           "IDX array",
           path, total, shape_str(shape));
  switch (dtype) {
    case DType::Float64: return convert<double>(bytes, shape, dtype);
    case DType::Int64: return convert<int64_t>(bytes, shape, dtype);
    default: return convert<float>(bytes, shape, dtype);
  }
}

namespace {
std::string find_file(const std::string& root, const std::string& name) {
  const fs::path base(root);
  std::error_code ec;
  for (const std::string& candidate : {name + ".gz", name})
    if (fs::is_regular_file(base / candidate, ec)) return (base / candidate).string();
  fail("fashion_mnist: {} not found (nor {}); install the Debian package dataset-fashion-mnist (apt-get install "
       "dataset-fashion-mnist) or pass --data-dir to a folder with the IDX files",
       (base / (name + ".gz")).string(), (base / name).string());
}
}  // namespace

TensorDataset fashion_mnist(const std::string& root, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string image_path = find_file(root, prefix + "-images-idx3-ubyte");
  const std::string label_path = find_file(root, prefix + "-labels-idx1-ubyte");
  Tensor images = read_idx(image_path, DType::Float32);
  HG_CHECK(images.dim() == 3 && images.size(1) == 28 && images.size(2) == 28,
           "fashion_mnist: {} holds an array of shape {}; Fashion-MNIST images are [N, 28, 28]", image_path,
           shape_str(images.shape()));
  Tensor labels = read_idx(label_path, DType::Int64);
  HG_CHECK(labels.dim() == 1, "fashion_mnist: {} holds an array of shape {}; labels are 1-d [N]", label_path,
           shape_str(labels.shape()));
  HG_CHECK(labels.size(0) == images.size(0),
           "fashion_mnist: {} holds {} labels but {} holds {} images; the files do not belong together", label_path,
           labels.size(0), image_path, images.size(0));
  const int64_t* l = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    HG_CHECK(l[i] >= 0 && l[i] < 10, "fashion_mnist: {}: label {} of sample {} is out of range 0 .. 9", label_path,
             l[i], i);
  images.div_(255.0);
  return TensorDataset(images.view({images.size(0), 1, 28, 28}), labels);
}

}  // namespace halfgrad::data
