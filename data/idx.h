#pragma once
// The IDX format (LeCun's MNIST files, and Fashion-MNIST's): a 4-byte magic
// 00 00 <type> <ndims>, ndims big-endian uint32 sizes, then the elements in
// row-major order. We read the unsigned-byte type (0x08), plain or gzip'd,
// and treat every file as hostile: each malformation is a halfgrad::Error
// naming the file and what is wrong, and nothing is allocated beyond what the
// file can actually hold.
#include <cstdint>
#include <string>

#include <halfgrad/core/tensor.h>
#include <halfgrad/data/dataset.h>

namespace halfgrad::data {

// The array in the IDX file at `path` (gzip is detected by its 1f 8b magic;
// anything else is read as a plain file), shaped as its header says, values
// unchanged (0 .. 255, not scaled) in `dtype`: float32 (the default), float64
// or int64 (labels). halfgrad has no uint8 dtype, so the bytes are converted.
// The header's sizes may ask for at most `max_bytes` bytes of data (elements):
// more is an Error naming the file and both sizes before anything is read, so
// a gzip bomb (a small file that honestly expands to gigabytes) costs nothing.
// The default, 256 MiB, is over five times Fashion-MNIST's largest file; pass
// a larger limit to read larger arrays (the tensor takes max_bytes times the
// dtype's size).
inline constexpr uint64_t kIdxMaxBytes = uint64_t{1} << 28;
Tensor read_idx(const std::string& path, DType dtype = DType::Float32, uint64_t max_bytes = kIdxMaxBytes);

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kFashionMnistRoot = "/usr/share/datasets/fashion-mnist";

// The mean and standard deviation of every pixel of the 60000 training
// images, scaled to [0, 1] (0.28604 and 0.35302 to five places; the values
// torchvision users quote; tests/data/test_idx.cpp recomputes them from the
// files). The standard deviation is the population one, over all 47M pixels.
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

// Fashion-MNIST (Xiao, Rasul, Vollgraf 2017) from `root`: the 60000 training
// or 10000 test examples as a TensorDataset of float32 images [N, 1, 28, 28]
// scaled to [0, 1] (torchvision's ToTensor; normalise with data::Normalize)
// and int64 labels [N] in 0 .. 9. Files: {train,t10k}-{images-idx3,labels-idx1}-ubyte,
// each with or without .gz.
TensorDataset fashion_mnist(const std::string& root = kFashionMnistRoot, bool train = true);

// The class names, by label.
inline constexpr const char* kFashionMnistClasses[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                          "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

}  // namespace halfgrad::data
