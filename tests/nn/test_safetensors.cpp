// safetensors files: round trips of every dtype and layout, the bytes of the
// layout itself, a file PyTorch wrote (tests/nn/data, made by
// tests/nn/safetensors_interop.py), PyTorch reading ours, modules through
// nn::save / nn::load, and every kind of broken file as an Error naming it.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include <halfgrad.h>

#include "temp_dir.h"
#include "test_util.h"
#include "tutorial_mlp.h"

namespace hg = halfgrad;
using hgtest::ErrorCase;
using hgtest::TempDir;

namespace {

using Named = std::vector<std::pair<std::string, hg::Tensor>>;

// The tensors of safetensors_interop.py's formula(): each value computed in
// float64 and rounded once, or exact in its dtype.
Named formula() {
  std::vector<double> f32, f64, f16, bf16, i64;
  for (int i = 0; i < 6; ++i) f32.push_back(static_cast<double>(i) * 0.1 - 0.25);
  for (int i = 0; i < 5; ++i) f64.push_back(static_cast<double>(i) / 3.0 - 1.0);
  for (int i = 0; i < 8; ++i) f16.push_back((i - 3) * 0.375);
  for (int i = 0; i < 3; ++i) bf16.push_back((i - 1) * 0.5 + 2);
  for (int64_t i = 0; i < 4; ++i) i64.push_back(static_cast<double>(i * i * 1000000007 - 3));
  std::vector<double> b;
  for (int i = 0; i < 7; ++i) b.push_back(i % 3 == 0 ? 1.0 : 0.0);
  return {{"f32", hgtest::make(f32, {2, 3}, hg::float32)},   {"f64", hgtest::make(f64, {5}, hg::float64)},
          {"f16", hgtest::make(f16, {2, 2, 2}, hg::float16)}, {"bf16", hgtest::make(bf16, {3, 1}, hg::bfloat16)},
          {"i64", hgtest::make(i64, {4}, hg::int64)},         {"bool", hgtest::make(b, {7}, hg::boolean)},
          {"scalar", hgtest::make({2.5}, {}, hg::float64)},   {"empty", hg::zeros({0, 3})}};
}

void check_formula(const hg::nn::SafetensorsFile& f) {
  const Named want = formula();
  REQUIRE(f.tensors.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    const hg::Tensor& got = f.at(name);
    CHECK(got.device().is_cpu());
    CHECK(hgtest::same_bits(got, t));
  }
}

// A file from raw parts: the header text, its declared length (default: the
// text's), and the data bytes.
std::string raw_file(const std::string& header, const std::string& data = "", int64_t declared = -1) {
  const uint64_t n = declared < 0 ? header.size() : static_cast<uint64_t>(declared);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

}  // namespace

TEST_CASE("safetensors: every dtype, 0-d and empty, round trips bit for bit in order", "[nn][safetensors]") {
  TempDir dir;
  Named tensors = formula();
  // Values that are not exact in a short mantissa, from a non-trivial draw.
  tensors.emplace_back("random", hgtest::uniform({3, 4}, hg::float32));
  hg::nn::save_safetensors(dir / "t.safetensors", tensors, {{"writer", "halfgrad"}, {"note", "ünïcode"}});
  const auto f = hg::nn::load_safetensors(dir / "t.safetensors");
  REQUIRE(f.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    CHECK(f.tensors[i].first == tensors[i].first);  // the order saved
    CHECK(hgtest::same_bits(f.tensors[i].second, tensors[i].second));
  }
  CHECK(f.metadata == std::map<std::string, std::string>{{"writer", "halfgrad"}, {"note", "ünïcode"}});
  CHECK_THROWS_WITH(f.at("nope"), Catch::Contains("no tensor \"nope\""));
}

TEST_CASE("safetensors: non-contiguous tensors are saved in logical order", "[nn][safetensors]") {
  TempDir dir;
  for (hg::DType dt : hgtest::kFloatDTypes) {
    INFO(hg::dtype_name(dt));
    const hg::Tensor base = hgtest::uniform({4, 5}, dt);
    const hg::Tensor permuted = base.permute({1, 0}), narrowed = base.narrow(1, 1, 3);
    REQUIRE(!permuted.is_contiguous());
    REQUIRE(!narrowed.is_contiguous());
    hg::nn::save_safetensors(dir / "v.safetensors", {{"p", permuted}, {"n", narrowed}});
    const auto f = hg::nn::load_safetensors(dir / "v.safetensors");
    CHECK(f.at("p").shape() == hg::Shape{5, 4});
    CHECK(hgtest::values(f.at("p")) == hgtest::values(permuted));
    CHECK(hgtest::values(f.at("n")) == hgtest::values(narrowed));
  }
}

TEST_CASE("safetensors: the bytes are the format's (header padded to 8, little-endian data)", "[nn][safetensors]") {
  TempDir dir;
  hg::nn::save_safetensors(dir / "b.safetensors", {{"a", hg::tensor({1.0f, -2.0f})}, {"b", hg::tensor(std::vector<int64_t>{7})}});
  const std::string bytes = hgtest::read_bytes(dir / "b.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  const std::string header = bytes.substr(8, n);
  CHECK(header.rfind(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[1],)"
                     R"("data_offsets":[8,16]}})",
                     0) == 0);
  CHECK(header.find_first_not_of(' ', header.find_last_of('}') + 1) == std::string::npos);
  REQUIRE(bytes.size() == 8 + n + 16);
  float a[2];
  int64_t b;
  std::memcpy(a, bytes.data() + 8 + n, 8);
  std::memcpy(&b, bytes.data() + 8 + n + 8, 8);
  CHECK(a[0] == 1.0f);
  CHECK(a[1] == -2.0f);
  CHECK(b == 7);
}

TEST_CASE("safetensors: a file PyTorch wrote loads with the values of the same formula", "[nn][safetensors]") {
  const auto f = hg::nn::load_safetensors(HALFGRAD_TESTS_DIR "/nn/data/pytorch_written.safetensors");
  check_formula(f);
  CHECK(f.metadata == std::map<std::string, std::string>{{"source", "pytorch"}, {"formula", "v1"}});
  // PyTorch's layout (larger itemsize first) is the file order we return.
  CHECK(f.tensors.front().first == "f64");
  CHECK(f.tensors.back().first == "bool");
}

// Hidden ("[.interop]"): CTest runs it as test_nn:interop, which reports
// itself skipped where /usr/bin/python3 has no torch (scripts/setup --bench
// installs python3-torch), instead of passing without checking anything.
TEST_CASE("safetensors: PyTorch reads what halfgrad writes", "[nn][safetensors][.interop]") {
  REQUIRE(std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0);
  TempDir dir;
  hg::nn::save_safetensors(dir / "ours.safetensors", formula(), {{"writer", "halfgrad"}});
  const std::string cmd = "/usr/bin/python3 " HALFGRAD_TESTS_DIR "/nn/safetensors_interop.py check " + (dir / "ours.safetensors");
  CHECK(std::system(cmd.c_str()) == 0);
}

TEST_CASE("safetensors: save errors", "[nn][safetensors]") {
  TempDir dir;
  const std::string p = dir / "e.safetensors";
  hgtest::expect_errors({
      {"duplicate name", [&] { hg::nn::save_safetensors(p, {{"a", hg::ones({1})}, {"a", hg::ones({1})}}); },
       {"\"a\" is given twice"}},
      {"reserved name", [&] { hg::nn::save_safetensors(p, {{"__metadata__", hg::ones({1})}}); }, {"reserved"}},
      {"undefined tensor", [&] { hg::nn::save_safetensors(p, {{"a", hg::Tensor()}}); }, {"\"a\" is undefined"}},
      {"missing folder", [&] { hg::nn::save_safetensors(dir / "no/such/dir/x.safetensors", {{"a", hg::ones({1})}}); },
       {"cannot create", "no/such/dir"}},
  });
  CHECK(!std::filesystem::exists(p));
}

TEST_CASE("safetensors: hostile files are Errors naming the file and the problem", "[nn][safetensors]") {
  TempDir dir;
  const std::string p = dir / "bad.safetensors";
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  const std::string eight(8, '\x01');
  // (what, file bytes, what the message says)
  const std::vector<std::tuple<const char*, std::string, const char*>> cases = {
      {"shorter than the length", std::string("\x02\x00\x00", 3), "too short for the 8-byte header length"},
      {"length beyond the file", raw_file("{}", "", 64), "truncated"},
      {"absurd length", raw_file("{}", "", int64_t{1} << 40), "above the limit"},
      {"length 0", raw_file("", ""), "too short for a JSON object"},
      {"invalid JSON", raw_file("{\"a\":"), "not valid JSON"},
      {"invalid UTF-8", raw_file("{\"\xff\":{}}"), "not valid JSON"},
      {"NUL padding", raw_file(std::string("{}\0\0\0\0\0\0", 8)), "not valid JSON"},
      {"not an object", raw_file("[1,2]"), "must be a JSON object, got a array"},
      {"entry not an object", raw_file(R"({"a":[1]})"), "tensor \"a\" must be an object"},
      {"missing dtype", raw_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight), "has no \"dtype\" field"},
      {"missing shape", raw_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", eight), "has no \"shape\" field"},
      {"missing offsets", raw_file("{\"a\":{" + f32x2 + "}}", eight), "has no \"data_offsets\" field"},
      {"extra field", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8],"x":1}})", eight),
       "unknown field \"x\""},
      {"unknown dtype", raw_file(R"({"a":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", eight),
       "dtype \"I8\", which halfgrad has no tensor for"},
      {"dtype not a string", raw_file(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", eight),
       "dtype must be a string"},
      {"negative size", raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "must be a non-negative integer"},
      {"fractional size", raw_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight),
       "must be a non-negative integer"},
      {"shape not an array", raw_file(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", eight),
       "shape must be an array"},
      {"overflowing shape",
       raw_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight),
       "more bytes than fit in int64"},
      {"overflow hidden by a zero",
       raw_file(R"({"a":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"),
       "more bytes than fit in int64"},
      {"size above 2^63", raw_file(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})", eight),
       "below 2^63"},
      {"offsets not a pair", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0]}})", eight), "[begin, end]"},
      {"negative offset", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[-8,0]}})", eight),
       "data_offsets[0] must be a non-negative integer"},
      {"end before begin", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[8,0]}})", eight), "end before they begin"},
      {"size != numel * itemsize", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,4]}})", eight),
       "hold 4 bytes, but a F32 of shape [2] has 8"},
      {"range beyond the data", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]}})", "1234"),
       "cover 8 bytes of data but the file holds 4"},
      {"trailing bytes", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]}})", eight + "xx"),
       "cover 8 bytes of data but the file holds 10"},
      {"gap", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 + R"(,"data_offsets":[12,20]}})",
                       eight + eight + "1234"),
       "\"b\" starts at data offset 12, but the previous tensor ends at 8"},
      {"overlap", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 + R"(,"data_offsets":[4,12]}})",
                           eight + "1234"),
       "\"b\" starts at data offset 4"},
      {"not starting at 0", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[4,12]}})", "1234" + eight),
       "starts at data offset 4, but the previous tensor ends at 0"},
      {"duplicate tensor", raw_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]},"a":{)" + f32x2 +
                                    R"(,"data_offsets":[8,16]}})",
                                    eight + eight),
       "the key \"a\" twice"},
      {"duplicate field", raw_file("{\"a\":{" + f32x2 + R"(,"dtype":"F64","data_offsets":[0,8]}})", eight),
       "the key \"dtype\" twice"},
      {"duplicate metadata key", raw_file(R"({"__metadata__":{"k":"1","k":"2"}})"), "the key \"k\" twice"},
      {"metadata value not a string", raw_file(R"({"__metadata__":{"k":1}})"), "__metadata__[\"k\"] must be a string"},
      {"metadata not an object", raw_file(R"({"__metadata__":[1]})"), "__metadata__ must be an object"},
      {"nested too deep", raw_file(R"({"a":{"shape":[[1]]}})"), "nests deeper than 3 levels"},
      {"bool byte 2", raw_file(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2)),
       "has the byte 2 at element 1"},
  };
  for (const auto& [what, bytes, says] : cases) {
    INFO(what);
    hgtest::write_bytes(p, bytes);
    hgtest::expect_errors({{what, [&] { hg::nn::load_safetensors(p); }, {"bad.safetensors", says}}});
  }
  hgtest::expect_errors({
      {"missing file", [&] { hg::nn::load_safetensors(dir / "none.safetensors"); }, {"none.safetensors", "cannot open"}},
      {"a folder", [&] { hg::nn::load_safetensors(dir.path.string()); }, {"not a regular file"}},
  });
}

