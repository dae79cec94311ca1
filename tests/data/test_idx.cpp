// The IDX reader and Fashion-MNIST: round trips of files written here (plain
// and gzip), every kind of broken file (each a clear Error naming the file),
// and the real data set from Debian's dataset-fashion-mnist (sizes, the label
// histogram, and the mean/std constants recomputed from the pixels).
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <filesystem>
#include <fstream>

#include <halfgrad/data/data.h>

#include "fuzz/mutate.h"
#include "temp_dir.h"
#include "test_util.h"

namespace hg = halfgrad;
namespace fs = std::filesystem;
using hg::Tensor;

namespace {

using Bytes = std::vector<unsigned char>;

// A fresh folder under the system temp dir, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/halfgrad-idx-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
}

// An IDX header for `dims` with element type `type`, then `data`.
Bytes idx(const std::vector<uint32_t>& dims, const Bytes& data, unsigned char type = 0x08) {
  Bytes b{0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims) put_be32(b, d);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Bytes gzip(const Bytes& raw) {
  uLongf cap = compressBound(static_cast<uLong>(raw.size())) + 64;
  Bytes out(cap);
  z_stream s{};
  REQUIRE(deflateInit2(&s, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);  // +16: a gzip wrapper
  s.next_in = const_cast<unsigned char*>(raw.data());
  s.avail_in = static_cast<uInt>(raw.size());
  s.next_out = out.data();
  s.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&s, Z_FINISH) == Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

void write(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(f.good());
}

Bytes pattern(size_t n) {  // never all zeros
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((i * 37 + 11) % 256);
  return b;
}

// A small Fashion-MNIST lookalike in `dir`: n images of 28x28 and n labels.
void fake_fashion(const TempDir& dir, const std::string& prefix, uint32_t n_images, const Bytes& labels, bool gz) {
  const Bytes im = idx({n_images, 28, 28}, pattern(size_t{n_images} * 784));
  const Bytes lb = idx({static_cast<uint32_t>(labels.size())}, labels, 0x08);
  const std::string ext = gz ? ".gz" : "";
  write(dir.file(prefix + "-images-idx3-ubyte" + ext), gz ? gzip(im) : im);
  write(dir.file(prefix + "-labels-idx1-ubyte" + ext), gz ? gzip(lb) : lb);
}

std::string real_root() {
  const std::string root = hg::data::kFashionMnistRoot;
  if (!fs::exists(root + "/train-images-idx3-ubyte.gz") && !fs::exists(root + "/train-images-idx3-ubyte"))
    FAIL("Fashion-MNIST is not installed at " << root
                                              << ": install the Debian package dataset-fashion-mnist "
                                                 "(apt-get install dataset-fashion-mnist; scripts/setup does)");
  return root;
}

}  // namespace

TEST_CASE("read_idx: plain and gzip files, shapes and values", "[data][idx]") {
  TempDir dir;
  const Bytes data = pattern(2 * 3 * 4);
  write(dir.file("a.idx"), idx({2, 3, 4}, data));
  write(dir.file("a.idx.gz"), gzip(idx({2, 3, 4}, data)));
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    INFO(name);
    for (hg::DType dt : {hg::DType::Float32, hg::DType::Float64, hg::DType::Int64}) {
      const Tensor t = hg::data::read_idx(dir.file(name), dt);
      CHECK(t.dtype() == dt);
      CHECK(t.shape() == hg::Shape{2, 3, 4});
      const auto v = hgtest::values(t);
      for (size_t i = 0; i < data.size(); ++i) CHECK(v[i] == static_cast<double>(data[i]));
    }
  }
  // 1-d (labels), a dimension of 0 (no data), and a large gzip'd file read in several chunks.
  write(dir.file("l.idx"), idx({5}, Bytes{9, 0, 3, 255, 7}));
  CHECK(hg::data::read_idx(dir.file("l.idx"), hg::DType::Int64).to_vector<int64_t>() ==
        std::vector<int64_t>{9, 0, 3, 255, 7});
  write(dir.file("z.idx"), idx({0, 28}, {}));
  CHECK(hg::data::read_idx(dir.file("z.idx")).shape() == hg::Shape{0, 28});
  const Bytes big = pattern(3u << 20);
  write(dir.file("big.gz"), gzip(idx({3, 1024, 1024}, big)));
  const Tensor b = hg::data::read_idx(dir.file("big.gz"));
  CHECK(b.shape() == hg::Shape{3, 1024, 1024});
  CHECK(b.select(0, 2).select(0, 1023).select(0, 1023).item<float>() == static_cast<float>(big.back()));
  CHECK(b.sum().item<double>() == std::accumulate(big.begin(), big.end(), 0.0));
}

