// Every op of ops/ops.h on a CUDA device against the CPU backend on the same
// values: ||cuda - cpu|| / ||cpu|| within the dtype's tolerance (float64
// 1e-12, float32 1e-5, bfloat16 1e-2, float16 2e-3), exact for int64 and bool
// results, casts, max/argmax and random draws. Inputs cover broadcasting,
// transposed, narrowed (misaligned) and permuted views, 0-d tensors, and sizes
// that take every kernel path (vector tails, grid-stride loops, split
// reductions, > 2^31 elements). Backward: gradients of composite expressions
// on CUDA against the CPU. Run only where a GPU is usable ("[cuda]").
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_compare.h"
#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Reduction;
using hg::Shape;
using hg::Tensor;
using hg::TensorOptions;
using hgtest::values;
using hgtest::cuda::dev;
using hgtest::cuda::expect_same;
using hgtest::cuda::float_and_int;
using hgtest::cuda::kCpu;
using hgtest::cuda::kCuda;
using hgtest::cuda::leaf_on;

namespace {


// Same values, same bits (sign of zero, half/bfloat16 rounding); NaNs only need to be NaN.
void expect_bits(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  INFO(what);
  expect_same(gpu, cpu, what, true);
  const Tensor back = gpu.contiguous().cpu();
  const auto vg = values(back), vc = values(cpu);
  REQUIRE(vg.size() == vc.size());
  const bool b16 = cpu.dtype() == DType::Float16 || cpu.dtype() == DType::BFloat16;
  const auto bg = b16 ? hgtest::bits16(back) : std::vector<uint16_t>{};
  const auto bc = b16 ? hgtest::bits16(cpu) : std::vector<uint16_t>{};
  for (size_t i = 0; i < vc.size(); ++i) {
    if (std::isnan(vc[i])) continue;
    INFO("element " << i << ": cuda " << vg[i] << ", cpu " << vc[i]);
    CHECK(std::signbit(vg[i]) == std::signbit(vc[i]));
    if (b16) CHECK(bg[i] == bc[i]);
  }
}

// A view applied the same way to the CPU tensor and to its CUDA copy.
struct Layout {
  std::string name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> ls = {
      {"contiguous", {37, 29}, [](const Tensor& t) { return t; }},
      {"transposed", {29, 37}, [](const Tensor& t) { return t.t(); }},
      {"narrowed (misaligned)", {37, 30}, [](const Tensor& t) { return t.narrow(1, 1, 29); }},
      {"permuted 3-d", {5, 6, 7}, [](const Tensor& t) { return t.permute({2, 0, 1}); }},
      {"expanded", {1, 29}, [](const Tensor& t) { return t.expand({37, 29}); }},
      {"0-d", {}, [](const Tensor& t) { return t; }},
      {"vector tail", {1027}, [](const Tensor& t) { return t; }},
  };
  return ls;
}

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  double lo, hi;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return hg::neg(x); }, -2, 2},
      {"exp", [](const Tensor& x) { return hg::exp(x); }, -2, 2},
      {"log", [](const Tensor& x) { return hg::log(x); }, 0.1, 3},
      {"sqrt", [](const Tensor& x) { return hg::sqrt(x); }, 0.1, 3},
      {"abs", [](const Tensor& x) { return hg::abs(x); }, -2, 2},
      {"relu", [](const Tensor& x) { return hg::relu(x); }, -2, 2},
      {"gelu", [](const Tensor& x) { return hg::gelu(x); }, -3, 3},
      {"gelu tanh", [](const Tensor& x) { return hg::gelu(x, "tanh"); }, -3, 3},
      {"sigmoid", [](const Tensor& x) { return hg::sigmoid(x); }, -4, 4},
      {"tanh", [](const Tensor& x) { return hg::tanh(x); }, -2, 2},
      {"pow 2", [](const Tensor& x) { return hg::pow(x, 2.0); }, -2, 2},
      {"pow 0.5", [](const Tensor& x) { return hg::pow(x, 0.5); }, 0.1, 3},
      {"pow -1", [](const Tensor& x) { return hg::pow(x, -1.0); }, 0.25, 2},
      {"clamp both", [](const Tensor& x) { return hg::clamp(x, -0.5, 0.75); }, -2, 2},
      {"clamp min", [](const Tensor& x) { return hg::clamp(x, -0.5, std::nullopt); }, -2, 2},
      {"clamp max", [](const Tensor& x) { return hg::clamp(x, std::nullopt, 0.75); }, -2, 2},
      {"scalar ops", [](const Tensor& x) { return 1.0 - (2.0 * x + 0.5) / 3.0; }, -2, 2},
  };
}

std::string dn(DType t) { return hgtest::dname(t); }

}  // namespace

// ---- elementwise ---------------------------------------------------------------------------------

TEST_CASE("CUDA unary ops match the CPU in every float dtype and layout", "[cuda][ops][elementwise]") {
  for (const auto& c : unary_cases())
    for (DType dt : hgtest::kFloatDTypes)
      for (const auto& l : layouts()) {
        const Tensor base = hgtest::uniform(l.base, dt, c.lo, c.hi);
        const Tensor x = l.view(base), xg = l.view(dev(base));
        expect_same(c.op(xg), c.op(x), c.name + " " + dn(dt) + " " + l.name);
      }
}

TEST_CASE("CUDA int64 unary ops are exact", "[cuda][ops][elementwise][int64]") {
  const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return hg::neg(x); }, -20, 20},
      {"abs", [](const Tensor& x) { return hg::abs(x); }, -20, 20},
      {"relu", [](const Tensor& x) { return hg::relu(x); }, -20, 20},
      {"pow 3", [](const Tensor& x) { return hg::pow(x, 3.0); }, -20, 20},
      {"clamp both", [](const Tensor& x) { return hg::clamp(x, -3.0, 5.0); }, -20, 20},
      {"clamp min", [](const Tensor& x) { return hg::clamp(x, -3.0, std::nullopt); }, -20, 20},
      {"clamp max", [](const Tensor& x) { return hg::clamp(x, std::nullopt, 5.0); }, -20, 20},
      {"float result: exp", [](const Tensor& x) { return hg::exp(x); }, -5, 5},
  };
  for (const auto& c : cases)
    for (const auto& l : layouts()) {
      const Tensor base = hgtest::uniform(l.base, DType::Int64, c.lo, c.hi);
      const Tensor x = l.view(base), xg = l.view(dev(base));
      expect_same(c.op(xg), c.op(x), c.name + " int64 " + l.name);
    }
}

