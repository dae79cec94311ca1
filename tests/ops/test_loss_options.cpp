// The losses' options (ops/loss_options.h) and nn::functional: cross_entropy
// with class weights, label smoothing and probability targets; weighted
// nll_loss; l1_loss, smooth_l1_loss; mse_loss broadcasting; the weights of
// binary_cross_entropy(_with_logits). Forward against float64 references
// computed here from the formulas and against PyTorch 1.13 numbers, every
// reduction, gradcheck in float64, errors, autocast dtypes.
#include <catch2/catch.hpp>

#include <halfgrad/amp/autocast.h>
#include <halfgrad/nn/functional.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include "test_util.h"

using namespace halfgrad;
namespace F = halfgrad::nn::functional;
using Catch::Matchers::Contains;
using hgtest::values;

namespace {
const char* rname(Reduction r) { return r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none"; }
constexpr Reduction kReductions[] = {Reduction::Mean, Reduction::Sum, Reduction::None};
constexpr int64_t N = 5, C = 4;

// The inputs of the PyTorch 1.13 script that produced the constants below
// (run as `/usr/bin/python3 ref.py`; its torch calls are quoted in the test's
// comments, the inputs are these formulas, rebuilt here without Python):
//   x[i][c] = 2 sin(0.7 i + 1.3 c) [5, 4], t[i] = (3 i + 1) % 4, w[c] = 0.5 + 0.25 c,
//   p = softmax(cos(0.9 i - 0.4 c), dim 1)
std::vector<double> x_values() {
  std::vector<double> v;
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c) v.push_back(2 * std::sin(0.7 * i + 1.3 * c));
  return v;
}
Tensor torch_x() { return hgtest::make(x_values(), {N, C}, float64); }
Tensor torch_t() { return tensor(std::vector<int64_t>{1, 0, 3, 2, 1}); }
Tensor torch_w() { return hgtest::make({0.5, 0.75, 1.0, 1.25}, {C}, float64); }
Tensor torch_p() {
  std::vector<double> v;
  for (int i = 0; i < N; ++i) {
    double s = 0;
    for (int c = 0; c < C; ++c) s += std::exp(std::cos(0.9 * i - 0.4 * c));
    for (int c = 0; c < C; ++c) v.push_back(std::exp(std::cos(0.9 * i - 0.4 * c)) / s);
  }
  return hgtest::make(v, {N, C}, float64);
}
//   a[i][j] = sin(1.1 i + 0.5 j) [4, 3], b[i][j] = 0.9 cos(0.8 i - 0.3 j)
Tensor torch_a() {
  std::vector<double> v;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) v.push_back(std::sin(1.1 * i + 0.5 * j));
  return hgtest::make(v, {4, 3}, float64);
}
Tensor torch_b() {
  std::vector<double> v;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) v.push_back(std::cos(0.8 * i - 0.3 * j) * 0.9);
  return hgtest::make(v, {4, 3}, float64);
}

// ---- float64 references from the formulas --------------------------------------
std::vector<double> log_softmax_rows(const std::vector<double>& x, int64_t n, int64_t c) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, x[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[i * c + j] - mx);
    for (int64_t j = 0; j < c; ++j) out[i * c + j] = x[i * c + j] - mx - std::log(s);
  }
  return out;
}
std::vector<double> reduce(const std::vector<double>& per, Reduction r, double divisor) {
  if (r == Reduction::None) return per;
  double s = 0;
  for (double e : per) s += e;
  return {r == Reduction::Sum ? s : s / divisor};
}
// Class-index targets: (1 - eps) nll_w + eps / C smooth_w, mean divides by the
// summed weights of the kept targets. `logp`: log-probabilities already.
std::vector<double> ref_ce_index(const std::vector<double>& logp, int64_t n, int64_t c, const std::vector<double>& t,
                                 const std::vector<double>& w, int64_t ignore, Reduction r, double eps) {
  std::vector<double> nll(n), smooth(n);
  double wsum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto ti = static_cast<int64_t>(t[i]);
    if (ti == ignore) continue;
    const double wi = w.empty() ? 1.0 : w[ti];
    wsum += wi;
    nll[i] = -wi * logp[i * c + ti];
    for (int64_t j = 0; j < c; ++j) smooth[i] -= (w.empty() ? 1.0 : w[j]) * logp[i * c + j];
  }
  const auto a = reduce(nll, r, wsum), b = reduce(smooth, r, wsum);
  std::vector<double> out(a.size());
  for (size_t k = 0; k < a.size(); ++k) out[k] = (1 - eps) * a[k] + eps / static_cast<double>(c) * b[k];
  return out;
}
// Probability targets: -sum_c w_c t'_c logp_c with t' = t (1 - eps) + eps / C; mean over N.
std::vector<double> ref_ce_prob(const std::vector<double>& logp, int64_t n, int64_t c, const std::vector<double>& t,
                                const std::vector<double>& w, Reduction r, double eps) {
  std::vector<double> per(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      per[i] -= (w.empty() ? 1.0 : w[j]) * (t[i * c + j] * (1 - eps) + eps / static_cast<double>(c)) * logp[i * c + j];
  return reduce(per, r, static_cast<double>(n));
}
double ref_smooth_l1(double d, double beta) {
  const double z = std::fabs(d);
  return z < beta ? 0.5 * z * z / beta : z - 0.5 * beta;
}
double softplus(double v) { return std::log1p(std::exp(-std::fabs(v))) + std::max(v, 0.0); }

Tensor class_targets(int64_t n, int64_t c, int64_t ignore, int n_ignored) {
  Tensor t = hgtest::uniform({n}, int64, 0, static_cast<double>(c - 1));
  auto* p = static_cast<int64_t*>(t.data_ptr());
  for (int k = 0; k < n_ignored; ++k) p[(3 * k + 1) % n] = ignore;
  return t;
}
// Rows of positive values summing to 1.
Tensor prob_targets(int64_t n, int64_t c, DType dt) {
  const Tensor u = hgtest::uniform({n, c}, float64, 0.1, 1.0);
  return div(u, sum(u, {1}, true)).to(dt);
}
}  // namespace

