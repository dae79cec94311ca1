// libFuzzer target for the safetensors reader: any bytes go through the same
// checks as load_safetensors (nn/safetensors_format.h). A halfgrad::Error is
// the expected answer to a bad file; anything else (a crash, an out-of-bounds
// read under ASan, another exception type) is a finding. For a file that
// parses, the invariants a loader relies on are asserted: the ranges tile the
// data exactly and each holds numel * itemsize bytes.
//
// Built only with clang and -DHALFGRAD_FUZZ=ON (tests/fuzz/CMakeLists.txt).
#include <cstdint>
#include <cstdlib>

#include <halfgrad/core/error.h>
#include <halfgrad/nn/safetensors_format.h>

namespace st = halfgrad::safetensors;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const st::Header h = st::parse_bytes(data, size, "fuzz");
    const uint64_t header = size - 8;  // at most; the data section is what is left
    uint64_t at = 0;
    for (const st::Entry& e : h.entries) {
      uint64_t numel = 1;
      for (int64_t d : e.shape) {
        if (d < 0) std::abort();
        numel *= static_cast<uint64_t>(d);
      }
      if (e.begin != at || e.end < e.begin || e.end - e.begin != numel * halfgrad::itemsize(e.dtype)) std::abort();
      at = e.end;
    }
    if (at > header) std::abort();
    // Round trip: what we write for this header parses back to the same entries.
    const std::string again = st::serialize_header(h.entries, h.metadata);
    std::string file = again + std::string(at, '\0');
    const st::Header h2 =
        st::parse_bytes(reinterpret_cast<const unsigned char*>(file.data()), file.size(), "fuzz-roundtrip");
    if (h2.entries.size() != h.entries.size() || h2.metadata != h.metadata) std::abort();
    for (size_t i = 0; i < h.entries.size(); ++i)
      if (h2.entries[i].name != h.entries[i].name || h2.entries[i].shape != h.entries[i].shape ||
          h2.entries[i].dtype != h.entries[i].dtype || h2.entries[i].begin != h.entries[i].begin)
        std::abort();
  } catch (const halfgrad::Error&) {
  }
  return 0;
}