TEST_CASE("CUDA binary ops with broadcasting, strides and scalars", "[cuda][ops][elementwise]") {
  using BinOp = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, BinOp>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return hg::add(a, b); }},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return hg::add(a, b, 2.0); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return hg::sub(a, b); }},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return hg::sub(a, b, 3.0); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return hg::mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return hg::div(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return hg::pow(hg::add(hg::abs(a), 0.25), b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return hg::maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return hg::minimum(a, b); }},
      {"scalar add sub", [](const Tensor& a, const Tensor&) { return hg::sub(hg::add(a, 2.0), 0.5); }},
      {"scalar mul div", [](const Tensor& a, const Tensor&) { return hg::div(hg::mul(a, 3.0), 4.0); }},
  };
  struct Shapes {
    std::string name;
    Shape a, b;
    bool transpose_a;
  };
  const std::vector<Shapes> shapes = {
      {"same shape", {37, 29}, {37, 29}, false},
      {"row broadcast", {37, 29}, {29}, false},
      {"both broadcast", {4, 1, 5}, {3, 1}, false},
      {"transposed a", {29, 37}, {37, 29}, true},
      {"0-d b", {37, 29}, {}, false},
      {"vector tail", {1029}, {1029}, false},
  };
  for (DType dt : float_and_int())
    for (const auto& [oname, op] : ops)
      for (const auto& s : shapes) {
        if (dt == DType::Int64 && oname == "pow") continue;  // integer tensors promote to float: covered by div
        // b away from zero (div), both integral for int64
        const Tensor a = dt == DType::Int64 ? hgtest::uniform(s.a, dt, -20, 20) : hgtest::uniform(s.a, dt);
        const Tensor b = dt == DType::Int64 ? hgtest::uniform(s.b, dt, 1, 9) : hgtest::away_from_zero(s.b, dt);
        const Tensor ac = s.transpose_a ? a.t() : a, ag = s.transpose_a ? dev(a).t() : dev(a);
        expect_same(op(ag, dev(b)), op(ac, b), oname + " " + dn(dt) + " " + s.name);
      }
}

TEST_CASE("CUDA mixed dtypes promote as on the CPU", "[cuda][ops][elementwise]") {
  const Tensor a = hgtest::uniform({8, 9}, DType::Float16), b = hgtest::uniform({9}, DType::Float32);
  const Tensor c = hgtest::uniform({8, 9}, DType::BFloat16), i = hgtest::uniform({8, 9}, DType::Int64, -9, 9);
  expect_same(hg::add(dev(a), dev(b)), hg::add(a, b), "float16 + float32");
  expect_same(hg::mul(dev(a), dev(c)), hg::mul(a, c), "float16 * bfloat16");
  expect_same(hg::sub(dev(i), dev(a)), hg::sub(i, a), "int64 - float16");
  expect_same(hg::div(dev(i), 4.0), hg::div(i, 4.0), "int64 / 4 gives float32");
  expect_same(hg::mul(dev(i), 2.5), hg::mul(i, 2.5), "int64 * 2.5 gives float32");
}

TEST_CASE("CUDA comparisons give exact bool results, ties included", "[cuda][ops][compare]") {
  using CmpOp = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, CmpOp>> ops = {
      {"eq", [](const Tensor& a, const Tensor& b) { return hg::eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return hg::ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return hg::lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return hg::le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return hg::gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return hg::ge(a, b); }},
  };
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&, double)>>> scalar_ops = {
      {"eq", [](const Tensor& a, double b) { return hg::eq(a, b); }},
      {"ne", [](const Tensor& a, double b) { return hg::ne(a, b); }},
      {"lt", [](const Tensor& a, double b) { return hg::lt(a, b); }},
      {"le", [](const Tensor& a, double b) { return hg::le(a, b); }},
      {"gt", [](const Tensor& a, double b) { return hg::gt(a, b); }},
      {"ge", [](const Tensor& a, double b) { return hg::ge(a, b); }},
  };
  for (DType dt : float_and_int()) {
    // small integers: many ties
    const Tensor a = hgtest::uniform({37, 29}, dt, -3, 3), b = hgtest::uniform({29}, dt, -3, 3);
    const Tensor at = hgtest::uniform({29, 37}, dt, -3, 3);
    const Tensor ai = hg::tensor(std::vector<double>{-3, -2, -1, 0, 1, 2, 3}, {7}).to(dt);
    for (const auto& [name, op] : ops) {
      const Tensor ag = dev(a), bg = dev(b);
      expect_same(op(ag, bg), op(a, b), name + " " + dn(dt) + " broadcast");
      expect_same(op(dev(at).t(), ag), op(at.t(), a), name + " " + dn(dt) + " transposed");
      // the vector path with a 0-d operand
      expect_same(op(dev(ai), dev(ai.narrow(0, 3, 1).reshape({}))), op(ai, ai.narrow(0, 3, 1).reshape({})),
                  name + " " + dn(dt) + " 0-d operand");
    }
    for (const auto& [name, op] : scalar_ops) expect_same(op(dev(a), 1.0), op(a, 1.0), name + " scalar " + dn(dt));
  }
  // NaN compares false (ne true), as on the CPU
  const Tensor n = hg::tensor(std::vector<float>{NAN, 1.f, NAN, -2.f}, {4});
  const Tensor m = hg::tensor(std::vector<float>{NAN, NAN, 0.f, -2.f}, {4});
  for (const auto& [name, op] : ops) expect_same(op(dev(n), dev(m)), op(n, m), name + " with NaN");
}

TEST_CASE("CUDA where with broadcasting in every dtype", "[cuda][ops][where]") {
  for (DType dt : hgtest::kAllDTypes) {
    const Tensor c = hgtest::random_bool({37, 1});
    const Tensor ct = hgtest::random_bool({29, 37});
    const auto make = [&](const Shape& s) {
      return dt == DType::Bool ? hgtest::random_bool(s) : hgtest::uniform(s, dt, -9, 9);
    };
    const Tensor a = make({37, 29}), b = make({29});
    expect_same(hg::where(dev(c), dev(a), dev(b)), hg::where(c, a, b), "where broadcast " + dn(dt));
    expect_same(hg::where(dev(ct).t(), dev(b), dev(a)), hg::where(ct.t(), b, a), "where transposed cond " + dn(dt));
  }
}