TEST_CASE("loss options: the designated-initialiser spellings compile and pick the options form",
          "[ops][loss][options]") {
  const Tensor x = torch_x(), t = torch_t(), w = torch_w(), p = torch_p();
  const Tensor a = torch_a(), b = torch_b();
  auto item = [](const Tensor& l) { return l.item<double>(); };
  // C++20 designated lists follow the member order (weight, ignore_index, reduction, label_smoothing).
  // The values are PyTorch 1.13's (the PyTorch test below).
  CHECK(item(F::cross_entropy(x, t, {.label_smoothing = 0.0})) == Approx(item(cross_entropy(x, t))).epsilon(1e-15));
  {
    namespace hg = halfgrad;  // the spelling of the docs
    const Tensor logits = x, target = t;
    CHECK(item(hg::nn::functional::cross_entropy(logits, target, {.label_smoothing = 0.1})) ==
          Approx(item(hg::cross_entropy(logits, target, {Tensor(), -100, Reduction::Mean, 0.1}))).epsilon(1e-15));
    CHECK(item(hg::nn::functional::cross_entropy(logits, target, {.label_smoothing = 0.1})) !=
          Approx(item(hg::cross_entropy(logits, target))));
  }
  CHECK(item(F::cross_entropy(x, t, {.ignore_index = 2, .label_smoothing = 0.2})) ==
        Approx(2.158392728922805).epsilon(1e-12));
  CHECK(item(F::cross_entropy(x, t, {.weight = w, .ignore_index = 2, .label_smoothing = 0.1})) ==
        Approx(2.531351986546707).epsilon(1e-12));
  CHECK(item(cross_entropy(x, t, {.weight = w})) == Approx(2.8580671180180026).epsilon(1e-12));
  CHECK(item(F::cross_entropy(x, p, {.weight = w, .label_smoothing = 0.1})) == Approx(2.283093609318174).epsilon(1e-12));
  CHECK(item(F::cross_entropy(x, t, {.reduction = Reduction::Sum, .label_smoothing = 0.2})) ==
        Approx(item(F::cross_entropy(x, t, {.label_smoothing = 0.2})) * N).epsilon(1e-12));
  CHECK(item(F::nll_loss(log_softmax(x, 1), t, {.weight = w, .ignore_index = 2})) ==
        Approx(2.526593792222673).epsilon(1e-12));
  CHECK(item(F::mse_loss(a, b, {.reduction = Reduction::Sum})) == Approx(item(mse_loss(a, b, Reduction::Sum))));
  CHECK(item(F::l1_loss(a, b, {.reduction = Reduction::Sum})) == Approx(4.812959630639182).epsilon(1e-12));
  CHECK(item(F::smooth_l1_loss(a, b, {.beta = 0.5})) == Approx(0.2146008468798198).epsilon(1e-12));
  CHECK(item(F::smooth_l1_loss(a, b, {.reduction = Reduction::Sum, .beta = 0.5})) ==
        Approx(2.5752101625578376).epsilon(1e-12));
  const Tensor ww = hgtest::make({0.5, 1.0, 2.0}, {3}, float64), pw = hgtest::make({3.0, 0.5, 1.5}, {3}, float64);
  const Tensor tb = div(add(b, 1.0), 2.0);
  CHECK(item(F::binary_cross_entropy(sigmoid(a), tb, {.weight = ww})) == Approx(0.6724980634846874).epsilon(1e-12));
  CHECK(item(F::binary_cross_entropy_with_logits(mul(a, 3.0), tb, {.weight = ww, .pos_weight = pw})) ==
        Approx(0.9134120755111153).epsilon(1e-12));
  CHECK(item(F::binary_cross_entropy_with_logits(mul(a, 3.0), tb, {.pos_weight = pw})) !=
        Approx(item(F::binary_cross_entropy_with_logits(mul(a, 3.0), tb))));
  // positional forms still work, and {} / a bare Reduction are fine
  CHECK(item(F::cross_entropy(x, t, Reduction::Sum, 2)) == Approx(item(cross_entropy(x, t, {.ignore_index = 2,
                                                                                            .reduction = Reduction::Sum}))));
  CHECK(item(F::cross_entropy(x, t, {})) == item(cross_entropy(x, t)));
  CHECK(item(F::smooth_l1_loss(a, b, Reduction::Mean, 0.5)) == Approx(0.2146008468798198).epsilon(1e-12));
  CHECK(F::l1_loss(a, b, Reduction::None).shape() == Shape{4, 3});
  // the functional namespace re-exports the activations
  CHECK(values(F::relu(a)) == values(relu(a)));
  CHECK(values(F::softmax(x, 1)) == values(softmax(x, 1)));
  CHECK(F::linear(a, ones({2, 3}, float64)).shape() == Shape{4, 2});
}

