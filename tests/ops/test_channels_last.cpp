// Channels-last tensors (MemoryFormat::ChannelsLast): the strides, the copy
// in and out, and every op a convolutional net runs keeping the layout, with
// the values of the same op on row-major tensors (those are checked against
// float64 references in the other files), forward and backward.
#include <catch2/catch.hpp>

#include <halfgrad.h>
#include <halfgrad/kernels/cpu/conv.h>

#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::MemoryFormat;
using hg::Shape;
using hg::Tensor;
using hgtest::values;

namespace {

constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

bool is_cl(const Tensor& t) { return t.is_contiguous(kCL) && !t.is_contiguous(); }

// The same op on row-major and on channels-last copies of the same inputs:
// outputs (and, with backward, the inputs' gradients for a random upstream
// gradient) equal within the dtype's tolerance, and the output channels-last.
void same_as_row_major(const std::string& what, const std::function<Tensor(const std::vector<Tensor>&)>& op,
                       const std::vector<Tensor>& inputs, bool backward = true) {
  INFO(what);
  std::vector<Tensor> rm, cl;
  for (const Tensor& t : inputs) {
    rm.push_back(t.detach().clone().requires_grad_(backward && t.is_floating_point()));
    Tensor c = t.dim() == 4 ? t.detach().contiguous(kCL) : t.detach().clone();
    cl.push_back(c.requires_grad_(backward && t.is_floating_point()));
  }
  const Tensor yr = op(rm), yc = op(cl);
  CHECK(yc.is_contiguous(kCL));  // ([N, C, 1, 1] is both layouts)
  const auto out = hgtest::compare(yc, values(yr));
  CHECK(out.ok);
  INFO(out.msg);
  if (!backward) return;
  const Tensor g = hgtest::uniform(yr.shape(), yr.dtype());
  (yr * g).sum().backward();
  (yc * g).sum().backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!rm[i].requires_grad()) continue;
    INFO("gradient of input " << i);
    REQUIRE(cl[i].grad().defined());
    const auto c = hgtest::compare(cl[i].grad(), values(rm[i].grad()));
    INFO(c.msg);
    CHECK(c.ok);
  }
}

}  // namespace

