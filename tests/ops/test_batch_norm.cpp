// batch_norm: forward against a float64 reference written here (training with
// batch statistics and the running-stat update, eval with the running ones), in
// every float dtype with float32 statistics, on contiguous and permuted inputs;
// gradients by finite differences in float64 (training and eval, with and
// without weight/bias) and against a float64 reference for bfloat16 with
// float32 parameters; output dtypes under CPU autocast; errors.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hgtest::values;

namespace {

struct Ref {
  std::vector<double> y, mean, var;  // var: biased
  std::vector<double> running_mean, running_var;
};

// x in logical order with shape [N, C, *]; w, b, rm, rv of C values (empty: absent).
Ref bn_ref(const std::vector<double>& x, const Shape& shape, const std::vector<double>& w,
           const std::vector<double>& b, bool training, std::vector<double> rm, std::vector<double> rv,
           double momentum, double eps) {
  const int64_t n = shape[0], c = shape[1];
  int64_t s = 1;
  for (size_t d = 2; d < shape.size(); ++d) s *= shape[d];
  Ref r;
  r.mean.assign(static_cast<size_t>(c), 0.0);
  r.var.assign(static_cast<size_t>(c), 0.0);
  auto at = [&](int64_t i, int64_t ch, int64_t j) { return x[static_cast<size_t>((i * c + ch) * s + j)]; };
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sum += at(i, ch, j);
    const double m = sum / static_cast<double>(n * s);
    double sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sq += (at(i, ch, j) - m) * (at(i, ch, j) - m);
    r.mean[static_cast<size_t>(ch)] = m;
    r.var[static_cast<size_t>(ch)] = sq / static_cast<double>(n * s);
  }
  r.y.resize(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const size_t k = static_cast<size_t>(ch);
      const double m = training ? r.mean[k] : rm[k];
      const double v = training ? r.var[k] : rv[k];
      const double ww = w.empty() ? 1.0 : w[k], bb = b.empty() ? 0.0 : b[k];
      for (int64_t j = 0; j < s; ++j)
        r.y[static_cast<size_t>((i * c + ch) * s + j)] = (at(i, ch, j) - m) / std::sqrt(v + eps) * ww + bb;
    }
  if (training && !rm.empty()) {
    const double cnt = static_cast<double>(n * s);
    for (size_t k = 0; k < rm.size(); ++k) {
      rm[k] = (1 - momentum) * rm[k] + momentum * r.mean[k];
      rv[k] = (1 - momentum) * rv[k] + momentum * r.var[k] * cnt / (cnt - 1);
    }
  }
  r.running_mean = rm;
  r.running_var = rv;
  return r;
}

// A tensor of `shape` in `dt` that is not contiguous (its channel dim is innermost in memory; [N, C]: transposed).
Tensor channels_last(const Shape& shape, DType dt) {
  if (shape.size() == 2) return hgtest::uniform({shape[1], shape[0]}, dt, -2.0, 3.0).t();  // [N, C]: transposed
  Shape stored = {shape[0]};
  for (size_t d = 2; d < shape.size(); ++d) stored.push_back(shape[d]);
  stored.push_back(shape[1]);
  Shape perm = {0, static_cast<int64_t>(shape.size()) - 1};
  for (size_t d = 2; d < shape.size(); ++d) perm.push_back(static_cast<int64_t>(d) - 1);
  Tensor t = hgtest::uniform(stored, dt, -2.0, 3.0).permute(perm);
  REQUIRE(t.shape() == shape);
  if (t.numel() / (shape[0] * shape[1]) > 1) REQUIRE(!t.is_contiguous());  // 1x1 maps: the two layouts are one
  return t;
}

DType stat_dtype(DType dt) { return dt == DType::Float64 ? DType::Float64 : DType::Float32; }

}  // namespace