TEST_CASE("loss options: PyTorch 1.13 values, every reduction and the gradients", "[ops][loss][options]") {
  // /usr/bin/python3 ref.py (torch 1.13, float64, `import torch.nn.functional as F; from math import sin, cos`):
  //   N, C = 5, 4
  //   x = tensor([[2*sin(0.7*i + 1.3*c) for c in range(C)] for i in range(N)], float64)
  //   t = tensor([(3*i+1) % C for i in range(N)]); w = tensor([0.5 + 0.25*c for c in range(C)])
  //   p = softmax(tensor([[cos(0.9*i - 0.4*c) for c in range(C)] for i in range(N)]), 1)
  //   F.cross_entropy(x, t, weight=w, ignore_index=2, reduction=red, label_smoothing=0.1)   # "w ls ign"
  //   F.cross_entropy(x, t, ignore_index=2, reduction=red, label_smoothing=0.2)             # "ls ign"
  //   F.cross_entropy(x, t, weight=w, reduction=red)                                        # "w"
  //   F.cross_entropy(x, p, weight=w, reduction=red, label_smoothing=0.1)                   # "prob w ls"
  //   F.cross_entropy(x, p, reduction=red)                                                  # "prob"
  //   F.nll_loss(log_softmax(x, 1), t, weight=w, ignore_index=2, reduction=red)             # "nll w ign"
  const Tensor x = torch_x(), t = torch_t(), w = torch_w(), p = torch_p();
  struct Row {
    const char* what;
    std::function<Tensor(Reduction)> f;
    std::vector<double> mean, sum, none;
  };
  const std::vector<Row> rows = {
      {"w ls ign", [&](Reduction r) { return cross_entropy(x, t, {w, 2, r, 0.1}); }, {2.531351986546707},
       {8.226893956276799},
       {0.5035392655304136, 0.7118236429381035, 4.706057664800911, 0.0, 2.3054733830073704}},
      {"ls ign", [&](Reduction r) { return cross_entropy(x, t, {Tensor(), 2, r, 0.2}); }, {2.158392728922805},
       {8.63357091569122}, {0.7703459982009163, 1.295240481497404, 3.6455505536097927, 0.0, 2.9224338823831078}},
      {"w", [&](Reduction r) { return cross_entropy(x, t, {.weight = w, .reduction = r}); }, {2.8580671180180026},
       {12.146785251576512},
       {0.3480390478796306, 0.5388806241154966, 4.9510418722104985, 3.9353554268528246, 2.3734682805180616}},
      {"prob w ls", [&](Reduction r) { return cross_entropy(x, p, {w, -100, r, 0.1}); }, {2.283093609318174},
       {11.41546804659087},
       {1.6033562516083328, 2.426320223278126, 3.147052651778796, 2.604248434978113, 1.6344904849475033}},
      {"prob", [&](Reduction r) { return cross_entropy(x, p, {.reduction = r}); }, {2.2863742033426235},
       {11.431871016713117},
       {1.8223541018394696, 2.2875006692998614, 2.9340029608762794, 2.5286209208460786, 1.8593923638514298}},
      {"nll w ign", [&](Reduction r) { return nll_loss(log_softmax(x, 1), t, {w, 2, r}); }, {2.526593792222673},
       {8.211429824723687},
       {0.3480390478796306, 0.5388806241154966, 4.9510418722104985, 0.0, 2.3734682805180616}},
  };
  for (const auto& row : rows)
    for (Reduction r : kReductions) {
      INFO(row.what << " " << rname(r));
      const Tensor y = row.f(r);
      CHECK(y.dtype() == float64);
      HG_CHECK_CLOSE_TOL(y, r == Reduction::Mean ? row.mean : r == Reduction::Sum ? row.sum : row.none, 1e-13);
    }
  // gradients: xx.grad after F.cross_entropy(xx, t, weight=w, ignore_index=2, label_smoothing=0.1).backward()
  Tensor xl = torch_x().requires_grad_(true);
  cross_entropy(xl, t, {w, 2, Reduction::Mean, 0.1}).backward();
  HG_CHECK_CLOSE_TOL(
      xl.grad(),
      (std::vector<double>{0.01762647565075679, -0.06595161543098914, 0.05251428268981597, -0.004189142909583654,
                           -0.0860179390851433, 0.08987850223009733, 0.0036278584852924576, -0.007488421630246471,
                           0.26560455447060505, 0.08248713032618535, 0.0005714633213435317, -0.3486631481181339, 0.0,
                           0.0, 0.0, 0.0, 0.0956236043815768, -0.2035537304124288, 0.0031596813508241025,
                           0.10477044468002789}),
      1e-12);
  // and F.cross_entropy(xx, p, weight=w, label_smoothing=0.1).backward()
  Tensor xp = torch_x().requires_grad_(true);
  cross_entropy(xp, p, {.weight = w, .label_smoothing = 0.1}).backward();
  HG_CHECK_CLOSE_TOL(
      xp.grad(),
      (std::vector<double>{-0.015720309658796654, 0.060089230748500214, -0.004638026360195575, -0.03973089472950799,
                           0.04156478983621935, 0.06695162863645035, -0.043483359633832167, -0.06503305883883749,
                           0.12545731105068655, 0.01533593529144767, -0.052365642438433176, -0.08842760390370107,
                           0.14095323650350589, -0.012541126165738858, -0.049195883937357236, -0.07921622640040976,
                           0.05072153606697411, -0.026476448636519, -0.03941936406078233, 0.015174276630327204}),
      1e-12);

  // the elementwise losses, same script:
  //   a = tensor([[sin(1.1*i+0.5*j) for j in range(3)] for i in range(4)]); b = 0.9*cos(0.8*i-0.3*j)
  //   F.l1_loss(a, b), F.smooth_l1_loss(a, b, beta=0.5), F.smooth_l1_loss(a, b) (beta 1), beta=0.0
  //   F.binary_cross_entropy(sigmoid(a), (b+1)/2, weight=[0.5,1,2])
  //   F.binary_cross_entropy_with_logits(3*a, (b+1)/2, weight=[0.5,1,2], pos_weight=[3,0.5,1.5])
  //   F.mse_loss(a, b[0])  (broadcast target [3] against [4, 3])
  const Tensor a = torch_a(), b = torch_b(), tb = div(add(b, 1.0), 2.0);
  const Tensor ww = hgtest::make({0.5, 1.0, 2.0}, {3}, float64), pw = hgtest::make({3.0, 0.5, 1.5}, {3}, float64);
  const std::vector<double> l1_none = {0.9,  0.3803773016088424,  0.09866893138918598, 0.2641713216489866,
                                       0.20974929734016956, 0.01885055340824382, 0.83477597389075,
                                       0.18663093447170115, 0.544646218708906,   0.5059086498438725,
                                       0.1574963968028471,  0.7116840515256766};
  const std::vector<Row> erows = {
      {"l1", [&](Reduction r) { return l1_loss(a, b, {r}); }, {0.40107996921993183}, {4.812959630639182}, l1_none},
      {"smooth_l1 beta 0", [&](Reduction r) { return smooth_l1_loss(a, b, {r, 0.0}); }, {0.40107996921993183},
       {4.812959630639182}, l1_none},
      {"smooth_l1 beta 0.5", [&](Reduction r) { return smooth_l1_loss(a, b, {r, 0.5}); }, {0.2146008468798198},
       {2.5752101625578376},
       {0.65, 0.14468689157922426, 0.00973555802148389, 0.06978648718177234, 0.043994767734694865,
        0.0003553433637970527, 0.58477597389075, 0.034831105701780406, 0.29464621870890595, 0.2559086498438725,
        0.02480511500587987, 0.4616840515256766}},
      {"smooth_l1 beta 1", [&](Reduction r) { return smooth_l1_loss(a, b, {r}); }, {0.12058847707961018},
       {1.4470617249553221},
       {0.405, 0.07234344578961213, 0.004867779010741945, 0.03489324359088617, 0.021997383867347432,
        0.00017767168189852635, 0.348425463292625, 0.017415552850890203, 0.1483197517769547, 0.12797178099342502,
        0.012402557502939934, 0.25324709459800093}},
      {"bce weight", [&](Reduction r) { return binary_cross_entropy(sigmoid(a), tb, {ww, r}); }, {0.6724980634846874},
       {8.06997676181625},
       {0.34657359027997264, 0.5155015518707696, 0.9332777581801419, 0.25494872947998704, 0.4184194192078521,
        0.8056630197120815, 0.39167297371609305, 0.6643615728891551, 1.4155318412184987, 0.3219550581636803,
        0.600228860352257, 1.4018423867457597}},
      {"bce_with_logits weight pos_weight",
       [&](Reduction r) { return binary_cross_entropy_with_logits(mul(a, 3.0), tb, {ww, r, pw}); },
       {0.9134120755111153},
       {10.960944906133383},
       {1.0050634118119206, 0.21476579484346486, 0.8705398537215934, 0.33693612693419883, 0.3420093013793266,
        0.518249345207644, 0.7059347735554704, 0.655640802219414, 2.0621264084394695, 0.44295142084548744,
        0.3782080463602231, 3.4285196208151705}},
      {"mse broadcast target", [&](Reduction r) { return mse_loss(a, b.select(0, 0), {r}); }, {0.6560471186391733},
       {7.87256542367008},
       {0.81, 0.14468689157922426, 0.00973555802148389, 7.73105170892414e-05, 0.019535866141649528,
        0.01449792107930663, 0.00837290811394753, 0.18698961631718633, 0.6418832983930862, 1.1188259534785827,
        2.1657853076259204, 2.752174792402603}},
  };
  for (const auto& row : erows)
    for (Reduction r : kReductions) {
      INFO(row.what << " " << rname(r));
      const Tensor y = row.f(r);
      CHECK(y.dtype() == float64);
      CHECK(y.shape() == (r == Reduction::None ? Shape{4, 3} : Shape{}));
      HG_CHECK_CLOSE_TOL(y, r == Reduction::Mean ? row.mean : r == Reduction::Sum ? row.sum : row.none, 1e-13);
    }
  // F.binary_cross_entropy_with_logits(aa, tt, weight=ww, pos_weight=pw).backward(): aa.grad, tt.grad
  Tensor xa = mul(a, 3.0).requires_grad_(true), ta = tb.clone().requires_grad_(true);
  binary_cross_entropy_with_logits(xa, ta, {.weight = ww, .pos_weight = pw}).backward();
  HG_CHECK_CLOSE_TOL(xa.grad(),
                     (std::vector<double>{-0.05833333333333333, -0.0027108742104795754, 0.003686859632563618,
                                          0.0007046782176030794, 0.0065709182780258335, -0.007280839207863303,
                                          0.014698995061723183, 0.01915064116125061, -0.0814691892020409,
                                          0.00035159467665606126, -0.0014667198753180906, -0.08741669223619901}),
                     1e-12);
  HG_CHECK_CLOSE_TOL(ta.grad(),
                     (std::vector<double>{0.0577622650466621, -0.12872976079928275, -0.41431394581796605,
                                          -0.1058404737513101, -0.2519204030643008, -0.42557424492445034,
                                          -0.09400032194349678, -0.11704748890371962, 0.09456515424384022,
                                          0.09951008671518284, 0.07031524392859445, 0.6922959454206578}),
                     1e-12);
}