TEST_CASE("channels-last strides, checks and copies", "[core][channels_last]") {
  const Tensor x = hgtest::uniform({2, 3, 4, 5}, DType::Float32);
  CHECK(hg::strides_for({2, 3, 4, 5}, kCL) == Shape{60, 1, 15, 3});
  CHECK(hg::strides_for({2, 3, 4, 5, 6}, MemoryFormat::ChannelsLast3d) == Shape{360, 1, 90, 18, 3});
  CHECK(x.suggest_memory_format() == MemoryFormat::Contiguous);
  const Tensor c = x.contiguous(kCL);
  CHECK(c.strides() == Shape{60, 1, 15, 3});
  CHECK(c.is_contiguous(kCL));
  CHECK_FALSE(c.is_contiguous());
  CHECK(c.suggest_memory_format() == kCL);
  CHECK(values(c) == values(x));
  CHECK(c.contiguous(kCL).is_same(c));  // already in the format: no copy
  CHECK(values(c.contiguous()) == values(x));
  CHECK(c.contiguous().is_contiguous());
  // [N, C, 1, 1] is both layouts: nothing to convert, and row-major is suggested
  const Tensor v = hgtest::uniform({2, 3, 1, 1}, DType::Float32);
  CHECK(v.is_contiguous(kCL));
  CHECK(v.suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK(hg::memory_order({2, 3, 4, 5}, c.strides()) == Shape{0, 2, 3, 1});
  CHECK_FALSE(hg::in_memory_order({2, 3, 4, 5}, c.strides()));
  CHECK(hg::in_memory_order({2, 3, 4, 5}, x.strides()));
  CHECK(hg::in_memory_order({2, 1, 3}, {3, 7, 1}));  // a size-1 dim's stride does not count
  // only 4-d tensors have a channels-last layout
  hgtest::expect_errors({{"contiguous(ChannelsLast) of a 3-d tensor",
                          [] { (void)hgtest::uniform({3, 4, 5}, DType::Float32).contiguous(kCL); },
                          {"contiguous", "channels_last", "4-d", "[3, 4, 5]"}}});
  // the layout's gradient flows back as a plain gradient
  const Tensor leaf = hgtest::uniform({2, 3, 4, 5}, DType::Float64).requires_grad_(true);
  (leaf.contiguous(kCL) * 2.0).sum().backward();
  CHECK(values(leaf.grad()) == std::vector<double>(120, 2.0));
}

TEST_CASE("elementwise ops and casts keep the channels-last layout", "[ops][channels_last]") {
  const Tensor x = hgtest::uniform({2, 4, 3, 5}, DType::Float32).contiguous(kCL);
  CHECK(is_cl(hg::relu(x)));
  CHECK(is_cl(x.to(DType::BFloat16)));
  CHECK(is_cl(x.clone()));
  CHECK(is_cl(hg::hardswish(x)));
  const Tensor per_channel = hgtest::uniform({1, 4, 1, 1}, DType::Float32);
  const Tensor scale = hgtest::uniform({2, 4, 1, 1}, DType::Float32);
  CHECK(is_cl(x + per_channel));
  CHECK(is_cl(x * scale));
  CHECK(is_cl(scale * x));  // the first input of the output's shape decides
  // a row-major input of the output's shape first: row-major out, as PyTorch
  CHECK((x.contiguous() + x).is_contiguous());
  same_as_row_major("x * scale + x", [](const std::vector<Tensor>& in) { return in[0] * in[1] + in[0]; },
                    {hgtest::uniform({2, 4, 3, 5}, DType::Float64), hgtest::uniform({2, 4, 1, 1}, DType::Float64)});
  same_as_row_major("hardsigmoid, bfloat16",
                    [](const std::vector<Tensor>& in) { return hg::hardsigmoid(in[0]) * in[0]; },
                    {hgtest::uniform({2, 4, 3, 5}, DType::BFloat16)});
}

TEST_CASE("conv2d and conv_transpose2d on channels-last inputs", "[ops][conv][channels_last]") {
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::uniform({2, 8, 9, 7}, dt);
    same_as_row_major("3x3 stride 2 with bias",
                      [](const std::vector<Tensor>& in) { return hg::conv2d(in[0], in[1], in[2], 2, 1); },
                      {x, hgtest::uniform({6, 8, 3, 3}, dt), hgtest::uniform({6}, dt)});
    same_as_row_major("1x1 pointwise", [](const std::vector<Tensor>& in) { return hg::conv2d(in[0], in[1]); },
                      {x, hgtest::uniform({12, 8, 1, 1}, dt)});
    same_as_row_major("5x5 depthwise",
                      [](const std::vector<Tensor>& in) { return hg::conv2d(in[0], in[1], Tensor(), 1, 2, 1, 8); },
                      {x, hgtest::uniform({8, 1, 5, 5}, dt)});
    same_as_row_major("3x3 depthwise stride 2, dilation 2, bias",
                      [](const std::vector<Tensor>& in) { return hg::conv2d(in[0], in[1], in[2], 2, 2, 2, 8); },
                      {x, hgtest::uniform({8, 1, 3, 3}, dt), hgtest::uniform({8}, dt)});
    same_as_row_major("grouped 3x3, groups 2",
                      [](const std::vector<Tensor>& in) { return hg::conv2d(in[0], in[1], Tensor(), 1, 1, 1, 2); },
                      {x, hgtest::uniform({4, 4, 3, 3}, dt)});
    same_as_row_major("conv_transpose2d stride 2, output_padding 1",
                      [](const std::vector<Tensor>& in) {
                        return hg::conv_transpose2d(in[0], in[1], in[2], 2, 1, 1);
                      },
                      {x, hgtest::uniform({8, 3, 3, 3}, dt), hgtest::uniform({3}, dt)});
  }
}

TEST_CASE("the channels-last depthwise weight gradient loop against the row-major one",
          "[ops][conv][channels_last]") {
  // the loop oneDNN's missing depthwise kernel sends channels-last problems to,
  // called directly (on a CPU with that kernel oneDNN would run instead);
  // 70 channels: a full block of 64 and a partial one
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float64}) {
    INFO(hgtest::dname(dt));
    hg::kernels::ConvGeometry g;
    g.nd = 2;
    g.groups = 70;
    g.stride[0] = g.stride[1] = 2;
    g.pad_before[0] = g.pad_before[1] = g.pad_after[0] = g.pad_after[1] = 2;
    const Tensor x = hgtest::uniform({3, 70, 9, 8}, dt), dy = hgtest::uniform({3, 70, 5, 4}, dt);
    Tensor dw = hg::empty({70, 1, 5, 5}, dt), db = hg::empty({70}, dt);
    Tensor dw_ref = hg::empty({70, 1, 5, 5}, dt), db_ref = hg::empty({70}, dt);
    hg::kernels::cpu::conv_backward_weight_direct(dy.contiguous(kCL), x.contiguous(kCL), g, dw, db);
    hg::kernels::cpu::conv_backward_weight_direct(dy, x, g, dw_ref, db_ref);
    const auto cw = hgtest::compare(dw, values(dw_ref)), cb = hgtest::compare(db, values(db_ref));
    INFO(cw.msg << "; " << cb.msg);
    CHECK(cw.ok);
    CHECK(cb.ok);
  }
}