TEST_CASE("safetensors: valid edge cases load (null metadata, empty file, unpadded header)", "[nn][safetensors]") {
  TempDir dir;
  hgtest::write_bytes(dir / "a.safetensors", raw_file(R"({"__metadata__":null})"));
  CHECK(hg::nn::load_safetensors(dir / "a.safetensors").tensors.empty());
  hgtest::write_bytes(dir / "b.safetensors", raw_file(R"({"x":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}}  )",
                                                      std::string("\x01\x00\x01", 3)));
  const auto f = hg::nn::load_safetensors(dir / "b.safetensors");
  CHECK(hgtest::values(f.at("x")) == std::vector<double>{1, 0, 1});
  hg::nn::save_safetensors(dir / "c.safetensors", {});
  CHECK(hg::nn::load_safetensors(dir / "c.safetensors").tensors.empty());
}

TEST_CASE("nn::save / nn::load: a module's state_dict with PyTorch's keys", "[nn][safetensors]") {
  TempDir dir;
  hg::manual_seed(1);
  hgtest::MLP a;
  hg::nn::save(a, dir / "m.safetensors", {{"epoch", "3"}});
  const auto f = hg::nn::load_safetensors(dir / "m.safetensors");
  std::vector<std::string> names;
  for (const auto& [n, t] : f.tensors) names.push_back(n);
  CHECK(names == std::vector<std::string>{"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"});
  CHECK(f.metadata.at("epoch") == "3");

  hg::manual_seed(2);
  hgtest::MLP b;
  REQUIRE(!hgtest::same_bits(a.linear1.weight, b.linear1.weight));
  const hg::Tensor handle = b.linear1.weight;
  const auto r = hg::nn::load(b, dir / "m.safetensors");
  CHECK(r.missing_keys.empty());
  CHECK(r.unexpected_keys.empty());
  for (const auto& [name, t] : a.state_dict()) {
    INFO(name);
    CHECK(hgtest::same_bits(b.state_dict().at(name), t));
  }
  CHECK(handle.is_same(b.linear1.weight));  // copied into the module's own tensor
  CHECK(b.linear1.weight.requires_grad());
}