TEST_CASE("cross_entropy options against float64 references in every float dtype", "[ops][loss][options]") {
  const int64_t n = 9, c = 6;
  for (DType dt : hgtest::kFloatDTypes)
    for (Reduction r : kReductions)
      for (bool weighted : {false, true})
        for (double eps : {0.0, 0.15})
          for (bool transposed : {false, true}) {
            const int64_t ignore = 3;
            INFO(hgtest::dname(dt) << " " << rname(r) << (weighted ? " weighted" : "") << " eps " << eps
                                   << (transposed ? " transposed" : ""));
            const Tensor x =
                transposed ? hgtest::uniform({c, n}, dt, -3, 3).t() : hgtest::uniform({n, c}, dt, -3, 3);
            const Tensor w = weighted ? hgtest::uniform({c}, dt, 0.25, 2.0) : Tensor();
            const std::vector<double> wv = weighted ? values(w) : std::vector<double>{};
            const auto lp = log_softmax_rows(values(x), n, c);
            // class indices, two ignored
            const Tensor t = class_targets(n, c, ignore, 2);
            const Tensor y = cross_entropy(x, t, {w, ignore, r, eps});
            CHECK(y.dtype() == dt);
            CHECK(y.shape() == (r == Reduction::None ? Shape{n} : Shape{}));
            HG_CHECK_CLOSE_TOL(y, ref_ce_index(lp, n, c, values(t), wv, ignore, r, eps), 2 * hgtest::tol(dt));
            // probabilities, from a non-contiguous target too
            const Tensor pt = transposed ? prob_targets(n, c, dt).t().contiguous().t() : prob_targets(n, c, dt);
            const Tensor yp = cross_entropy(x, pt, {.weight = w, .reduction = r, .label_smoothing = eps});
            CHECK(yp.dtype() == dt);
            HG_CHECK_CLOSE_TOL(yp, ref_ce_prob(lp, n, c, values(pt), wv, r, eps), 2 * hgtest::tol(dt));
            // nll_loss with the weight
            if (weighted && eps == 0.0) {
              const Tensor lpt = log_softmax(x, 1);
              HG_CHECK_CLOSE_TOL(nll_loss(lpt, t, {w, ignore, r}),
                                 ref_ce_index(values(lpt), n, c, values(t), wv, ignore, r, 0.0), 2 * hgtest::tol(dt));
            }
          }
}

