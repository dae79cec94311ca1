#pragma once
// halfgrad::Error: every failure a user can cause ends here, with a message
// that names the op, the shapes/dtypes/devices involved and a remedy.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace halfgrad {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace halfgrad

// HG_CHECK(cond, "fmt", args...): throw halfgrad::Error with the message when cond is false.
#define HG_CHECK(cond, ...)                 \
  do {                                      \
    if (!(cond)) ::halfgrad::fail(__VA_ARGS__); \
  } while (0)
