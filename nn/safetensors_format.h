#pragma once
// The safetensors container, without tensors: parse and check a file's header
// against the size of its data, and write one. Kept apart from the Tensor
// code (nn/safetensors.cpp) so that the libFuzzer target
// (tests/fuzz/safetensors_fuzz.cpp) can build exactly this parser (and the
// bounded JSON parse it uses, core/json_input.cpp) with clang and nothing
// else of the library. Internal: not an installed header.
//
// The format (https://github.com/huggingface/safetensors): 8 bytes, a
// little-endian uint64 N; N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...,
//    "__metadata__": {"key": "string value"}}
// (possibly padded with trailing spaces); then the data, offsets relative to
// its start. The checks follow the reference implementation's: the header is
// at most 100 MB, every entry has exactly these three fields, the ranges
// cover the data exactly and in order (no gaps, no overlaps, nothing after),
// and each range holds numel * itemsize bytes. Beyond it: duplicate keys are an
// Error (a JSON parser keeps the last silently), so is a dtype halfgrad has no
// tensor for, and a BOOL byte other than 0 or 1 (checked in nn/safetensors.cpp).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <halfgrad/core/dtype.h>

namespace halfgrad::safetensors {

// The reference implementation's cap on N: a header larger than this is an
// Error before anything is allocated for it.
inline constexpr uint64_t kMaxHeaderSize = 100'000'000;

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

struct Header {
  std::vector<Entry> entries;  // in data order (by begin), which is file order
  std::map<std::string, std::string> metadata;
};

// "F32" <-> float32, ...; an unknown name is an Error naming `file`.
std::string_view dtype_code(DType dtype);
DType dtype_from_code(std::string_view code, const std::string& file, const std::string& tensor);

// The N of the first 8 bytes, checked against the cap and the file's size
// (`file_size` bytes in all); an Error naming `file` otherwise.
uint64_t header_length(const unsigned char (&prefix)[8], uint64_t file_size, const std::string& file);

// Parses the N header bytes and checks them against a data section of
// `data_size` bytes. Every problem is a halfgrad::Error naming `file`.
Header parse_header(std::string_view json, uint64_t data_size, const std::string& file);

// A whole file in memory: header_length + parse_header (the fuzzer's entry).
Header parse_bytes(const unsigned char* data, size_t size, const std::string& file);

// The 8-byte length and the JSON header (padded with spaces so the data
// starts 8-byte aligned, as Hugging Face writes it) for `entries`, whose
// ranges must be consecutive from 0 in order (the caller lays them out).
std::string serialize_header(const std::vector<Entry>& entries, const std::map<std::string, std::string>& metadata);

}  // namespace halfgrad::safetensors
