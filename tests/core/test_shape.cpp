// Shape: a std::vector<int64_t> with six values inline. Every edit is checked
// against a std::vector doing the same, across the inline / heap boundary, and
// a tensor of rank above six works as one of rank two.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include <halfgrad.h>

using namespace halfgrad;

namespace {
std::vector<int64_t> as_vec(const Shape& s) { return std::vector<int64_t>(s.begin(), s.end()); }
}  // namespace

TEST_CASE("Shape edits as a std::vector does, inline and on the heap", "[core][shape]") {
  std::mt19937 rng(7);
  Shape s;
  std::vector<int64_t> v;
  for (int step = 0; step < 4000; ++step) {
    const int what = static_cast<int>(rng() % 7);
    const int64_t x = static_cast<int64_t>(rng() % 1000) - 500;
    const size_t at = v.empty() ? 0 : rng() % (v.size() + 1);
    switch (what) {
      case 0: s.push_back(x); v.push_back(x); break;
      case 1: if (!v.empty()) { s.pop_back(); v.pop_back(); } break;
      case 2: s.insert(s.begin() + at, x); v.insert(v.begin() + static_cast<long>(at), x); break;
      case 3:
        if (at < v.size()) {
          s.erase(s.begin() + at);
          v.erase(v.begin() + static_cast<long>(at));
        }
        break;
      case 4: {
        const size_t n = rng() % 12;
        s.resize(n, x);
        v.resize(n, x);
        break;
      }
      case 5: {  // insert a range of itself: the source may move while the gap opens
        const Shape copy = s;
        s.insert(s.begin() + at, copy.begin(), copy.end());
        const std::vector<int64_t> vc = v;
        v.insert(v.begin() + static_cast<long>(at), vc.begin(), vc.end());
        if (v.size() > 40) { s.clear(); v.clear(); }
        break;
      }
      case 6: {  // copies and moves keep the values and leave the source valid
        Shape c = s;
        Shape m = std::move(c);
        REQUIRE(as_vec(m) == v);
        c = m;
        REQUIRE(as_vec(c) == v);
        s = std::move(m);
        break;
      }
    }
    REQUIRE(s.size() == v.size());
    REQUIRE(as_vec(s) == v);
  }
}

TEST_CASE("Shape converts to and from std::vector and compares as one", "[core][shape]") {
  const std::vector<int64_t> big{1, 2, 3, 4, 5, 6, 7, 8, 9};
  const Shape s = big;  // beyond the inline six: on the heap
  CHECK(s.size() == 9);
  CHECK(s.capacity() >= 9);
  const std::vector<int64_t> back = s;
  CHECK(back == big);
  CHECK(s == big);
  CHECK(Shape{2, 3} == Shape{2, 3});
  CHECK(Shape{2, 3} != Shape{2, 4});
  CHECK(Shape{2, 3} < Shape{2, 4});
  CHECK(Shape{2} < Shape{2, 0});
  CHECK(Shape(3, 7) == Shape{7, 7, 7});
  CHECK_THROWS_AS(s.at(9), std::out_of_range);
  CHECK(shape_str(Shape{}) == "[]");
  Shape a{1, 2}, b = big;
  a.swap(b);
  CHECK(a == big);
  CHECK(b == Shape{1, 2});
}

TEST_CASE("a tensor of rank 8 (its shape on the heap) views and reduces", "[core][shape]") {
  Tensor t = arange(256, kFloat32).reshape({2, 2, 2, 2, 2, 2, 2, 2});
  CHECK(t.dim() == 8);
  CHECK(t.strides() == Shape{128, 64, 32, 16, 8, 4, 2, 1});
  const Tensor p = t.permute({7, 6, 5, 4, 3, 2, 1, 0}).contiguous();
  CHECK(p.index({1, 0, 0, 0, 0, 0, 0, 0}).item<float>() == 1.f);
  CHECK(p.index({0, 0, 0, 0, 0, 0, 0, 1}).item<float>() == 128.f);
  CHECK(t.sum({0, 1, 2, 3, 4, 5, 6}).shape() == Shape{2});
  CHECK(t.flatten().sum().item<float>() == 255.f * 256.f / 2.f);
}