TEST_CASE("read_idx: broken files are clear errors naming the file", "[data][idx][errors]") {
  TempDir dir;
  const Bytes good = idx({4, 5}, pattern(20));
  auto put = [&](const std::string& name, const Bytes& b) {
    write(dir.file(name), b);
    return dir.file(name);
  };
  const std::string missing = dir.file("missing.idx");
  const std::string bad_magic = put("magic.idx", [&] { Bytes b = good; b[0] = 0x50; b[1] = 0x4b; return b; }());
  const std::string float_type = put("float.idx", idx({4}, pattern(16), 0x0D));
  const std::string no_dims = put("nodims.idx", Bytes{0, 0, 8, 0});
  const std::string short_header = put("short.idx", Bytes{0, 0, 8});
  const std::string short_dims = put("shortdims.idx", Bytes{0, 0, 8, 3, 0, 0, 0, 4, 0});
  const std::string truncated = put("trunc.idx", Bytes(good.begin(), good.end() - 3));
  const std::string trailing = put("trail.idx", [&] { Bytes b = good; b.push_back(1); return b; }());
  const std::string overflow = put("overflow.idx", idx({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, pattern(8)));
  const std::string wrong_dims = put("dims.idx", idx({40000, 28, 28}, pattern(784)));
  const Bytes gz = gzip(idx({64, 64}, pattern(4096)));
  const std::string gz_half = put("half.gz", Bytes(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)));
  const std::string gz_no_trailer = put("notrailer.gz", Bytes(gz.begin(), gz.end() - 4));
  const std::string gz_bad_crc = put("crc.gz", [&] { Bytes b = gz; b[b.size() - 6] ^= 0x5a; return b; }());
  const std::string gz_huge = put("huge.gz", gzip(idx({60000, 60000, 60000}, pattern(100))));
  const std::string gz_short = put("short.gz", gzip(idx({10, 100}, pattern(500))));
  const std::string gz_trailing = put("trail.gz", gzip([&] { Bytes b = good; b.push_back(7); return b; }()));
  using hgtest::ErrorCase;
  auto reads = [](std::string p) { return [p] { hg::data::read_idx(p); }; };
  hgtest::expect_errors({
      {"missing file", reads(missing), {"missing.idx", "no such file"}},
      {"bad magic", reads(bad_magic), {"magic.idx", "bad magic number 50 4b", "not an IDX file"}},
      {"float elements", reads(float_type), {"float.idx", "element type 0x0d (float32) is not supported"}},
      {"0 dimensions", reads(no_dims), {"nodims.idx", "0 dimensions"}},
      {"short magic", reads(short_header), {"short.idx", "truncated", "magic"}},
      {"short dimensions", reads(short_dims), {"shortdims.idx", "truncated", "dimension sizes"}},
      {"truncated data", reads(truncated), {"trunc.idx", "ask for 20 bytes", "holds 17", "truncated"}},
      {"trailing bytes", reads(trailing), {"trail.idx", "holds 21", "trailing bytes"}},
      {"dims overflow", reads(overflow), {"overflow.idx", "overflow"}},
      {"dims do not match the file", reads(wrong_dims), {"dims.idx", "[40000, 28, 28]", "31360000 bytes"}},
      {"gzip cut in half", reads(gz_half), {"half.gz"}},
      {"gzip without its trailer", reads(gz_no_trailer), {"notrailer.gz", "cut short"}},
      {"gzip with a bad CRC", reads(gz_bad_crc), {"crc.gz", "corrupt"}},
      {"gzip claiming more than it can hold", reads(gz_huge), {"huge.gz", "more than a gzip file of", "corrupt"}},
      {"gzip with too little data", reads(gz_short), {"short.gz", "truncated: 500 of the 1000 data bytes"}},
      {"gzip with trailing data", reads(gz_trailing), {"trail.gz", "goes on after the 20 bytes"}},
      {"unsupported dtype", [=] { hg::data::read_idx(dir.file("l.idx"), hg::DType::Float16); }, {"float16"}},
  });
}