TEST_CASE("cross_entropy options: edge cases", "[ops][loss][options]") {
  const Tensor x = hgtest::uniform({4, 3}, float32);
  // a probability target with a negative ignore_index is fine (PyTorch ignores it)
  const Tensor p = prob_targets(4, 3, float32);
  CHECK(cross_entropy(x, p, {.ignore_index = -1}).item<float>() == cross_entropy(x, p).item<float>());
  // float64 targets with float32 logits promote (as PyTorch)
  CHECK(cross_entropy(x, p.to(float64)).dtype() == float64);
  // label smoothing 1: only the smoothing term; all targets ignored: NaN (0 / 0); sum 0
  const Tensor t = tensor(std::vector<int64_t>{0, 2, 1, 1});
  const auto lp = log_softmax_rows(values(x), 4, 3);
  HG_CHECK_CLOSE(cross_entropy(x, t, {.label_smoothing = 1.0}),
                 ref_ce_index(lp, 4, 3, values(t), {}, -100, Reduction::Mean, 1.0));
  const Tensor all_ignored = tensor(std::vector<int64_t>{-100, -100, -100, -100});
  const Tensor w = hgtest::uniform({3}, float32, 0.5, 1.5);
  CHECK(std::isnan(cross_entropy(x, all_ignored, {.weight = w}).item<float>()));
  CHECK(std::isnan(cross_entropy(x, all_ignored, {.label_smoothing = 0.1}).item<float>()));
  CHECK(cross_entropy(x, all_ignored, {.weight = w, .reduction = Reduction::Sum, .label_smoothing = 0.1})
            .item<float>() == 0.f);
  // empty batch: probability mean is NaN, sum 0, none [0]
  const Tensor xe = zeros({0, 3}), pe = zeros({0, 3});
  CHECK(std::isnan(cross_entropy(xe, pe).item<float>()));
  CHECK(cross_entropy(xe, pe, {.reduction = Reduction::Sum}).item<float>() == 0.f);
  CHECK(cross_entropy(xe, pe, {.reduction = Reduction::None}).shape() == Shape{0});
  CHECK(nll_loss(xe, zeros({0}, int64), {.weight = w, .reduction = Reduction::None}).shape() == Shape{0});
  // an infinite logit with an ignored row: the masked smoothing term stays finite (masked_fill, not a product)
  const Tensor xinf = hgtest::make({0.5, -INFINITY, 1.0, 0.2, 0.1, 0.3}, {2, 3}, float32);
  const Tensor tinf = tensor(std::vector<int64_t>{-100, 2});
  CHECK(std::isfinite(cross_entropy(xinf, tinf, {.label_smoothing = 0.1}).item<float>()));
}

