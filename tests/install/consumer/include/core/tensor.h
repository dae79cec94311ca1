#pragma once
// The consumer's own core/tensor.h, on its include path before halfgrad's: the
// names every framework uses must not collide with halfgrad's installed headers
// (which live under <halfgrad/...>). If a halfgrad header picked this file up,
// halfgrad::Tensor would be missing and the build would fail.
namespace app {
struct Tensor {
  int rows = 0, cols = 0;
};
}  // namespace app