TEST_CASE("CUDA NaN propagates through maximum, minimum, relu and clamp as on the CPU", "[cuda][ops][nan]") {
  for (DType dt : hgtest::kFloatDTypes) {
    const Tensor a = hgtest::make({NAN, 1, -1, NAN, 2, 0.5}, {6}, dt);
    const Tensor b = hgtest::make({0, NAN, -2, NAN, 3, 0.5}, {6}, dt);
    expect_bits(hg::maximum(dev(a), dev(b)), hg::maximum(a, b), "maximum " + dn(dt));
    expect_bits(hg::minimum(dev(a), dev(b)), hg::minimum(a, b), "minimum " + dn(dt));
    expect_bits(hg::relu(dev(a)), hg::relu(a), "relu " + dn(dt));
    expect_bits(hg::clamp(dev(a), -0.5, 0.5), hg::clamp(a, -0.5, 0.5), "clamp " + dn(dt));
  }
}

TEST_CASE("CUDA casts between all dtypes are bit-exact", "[cuda][ops][cast]") {
  // Finite in every dtype (safe to turn into int64 or bool): ties, subnormals of float16.
  const std::vector<double> safe = {0.0,   -0.0,       1.0,   -1.0,   2.5,    -2.5,        3.5,   -7.75,
                                    65504, 1e-7,       6e-5,  0.1,    -0.3333, 1.0009765625, 255.5, 1000.25,
                                    -4096.5, 1.00048828125, 3.0, 7.0};
  // Only for float destinations: overflow to inf, inf, NaN, float32 subnormals.
  std::vector<double> wide = safe;
  for (double v : {65520.0, 70000.0, 1e30, -1e30, 3e38, 1e-40, 3e-8, 1e300})
    wide.push_back(v);
  const double inf = std::numeric_limits<double>::infinity();
  for (double v : {inf, -inf, std::numeric_limits<double>::quiet_NaN()}) wide.push_back(v);

  for (DType src : hgtest::kAllDTypes)
    for (DType dst : hgtest::kAllDTypes) {
      if (src == dst) continue;
      const bool wide_ok = hg::is_floating(src) && hg::is_floating(dst) && src != DType::Float64;
      const bool from_f64 = hg::is_floating(dst) && src == DType::Float64;
      std::vector<double> v = wide_ok ? wide : safe;
      if (from_f64) {  // NaN payload rules differ for float64 sources: values only, below
        v = wide;
        v.pop_back();
      }
      const Tensor x = hgtest::make(v, {static_cast<int64_t>(v.size())}, src);
      expect_bits(dev(x).to(dst), x.to(dst), dn(src) + " to " + dn(dst));
      // strided source and strided destination
      const Tensor xm = hgtest::make(std::vector<double>(safe.begin(), safe.begin() + 20), {4, 5}, src);
      expect_bits(dev(xm).t().to(dst), xm.t().to(dst), dn(src) + " to " + dn(dst) + " transposed source");
      Tensor dg = hg::zeros({5, 4}, TensorOptions(dst, kCuda)), dc = hg::zeros({5, 4}, dst);
      dg.t().copy_(dev(xm));
      dc.t().copy_(xm);
      expect_bits(dg, dc, dn(src) + " to " + dn(dst) + " into a transposed destination");
    }
  // NaN from float64: still NaN
  const Tensor nan64 = hgtest::make({NAN, -NAN, 1.0}, {3}, DType::Float64);
  for (DType dst : hgtest::kFloatDTypes) expect_same(dev(nan64).to(dst), nan64.to(dst), "float64 NaN to " + dn(dst));
}

TEST_CASE("CUDA fill, copy_, clone and contiguous on strided views", "[cuda][ops][copy]") {
  for (DType dt : hgtest::kAllDTypes) {
    Tensor g = hg::zeros({6, 7}, TensorOptions(dt, kCuda)), c = hg::zeros({6, 7}, dt);
    g.narrow(1, 2, 3).fill_(2.5);
    c.narrow(1, 2, 3).fill_(2.5);
    g.t().narrow(0, 5, 2).fill_(-1.0);
    c.t().narrow(0, 5, 2).fill_(-1.0);
    g.narrow(0, 1, 1).fill_(7.0);  // a contiguous view: the runtime's fill
    c.narrow(0, 1, 1).fill_(7.0);
    expect_same(g, c, "strided fill " + dn(dt));

    const Tensor src = dt == DType::Bool ? hgtest::random_bool({7}) : hgtest::uniform({7}, dt, -5, 5);
    g.t().narrow(1, 0, 3).copy_(dev(src).reshape({7, 1}));  // broadcast source, strided destination
    c.t().narrow(1, 0, 3).copy_(src.reshape({7, 1}));
    expect_same(g, c, "broadcast copy_ into a strided view " + dn(dt));

    const Tensor p = dt == DType::Bool ? hgtest::random_bool({3, 4, 5}) : hgtest::uniform({3, 4, 5}, dt, -5, 5);
    expect_same(dev(p).permute({2, 0, 1}).contiguous(), p.permute({2, 0, 1}).contiguous(), "contiguous " + dn(dt));
    expect_same(dev(p).narrow(2, 1, 3).clone(), p.narrow(2, 1, 3).clone(), "clone " + dn(dt));
    expect_same(dev(p).clone(), p, "clone contiguous " + dn(dt));
  }
}

TEST_CASE("CUDA elementwise on large tensors: vector, grid-stride and misaligned paths", "[cuda][ops][elementwise]") {
  const int64_t n = (int64_t{1} << 23) + 5;  // many grid-stride rounds and a ragged vector tail
  for (DType dt : {DType::Float16, DType::Float32}) {
    const Tensor a = hgtest::uniform({n}, dt), b = hgtest::uniform({n}, dt);
    const Tensor ag = dev(a), bg = dev(b);
    expect_same(hg::add(ag, bg), hg::add(a, b), "large add " + dn(dt));
    expect_same(hg::mul(ag, 0.5), hg::mul(a, 0.5), "large mul by a scalar " + dn(dt));
    expect_same(hg::gt(ag, bg), hg::gt(a, b), "large gt " + dn(dt));
    expect_same(ag.to(DType::BFloat16), a.to(DType::BFloat16), "large cast " + dn(dt));
    expect_same(hg::add(ag.narrow(0, 1, n - 3), bg.narrow(0, 3, n - 3)),
                hg::add(a.narrow(0, 1, n - 3), b.narrow(0, 3, n - 3)), "large misaligned add " + dn(dt));
  }
}