TEST_CASE("l1_loss, smooth_l1_loss, mse_loss: float64 references, broadcasting, every dtype", "[ops][loss][options]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (Reduction r : kReductions)
      for (double beta : {0.0, 0.5, 1.0}) {
        INFO(hgtest::dname(dt) << " " << rname(r) << " beta " << beta);
        const Tensor a = hgtest::uniform({6, 5}, dt), b = hgtest::uniform({5, 6}, dt).t();  // non-contiguous
        const auto d = hgtest::map2(a, b, [](double u, double v) { return u - v; });
        std::vector<double> l1, sl1;
        for (double e : d) {
          l1.push_back(std::fabs(e));
          sl1.push_back(ref_smooth_l1(e, beta));
        }
        const Tensor y1 = l1_loss(a, b, {r}), ys = smooth_l1_loss(a, b, {r, beta});
        CHECK(y1.dtype() == dt);
        CHECK(ys.dtype() == dt);
        HG_CHECK_CLOSE_TOL(y1, reduce(l1, r, static_cast<double>(l1.size())), 2 * hgtest::tol(dt));
        HG_CHECK_CLOSE_TOL(ys, reduce(sl1, r, static_cast<double>(sl1.size())), 2 * hgtest::tol(dt));
      }
  // broadcasting: target [5] against input [4, 5] (mse_loss and l1_loss; PyTorch warns, see the warning test)
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    const Tensor a = hgtest::uniform({4, 5}, dt), b = hgtest::uniform({5}, dt);
    const auto bb = hgtest::expand(values(b), {5}, {4, 5}), av = values(a);
    std::vector<double> sq, ab;
    for (size_t i = 0; i < av.size(); ++i) {
      sq.push_back((av[i] - bb[i]) * (av[i] - bb[i]));
      ab.push_back(std::fabs(av[i] - bb[i]));
    }
    CHECK(mse_loss(a, b, {Reduction::None}).shape() == Shape{4, 5});
    HG_CHECK_CLOSE_TOL(mse_loss(a, b, {Reduction::None}), sq, 2 * hgtest::tol(dt));
    HG_CHECK_CLOSE_TOL(mse_loss(b, a), reduce(sq, Reduction::Mean, 20), 2 * hgtest::tol(dt));  // input broadcasts too
    HG_CHECK_CLOSE_TOL(l1_loss(a, b, {Reduction::Sum}), reduce(ab, Reduction::Sum, 1), 2 * hgtest::tol(dt));
  }
  // 0-d and empty
  const Tensor s = hgtest::make({1.5}, {}, float32), u = hgtest::make({0.25}, {}, float32);
  CHECK(l1_loss(s, u).item<float>() == 1.25f);
  CHECK(smooth_l1_loss(s, u).item<float>() == 0.75f);
  CHECK(smooth_l1_loss(s, u, {.beta = 2.0}).item<float>() == Approx(0.25 * 1.25 * 1.25));
  CHECK(std::isnan(l1_loss(zeros({0}), zeros({0})).item<float>()));  // mean of nothing, as PyTorch
  CHECK(smooth_l1_loss(zeros({0}), zeros({0}), {Reduction::Sum}).item<float>() == 0.f);
}

TEST_CASE("binary_cross_entropy(_with_logits) weights against float64 references", "[ops][loss][options]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (Reduction r : kReductions)
      for (int variant = 0; variant < 3; ++variant) {  // weight [C]; pos_weight [C]; both, weight [N, 1]
        INFO(hgtest::dname(dt) << " " << rname(r) << " variant " << variant);
        const int64_t n = 7, c = 4;
        const Tensor x = hgtest::uniform({c, n}, dt, -4, 4).t(), t = hgtest::uniform({n, c}, dt, 0, 1);
        const Tensor p = sigmoid(x);
        const Tensor w = variant == 2 ? hgtest::uniform({n, 1}, dt, 0.25, 2) : hgtest::uniform({c}, dt, 0.25, 2);
        const Tensor pw = hgtest::uniform({c}, dt, 0.25, 3);
        const Shape wshape = w.shape();
        const auto xv = values(x), tv = values(t), pv = values(p), wv = values(w), pwv = values(pw);
        std::vector<double> bce, bcel;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < c; ++j) {
            const size_t k = static_cast<size_t>(i * c + j);
            const double wk = variant == 1 ? 1.0 : (variant == 2 ? wv[i] : wv[j]);
            const double pk = variant == 0 ? 1.0 : pwv[j];
            const double xk = xv[k], tk = tv[k];
            bce.push_back(-wk * (tk * std::max(std::log(pv[k]), -100.0) +
                                 (1 - tk) * std::max(std::log(1 - pv[k]), -100.0)));
            bcel.push_back(wk * ((1 - tk) * xk + (1 + (pk - 1) * tk) * softplus(-xk)));
          }
        const double cnt = static_cast<double>(n * c);
        if (variant != 1) {
          const Tensor y = binary_cross_entropy(p, t, {w, r});
          CHECK(y.dtype() == dt);
          HG_CHECK_CLOSE_TOL(y, reduce(bce, r, cnt), 4 * hgtest::tol(dt));
        }
        const Tensor y = binary_cross_entropy_with_logits(
            x, t, {variant == 1 ? Tensor() : w, r, variant == 0 ? Tensor() : pw});
        CHECK(y.dtype() == dt);
        CHECK(y.shape() == (r == Reduction::None ? Shape{n, c} : Shape{}));
        HG_CHECK_CLOSE_TOL(y, reduce(bcel, r, cnt), 4 * hgtest::tol(dt));
      }
  // large logits stay finite with pos_weight (the stable form)
  const Tensor big = hgtest::make({80.0, -80.0}, {2}, float32), t = hgtest::make({0.0, 1.0}, {2}, float32);
  const Tensor l = binary_cross_entropy_with_logits(big, t, {.reduction = Reduction::None,
                                                             .pos_weight = hgtest::make({2.0}, {1}, float32)});
  HG_CHECK_CLOSE(l, (std::vector<double>{80.0, 160.0}));
}

