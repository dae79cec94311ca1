#pragma once
// Peak memory, for the end-of-epoch report of a training loop ("peak 812.4 MiB
// on cuda:0"): how much memory the run needed at most, on the device it
// trains on.
//
//   CUDA: the high-water mark of bytes handed out by halfgrad's pool on that
//         device (tensors only; memory the pool caches after a free, cuBLASLt
//         workspaces and the CUDA context are not counted). Reading it does
//         not wait for the device. reset_peak_memory starts a new mark.
//   CPU:  the process's peak resident set size (getrusage's ru_maxrss):
//         everything the process touched, not only tensors. It cannot be
//         reset; reset_peak_memory(cpu) returns false.
#include <cstdint>
#include <string>

#include <halfgrad/core/device.h>

namespace halfgrad::train {

uint64_t peak_memory_bytes(Device device);
// True when the mark was reset (CUDA), false where that is not possible (CPU).
bool reset_peak_memory(Device device);

// "512 B", "1.5 KiB", "123.4 MiB", "2.0 GiB": binary units, one decimal.
std::string format_bytes(uint64_t bytes);

}  // namespace halfgrad::train