TEST_CASE("CUDA strided kernels split tensors of more than 2^31 elements", "[cuda][ops][large]") {
  // 3 * 2^30 bools read through a transposed view: the strided copy kernel
  // indexes in 32 bits, so the launcher splits the work. About 16 GB of GPU
  // memory in all; a smaller GPU reports out of memory and skips the check.
  try {
    const int64_t n = int64_t{1} << 30;
    Tensor s;
    {
      Tensor x = hg::zeros({3, n}, TensorOptions(DType::Bool, kCuda));
      x.narrow(0, 0, 1).fill_(1.0);
      x.narrow(0, 2, 1).fill_(1.0);
      const Tensor y = x.t().contiguous();  // [n, 3] rows of (true, false, true)
      x = Tensor();
      const Tensor yh = y.to(DType::Float16);  // the vector kernel with 64-bit indices
      s = hg::sum(yh, {1});                     // 2 in every row
      // rows on both sides of the split (the outermost dim is halved) and at the ends
      for (int64_t row : {int64_t{0}, n / 2 - 1, n / 2, n - 1})
        CHECK(values(y.narrow(0, row, 1).reshape({3}).cpu()) == std::vector<double>{1, 0, 1});
    }
    CHECK(hg::max(s).item<float>() == 2.0f);
    CHECK(hg::max(hg::neg(s)).item<float>() == -2.0f);
  } catch (const hg::Error& e) {
    if (std::string(e.what()).find("out of memory") == std::string::npos) throw;
    WARN("skipped: " << e.what());
  }
}

// ---- reductions --------------------------------------------------------------------------------------

namespace {
std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> reduce_inputs(DType dt, double lo, double hi) {
  const Tensor c = hgtest::uniform({4, 5, 6}, dt, lo, hi);
  const Tensor p = hgtest::uniform({6, 4, 5}, dt, lo, hi);
  return {{"contiguous", {c, dev(c)}}, {"permuted", {p.permute({1, 2, 0}), dev(p).permute({1, 2, 0})}}};
}
const std::vector<Shape> kDimSets = {{0}, {1}, {2}, {-1}, {0, 1}, {1, 2}, {0, 2}, {2, 0}, {0, 1, 2}};
}  // namespace

TEST_CASE("CUDA sum and mean over dims with keepdim", "[cuda][ops][reduce]") {
  for (DType dt : float_and_int())
    // floats mostly positive: no sum near zero, where summation order would dominate the relative error
    for (const auto& [layout, xs] : reduce_inputs(dt, dt == DType::Int64 ? -40 : -1, dt == DType::Int64 ? 40 : 3)) {
      const auto& [x, xg] = xs;
      for (const Shape& dims : kDimSets)
        for (bool keepdim : {false, true}) {
          const std::string what = dn(dt) + " " + layout + " dims " + hg::shape_str(dims) + (keepdim ? " keepdim" : "");
          expect_same(hg::sum(xg, dims, keepdim), hg::sum(x, dims, keepdim), "sum " + what);
          if (dt != DType::Int64) expect_same(hg::mean(xg, dims, keepdim), hg::mean(x, dims, keepdim), "mean " + what);
        }
      expect_same(hg::sum(xg), hg::sum(x), "sum all " + dn(dt) + " " + layout);
      if (dt != DType::Int64) expect_same(xg.mean(), x.mean(), "mean all " + dn(dt) + " " + layout);
    }
  const Tensor b = hgtest::random_bool({5, 7});
  expect_same(hg::sum(dev(b), {1}), hg::sum(b, {1}), "sum of bool gives int64");
}

TEST_CASE("CUDA max and argmax over a dim with keepdim, ties and NaN", "[cuda][ops][reduce]") {
  for (DType dt : float_and_int())
    // integers in [-2, 2]: many ties, the first index must win
    for (const auto& [layout, xs] : reduce_inputs(dt, -2, 2)) {
      const auto& [x, xg] = xs;
      for (int64_t d : {0, 1, 2, -1})
        for (bool keepdim : {false, true}) {
          const std::string what = dn(dt) + " " + layout + " dim " + std::to_string(d) + (keepdim ? " keepdim" : "");
          expect_same(std::get<0>(hg::max(xg, d, keepdim)), std::get<0>(hg::max(x, d, keepdim)), "max " + what, true);
          expect_same(hg::argmax(xg, d, keepdim), hg::argmax(x, d, keepdim), "argmax " + what);
        }
      expect_same(hg::max(xg), hg::max(x), "max all " + dn(dt) + " " + layout, true);
      expect_same(hg::argmax(xg), hg::argmax(x), "argmax all " + dn(dt) + " " + layout);
    }
  for (DType dt : hgtest::kFloatDTypes) {
    Tensor x = hgtest::uniform({6, 9}, dt, -2, 2);
    const std::vector<std::pair<int64_t, int64_t>> nans = {{1, 3}, {1, 6}, {4, 0}, {5, 8}};
    for (const auto& [i, j] : nans) x.narrow(0, i, 1).narrow(1, j, 1).fill_(NAN);
    const Tensor xg = dev(x);
    for (int64_t d : {0, 1}) {
      expect_same(std::get<0>(hg::max(xg, d)), std::get<0>(hg::max(x, d)), "max with NaN " + dn(dt), true);
      expect_same(hg::argmax(xg, d), hg::argmax(x, d), "argmax with NaN " + dn(dt));
    }
    expect_same(hg::max(xg), hg::max(x), "max all with NaN " + dn(dt), true);
  }
}

TEST_CASE("CUDA reductions on shapes that take every kernel path", "[cuda][ops][reduce]") {
  for (DType dt : float_and_int()) {
    const double lo = dt == DType::Int64 ? -50 : 0, hi = dt == DType::Int64 ? 50 : 2;  // positive: no cancellation
    struct Case {
      std::string name;
      Shape shape, dims;
    };
    const std::vector<Case> cases = {
        {"column sums, one pass", {100, 10}, {0}},
        {"column sums, split rows", {4096, 40}, {0}},
        {"leading dims of a 3-d tensor", {3, 7, 33}, {0, 1}},
        {"block per row", {64, 3000}, {1}},
        {"warp per row", {300, 100}, {1}},
        {"middle dim (copy first)", {8, 50, 9}, {1}},
    };
    for (const auto& c : cases) {
      const Tensor x = hgtest::uniform(c.shape, dt, lo, hi), xg = dev(x);
      expect_same(hg::sum(xg, c.dims), hg::sum(x, c.dims), "sum " + c.name + " " + dn(dt));
      if (dt != DType::Int64) expect_same(hg::mean(xg, c.dims, true), hg::mean(x, c.dims, true), "mean " + c.name + " " + dn(dt));
      if (c.dims.size() == 1) {
        expect_same(std::get<0>(hg::max(xg, c.dims[0])), std::get<0>(hg::max(x, c.dims[0])), "max " + c.name + " " + dn(dt), true);
        expect_same(hg::argmax(xg, c.dims[0]), hg::argmax(x, c.dims[0]), "argmax " + c.name + " " + dn(dt));
      }
    }
    // A full reduction of a long row: split over blocks, then a second pass.
    const int64_t n = (int64_t{1} << 20) + 3;
    Tensor x = hgtest::uniform({n}, dt, lo, hi);
    // the maximum twice, in different chunks: the first position wins; NaN later
    x.narrow(0, 300000, 1).fill_(hi + 5);
    x.narrow(0, 900000, 1).fill_(hi + 5);
    const Tensor xg = dev(x);
    if (dt != DType::Int64) expect_same(xg.mean(), x.mean(), "mean of 2^20 " + dn(dt));
    else expect_same(hg::sum(xg), hg::sum(x), "sum of 2^20 int64");
    expect_same(hg::max(xg), hg::max(x), "max of 2^20 " + dn(dt), true);
    expect_same(hg::argmax(xg), hg::argmax(x), "argmax of 2^20 " + dn(dt));
    if (dt != DType::Int64) {
      x.narrow(0, 700000, 1).fill_(NAN);
      x.narrow(0, 800000, 1).fill_(NAN);
      expect_same(hg::max(dev(x)), hg::max(x), "max of 2^20 with NaN " + dn(dt), true);
      expect_same(hg::argmax(dev(x)), hg::argmax(x), "argmax of 2^20 with NaN " + dn(dt));
    }
  }
}

