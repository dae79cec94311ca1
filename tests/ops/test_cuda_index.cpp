// The indexing and gathering ops on a CUDA device against the CPU backend on
// the same values (kernels/cuda/index.cu): exact for gathers, scatters and masked
// fills (they move bits), within the dtype's tolerance for scatter_add (atomic
// float adds in any order). Also what CUDA does with an out-of-range index (no
// sync, so no Error: gather gives NaN or 0, scatter skips it), gradients on
// CUDA against the CPU, and scatter_add under CUDA autocast. Run only where a
// GPU is usable ("[cuda]").
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "cuda_compare.h"
#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hgtest::values;
using hgtest::cuda::dev;
using hgtest::cuda::float_and_int;
using hgtest::cuda::kCuda;
using namespace hg::indexing;

namespace {
// Indexing moves values without arithmetic: CUDA must match the CPU exactly
// (`exact = false` only where atomics add in another order).
void expect_exact(const Tensor& gpu, const Tensor& cpu, const std::string& what, bool exact = true) {
  hgtest::cuda::expect_same(gpu, cpu, what, exact);
}


// A view applied the same way on both devices.
struct Layout {
  std::string name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
};
const std::vector<Layout> kLayouts = {
    {"contiguous", {37, 29}, [](const Tensor& t) { return t; }},
    {"transposed", {29, 37}, [](const Tensor& t) { return t.t(); }},
    {"narrowed", {37, 30}, [](const Tensor& t) { return t.narrow(1, 1, 29); }},
};

// No repeats along dim 1 of a [rows, len] index into n columns.
Tensor unique_cols(int64_t rows, int64_t len, int64_t n) {
  std::vector<double> v;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> perm(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) perm[k] = k;
    std::shuffle(perm.begin(), perm.end(), hgtest::rng());
    for (int64_t k = 0; k < len; ++k) v.push_back(static_cast<double>(perm[k]));
  }
  return hgtest::make(v, {rows, len}, DType::Int64);
}

}  // namespace

TEST_CASE("CUDA index_select, gather and scatter match the CPU exactly", "[cuda][ops][indexing]") {
  for (DType dt : float_and_int())
    for (const auto& l : kLayouts) {
      const std::string what = hgtest::dname(dt) + " " + l.name;
      const Tensor base = hgtest::uniform(l.base, dt);
      const Tensor xc = l.view(base), xg = l.view(dev(base));  // [37, 29], same values and layout
      const Tensor sel = hgtest::uniform({50}, DType::Int64, 0, 28);
      expect_exact(hg::index_select(xg, 1, dev(sel)), hg::index_select(xc, 1, sel), what + " index_select");
      const Tensor gi = hgtest::uniform({20, 40}, DType::Int64, 0, 28);
      expect_exact(hg::gather(xg, 1, dev(gi)), hg::gather(xc, 1, gi), what + " gather");
      expect_exact(hg::gather(xg, 1, dev(gi).t().contiguous().t()), hg::gather(xc, 1, gi), what + " gather strided index");
      const Tensor ui = unique_cols(30, 20, 29);
      const Tensor src = hgtest::uniform({33, 25}, dt);
      expect_exact(hg::scatter(xg, 1, dev(ui), dev(src)), hg::scatter(xc, 1, ui, src), what + " scatter");
      expect_exact(hg::scatter(xg, 1, dev(ui), 1.5), hg::scatter(xc, 1, ui, 1.5), what + " scatter value");
      const Tensor ai = hgtest::uniform({30, 20}, DType::Int64, 0, 3);  // many repeats: atomics
      expect_exact(hg::scatter_add(xg, 1, dev(ai), dev(src)), hg::scatter_add(xc, 1, ai, src), what + " scatter_add",
                  dt == DType::Int64);
      Tensor yg = xg.clone(), yc = xc.clone();
      yg.scatter_add_(1, dev(ai), dev(src));
      yc.scatter_add_(1, ai, src);
      expect_exact(yg, yc, what + " scatter_add_", dt == DType::Int64);
      yg.scatter_(1, dev(ui), dev(src));
      yc.scatter_(1, ui, src);
      expect_exact(yg, yc, what + " scatter_", false);
    }
  // bool, 0-d, empty, index_select on a big row count (grid-stride loop)
  const Tensor b = hgtest::random_bool({6, 7});
  const Tensor bi = hgtest::uniform({6, 3}, DType::Int64, 0, 6);
  expect_exact(hg::gather(dev(b), 1, dev(bi)), hg::gather(b, 1, bi), "bool gather");
  const Tensor s = hgtest::uniform({}, DType::Float32);
  expect_exact(hg::gather(dev(s), 0, dev(hg::zeros({}, DType::Int64))), hg::gather(s, 0, hg::zeros({}, DType::Int64)),
              "0-d gather");
  CHECK(hg::gather(dev(hgtest::uniform({3, 4}, DType::Float32)), 1, dev(hg::zeros({3, 0}, DType::Int64))).shape() ==
        Shape{3, 0});
  const Tensor big = hgtest::uniform({70000, 3}, DType::Float32);
  const Tensor bsel = hgtest::uniform({90000}, DType::Int64, 0, 69999);
  expect_exact(hg::index_select(dev(big), 0, dev(bsel)), hg::index_select(big, 0, bsel), "index_select 90000 rows");
}