TEST_CASE("loss options: gradcheck in float64", "[ops][loss][options][grad]") {
  const int64_t n = 6, c = 5;
  const Tensor w = hgtest::uniform({c}, float64, 0.25, 2.0);
  const Tensor t = class_targets(n, c, 1, 2);
  for (Reduction r : kReductions) {
    INFO(rname(r));
    const Tensor x = hgtest::leaf({n, c});
    HG_GRADCHECK([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, {w, 1, r, 0.2}); }, {x});
    HG_GRADCHECK([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, {.weight = w, .reduction = r}); },
                 {x});
    HG_GRADCHECK([&](const std::vector<Tensor>& in) { return nll_loss(log_softmax(in[0], 1), t, {w, 1, r}); }, {x});
    // probability targets: gradients for the logits and the target
    Tensor p = prob_targets(n, c, float64).requires_grad_(true);
    HG_GRADCHECK([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], {w, -100, r, 0.1}); },
                 {x, p});
    // elementwise: values away from the kinks (d = 0, |d| = beta)
    const Tensor a = hgtest::leaf({4, 3});
    std::vector<double> bv = values(a);
    for (size_t i = 0; i < bv.size(); ++i) bv[i] += (i % 2 ? 0.3 : -0.9) + 0.1 * static_cast<double>(i % 3);
    Tensor b = hgtest::leaf_from(bv, {4, 3});
    HG_GRADCHECK([&](const std::vector<Tensor>& in) { return l1_loss(in[0], in[1], {r}); }, {a, b});
    HG_GRADCHECK([&](const std::vector<Tensor>& in) { return smooth_l1_loss(in[0], in[1], {r, 0.5}); }, {a, b});
    Tensor b1 = hgtest::leaf({3});
    HG_GRADCHECK([&](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], {r}); }, {a, b1});
    HG_GRADCHECK([&](const std::vector<Tensor>& in) { return l1_loss(in[0], in[1], {r}); },
                 {a, hgtest::leaf_from({3.0, -3.0, 3.5}, {3})});
    // binary cross-entropy with weights
    const Tensor ww = hgtest::uniform({3}, float64, 0.25, 2.0), pw = hgtest::uniform({3}, float64, 0.25, 3.0);
    Tensor pr = hgtest::leaf({4, 3}, 0.1, 0.9), tt = hgtest::leaf({4, 3}, 0.0, 1.0);
    HG_GRADCHECK([&](const std::vector<Tensor>& in) { return binary_cross_entropy(in[0], in[1], {ww, r}); }, {pr, tt});
    HG_GRADCHECK(
        [&](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], in[1], {ww, r, pw}); },
        {a, tt});
  }
}

TEST_CASE("loss options: errors", "[ops][loss][options][errors]") {
  const Tensor x = hgtest::uniform({4, 3}, float32), t = tensor(std::vector<int64_t>{0, 2, 1, 1});
  const Tensor p = prob_targets(4, 3, float32), w3 = ones({3});
  const Tensor a = hgtest::uniform({4, 3}, float32), b = hgtest::uniform({4, 3}, float32, 0.1, 0.9);
  hgtest::expect_errors({
      {"weight of the wrong size", [&] { cross_entropy(x, t, {.weight = ones({4})}); },
       {"cross_entropy", "weight", "3 classes", "[4]"}},
      {"weight 2-d", [&] { nll_loss(x, t, {.weight = ones({1, 3})}); }, {"nll_loss", "weight", "[1, 3]"}},
      {"integer weight", [&] { cross_entropy(x, t, {.weight = ones({3}, int64)}); }, {"cross_entropy", "floating"}},
      {"weight of another dtype", [&] { cross_entropy(x, t, {.weight = ones({3}, float64)}); },
       {"cross_entropy", "float64", "float32", "autocast"}},
      {"weight of another dtype, probabilities", [&] { cross_entropy(x, p, {.weight = ones({3}, float64)}); },
       {"cross_entropy", "float64"}},
      {"nll weight of another dtype", [&] { nll_loss(x, t, {.weight = ones({3}, float16)}); }, {"nll_loss", "float16"}},
      {"probability target of the wrong shape", [&] { cross_entropy(x, p.narrow(1, 0, 2)); },
       {"cross_entropy", "[4, 2]", "[4, 3]"}},
      {"probability target with ignore_index", [&] { cross_entropy(x, p, {.ignore_index = 1}); },
       {"cross_entropy", "ignore_index", "-100"}},
      {"class targets of the wrong length", [&] { cross_entropy(x, tensor(std::vector<int64_t>{0, 1}), {.weight = w3}); },
       {"cross_entropy", "[2]"}},
      {"out-of-range class with a weight", [&] { cross_entropy(x, tensor(std::vector<int64_t>{0, 5, 1, 1}), {.weight = w3}); },
       {"cross_entropy", "5"}},
      {"label_smoothing above 1", [&] { cross_entropy(x, t, {.label_smoothing = 1.5}); }, {"label_smoothing", "1.5"}},
      {"negative label_smoothing", [&] { cross_entropy(x, t, {.label_smoothing = -0.1}); }, {"label_smoothing"}},
      {"negative beta", [&] { smooth_l1_loss(a, b, {.beta = -1.0}); }, {"smooth_l1_loss", "negative", "beta"}},
      {"l1 shapes that do not broadcast", [&] { l1_loss(a, ones({4})); }, {"l1_loss", "[4, 3]", "[4]"}},
      {"integer l1 input", [&] { l1_loss(ones({3}, int64), ones({3})); }, {"l1_loss", "floating"}},
      {"bce weight that does not broadcast", [&] { binary_cross_entropy(b, b, {.weight = ones({4})}); },
       {"binary_cross_entropy", "weight", "[4]"}},
      {"bce weight larger than the input", [&] { binary_cross_entropy(b, b, {.weight = ones({2, 4, 3})}); },
       {"binary_cross_entropy", "[2, 4, 3]"}},
      {"bce_with_logits pos_weight that does not broadcast",
       [&] { binary_cross_entropy_with_logits(a, b, {.pos_weight = ones({2})}); }, {"pos_weight", "[2]"}},
      {"bce_with_logits integer weight", [&] { binary_cross_entropy_with_logits(a, b, {.weight = ones({3}, int64)}); },
       {"binary_cross_entropy_with_logits", "floating"}},
      {"bce_with_logits target shape", [&] { binary_cross_entropy_with_logits(a, b.narrow(0, 0, 2)); },
       {"binary_cross_entropy_with_logits", "same shape"}},
  });
}