TEST_CASE("CUDA sum_to and reductions of empty and 0-d tensors", "[cuda][ops][reduce]") {
  for (DType dt : hgtest::kFloatDTypes) {
    const Tensor x = hgtest::uniform({4, 5, 6}, dt);
    for (const Shape& to : {Shape{5, 6}, Shape{4, 1, 6}, Shape{1, 5, 1}, Shape{6}, Shape{}})
      expect_same(hg::sum_to(dev(x), to), hg::sum_to(x, to), "sum_to " + hg::shape_str(to) + " " + dn(dt));
    const Tensor e = hg::zeros({0, 3}, dt), s = hg::full({}, 1.5, dt);
    expect_same(hg::sum(dev(e), {0}), hg::sum(e, {0}), "sum over an empty dim " + dn(dt));
    expect_same(hg::mean(dev(e), {0}), hg::mean(e, {0}), "mean over an empty dim (NaN) " + dn(dt));
    expect_same(hg::sum(dev(e), {1}), hg::sum(e, {1}), "empty result " + dn(dt));
    expect_same(hg::sum(dev(s)), hg::sum(s), "sum of 0-d " + dn(dt));
    expect_same(hg::max(dev(s)), hg::max(s), "max of 0-d " + dn(dt));
    expect_same(hg::argmax(dev(s)), hg::argmax(s), "argmax of 0-d " + dn(dt));
  }
}

// ---- softmax and losses ----------------------------------------------------------------------------

TEST_CASE("CUDA softmax and log_softmax over every dim, forward and backward", "[cuda][ops][softmax]") {
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const std::vector<Case> cases = {{{7, 10}, 1},   {{7, 10}, 0},     {{3, 2000}, -1}, {{4, 5, 6}, 1},
                                   {{4, 5, 6}, 0}, {{2, 3, 1100}, 2}, {{9}, 0},        {{1, 33}, 1}};
  for (DType dt : hgtest::kFloatDTypes)
    for (const auto& c : cases)
      for (bool log : {false, true}) {
        const std::string what = std::string(log ? "log_softmax " : "softmax ") + dn(dt) + " " +
                                 hg::shape_str(c.shape) + " dim " + std::to_string(c.dim);
        Tensor x = hgtest::uniform(c.shape, dt, -4, 4);
        const Tensor w = hgtest::uniform(c.shape, dt);
        const Tensor xc = leaf_on(x, kCpu), xg = leaf_on(x, kCuda);
        auto f = [&](const Tensor& t) { return log ? hg::log_softmax(t, c.dim) : hg::softmax(t, c.dim); };
        const Tensor yc = f(xc), yg = f(xg);
        expect_same(yg, yc, what);
        hg::mul(yc, w).sum().backward();
        hg::mul(yg, dev(w)).sum().backward();
        expect_same(xg.grad(), xc.grad(), what + " backward");
      }
  // masked entries (-inf) and large values stay finite where the CPU's do
  for (DType dt : hgtest::kFloatDTypes) {
    Tensor x = hgtest::uniform({5, 40}, dt, -4, 4);
    x.narrow(1, 0, 7).fill_(-INFINITY);
    x.narrow(0, 2, 1).fill_(60000.0);
    expect_same(hg::softmax(dev(x), 1), hg::softmax(x, 1), "softmax with -inf " + dn(dt));
    expect_same(hg::log_softmax(dev(x), 1), hg::log_softmax(x, 1), "log_softmax with -inf " + dn(dt));
  }
}