TEST_CASE("nn::load converts to the module's dtype, as load_state_dict does", "[nn][safetensors]") {
  TempDir dir;
  hg::manual_seed(3);
  hgtest::MLP a;
  a.to(hg::float64);
  hg::nn::save(a, dir / "m64.safetensors");
  hgtest::MLP b;  // float32
  hg::nn::load(b, dir / "m64.safetensors");
  CHECK(b.linear2.weight.dtype() == hg::float32);
  CHECK(hgtest::same_bits(b.linear2.weight, a.linear2.weight.to(hg::float32)));
}

TEST_CASE("nn::load: missing, unexpected and mis-shaped keys", "[nn][safetensors]") {
  TempDir dir;
  hg::manual_seed(4);
  hgtest::MLP a;
  Named partial, extra, misshaped;
  for (const auto& [n, t] : a.state_dict()) {
    if (n != "linear2.bias") partial.emplace_back(n, t);
    extra.emplace_back(n, t);
    misshaped.emplace_back(n, n == "linear1.bias" ? hg::zeros({99}) : t);
  }
  extra.emplace_back("linear3.weight", hg::ones({2}));
  hg::nn::save_safetensors(dir / "partial.safetensors", partial);
  hg::nn::save_safetensors(dir / "extra.safetensors", extra);
  hg::nn::save_safetensors(dir / "misshaped.safetensors", misshaped);

  hgtest::expect_errors({
      {"strict, missing", [&] { hgtest::MLP b; hg::nn::load(b, dir / "partial.safetensors"); },
       {"partial.safetensors", "linear2.bias"}},
      {"strict, unexpected", [&] { hgtest::MLP b; hg::nn::load(b, dir / "extra.safetensors"); },
       {"extra.safetensors", "linear3.weight"}},
      {"shape", [&] { hgtest::MLP b; hg::nn::load(b, dir / "misshaped.safetensors", false); },
       {"misshaped.safetensors", "linear1.bias"}},
  });
  hgtest::MLP b;
  const hg::Tensor bias_before = b.linear2.bias.clone();
  const auto r = hg::nn::load(b, dir / "partial.safetensors", false);
  CHECK(r.missing_keys == std::vector<std::string>{"linear2.bias"});
  CHECK(r.unexpected_keys.empty());
  CHECK(hgtest::same_bits(b.linear2.bias, bias_before));
  CHECK(hgtest::same_bits(b.linear1.weight, a.linear1.weight));
  hgtest::MLP c;
  const auto r2 = hg::nn::load(c, dir / "extra.safetensors", false);
  CHECK(r2.unexpected_keys == std::vector<std::string>{"linear3.weight"});
  CHECK(hgtest::same_bits(c.linear2.bias, a.linear2.bias));
}