TEST_CASE("batch_norm in training normalises with the batch statistics and updates the running ones",
          "[ops][batch_norm]") {
  const double momentum = 0.3, eps = 1e-3;
  for (DType dt : hgtest::kFloatDTypes) {
    for (const Shape& shape : {Shape{6, 3}, Shape{2, 3, 5}, Shape{3, 4, 5, 6}, Shape{2, 2, 3, 2, 2}, Shape{7, 4, 1, 1}}) {
      for (bool strided : {false, true}) {
        INFO(hgtest::dname(dt) << " " << hg::shape_str(shape) << (strided ? " channels innermost" : " contiguous"));
        const int64_t c = shape[1];
        const DType st = stat_dtype(dt);
        const Tensor x = strided ? channels_last(shape, dt) : hgtest::uniform(shape, dt, -2.0, 3.0);
        const Tensor w = hgtest::uniform({c}, st, 0.5, 1.5), b = hgtest::uniform({c}, st);
        const Tensor rm = hgtest::uniform({c}, st), rv = hgtest::uniform({c}, st, 0.5, 2.0);
        const Ref ref = bn_ref(values(x), shape, values(w), values(b), true, values(rm), values(rv), momentum, eps);
        const uint64_t v0 = rm.version();
        const Tensor y = hg::batch_norm(x, rm, rv, w, b, true, momentum, eps);
        CHECK(y.dtype() == dt);
        CHECK(y.shape() == shape);
        HG_CHECK_CLOSE(y, ref.y);
        HG_CHECK_CLOSE(rm, ref.running_mean);
        HG_CHECK_CLOSE(rv, ref.running_var);
        CHECK(rm.version() > v0);  // changed in place: saved views of it see the change
      }
    }
  }
}

TEST_CASE("batch_norm in eval normalises with the running statistics and leaves them alone", "[ops][batch_norm]") {
  for (DType dt : hgtest::kFloatDTypes) {
    for (bool strided : {false, true}) {
      INFO(hgtest::dname(dt) << (strided ? " channels innermost" : " contiguous"));
      const Shape shape{3, 4, 5, 2};
      const DType st = stat_dtype(dt);
      const Tensor x = strided ? channels_last(shape, dt) : hgtest::uniform(shape, dt, -2.0, 3.0);
      const Tensor w = hgtest::uniform({4}, st, 0.5, 1.5), b = hgtest::uniform({4}, st);
      const Tensor rm = hgtest::uniform({4}, st), rv = hgtest::uniform({4}, st, 0.5, 2.0);
      const auto rm0 = values(rm), rv0 = values(rv);
      const Ref ref = bn_ref(values(x), shape, values(w), values(b), false, rm0, rv0, 0.1, 1e-5);
      const Tensor y = hg::batch_norm(x, rm, rv, w, b, false);
      CHECK(y.dtype() == dt);
      HG_CHECK_CLOSE(y, ref.y);
      HG_CHECK_EXACT(rm, rm0);
      HG_CHECK_EXACT(rv, rv0);
      // without weight and bias
      const Ref plain = bn_ref(values(x), shape, {}, {}, false, rm0, rv0, 0.1, 1e-5);
      HG_CHECK_CLOSE(hg::batch_norm(x, rm, rv), plain.y);
    }
  }
}

TEST_CASE("batch_norm with parameters and statistics in the input's half dtype", "[ops][batch_norm]") {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    INFO(hgtest::dname(dt));
    const Shape shape{4, 3, 3, 3};
    const Tensor x = hgtest::uniform(shape, dt, -2.0, 3.0);
    const Tensor w = hgtest::uniform({3}, dt, 0.5, 1.5), b = hgtest::uniform({3}, dt);
    const Tensor rm = hgtest::uniform({3}, dt), rv = hgtest::uniform({3}, dt, 0.5, 2.0);
    const Ref ref = bn_ref(values(x), shape, values(w), values(b), true, values(rm), values(rv), 0.1, 1e-5);
    const Tensor y = hg::batch_norm(x, rm, rv, w, b, true);
    CHECK(y.dtype() == dt);
    CHECK(rm.dtype() == dt);
    HG_CHECK_CLOSE(y, ref.y);
    HG_CHECK_CLOSE(rm, hgtest::round_all(ref.running_mean, dt));
    HG_CHECK_CLOSE(rv, hgtest::round_all(ref.running_var, dt));
  }
}