TEST_CASE("fashion_mnist on files written here: shapes, scaling, broken sets", "[data][idx][fashion]") {
  for (bool gz : {true, false}) {
    INFO("gzip " << gz);
    TempDir dir;
    fake_fashion(dir, "t10k", 3, Bytes{9, 0, 4}, gz);
    const auto ds = hg::data::fashion_mnist(dir.path.string(), /*train=*/false);
    CHECK(ds.size() == 3);
    CHECK(ds.inputs().shape() == hg::Shape{3, 1, 28, 28});
    CHECK(ds.inputs().dtype() == hg::DType::Float32);
    CHECK(ds.targets().dtype() == hg::DType::Int64);
    CHECK(ds.targets().to_vector<int64_t>() == std::vector<int64_t>{9, 0, 4});
    const Bytes px = pattern(3 * 784);
    const auto v = hgtest::values(ds.inputs());
    for (size_t i = 0; i < px.size(); i += 97) CHECK(v[i] == static_cast<double>(static_cast<float>(px[i]) / 255.0f));
  }
  TempDir range, count, shape, empty;
  fake_fashion(range, "train", 3, Bytes{1, 10, 2}, true);
  fake_fashion(count, "train", 3, Bytes{1, 2}, true);
  write(shape.file("train-images-idx3-ubyte"), idx({2, 28, 27}, pattern(2 * 28 * 27)));
  write(shape.file("train-labels-idx1-ubyte"), idx({2}, Bytes{1, 2}));
  const std::string r = range.path.string(), c = count.path.string(), s = shape.path.string(), e = empty.path.string();
  hgtest::expect_errors({
      {"label out of range", [=] { hg::data::fashion_mnist(r); }, {"train-labels-idx1-ubyte.gz", "label 10 of sample 1"}},
      {"count mismatch", [=] { hg::data::fashion_mnist(c); }, {"holds 2 labels", "holds 3 images"}},
      {"not 28x28", [=] { hg::data::fashion_mnist(s); }, {"train-images-idx3-ubyte", "[2, 28, 27]"}},
      {"missing files", [=] { hg::data::fashion_mnist(e); },
       {"train-images-idx3-ubyte.gz not found", "apt-get install dataset-fashion-mnist", "--data-dir"}},
  });
}