TEST_CASE("CUDA masked_fill, where with scalars and one_hot match the CPU", "[cuda][ops][indexing]") {
  for (DType dt : float_and_int()) {
    const std::string what = hgtest::dname(dt);
    const Tensor x = hgtest::uniform({5, 9}, dt);
    const Tensor m = hgtest::random_bool({9});
    expect_exact(hg::masked_fill(dev(x), dev(m), 0.5), hg::masked_fill(x, m, 0.5), what + " masked_fill");
    expect_exact(hg::masked_fill(dev(x), dev(m), hg::full({}, -3.0)), hg::masked_fill(x, m, hg::full({}, -3.0)),
                what + " masked_fill with a CPU 0-d value");
    Tensor yg = dev(x), yc = x.clone();
    yg.masked_fill_(dev(m), 2.0);
    yc.masked_fill_(m, 2.0);
    expect_exact(yg, yc, what + " masked_fill_");
    const Tensor c = hgtest::random_bool({5, 9});
    expect_exact(hg::where(dev(c), dev(x), 0.25), hg::where(c, x, 0.25), what + " where(c, x, s)");
    expect_exact(hg::where(dev(c), 0.25, dev(x)), hg::where(c, 0.25, x), what + " where(c, s, x)");
  }
  const Tensor c = hgtest::random_bool({4, 3});
  expect_exact(hg::where(dev(c), 1.0, -1.0), hg::where(c, 1.0, -1.0), "where(c, s, s)");
  const Tensor idx = hgtest::uniform({3, 5}, DType::Int64, 0, 6);
  expect_exact(hg::one_hot(dev(idx)), hg::one_hot(idx), "one_hot");
  expect_exact(hg::one_hot(dev(idx), 9), hg::one_hot(idx, 9), "one_hot 9");
  REQUIRE_THROWS_AS(hg::one_hot(dev(hg::tensor(std::vector<int64_t>{0, -1}))), hg::Error);  // checked on the host
}

TEST_CASE("CUDA x.index and index_put_ with tensor indices match the CPU", "[cuda][ops][indexing]") {
  for (DType dt : float_and_int()) {
    const std::string what = hgtest::dname(dt);
    const Tensor x = hgtest::uniform({6, 7}, dt);
    const Tensor m = hgtest::random_bool({6, 7});
    expect_exact(dev(x).index({dev(m)}), x.index({m}), what + " x[mask]");
    expect_exact(dev(x).index({m}), x.index({m}), what + " x[cpu mask]");
    const Tensor i = hg::tensor(std::vector<int64_t>{5, -1, 0, 2}, {2, 2});
    expect_exact(dev(x).index({Slice(), dev(i)}), x.index({Slice(), i}), what + " x[:, idx]");
    Tensor yg = dev(x), yc = x.clone();
    yg.index_put_({dev(m)}, 1.0);
    yc.index_put_({m}, 1.0);
    expect_exact(yg, yc, what + " x[mask] = s");
    int64_t n = 0;
    for (double v : values(m)) n += v != 0;
    const Tensor vals = hgtest::uniform({n}, dt);
    yg.index_put_({dev(m)}, dev(vals));
    yc.index_put_({m}, vals);
    expect_exact(yg, yc, what + " x[mask] = values");
    const Tensor add = hgtest::uniform({6, 4}, dt);
    const Tensor rep = hg::tensor(std::vector<int64_t>{1, 1, 3, 1});
    yg.index_put_({Slice(), dev(rep)}, dev(add), true);
    yc.index_put_({Slice(), rep}, add, true);
    expect_exact(yg, yc, what + " x[:, idx] += values", dt == DType::Int64);
  }
}