TEST_CASE("batch_norm's running statistics after 3 training steps: the formula and PyTorch's values",
          "[ops][batch_norm]") {
  // Inputs x_k[i] = sin(0.37 i + 1.3 k) (1 + k) + 0.2 k, float32 [4, 3, 2, 2]. PyTorch 1.13's values
  // (tests' /usr/bin/python3):
  //   def step_input(k): return torch.tensor([math.sin(0.37 * i + 1.3 * k) * (1 + k) + 0.2 * k
  //       for i in range(48)], dtype=torch.float64).to(torch.float32).reshape(4, 3, 2, 2)
  //   for mom in (0.1, None):
  //       bn = torch.nn.BatchNorm2d(3, momentum=mom)
  //       for k in range(3): y = bn(step_input(k))
  //       print(bn.running_mean.tolist(), bn.running_var.tolist(), int(bn.num_batches_tracked))
  auto step_input = [](int k) {
    std::vector<double> v(48);
    for (int i = 0; i < 48; ++i) v[static_cast<size_t>(i)] = std::sin(0.37 * i + 1.3 * k) * (1 + k) + 0.2 * k;
    return hgtest::make(v, {4, 3, 2, 2}, DType::Float32);
  };
  // momentum 0.1 through the functional form, checked step by step against the formula
  Tensor rm = hg::zeros({3}), rv = hg::ones({3});
  std::vector<double> em(3, 0.0), ev(3, 1.0);
  for (int k = 0; k < 3; ++k) {
    const Tensor x = step_input(k);
    const Ref ref = bn_ref(values(x), x.shape(), {}, {}, true, em, ev, 0.1, 1e-5);
    em = ref.running_mean;
    ev = ref.running_var;
    hg::batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1);
    HG_CHECK_CLOSE(rm, em);
    HG_CHECK_CLOSE(rv, ev);
  }
  HG_CHECK_CLOSE_TOL(rm, (std::vector<double>{0.0718597546, 0.0088407388, 0.0352255479}), 1e-6);
  HG_CHECK_CLOSE_TOL(rv, (std::vector<double>{1.38999188, 1.47074723, 1.38315344}), 1e-6);

  // the layers: momentum 0.1 and momentum=None (the cumulative average)
  hg::nn::BatchNorm2d bn(3), cumulative(3, 1e-5, std::nullopt);
  for (int k = 0; k < 3; ++k) {
    bn(step_input(k));
    cumulative(step_input(k));
  }
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);
  CHECK(cumulative.num_batches_tracked.item<int64_t>() == 3);
  HG_CHECK_CLOSE_TOL(bn.running_mean, (std::vector<double>{0.0718597546, 0.0088407388, 0.0352255479}), 1e-6);
  HG_CHECK_CLOSE_TOL(bn.running_var, (std::vector<double>{1.38999188, 1.47074723, 1.38315344}), 1e-6);
  HG_CHECK_CLOSE_TOL(cumulative.running_mean, (std::vector<double>{0.261620283, 0.0370653719, 0.108832613}), 1e-6);
  HG_CHECK_CLOSE_TOL(cumulative.running_var, (std::vector<double>{2.3095777, 2.57049823, 2.28831029}), 1e-6);
}

TEST_CASE("batch_norm's gradients match finite differences", "[ops][batch_norm][grad]") {
  for (const Shape& shape : {Shape{5, 3}, Shape{3, 2, 4}, Shape{2, 3, 3, 2}, Shape{4, 3, 1, 1}}) {
    INFO(hg::shape_str(shape));
    const int64_t c = shape[1];
    const Tensor x = hgtest::leaf(shape), xs = hgtest::strided_leaf(shape);
    const Tensor w = hgtest::leaf({c}, 0.5, 1.5), b = hgtest::leaf({c});
    const Tensor rm = hgtest::uniform({c}, DType::Float64), rv = hgtest::uniform({c}, DType::Float64, 0.5, 2.0);
    auto train = [](const std::vector<Tensor>& in) {
      return hg::batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-3);
    };
    auto train_stats = [&](const std::vector<Tensor>& in) {
      // running stats given: updated on every call, the output unchanged
      Tensor m = rm.clone(), v = rv.clone();
      return hg::batch_norm(in[0], m, v, in[1], in[2], true, 0.1, 1e-3);
    };
    auto eval = [&](const std::vector<Tensor>& in) {
      return hg::batch_norm(in[0], rm, rv, in[1], in[2], false, 0.1, 1e-3);
    };
    auto no_affine = [](const std::vector<Tensor>& in) {
      return hg::batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true);
    };
    // a nonlinear function of the output, so the upstream gradient varies
    auto squared = [&](const std::vector<Tensor>& in) { return hg::mul(train(in), train(in)); };
    HG_GRADCHECK(train, {x, w, b});
    HG_GRADCHECK(train, {xs, w, b});
    HG_GRADCHECK(train_stats, {x, w, b});
    HG_GRADCHECK(eval, {x, w, b});
    HG_GRADCHECK(eval, {xs, w, b});
    HG_GRADCHECK(no_affine, {x});
    HG_GRADCHECK(squared, {x, w, b});
    // only the parameters want gradients (dx is not computed), or only the input
    HG_GRADCHECK(train, {x.detach(), w, b});
    HG_GRADCHECK(train, {x, w.detach(), b.detach()});
    HG_GRADCHECK(eval, {x.detach(), w, Tensor()});
  }
}