TEST_CASE("loss options: fp32 under CPU bfloat16 autocast", "[ops][loss][options][amp]") {
  const Tensor x = hgtest::uniform({4, 3}, float32), t = tensor(std::vector<int64_t>{0, 2, 1, 1});
  const Tensor p = prob_targets(4, 3, float32), w = hgtest::uniform({3}, float32, 0.5, 1.5);
  const Tensor a = hgtest::uniform({4, 3}, float32), b = hgtest::uniform({4, 3}, float32, 0.1, 0.9);
  amp::autocast region(DeviceType::CPU, bfloat16);
  const Tensor xl = x.to(bfloat16), al = a.to(bfloat16);  // low-precision inputs, e.g. a Linear's output
  CHECK(cross_entropy(xl, t, {.weight = w}).dtype() == float32);
  CHECK(cross_entropy(xl, t, {.label_smoothing = 0.1}).dtype() == float32);
  CHECK(cross_entropy(xl, p.to(bfloat16), {.weight = w.to(bfloat16), .label_smoothing = 0.1}).dtype() == float32);
  CHECK(nll_loss(xl, t, {.weight = w}).dtype() == float32);  // a bfloat16 input with a float32 weight is fine here
  CHECK(l1_loss(al, b).dtype() == float32);
  CHECK(smooth_l1_loss(al, b, {.beta = 0.5}).dtype() == float32);
  CHECK(mse_loss(al, b.to(bfloat16)).dtype() == float32);
  CHECK(binary_cross_entropy(b.to(bfloat16), b, {.weight = w}).dtype() == float32);
  CHECK(binary_cross_entropy_with_logits(al, b, {.weight = w, .pos_weight = w.to(bfloat16)}).dtype() == float32);
  // the value is the float32 computation on the bfloat16-rounded input
  CHECK(cross_entropy(xl, t, {.weight = w}).item<float>() ==
        Approx(cross_entropy(xl.to(float32), t, {.weight = w}).item<float>()).epsilon(1e-6));
}

TEST_CASE("loss options: a target of another shape warns once per process (PyTorch's UserWarning)",
          "[ops][loss][options]") {
  // In a child process (a fresh once_flag state is not guaranteed there, so
  // this is the only test that broadcasts smooth_l1_loss), stderr to a file.
  const auto r = hgtest::run_in_child([] {
    char path[] = "/tmp/hg_loss_warn_XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    dup2(fd, 2);
    const Tensor a = ones({4, 3}), b = zeros({3});
    smooth_l1_loss(a, b);
    smooth_l1_loss(a, b);             // no second line
    smooth_l1_loss(a, zeros({4, 3}));  // same shapes: nothing
    std::fflush(stderr);
    std::string text;
    char buf[4096];
    lseek(fd, 0, SEEK_SET);
    for (ssize_t k; (k = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(k));
    close(fd);
    unlink(path);
    throw std::runtime_error(text);
  });
  INFO(r.describe());
  REQUIRE(r.threw_other);
  const std::string& text = r.message;
  const std::string msg =
      "smooth_l1_loss: Using a target size ([3]) that is different to the input size ([4, 3]). This will likely lead "
      "to incorrect results due to broadcasting. Please ensure they have the same size.";
  CHECK_THAT(text, Contains(msg));
  CHECK(text.find(msg) == text.rfind(msg));  // once
}

TEST_CASE("loss options: a weight that requires grad gets no gradient", "[ops][loss][options][grad]") {
  // PyTorch has no derivative for these weights (it raises when asked for
  // one); halfgrad treats them as constants.
  Tensor x = hgtest::leaf({4, 3}), w = hgtest::leaf({3}, 0.5, 1.5);
  const Tensor t = tensor(std::vector<int64_t>{0, 2, 1, 1});
  Tensor p = hgtest::leaf({4, 3}, 0.1, 0.9), q = hgtest::uniform({4, 3}, float64, 0, 1);
  add(add(cross_entropy(x, t, {.weight = w, .label_smoothing = 0.1}), nll_loss(x, t, {.weight = w})),
      add(binary_cross_entropy(p, q, {.weight = w}),
          binary_cross_entropy_with_logits(x, q, {.weight = w, .pos_weight = w})))
      .backward();
  CHECK(x.grad().defined());
  CHECK(p.grad().defined());
  CHECK_FALSE(w.grad().defined());
}
