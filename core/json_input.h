#pragma once
// The one JSON parse for every file halfgrad reads (safetensors headers,
// checkpoints' trainer.json and optimizer/scheduler metadata). Such files are
// hostile, so the parse is bounded before anything is built from them:
//  - a size cap (the caller's; parse_json refuses text above it too),
//  - a depth cap, checked as each array or object opens (nothing deeper is
//    ever built, so nothing downstream recurses on untrusted depth),
//  - duplicate keys refused (a JSON parser would keep the last silently),
//  - linear time: nlohmann-json's SAX parser, which is iterative, feeding a
//    builder of our own (the library's parser_callback_t path rescans the
//    parent object at each object's end: quadratic in the number of entries),
//  - messages that quote at most a few hundred bytes of the input.
// Internal: not an installed header (it includes nlohmann-json, a private
// dependency). Also compiled into the libFuzzer target (tests/fuzz).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace halfgrad::json_input {

// At most this many bytes of input text, or of a dumped value, appear in a message.
inline constexpr size_t kQuoteLimit = 200;

struct Parsed {
  nlohmann::json value;
  std::string error;  // empty when the parse succeeded; else what is wrong, for the caller to prefix
  bool ok() const { return error.empty(); }
};

// Parses `text` (one JSON value, nothing but whitespace after it). Never
// throws for bad input: Parsed::error says what is wrong ("not valid JSON
// (...)", "nests deeper than N levels", "has the key \"k\" twice", "is N bytes,
// above the limit of M"), quoting at most kQuoteLimit bytes.
Parsed parse(std::string_view text, size_t max_depth, uint64_t max_bytes);

// `v` as JSON text, cut to kQuoteLimit bytes ("... (N bytes)" marks a cut):
// for messages about values read from files.
std::string quote(const nlohmann::json& v);
// `s` cut to kQuoteLimit bytes the same way.
std::string clip(std::string_view s);

}  // namespace halfgrad::json_input