TEST_CASE("CUDA out-of-range indices never touch memory out of bounds", "[cuda][ops][indexing]") {
  // documented: no host check on CUDA (a sync); gather gives NaN (0 for int64), scatter skips
  const Tensor x = dev(hgtest::iota({2, 3}, DType::Float32));
  const Tensor bad = dev(hg::tensor(std::vector<int64_t>{1, 3, -1, 0}, {2, 2}));
  const auto g = values(hg::gather(x, 1, bad).cpu());
  CHECK(g[0] == 1.0);
  CHECK(std::isnan(g[1]));
  CHECK(std::isnan(g[2]));
  CHECK(g[3] == 3.0);
  const auto gi = values(hg::gather(x.to(DType::Int64), 1, bad).cpu());
  CHECK(gi == (std::vector<double>{1, 0, 0, 3}));
  const Tensor s = hg::scatter(x, 1, bad, dev(hg::full({2, 2}, 9.0)));
  HG_CHECK_EXACT(s.cpu(), (std::vector<double>{0, 9, 2, 9, 4, 5}));
  const Tensor sa = hg::scatter_add(x, 1, bad, dev(hg::full({2, 2}, 1.0)));
  HG_CHECK_EXACT(sa.cpu(), (std::vector<double>{0, 2, 2, 4, 4, 5}));
}

TEST_CASE("CUDA gradients of the indexing ops match the CPU", "[cuda][ops][indexing][autograd]") {
  const Tensor x0 = hgtest::uniform({5, 6}, DType::Float64);
  const Tensor src0 = hgtest::uniform({5, 4}, DType::Float64);
  const Tensor sel = hg::tensor(std::vector<int64_t>{2, 2, 0, 5});
  const Tensor gi = hgtest::uniform({5, 4}, DType::Int64, 0, 5);
  const Tensor ui = unique_cols(5, 4, 6);
  const Tensor m = hgtest::random_bool({6});
  using Fn = std::function<Tensor(const Tensor&, const Tensor&, hg::Device)>;
  const std::vector<std::pair<std::string, Fn>> cases = {
      {"index_select", [&](const Tensor& x, const Tensor&, hg::Device d) { return hg::index_select(x, 1, sel.to(d)); }},
      {"gather", [&](const Tensor& x, const Tensor&, hg::Device d) { return hg::gather(x, 1, gi.to(d)); }},
      {"scatter", [&](const Tensor& x, const Tensor& s, hg::Device d) { return hg::scatter(x, 1, ui.to(d), s); }},
      {"scatter_add", [&](const Tensor& x, const Tensor& s, hg::Device d) { return hg::scatter_add(x, 1, gi.to(d), s); }},
      {"masked_fill", [&](const Tensor& x, const Tensor& s, hg::Device d) {
         return hg::masked_fill(x, m.to(d), s.sum());
       }},
      {"x[mask]", [&](const Tensor& x, const Tensor& s, hg::Device d) { return x.index({Slice(), m.to(d)}) * s.sum(); }},
  };
  for (const auto& [name, f] : cases) {
    INFO(name);
    Tensor xc = x0.clone().requires_grad_(), sc = src0.clone().requires_grad_();
    Tensor xg = dev(x0).requires_grad_(), sg = dev(src0).requires_grad_();
    const Tensor w = hgtest::uniform(f(xc.detach(), sc.detach(), hg::Device::cpu()).shape(), DType::Float64);
    (f(xc, sc, hg::Device::cpu()) * w).sum().backward();
    (f(xg, sg, kCuda) * dev(w)).sum().backward();
    expect_exact(xg.grad(), xc.grad(), name + " input grad", false);
    if (sc.grad().defined()) expect_exact(sg.grad(), sc.grad(), name + " src grad", false);
  }
}

TEST_CASE("CUDA autocast promotes scatter_add's inputs to the widest dtype", "[cuda][amp][indexing]") {
  const Tensor x = dev(hgtest::uniform({3, 4}, DType::Float16));
  const Tensor src = dev(hgtest::uniform({3, 4}, DType::Float32));
  const Tensor idx = dev(hgtest::uniform({3, 4}, DType::Int64, 0, 3));
  hg::amp::autocast region(hg::DeviceType::CUDA, hg::float16);
  CHECK(hg::scatter_add(x, 1, idx, src).dtype() == DType::Float32);
  CHECK(hg::gather(x, 1, idx).dtype() == DType::Float16);  // no row
}
