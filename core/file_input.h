#pragma once
// Opening the files halfgrad reads (safetensors, checkpoint parts, IDX
// files, metrics CSVs), which are hostile: only regular files. The open is
// non-blocking (a FIFO would otherwise block open() until a writer came,
// forever), then fstat on the descriptor itself (no check-then-open race)
// refuses anything but a regular file before a byte is read, and then the
// descriptor is made blocking again. Internal: not an installed header.
#include <cstdint>
#include <string>

namespace halfgrad {

// An open descriptor of the regular file `path`, for reading; `who` (the
// reader's name, "load_safetensors") starts the Error. Its size in `*size`.
// The caller closes it.
int open_regular_file(const std::string& path, const char* who, uint64_t* size = nullptr);

// The whole regular file `path`, refused with an Error (naming the file, its
// size and the limit) when it holds more than `max_bytes`.
std::string read_regular_file(const std::string& path, const char* who, uint64_t max_bytes);

}  // namespace halfgrad