TEST_CASE("Fashion-MNIST from the Debian package: sizes, labels, mean and std", "[data][idx][fashion][real]") {
  const std::string root = real_root();
  const auto train = hg::data::fashion_mnist(root, true);
  const auto test = hg::data::fashion_mnist(root, false);
  CHECK(train.inputs().shape() == hg::Shape{60000, 1, 28, 28});
  CHECK(test.inputs().shape() == hg::Shape{10000, 1, 28, 28});
  CHECK(train.targets().shape() == hg::Shape{60000});
  CHECK(test.targets().shape() == hg::Shape{10000});
  for (const auto* ds : {&train, &test}) {
    std::vector<int64_t> histogram(10, 0);
    for (int64_t l : ds->targets().to_vector<int64_t>()) ++histogram.at(static_cast<size_t>(l));
    CHECK(histogram == std::vector<int64_t>(10, ds->size() / 10));  // 6000 / 1000 per class
    CHECK(ds->inputs().amin().item<double>() == 0.0);
    CHECK(ds->inputs().amax().item<double>() == 1.0);
  }
  // The constants, recomputed in float64 over all 47M training pixels.
  const auto px = hgtest::values(train.inputs());
  double sum = 0, sq = 0;
  for (double p : px) sum += p;
  const double mean = sum / static_cast<double>(px.size());
  for (double p : px) sq += (p - mean) * (p - mean);
  const double std = std::sqrt(sq / static_cast<double>(px.size()));
  CHECK(std::abs(mean - hg::data::kFashionMnistMean) < 5e-5);
  CHECK(std::abs(std - hg::data::kFashionMnistStd) < 5e-5);
  // Normalised with them, the training pixels have mean ~0 and std ~1.
  const Tensor z = hg::data::Normalize({hg::data::kFashionMnistMean}, {hg::data::kFashionMnistStd})(
      train.inputs().narrow(0, 0, 6000));
  CHECK(std::abs(z.to(hg::DType::Float64).mean().item<double>()) < 0.02);
  // The first training label is 9 (Ankle boot), as in every Fashion-MNIST reader.
  CHECK(train.targets()[0].item<int64_t>() == 9);
  CHECK(std::string(hg::data::kFashionMnistClasses[9]) == "Ankle boot");
}

TEST_CASE("read_idx: randomly damaged files give a tensor or a halfgrad::Error, nothing else", "[data][idx][errors]") {
  // Flipped bytes, cuts and garbage anywhere (header included), plain and gzip'd;
  // under ASan this is also a memory-safety check of the reader.
  TempDir dir;
  const Bytes plain = idx({6, 7, 5}, pattern(210));
  const Bytes packed = gzip(plain);
  std::mt19937_64 g(77);
  int errors = 0, reads = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Bytes b = trial % 2 ? packed : plain;
    switch (g() % 3) {
      case 0:  // flip 1-3 bytes
        for (int k = 0, n = 1 + static_cast<int>(g() % 3); k < n; ++k) b[g() % b.size()] ^= static_cast<unsigned char>(1 + g() % 255);
        break;
      case 1:  // cut
        b.resize(g() % b.size());
        break;
      default:  // garbage appended or overwritten in the header
        if (g() % 2) b.push_back(static_cast<unsigned char>(g()));
        else b[4 + g() % 12] = static_cast<unsigned char>(g());
    }
    const std::string path = dir.file("damaged" + std::to_string(trial));
    write(path, b);
    try {
      const Tensor t = hg::data::read_idx(path);
      ++reads;
      CHECK(t.numel() <= 1 << 20);
    } catch (const hg::Error& e) {
      ++errors;
      CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains(path));
    }
  }
  // Most damage is caught. Not: a changed data byte of a plain file (nothing
  // checks pixels), a gzip header's mtime/flags bytes, garbage after a gzip
  // member (zlib ignores it) — about a quarter of the trials.
  CHECK(errors > 250);
  CHECK(errors + reads == 400);
}