TEST_CASE("safetensors: CUDA tensors are saved from the host and loaded into CUDA modules", "[nn][safetensors][cuda]") {
  TempDir dir;
  hg::manual_seed(5);
  hgtest::MLP a;
  a.to(hg::Device::cuda());
  const hg::Tensor h = hgtest::uniform({3, 2}, hg::bfloat16).cuda();
  hg::nn::save_safetensors(dir / "c.safetensors", {{"h", h}});
  const auto f = hg::nn::load_safetensors(dir / "c.safetensors");
  CHECK(f.at("h").device().is_cpu());
  CHECK(hgtest::same_bits(f.at("h"), h));
  hg::nn::save(a, dir / "m.safetensors");
  hgtest::MLP b;
  b.to(hg::Device::cuda());
  hg::nn::load(b, dir / "m.safetensors");
  CHECK(b.linear1.weight.device().is_cuda());
  CHECK(hgtest::same_bits(b.linear1.weight, a.linear1.weight));
}

using hgtest::within;

TEST_CASE("safetensors: hostile headers (deep, long, many entries) are bounded in time, stack and message size",
          "[nn][safetensors][hostile]") {
  TempDir dir;
  // 100k levels of nesting: refused at the fourth, without recursing.
  const std::string deep = dir / "deep.safetensors";
  hgtest::write_bytes(deep, raw_file("{\"a\":" + std::string(100'000, '[') + std::string(100'000, ']') + "}"));
  // An invalid 10 MB header whose last token is the whole string: the message
  // quotes a few hundred bytes of it, not 10 MB.
  const std::string long_bad = dir / "long_bad.safetensors";
  hgtest::write_bytes(long_bad, raw_file("{\"a\":\"" + std::string(10'000'000, 'x') + "\\q\"}"));
  // A 10 MB tensor name in an otherwise bad entry.
  const std::string long_name = dir / "long_name.safetensors";
  hgtest::write_bytes(long_name, raw_file("{\"" + std::string(10'000'000, 'n') + "\":[1]}"));
  hgtest::expect_errors({
      {"100k levels deep", within(30, [&] { hg::nn::load_safetensors(deep); }),
       {"deep.safetensors", "nests deeper than 3 levels"}},
      {"invalid 10 MB header", within(30, [&] { hg::nn::load_safetensors(long_bad); }),
       {"long_bad.safetensors", "not valid JSON"}},
      {"10 MB name", within(30, [&] { hg::nn::load_safetensors(long_name); }),
       {"long_name.safetensors", "must be an object", "bytes in all"}},
  });
  for (const std::string& p : {long_bad, long_name}) {
    INFO(p);
    const auto r = hgtest::run_in_child(within(30, [&] { hg::nn::load_safetensors(p); }));
    CHECK(r.threw_error);
    CHECK(r.message.size() < 1000);
  }

  // 100k entries (6 MB of header): linear, so well within a few seconds (the
  // callback parser took over 300 s); the alarm turns a regression into a failure.
  std::string header = "{";
  std::string data;
  constexpr int kEntries = 100'000;
  for (int i = 0; i < kEntries; ++i) {
    header += fmt::format("{}\"t{}\":{{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[{},{}]}}", i ? "," : "", i,
                          4 * i, 4 * i + 4);
    const float v = static_cast<float>(i);
    data.append(reinterpret_cast<const char*>(&v), 4);
  }
  header += "}";
  const std::string many = dir / "many.safetensors";
  hgtest::write_bytes(many, raw_file(header, data));
  const auto start = std::chrono::steady_clock::now();
  const auto r = hgtest::run_in_child(within(60, [&] {
    const auto f = hg::nn::load_safetensors(many);
    HG_CHECK(f.tensors.size() == kEntries && hgtest::values(f.at("t99999")) == std::vector<double>{99999},
             "wrong contents");
  }));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.describe() << " after " << seconds << " s");
  CHECK(r.returned);
  CHECK(seconds < 30);
}

TEST_CASE("safetensors: a FIFO (or other non-regular file) is refused before any read, never waited on",
          "[nn][safetensors][hostile]") {
  TempDir dir;
  const std::string fifo = dir / "pipe.safetensors";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  hgtest::expect_errors({
      {"FIFO", within(30, [&] { hg::nn::load_safetensors(fifo); }), {"pipe.safetensors", "FIFO", "not a regular file"}},
      {"FIFO through nn::load", within(30, [&] {
         hgtest::MLP m;
         hg::nn::load(m, fifo);
       }),
       {"pipe.safetensors", "not a regular file"}},
      {"missing", [&] { hg::nn::load_safetensors(dir / "none.safetensors"); }, {"none.safetensors", "no such file"}},
  });
}