TEST_CASE("batch norm and the pools on channels-last inputs", "[ops][channels_last]") {
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::uniform({3, 5, 6, 7}, dt);
    const DType stat = dt == DType::Float64 ? DType::Float64 : DType::Float32;
    // 16 and 24 channels: what oneDNN's channels-last kernel takes (its path for
    // float32 and bfloat16 training); 5: our loops
    for (const Shape& bn_shape : {Shape{3, 5, 6, 7}, Shape{4, 16, 5, 6}, Shape{2, 24, 7, 3}})
    for (bool training : {true, false}) {
      INFO("training " << training << ", shape " << hg::shape_str(bn_shape));
      const int64_t ch = bn_shape[1];
      const Tensor xb = hgtest::uniform(bn_shape, dt);
      const Tensor rm_r = hgtest::uniform({ch}, stat), rv_r = hgtest::away_from_zero({ch}, stat);
      const Tensor rm_c = rm_r.clone(), rv_c = rv_r.clone();
      int call = 0;
      same_as_row_major("batch_norm",
                        [&](const std::vector<Tensor>& in) {
                          const bool first = call++ == 0;
                          return hg::batch_norm(in[0], first ? rm_r : rm_c, first ? rv_r : rv_c, in[1], in[2],
                                                training, 0.1, 1e-5);
                        },
                        {xb, hgtest::uniform({ch}, stat), hgtest::uniform({ch}, stat)});
      // the running statistics move the same way in both layouts
      CHECK(hgtest::compare(rm_c, values(rm_r), 1e-6).ok);
      CHECK(hgtest::compare(rv_c, values(rv_r), 1e-6).ok);
    }
    same_as_row_major("max_pool2d 3x3 stride 2 pad 1",
                      [](const std::vector<Tensor>& in) { return hg::max_pool2d(in[0], 3, 2, 1); },
                      {hgtest::leaf_distinct({3, 5, 6, 7}).to(dt)});
    same_as_row_major("avg_pool2d 2x2 ceil_mode",
                      [](const std::vector<Tensor>& in) { return hg::avg_pool2d(in[0], 2, 2, 0, true); }, {x});
    same_as_row_major("adaptive_avg_pool2d to 1x1",
                      [](const std::vector<Tensor>& in) { return hg::adaptive_avg_pool2d(in[0], 1); }, {x}, true);
    same_as_row_major("adaptive_avg_pool2d to 4x3",
                      [](const std::vector<Tensor>& in) { return hg::adaptive_avg_pool2d(in[0], {4, 3}); }, {x});
  }
}

TEST_CASE("MobileNetV3-small on channels-last images: the row-major model's loss and gradients",
          "[nn][channels_last]") {
  // batch 8 of 64x64: the last feature maps are 2x2, so each batch norm sees at
  // least 32 values per channel
  hg::manual_seed(3);
  auto model = hg::nn::models::mobilenet_v3_small({.num_classes = 10});
  const Tensor images = hgtest::uniform({8, 3, 64, 64}, DType::Float32);
  const Tensor labels = hg::randint(0, 10, {8});
  hg::nn::CrossEntropyLoss criterion;
  auto run = [&](const Tensor& x, bool amp) {
    model->zero_grad(true);
    hg::manual_seed(11);  // the same dropout masks
    Tensor loss;
    {
      hg::amp::autocast region(hg::kCPU, hg::kBFloat16, /*enabled=*/amp);  // the forward's own autocast follows it
      loss = criterion(model->forward(x), labels);
    }
    loss.backward();
    std::vector<double> all;
    for (const auto& [name, p] : model->named_parameters()) {
      const std::vector<double> g = values(p.grad());
      all.insert(all.end(), g.begin(), g.end());
    }
    return std::make_pair(loss.item<double>(), all);
  };
  auto same = [&](DType dt, bool amp, double loss_tol, double grad_tol) {
    INFO(hgtest::dname(dt) << (amp ? ", bfloat16 AMP" : ""));
    model->to(dt);
    // training mode: the outputs use the batch's statistics, not the running ones the first call moved
    const auto [loss_rm, grads_rm] = run(images.to(dt), amp);
    const auto [loss_cl, grads_cl] = run(images.to(dt).contiguous(kCL), amp);
    CHECK(loss_cl == Approx(loss_rm).epsilon(loss_tol));
    const auto c = hgtest::compare(hg::tensor(grads_cl), grads_rm, grad_tol);
    INFO(c.msg);
    CHECK(c.ok);
  };
  // float64: the same arithmetic in another order, so equal to rounding; float32
  // and bfloat16 run other kernels per layout (oneDNN's NHWC ones), and 50
  // layers of batch norm in training mode amplify their rounding differences
  same(DType::Float64, false, 1e-12, 1e-9);
  same(DType::Float32, false, 1e-5, 1e-2);
  same(DType::Float32, true, 2e-2, 0.1);
}
