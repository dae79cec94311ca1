#pragma once
// What every snippet of docs/api.md may use without including it: the whole
// library as `hg`, std::cout, and CHECK(cond), the snippets' assertion (it
// throws, so a snippet whose claim is false fails its CTest entry, also in
// Release builds where assert() does nothing).
#include <halfgrad.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace hg = halfgrad;

#define CHECK(cond)                                                                                     \
  do {                                                                                                  \
    if (!(cond)) throw std::runtime_error(std::string("CHECK(" #cond ") failed at line ") +           \
                                          std::to_string(__LINE__));                                    \
  } while (0)

namespace snippet_prelude {
inline int run_one(int n, int count, void (*const snippets[])()) {
  if (n < 1 || n > count) {
    std::cerr << "usage: api_snippets <1.." << count << ">\n";
    return 2;
  }
  try {
    snippets[n - 1]();
  } catch (const std::exception& e) {
    std::cerr << "snippet " << n << " failed: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
}  // namespace snippet_prelude
