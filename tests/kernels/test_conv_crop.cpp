// kernels::crop_negative_padding (kernels/kernels.h): the host-side step that keeps
// negative padding (a transposed convolution with output_padding >= stride, legal
// while < dilation) away from cuDNN, which rejects it (CUDNN_STATUS_BAD_PARAM on the
// H200, gpu-runs/2026-12-04 case 1). Pure arithmetic, so it is checked here on the
// CPU: the cropped problem must read exactly the elements of x the original reads,
// at the same taps, and give the same output sizes.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include <halfgrad/kernels/kernels.h>

namespace kernels = halfgrad::kernels;

namespace {

int64_t out_size(int64_t in, int64_t pb, int64_t pa, int64_t k, int64_t s, int64_t d) {
  return (in + pb + pa - d * (k - 1) - 1) / s + 1;
}

// The geometry ops/conv.cpp gives the kernels for conv_transpose1d (the convolution
// from the transposed conv's output, of size `out`, back to its input).
kernels::ConvGeometry transposed_geometry(int64_t pad, int64_t opad, int64_t s, int64_t d) {
  kernels::ConvGeometry g;
  g.nd = 1;
  g.stride[0] = s;
  g.dilation[0] = d;
  g.pad_before[0] = pad;
  g.pad_after[0] = pad - (opad - opad % s);
  return g;
}

}  // namespace

TEST_CASE("conv crop: output_padding >= stride gives non-negative padding and the same output size", "[conv]") {
  // The H200's failing case: conv_transpose1d of x [2, 4, 9], w [4, 3, 3], stride 1,
  // padding 0, output_padding 1, dilation 2: y [2, 3, 14], and the geometry of the
  // convolution from y's 14 back to 9 had pad_after = -1.
  const kernels::ConvGeometry g = transposed_geometry(0, 1, 1, 2);
  REQUIRE(g.pad_after[0] == -1);
  const int64_t in = (9 - 1) * 1 - 0 + 2 * (3 - 1) + 1 + 1;  // 14
  REQUIRE(out_size(in, g.pad_before[0], g.pad_after[0], 3, 1, 2) == 9);
  const kernels::ConvCrop c = kernels::crop_negative_padding(g, &in);
  CHECK(c.cropped);
  CHECK_FALSE(c.empty);
  CHECK(c.g.pad_before[0] == 0);
  CHECK(c.g.pad_after[0] == 0);  // what cuDNN is given: never negative
  CHECK(c.start[0] == 0);
  CHECK(c.size[0] == 13);  // y's last element is read by no output: it gets the bias only
  CHECK(out_size(c.size[0], c.g.pad_before[0], c.g.pad_after[0], 3, 1, 2) == 9);
}

TEST_CASE("conv crop: leaves non-negative padding alone", "[conv]") {
  kernels::ConvGeometry g;
  g.nd = 2;
  g.pad_before[0] = 1, g.pad_after[0] = 2, g.pad_before[1] = 0, g.pad_after[1] = 0;
  const int64_t in[2] = {7, 5};
  const kernels::ConvCrop c = kernels::crop_negative_padding(g, in);
  CHECK_FALSE(c.cropped);
  CHECK_FALSE(c.empty);
  for (int i = 0; i < 2; ++i) {
    CHECK(c.start[i] == 0);
    CHECK(c.size[i] == in[i]);
    CHECK(c.g.pad_before[i] == g.pad_before[i]);
    CHECK(c.g.pad_after[i] == g.pad_after[i]);
  }
}

TEST_CASE("conv crop: every output reads the same x element at every tap, before and after", "[conv]") {
  int checked = 0, cropped = 0, empty = 0;
  for (int64_t in = 1; in <= 9; ++in)
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t d = 1; d <= 3; ++d)
          for (int64_t pb = -3; pb <= 3; ++pb)
            for (int64_t pa = -4; pa <= 3; ++pa) {
              const int64_t extent = d * (k - 1) + 1;
              if (in + pb + pa < extent) continue;  // the op rejects these
              kernels::ConvGeometry g;
              g.nd = 1;
              g.stride[0] = s, g.dilation[0] = d, g.pad_before[0] = pb, g.pad_after[0] = pa;
              const kernels::ConvCrop c = kernels::crop_negative_padding(g, &in);
              INFO("in " << in << " k " << k << " s " << s << " d " << d << " pad " << pb << ", " << pa);
              REQUIRE(c.g.pad_before[0] >= 0);
              REQUIRE(c.g.pad_after[0] >= 0);
              CHECK(c.cropped == (pb < 0 || pa < 0));
              const int64_t out = out_size(in, pb, pa, k, s, d);
              std::vector<bool> read(static_cast<size_t>(in), false);
              for (int64_t o = 0; o < out; ++o)
                for (int64_t t = 0; t < k; ++t) {
                  const int64_t pos = o * s - pb + t * d;  // x index, or padding outside [0, in)
                  if (pos >= 0 && pos < in) read[static_cast<size_t>(pos)] = true;
                }
              if (c.empty) {  // nothing of x is read: the backends write zeros (and the bias)
                ++empty;
                for (bool r : read) CHECK_FALSE(r);
                continue;
              }
              cropped += c.cropped;
              REQUIRE(c.start[0] >= 0);
              REQUIRE(c.start[0] + c.size[0] <= in);
              REQUIRE(out_size(c.size[0], c.g.pad_before[0], c.g.pad_after[0], k, s, d) == out);
              for (int64_t o = 0; o < out; ++o)
                for (int64_t t = 0; t < k; ++t) {
                  const int64_t pos = o * s - pb + t * d;
                  const int64_t pos2 = o * s - c.g.pad_before[0] + t * d;  // index into the cropped x
                  const bool in_x = pos >= 0 && pos < in, in_crop = pos2 >= 0 && pos2 < c.size[0];
                  REQUIRE(in_x == in_crop);
                  if (in_x) REQUIRE(pos2 + c.start[0] == pos);
                }
              // and what the crop leaves out is read by no output
              for (int64_t p = 0; p < in; ++p)
                if (p < c.start[0] || p >= c.start[0] + c.size[0]) CHECK_FALSE(read[static_cast<size_t>(p)]);
              ++checked;
            }
  CHECK(checked > 1000);
  CHECK(cropped > 100);
  CHECK(empty > 0);
}