TEST_CASE("batch_norm's gradients for a bfloat16 input with float32 parameters", "[ops][batch_norm][grad][amp]") {
  // [8, 3, 1, 1] and [8, 16, 1, 1]: one position per sample, whose rows of
  // channels take the channels-last path (our loops; oneDNN's NHWC primitive
  // where it has a JIT kernel, 16 channels)
  for (const Shape& shape : {Shape{4, 3, 2, 3}, Shape{8, 3, 1, 1}, Shape{8, 16, 1, 1}})
  for (bool training : {true, false}) {
    INFO(hg::shape_str(shape) << (training ? " training" : " eval"));
    const int64_t n = shape[0], c = shape[1], s = shape[2] * shape[3];
    const Tensor x = hgtest::uniform(shape, DType::BFloat16, -2.0, 3.0).requires_grad_(true);
    const Tensor w = hgtest::uniform({c}, DType::Float32, 0.5, 1.5).requires_grad_(true);
    const Tensor b = hgtest::uniform({c}, DType::Float32).requires_grad_(true);
    const Tensor rm = hgtest::uniform({c}, DType::Float32), rv = hgtest::uniform({c}, DType::Float32, 0.5, 2.0);
    const Tensor g = hgtest::uniform(shape, DType::BFloat16);
    const auto xv = values(x), gv = values(g), wv = values(w);
    const auto rmv = values(rm), rvv = values(rv);
    const Ref ref = bn_ref(xv, shape, {}, {}, true, {}, {}, 0.1, 1e-5);
    hg::batch_norm(x, rm, rv, w, b, training).backward(g);
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == DType::BFloat16);
    CHECK(w.grad().dtype() == DType::Float32);
    CHECK(b.grad().dtype() == DType::Float32);
    // the float64 reference of the three gradients
    std::vector<double> dx(xv.size()), dw(static_cast<size_t>(c), 0.0), db(static_cast<size_t>(c), 0.0);
    for (int64_t ch = 0; ch < c; ++ch) {
      const size_t k = static_cast<size_t>(ch);
      const double m = training ? ref.mean[k] : rmv[k];
      const double inv = 1.0 / std::sqrt((training ? ref.var[k] : rvv[k]) + 1e-5);
      double sg = 0, sgx = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) {
          const size_t e = static_cast<size_t>((i * c + ch) * s + j);
          sg += gv[e];
          sgx += gv[e] * (xv[e] - m);
        }
      db[k] = sg;
      dw[k] = sgx * inv;
      const double cnt = static_cast<double>(n * s);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) {
          const size_t e = static_cast<size_t>((i * c + ch) * s + j);
          dx[e] = training ? wv[k] * inv * (gv[e] - sg / cnt - (xv[e] - m) * inv * inv * sgx / cnt)
                           : wv[k] * inv * gv[e];
        }
    }
    HG_CHECK_CLOSE(x.grad(), dx);
    HG_CHECK_CLOSE_TOL(w.grad(), dw, 1e-5);
    HG_CHECK_CLOSE_TOL(b.grad(), db, 1e-5);
  }
}

TEST_CASE("batch_norm under CPU autocast runs in its input's dtype", "[ops][batch_norm][amp]") {
  const Tensor rm = hg::zeros({3}), rv = hg::ones({3});
  const Tensor w = hgtest::uniform({3}, DType::Float32, 0.5, 1.5), b = hgtest::uniform({3}, DType::Float32);
  hg::amp::autocast region(hg::DeviceType::CPU);
  // a float32 input stays float32 (no autocast row, as in PyTorch)
  const Tensor x32 = hgtest::uniform({4, 3, 2, 2}, DType::Float32);
  CHECK(hg::batch_norm(x32, rm, rv, w, b, true).dtype() == DType::Float32);
  // a bfloat16 input (e.g. a convolution's output under autocast) gives bfloat16; the stats stay float32
  const Tensor x16 = hgtest::uniform({4, 3, 2, 2}, DType::BFloat16);
  const Tensor y = hg::batch_norm(x16, rm, rv, w, b, true);
  CHECK(y.dtype() == DType::BFloat16);
  CHECK(rm.dtype() == DType::Float32);
  CHECK(rv.dtype() == DType::Float32);
  // after a bfloat16 linear layer
  const Tensor lin = hg::linear(hgtest::uniform({5, 4}, DType::Float32), hgtest::uniform({3, 4}, DType::Float32),
                                hgtest::uniform({3}, DType::Float32));
  REQUIRE(lin.dtype() == DType::BFloat16);
  CHECK(hg::batch_norm(lin, rm, rv, w, b, true).dtype() == DType::BFloat16);
}