namespace {
Tensor targets(int64_t n, int64_t c, int64_t ignore_index, int n_ignored) {
  Tensor t = hgtest::uniform({n}, DType::Int64, 0, static_cast<double>(c - 1));
  auto* p = static_cast<int64_t*>(t.data_ptr());
  for (int k = 0; k < n_ignored; ++k) p[(3 * k + 1) % n] = ignore_index;
  return t;
}
const char* rname(Reduction r) { return r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none"; }
}  // namespace

TEST_CASE("CUDA nll_loss and cross_entropy: reductions, ignore_index, backward", "[cuda][ops][loss]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
      for (int64_t ignore : {int64_t{-100}, int64_t{2}})
        for (const Shape& s : {Shape{13, 7}, Shape{6, 1500}}) {
          const std::string what =
              dn(dt) + " " + rname(r) + " ignore " + std::to_string(ignore) + " " + hg::shape_str(s);
          const Tensor x = hgtest::uniform(s, dt, -3, 3);
          const Tensor t = targets(s[0], s[1], ignore, 3);
          const Tensor w = hgtest::uniform({r == Reduction::None ? s[0] : 1}, dt, 0.5, 1.5);
          for (bool ce : {false, true}) {
            const Tensor xc = leaf_on(x, kCpu), xg = leaf_on(x, kCuda);
            auto f = [&](const Tensor& logits, const Tensor& target) {
              return ce ? hg::cross_entropy(logits, target, r, ignore)
                        : hg::nll_loss(hg::log_softmax(logits, 1), target, r, ignore);
            };
            const Tensor lc = f(xc, t), lg = f(xg, dev(t));
            const std::string name = std::string(ce ? "cross_entropy " : "nll_loss ") + what;
            expect_same(lg, lc, name);
            hg::mul(lc.reshape({-1}), w).sum().backward();
            hg::mul(lg.reshape({-1}), dev(w)).sum().backward();
            expect_same(xg.grad(), xc.grad(), name + " backward");
          }
        }
  // strided logits: a transposed view is made contiguous first
  const Tensor xt = hgtest::uniform({7, 13}, DType::Float32);
  const Tensor t = targets(13, 7, -100, 0);
  expect_same(hg::cross_entropy(dev(xt).t(), dev(t)), hg::cross_entropy(xt.t(), t), "cross_entropy transposed logits");
}

TEST_CASE("CUDA out-of-range targets give a NaN loss and a zero gradient without a sync", "[cuda][ops][loss]") {
  // The CPU raises an Error for these; on the device the sample's loss is NaN
  // and its gradient zero, as if it were ignored. The other samples must not
  // be touched (a stray write would land in a neighbouring row).
  for (DType dt : hgtest::kFloatDTypes) {
    const Tensor x = hgtest::uniform({4, 5}, dt);
    const Tensor bad = hg::tensor(std::vector<int64_t>{1, 7, -3, 4});        // 7 and -3 are out of range
    const Tensor ignored = hg::tensor(std::vector<int64_t>{1, -100, -100, 4});  // the CPU's view of it
    for (bool ce : {false, true}) {
      const std::string what = std::string(ce ? "cross_entropy " : "nll_loss ") + dn(dt);
      INFO(what);
      auto f = [&](const Tensor& logits, const Tensor& t) {
        return ce ? hg::cross_entropy(logits, t, Reduction::None)
                  : hg::nll_loss(hg::log_softmax(logits, 1), t, Reduction::None);
      };
      const Tensor xg = leaf_on(x, kCuda), xc = leaf_on(x, kCpu);
      const Tensor lg = f(xg, dev(bad)), lc = f(xc, ignored);
      const auto v = values(lg.cpu()), ref = values(lc);
      CHECK(std::isnan(v[1]));
      CHECK(std::isnan(v[2]));
      CHECK(v[0] == Approx(ref[0]).epsilon(hgtest::tol(dt) * 4));
      CHECK(v[3] == Approx(ref[3]).epsilon(hgtest::tol(dt) * 4));
      lg.backward(hg::ones_like(lg));  // a nonzero gradient for every sample, the bad ones included
      lc.backward(hg::ones_like(lc));
      expect_same(xg.grad(), xc.grad(), what + " gradient: zero rows for the bad targets");
      const Tensor mean = ce ? hg::cross_entropy(dev(x), dev(bad)) : hg::nll_loss(hg::log_softmax(dev(x), 1), dev(bad));
      CHECK(std::isnan(mean.item<double>()));
    }
  }
}

TEST_CASE("CUDA mse_loss and binary cross-entropy losses, forward and backward", "[cuda][ops][loss]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      const Tensor a = hgtest::uniform({9, 11}, dt), b = hgtest::uniform({9, 11}, dt);
      const Tensor p = hgtest::uniform({9, 11}, dt, 0.05, 0.95), q = hgtest::uniform({9, 11}, dt, 0, 1);
      const Tensor w = hgtest::uniform(r == Reduction::None ? Shape{9, 11} : Shape{}, dt, 0.5, 1.5);
      using Loss = std::function<Tensor(const Tensor&, const Tensor&)>;
      const std::vector<std::tuple<std::string, Loss, Tensor, Tensor>> cases = {
          {"mse_loss", [&](const Tensor& x, const Tensor& y) { return hg::mse_loss(x, y, r); }, a, b},
          {"binary_cross_entropy", [&](const Tensor& x, const Tensor& y) { return hg::binary_cross_entropy(x, y, r); },
           p, q},
          {"binary_cross_entropy_with_logits",
           [&](const Tensor& x, const Tensor& y) { return hg::binary_cross_entropy_with_logits(x, y, r); }, a, q},
      };
      for (const auto& [name, loss, in, target] : cases) {
        const std::string what = name + " " + dn(dt) + " " + rname(r);
        const Tensor xc = leaf_on(in, kCpu), xg = leaf_on(in, kCuda);
        const Tensor lc = loss(xc, target), lg = loss(xg, dev(target));
        expect_same(lg, lc, what);
        hg::mul(lc, w).sum().backward();
        hg::mul(lg, dev(w)).sum().backward();
        expect_same(xg.grad(), xc.grad(), what + " backward");
      }
    }
}

TEST_CASE("CUDA dropout: the same mask as the CPU for a seed, and its statistics", "[cuda][ops][dropout]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (double p : {0.1, 0.3, 0.5}) {
      const std::string what = dn(dt) + " p " + std::to_string(p);
      const Tensor x = hgtest::uniform({256, 256}, dt, 0.5, 2.0);
      hg::manual_seed(11);
      const Tensor yc = hg::dropout(x, p, true);
      hg::manual_seed(11);
      const Tensor yg = hg::dropout(dev(x), p, true);
      expect_same(yg, yc, "dropout " + what, true);  // both devices draw Philox counters 0.. for the seed
      const double zeros =
          hg::eq(yg, 0.0).to(DType::Float32).mean().item<float>();
      INFO(what);
      CHECK(zeros == Approx(p).margin(0.01));
      // kept values are x / (1 - p): the mean stays that of x
      const double mx = hg::mean(dev(x).to(DType::Float32)).item<float>();
      CHECK(hg::mean(yg.to(DType::Float32)).item<float>() == Approx(mx).epsilon(0.03));
      expect_same(hg::dropout(dev(x), p, false), x, "dropout eval " + what, true);
    }
  const Tensor x = dev(hgtest::uniform({100}, DType::Float32, 0.5, 2.0));
  CHECK(hg::eq(hg::dropout(x, 1.0, true), 0.0).to(DType::Int64).sum().item<int64_t>() == 100);
  CHECK(hg::eq(hg::dropout(x, 0.0, true), x).to(DType::Int64).sum().item<int64_t>() == 100);
}

// ---- joining, factories, matrix products ------------------------------------------------------------

