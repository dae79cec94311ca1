// The bounded JSON parse (core/json_input.h): nlohmann-json's SAX parser (an
// explicit stack, no recursion) feeding a builder that refuses nesting past
// the cap and duplicate keys as they arrive. Each value is placed with one
// map insertion or vector push, so the parse is linear in the input (up to the
// log of an object's size), whatever the number of entries.
#include <halfgrad/core/json_input.h>

#include <utility>
#include <vector>

#include <fmt/format.h>

namespace halfgrad::json_input {

namespace {

using json = nlohmann::json;

class Builder {
 public:
  explicit Builder(size_t max_depth) : max_depth_(max_depth) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(json(v)); }
  bool string(json::string_t& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool key(json::string_t& k) {
    json& object = *stack_.back();
    if (object.contains(k)) {
      error = fmt::format("has the key \"{}\" twice", clip(k));
      return false;
    }
    slot_ = &object[k];  // a null, filled by the value that follows
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    // e.what() ends with the last token read, which can be the whole input.
    error = fmt::format("is not valid JSON ({})", clip(e.what()));
    return false;
  }

  json root;
  std::string error;

 private:
  // Where the next value goes: the root, the end of the open array, or the
  // slot of the open object's last key. Only the innermost open container
  // ever grows, so the pointers on the stack stay valid.
  json* place(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool put(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& v) {
    if (stack_.size() >= max_depth_) {
      error = fmt::format("nests deeper than {} levels", max_depth_);
      return false;
    }
    stack_.push_back(place(std::move(v)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  size_t max_depth_;
  std::vector<json*> stack_;
  json* slot_ = nullptr;
};

}  // namespace

std::string clip(std::string_view s) {
  if (s.size() <= kQuoteLimit) return std::string(s);
  return fmt::format("{}... ({} bytes in all)", s.substr(0, kQuoteLimit), s.size());
}

std::string quote(const nlohmann::json& v) {
  return clip(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Parsed parse(std::string_view text, size_t max_depth, uint64_t max_bytes) {
  Parsed out;
  if (text.size() > max_bytes) {
    out.error = fmt::format("is {} bytes, above the limit of {}", text.size(), max_bytes);
    return out;
  }
  // nlohmann stops reading at a NUL byte as at the end of the input, so
  // "{}\0garbage" would pass; raw NULs are never valid JSON text.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    out.error = fmt::format("is not valid JSON (a NUL byte at offset {})", nul);
    return out;
  }
  Builder builder(max_depth);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const json::exception& e) {  // not expected: the builder reports errors by returning false
    builder.error = fmt::format("is not valid JSON ({})", clip(e.what()));
  }
  if (!ok || !builder.error.empty()) {
    out.error = builder.error.empty() ? std::string("is not valid JSON") : std::move(builder.error);
    return out;
  }
  out.value = std::move(builder.root);
  return out;
}

}  // namespace halfgrad::json_input