TEST_CASE("read_idx: a gzip bomb is an Error naming the file and the size, at once", "[data][idx][errors][hostile]") {
  TempDir dir;
  // 1 GiB of zeros that honestly decompresses: 1024 gzip members of 1 MiB each
  // (zlib reads concatenated members as one stream), about 1 MB on disk.
  const uint32_t side = 1024;
  Bytes file = gzip(idx({side, side, side}, Bytes(1 << 20, 0)));
  const Bytes member = gzip(Bytes(1 << 20, 0));
  for (int i = 1; i < 1024; ++i) file.insert(file.end(), member.begin(), member.end());
  const std::string bomb = dir.file("bomb.gz");
  write(bomb, file);
  // Small files against a small limit, plain and gzip'd; the limit is inclusive.
  const std::string plain = dir.file("small.idx"), small_gz = dir.file("small.gz");
  write(plain, idx({4, 5}, pattern(20)));
  write(small_gz, gzip(idx({4, 5}, pattern(20))));
  const auto start = std::chrono::steady_clock::now();
  hgtest::expect_errors({
      {"1 GiB from 1 MB", [&] { ::alarm(60); hg::data::read_idx(bomb); },
       {"bomb.gz", "[1024, 1024, 1024]", "1073741824 bytes of data", "above the limit of 268435456"}},
      {"plain above max_bytes", [&] { hg::data::read_idx(plain, hg::float32, 19); },
       {"small.idx", "20 bytes of data, above the limit of 19"}},
      {"gzip above max_bytes", [&] { hg::data::read_idx(small_gz, hg::float32, 19); },
       {"small.gz", "20 bytes of data, above the limit of 19"}},
  });
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 30);
  CHECK(hg::data::read_idx(small_gz, hg::float32, 20).numel() == 20);
  CHECK(hg::data::read_idx(plain, hg::int64, 20).numel() == 20);
}

TEST_CASE("read_idx: a FIFO or a folder is refused before any read", "[data][idx][errors][hostile]") {
  TempDir dir;
  const std::string fifo = dir.file("pipe.idx");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  hgtest::expect_errors({
      {"FIFO", [&] { ::alarm(30); hg::data::read_idx(fifo); }, {"pipe.idx", "is a FIFO (named pipe), not a regular file"}},
      {"folder", [&] { hg::data::read_idx(dir.path.string()); }, {"is a folder, not a regular file"}},
  });
}

TEST_CASE("read_idx fuzz: mutated plain and gzip files give a tensor or an Error, each within a second",
          "[data][idx][fuzz]") {
  // tests/fuzz/mutate.h: HALFGRAD_FUZZ_SECONDS=N runs N seconds instead of 600 inputs.
  TempDir dir;
  const Bytes plain = idx({3, 5, 7}, pattern(105));
  const Bytes seeds[] = {plain, gzip(plain), idx({40}, pattern(40))};
  const std::string progress = dir.file("progress");
  const auto r = hgtest::run_in_child([&] {
    hgfuzz::Mutator mutate(hgfuzz::seed());
    double slowest = 0;
    const int64_t ran = hgfuzz::loop(600, [&](int64_t i) {
      const Bytes& seed = seeds[i % std::size(seeds)];
      const std::string in = mutate(std::string(seed.begin(), seed.end()));
      const std::string path = dir.file("in");
      hgtest::write_bytes(path, in);
      hgtest::write_bytes(progress, fmt::format("input {} ({} bytes, seed {})", i, in.size(), hgfuzz::seed()));
      const auto t0 = std::chrono::steady_clock::now();
      try {
        const Tensor t = hg::data::read_idx(path, hg::float32, 1 << 20);
        // What it read is what the header says, and nothing beyond what the file holds.
        if (t.numel() > (1 << 20) || (t.numel() > 0 && hgtest::values(t.max())[0] > 255))
          throw std::logic_error(fmt::format("input {}: {} read from a {}-byte file", i, t.describe(), in.size()));
      } catch (const hg::Error& e) {
        if (std::string_view(e.what()).size() > 2000)
          throw std::logic_error(fmt::format("input {}: an Error message of {} bytes", i, std::strlen(e.what())));
      }
      slowest = std::max(slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    });
    if (slowest > 1.0) throw std::logic_error(fmt::format("the slowest of {} inputs took {:.2f} s", ran, slowest));
    hgtest::write_bytes(progress, fmt::format("read_idx fuzz: {} inputs, slowest {:.4f} s", ran, slowest));
  });
  INFO(r.describe() << " at " << hgtest::read_bytes(progress));
  CHECK(r.returned);
  fmt::print("{}\n", hgtest::read_bytes(progress));  // how many ran (the child's output is discarded)
}