TEST_CASE("CUDA cat and stack, with strided parts and promotion", "[cuda][ops][cat]") {
  for (DType dt : hgtest::kAllDTypes) {
    const auto make = [&](const Shape& s) {
      return dt == DType::Bool ? hgtest::random_bool(s) : hgtest::uniform(s, dt, -9, 9);
    };
    const Tensor a = make({2, 3, 4}), b = make({2, 5, 4}), c = make({4, 1, 2});
    const Tensor cg = dev(c).permute({2, 1, 0}), cc = c.permute({2, 1, 0});  // [2, 1, 4], strided
    expect_same(hg::cat({dev(a), dev(b), cg}, 1), hg::cat({a, b, cc}, 1), "cat dim 1 " + dn(dt));
    expect_same(hg::cat({dev(a), dev(a)}, 0), hg::cat({a, a}, 0), "cat dim 0 " + dn(dt));
    const Tensor d = make({2, 3, 1});
    expect_same(hg::cat({dev(a), dev(d)}, -1), hg::cat({a, d}, -1), "cat dim -1 " + dn(dt));
    for (int64_t d : {0, 1, 3, -1})
      expect_same(hg::stack({dev(a), dev(a).narrow(2, 0, 4)}, d), hg::stack({a, a}, d),
                  "stack dim " + std::to_string(d) + " " + dn(dt));
  }
  const Tensor h = hgtest::uniform({3, 4}, DType::Float16), f = hgtest::uniform({2, 4}, DType::Float32);
  expect_same(hg::cat({dev(h), dev(f)}, 0), hg::cat({h, f}, 0), "cat promotes float16 and float32");
}

TEST_CASE("CUDA factories give the CPU's values, random ones included for a seed", "[cuda][ops][factory]") {
  for (DType dt : float_and_int()) {
    const TensorOptions g(dt, kCuda), c(dt);
    expect_same(hg::zeros({3, 4}, g), hg::zeros({3, 4}, c), "zeros " + dn(dt));
    expect_same(hg::ones({3, 4}, g), hg::ones({3, 4}, c), "ones " + dn(dt));
    expect_same(hg::full({5}, 2.5, g), hg::full({5}, 2.5, c), "full " + dn(dt));
    expect_same(hg::arange(7, g), hg::arange(7, c), "arange " + dn(dt));
    expect_same(hg::arange(1.0, 4.0, 0.5, g), hg::arange(1.0, 4.0, 0.5, c), "arange with a step " + dn(dt));
    const Tensor base = hgtest::uniform({2, 3}, dt, -4, 4);
    expect_same(hg::zeros_like(dev(base)), hg::zeros_like(base), "zeros_like " + dn(dt));
    expect_same(hg::ones_like(dev(base)), hg::ones_like(base), "ones_like " + dn(dt));
    expect_same(hg::full_like(dev(base), -3.0), hg::full_like(base, -3.0), "full_like " + dn(dt));
    const Tensor e = hg::empty_like(dev(base));
    CHECK(e.device() == kCuda);
    CHECK(e.shape() == base.shape());
    CHECK(hg::empty({2, 2}, g).device() == kCuda);
    hg::manual_seed(3);
    const Tensor ri = hg::randint(-5, 5, {64}, g);
    hg::manual_seed(3);
    expect_same(ri, hg::randint(-5, 5, {64}, c), "randint " + dn(dt));
    if (dt == DType::Int64) continue;
    for (int which = 0; which < 2; ++which) {
      hg::manual_seed(4);
      const Tensor rg = which ? hg::randn({64}, g) : hg::rand({64}, g);
      hg::manual_seed(4);
      // float64 randn runs CUDA's log and cos, within an ulp of libm's: compared with a tolerance
      const bool exact = !(which && dt == DType::Float64);
      expect_same(rg, which ? hg::randn({64}, c) : hg::rand({64}, c), (which ? "randn " : "rand ") + dn(dt), exact);
    }
  }
  expect_same(hg::tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}, kCuda), hg::tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}),
              "tensor from floats");
  expect_same(hg::tensor(std::vector<double>{1, 2}, {}, TensorOptions(DType::Float64, kCuda)),
              hg::tensor(std::vector<double>{1, 2}), "tensor from doubles");
  expect_same(hg::tensor(std::vector<int64_t>{5, -6}, {}, TensorOptions(DType::Int64, kCuda)),
              hg::tensor(std::vector<int64_t>{5, -6}), "tensor from int64");
}

TEST_CASE("CUDA matrix products: mm, bmm, matmul, addmm, linear", "[cuda][ops][linalg]") {
  for (DType dt : hgtest::kFloatDTypes) {
    const auto u = [&](const Shape& s) { return hgtest::uniform(s, dt, -1, 1); };
    const Tensor a = u({37, 29}), b = u({29, 23}), at = u({29, 37}), bt = u({23, 29});
    expect_same(hg::mm(dev(a), dev(b)), hg::mm(a, b), "mm " + dn(dt));
    expect_same(hg::mm(dev(at).t(), dev(bt).t()), hg::mm(at.t(), bt.t()), "mm transposed " + dn(dt));
    const Tensor ba = u({3, 7, 5}), bb = u({3, 5, 4});
    expect_same(hg::bmm(dev(ba), dev(bb)), hg::bmm(ba, bb), "bmm " + dn(dt));
    // positive vectors: their dot product has no cancellation
    const Tensor v = hgtest::uniform({29}, dt, 0.1, 1), w = hgtest::uniform({29}, dt, 0.1, 1);
    expect_same(hg::matmul(dev(v), dev(w)), hg::matmul(v, w), "matmul 1-d 1-d " + dn(dt));
    expect_same(hg::matmul(dev(a), dev(v)), hg::matmul(a, v), "matmul 2-d 1-d " + dn(dt));
    expect_same(hg::matmul(dev(v), dev(b)), hg::matmul(v, b), "matmul 1-d 2-d " + dn(dt));
    expect_same(hg::matmul(dev(ba), dev(bb)), hg::matmul(ba, bb), "matmul batched " + dn(dt));
    const Tensor bias = u({23}), m = u({37, 23});
    expect_same(hg::addmm(dev(bias), dev(a), dev(b)), hg::addmm(bias, a, b), "addmm " + dn(dt));
    expect_same(hg::addmm(dev(m), dev(a), dev(b), 0.5, 2.0), hg::addmm(m, a, b, 0.5, 2.0), "addmm beta alpha " + dn(dt));
    const Tensor x = u({37, 29}), lw = u({23, 29});
    expect_same(hg::linear(dev(x), dev(lw), dev(bias)), hg::linear(x, lw, bias), "linear " + dn(dt));
    expect_same(hg::linear(dev(x), dev(lw)), hg::linear(x, lw), "linear without bias " + dn(dt));
    for (auto act : {hg::Activation::ReLU, hg::Activation::GELU})
      expect_same(hg::linear(dev(x), dev(lw), dev(bias), act), hg::linear(x, lw, bias, act),
                  "linear with activation " + std::to_string(static_cast<int>(act)) + " " + dn(dt));
    // no grad: cuBLASLt's GELU_BIAS epilogue whatever the width (23 here)
    expect_same(hg::linear(dev(x), dev(lw), dev(bias), hg::Activation::GELUTanh),
                hg::linear(x, lw, bias, hg::Activation::GELUTanh), "linear with tanh GELU " + dn(dt), false,
                std::max(hgtest::tol(dt), 1e-3));
  }
}