TEST_CASE("batch_norm of an empty batch is empty and leaves the running statistics", "[ops][batch_norm]") {
  Tensor rm = hgtest::uniform({3}, DType::Float32), rv = hgtest::uniform({3}, DType::Float32, 0.5, 2.0);
  const auto rm0 = values(rm), rv0 = values(rv);
  const Tensor x = hg::zeros({0, 3, 4}).requires_grad_(true);
  const Tensor w = hg::ones({3}).requires_grad_(true);
  const Tensor y = hg::batch_norm(x, rm, rv, w, Tensor(), true);
  CHECK(y.shape() == Shape{0, 3, 4});
  HG_CHECK_EXACT(rm, rm0);
  HG_CHECK_EXACT(rv, rv0);
  hg::sum(y).backward();
  CHECK(x.grad().shape() == Shape{0, 3, 4});
  HG_CHECK_EXACT(w.grad(), (std::vector<double>{0, 0, 0}));
}

TEST_CASE("batch_norm rejects bad arguments with messages naming them", "[ops][batch_norm][errors]") {
  const Tensor x = hgtest::uniform({4, 3, 2}, DType::Float32);
  const Tensor c3 = hg::ones({3}), c4 = hg::ones({4});
  hgtest::expect_errors({
      {"1-d input", [] { hg::batch_norm(hg::ones({3}), hg::zeros({3}), hg::ones({3})); },
       {"batch_norm", "at least 2 dims", "[3]"}},
      {"0-d input", [] { hg::batch_norm(hg::ones({}), Tensor(), Tensor(), Tensor(), Tensor(), true); },
       {"batch_norm", "at least 2 dims"}},
      {"integer input",
       [] { hg::batch_norm(hg::ones({4, 3}, DType::Int64), Tensor(), Tensor(), Tensor(), Tensor(), true); },
       {"batch_norm", "floating", "int64"}},
      {"weight of the wrong size", [&] { hg::batch_norm(x, c3, c3, c4, c3, true); },
       {"weight should contain 3 elements", "[4]"}},
      {"running_var of the wrong size", [&] { hg::batch_norm(x, c3, c4, c3, c3, true); },
       {"running_var should contain 3 elements"}},
      {"2-d weight", [&] { hg::batch_norm(x, c3, c3, hg::ones({3, 1}), c3, true); },
       {"weight should contain 3 elements"}},
      {"float16 statistics for a float32 input",
       [&] { hg::batch_norm(x, hg::zeros({3}, DType::Float16), hg::ones({3}, DType::Float16)); },
       {"running_mean", "float16", "float32 or the input's dtype"}},
      {"float64 weight for a bfloat16 input",
       [&] { hg::batch_norm(x.to(DType::BFloat16), c3, c3, hg::ones({3}, DType::Float64)); },
       {"weight", "float64", "bfloat16"}},
      {"one value per channel in training", [] { hg::batch_norm(hg::ones({1, 3}), hg::zeros({3}), hg::ones({3}), Tensor(), Tensor(), true); },
       {"Expected more than 1 value per channel when training", "[1, 3]"}},
      {"one value per channel in training (spatial)",
       [] { hg::batch_norm(hg::ones({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor(), true); },
       {"Expected more than 1 value per channel when training", "[1, 3, 1, 1]"}},
      {"eval without running stats", [&] { hg::batch_norm(x, Tensor(), Tensor()); },
       {"running_mean and running_var are needed", "training=true"}},
      {"only running_mean", [&] { hg::batch_norm(x, c3, Tensor(), Tensor(), Tensor(), true); },
       {"both running_mean and running_var"}},
      {"running stats that require grad",
       [&] { hg::batch_norm(x, hg::zeros({3}).requires_grad_(true), hg::ones({3}), Tensor(), Tensor(), true); },
       {"must not require grad", "buffers"}},
      {"undefined input", [] { hg::batch_norm(Tensor(), Tensor(), Tensor()); }, {"batch_norm", "input"}},
  });
  // one value per channel is fine in eval (PyTorch too)
  CHECK(hg::batch_norm(hg::ones({1, 3}), hg::zeros({3}), hg::ones({3})).shape() == Shape{1, 3});
}