// ---- backward ----------------------------------------------------------------------------------------

namespace {
using Expr = std::function<Tensor(const std::vector<Tensor>& leaves, hg::Device device)>;

// Runs expr on CPU leaves and on CUDA leaves holding the same values;
// compares the results (within value_tol when > 0) and every leaf's gradient.
void check_backward(const std::string& name, const std::vector<Tensor>& inputs, const Expr& expr,
                    double value_tol = 0) {
  std::vector<Tensor> lc, lg;
  for (const Tensor& t : inputs) {
    const Tensor c = leaf_on(t, kCpu), g = leaf_on(t, kCuda);
    lc.push_back(c);
    lg.push_back(g);
  }
  const Tensor yc = expr(lc, kCpu), yg = expr(lg, kCuda);
  expect_same(yg, yc, name + " value", false, value_tol);
  yc.backward();
  yg.backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    REQUIRE(lg[i].grad().defined());
    expect_same(lg[i].grad(), lc[i].grad(), name + " grad of input " + std::to_string(i));
  }
}
}  // namespace

TEST_CASE("CUDA gradients of composite expressions match the CPU", "[cuda][backward]") {
  for (DType dt : hgtest::kFloatDTypes) {
    const auto u = [&](const Shape& s, double lo = -1, double hi = 1) { return hgtest::uniform(s, dt, lo, hi); };
    const Tensor target = hgtest::uniform({16}, DType::Int64, 0, 9);

    check_backward("two-layer MLP with cross_entropy " + dn(dt), {u({16, 12}), u({20, 12}), u({20}), u({10, 20}), u({10})},
                   [&](const std::vector<Tensor>& p, hg::Device d) {
                     const Tensor h = hg::relu(hg::linear(p[0], p[1], p[2]));
                     return hg::cross_entropy(hg::linear(h, p[3], p[4]), target.to(d));
                   });

    check_backward("fused linear+gelu and mse_loss " + dn(dt), {u({16, 12}), u({8, 12}), u({8}), u({16, 8})},
                   [&](const std::vector<Tensor>& p, hg::Device) {
                     return hg::mse_loss(hg::linear(p[0], p[1], p[2], hg::Activation::GELU), p[3]);
                   });

    // tanh GELU: out_features 16 lets cuBLASLt write z in the GEMM (GELU_AUX_BIAS),
    // 12 takes the fallback (GEMM with bias, then one pass). dL/dy = gy (not a
    // leaf) does not depend on y, so only the value needs cuBLASLt's tanh
    // tolerance; the gradients come from z and our dGELU pass.
    for (int64_t features : {16, 12}) {
      const Tensor gy = u({10, features});
      check_backward("fused linear+gelu tanh, out_features " + std::to_string(features) + " " + dn(dt),
                     {u({10, 12}), u({features, 12}), u({features})},
                     [&](const std::vector<Tensor>& p, hg::Device d) {
                       return hg::sum(hg::linear(p[0], p[1], p[2], hg::Activation::GELUTanh) * gy.to(d));
                     },
                     std::max(hgtest::tol(dt), 1e-3));
    }

    check_backward("broadcast elementwise chain " + dn(dt), {u({8, 16}), u({16}, 0.5, 1.5)},
                   [&](const std::vector<Tensor>& p, hg::Device) {
                     const Tensor &x = p[0], &z = p[1];
                     const Tensor y = hg::sigmoid(x) * hg::tanh(z) + hg::exp(hg::neg(x * x)) / hg::sqrt(z * z + 1.0) -
                                      hg::pow(x, 2.0) * 0.5 + hg::log(z) * x;
                     return hg::mean(y);
                   });

    // distinct values: no ties in max/maximum
    const auto distinct = [&](const Shape& s, double shift) {
      Tensor t = hgtest::leaf_distinct(s, shift).detach().to(dt);
      return t;
    };
    check_backward("reductions, selections and clamps " + dn(dt), {distinct({6, 7}, 0.0), distinct({6, 7}, 0.05)},
                   [&](const std::vector<Tensor>& p, hg::Device) {
                     const Tensor &x = p[0], &z = p[1];
                     return hg::add(std::get<0>(hg::max(x, 1)).sum(), hg::pow(hg::mean(x, {0}), 2.0).sum()) +
                            hg::where(hg::gt(x, 0.0), x, x * 0.1).sum() + hg::clamp(x, -0.5, 0.5).sum() +
                            hg::gelu(z).sum() + hg::gelu(x, "tanh").sum() + hg::maximum(x, z).sum() + hg::minimum(x, z).mean() + hg::max(z) +
                            hg::abs(z).sum({1}, true).mean();
                   });

    check_backward("softmax, transposes, cat and stack " + dn(dt), {u({5, 6}), u({6, 5}), u({5, 6})},
                   [&](const std::vector<Tensor>& p, hg::Device) {
                     const Tensor s = hg::softmax(p[0], 0) * p[2];
                     const Tensor l = hg::log_softmax(p[1].t(), 1);
                     const Tensor c = hg::cat({s, l, p[1].t()}, 1);
                     return (hg::stack({c, c * 2.0}, 1) * hg::sum(c, {0}, true).unsqueeze(1)).mean();
                   });
  }
}

TEST_CASE("CUDA copies of views with more than 8 dims after merging match the CPU", "[cuda][ops][elementwise]") {
  // 10 dims of size 2, permuted so no two neighbours merge: the kernel sees
  // more dims than its strided path takes and splits the launch.
  hg::manual_seed(11);
  const Tensor x = hg::randn({2, 2, 2, 2, 2, 2, 2, 2, 2, 2});
  const hg::Shape perm{9, 0, 8, 1, 7, 2, 6, 3, 5, 4};
  const Tensor cpu = x.permute(perm).contiguous();
  const Tensor gpu = dev(x).permute(perm).contiguous().cpu();
  CHECK(hg::eq(cpu, gpu).to(hg::int64).sum().item<int64_t>() == x.numel());
  const Tensor added = hg::add(dev(x).permute(perm), 1.0).cpu();
  CHECK(hg::max(hg::abs(hg::sub(added, hg::add(x.permute(perm), 1.0)))).item<float>() == 0.0f);
}
