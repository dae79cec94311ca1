// The safetensors header: parsed by the bounded JSON parse every file we read
// goes through (core/json_input.h: depth cap, duplicate keys refused, linear
// time, short messages), then checked field by field against the data size
// (see nn/safetensors_format.h for the rules).
#include <halfgrad/nn/safetensors_format.h>

#include <algorithm>
#include <limits>
#include <utility>

#include <halfgrad/core/error.h>
#include <halfgrad/core/json_input.h>
#include <nlohmann/json.hpp>

namespace halfgrad::safetensors {

namespace {

using json = nlohmann::json;
using json_input::quote;

constexpr std::pair<std::string_view, DType> kCodes[] = {
    {"F32", DType::Float32}, {"F64", DType::Float64}, {"F16", DType::Float16},
    {"BF16", DType::BFloat16}, {"I64", DType::Int64}, {"BOOL", DType::Bool},
    {"F8_E4M3", DType::Float8_e4m3fn}, {"F8_E5M2", DType::Float8_e5m2},  // safetensors' fp8 names
};

// The header is at most three levels deep: {name: {"shape": [..]}}.
constexpr size_t kMaxDepth = 3;

[[noreturn]] void bad(const std::string& file, const std::string& problem) {
  fail("safetensors file '{}': {}", file, problem);
}

// A non-negative integer that fits int64 (JSON numbers parse as unsigned,
// signed or float; only the first is a size).
uint64_t size_field(const json& v, const std::string& file, const std::string& what) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad(file, fmt::format("{} must be a non-negative integer below 2^63, got {}", what, quote(v)));
  return v.get<uint64_t>();
}

Entry parse_entry(const std::string& name, const json& v, const std::string& file) {
  const std::string where = fmt::format("tensor \"{}\"", json_input::clip(name));
  if (!v.is_object()) bad(file, fmt::format("{} must be an object with dtype, shape and data_offsets, got {}", where, quote(v)));
  for (const auto& [key, value] : v.items()) {
    (void)value;
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      bad(file, fmt::format("{} has an unknown field \"{}\" (only dtype, shape and data_offsets are allowed)", where, key));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad(file, fmt::format("{} has no \"{}\" field", where, key));
  const json& dtype = v["dtype"];
  if (!dtype.is_string()) bad(file, fmt::format("{}: dtype must be a string, got {}", where, quote(dtype)));
  Entry e;
  e.name = name;
  e.dtype = dtype_from_code(dtype.get_ref<const std::string&>(), file, name);

  const json& shape = v["shape"];
  if (!shape.is_array()) bad(file, fmt::format("{}: shape must be an array, got {}", where, quote(shape)));
  // The product of the non-zero sizes must fit too, even when a zero makes the
  // tensor empty: the tensor's strides are such products.
  uint64_t product = 1;
  bool overflow = false, empty = false;
  for (const json& d : shape) {
    const uint64_t n = size_field(d, file, where + ": a shape entry");
    e.shape.push_back(static_cast<int64_t>(n));
    if (n == 0) empty = true;
    else if (product > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / n) overflow = true;
    else product *= n;
  }
  if (overflow || product > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / itemsize(e.dtype))
    bad(file, fmt::format("{}: shape {} has more bytes than fit in int64", where, quote(shape)));
  const uint64_t numel = empty ? 0 : product;

  const json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    bad(file, fmt::format("{}: data_offsets must be [begin, end], got {}", where, quote(offsets)));
  e.begin = size_field(offsets[0], file, where + ": data_offsets[0]");
  e.end = size_field(offsets[1], file, where + ": data_offsets[1]");
  if (e.end < e.begin) bad(file, fmt::format("{}: data_offsets [{}, {}] end before they begin", where, e.begin, e.end));
  const uint64_t nbytes = numel * itemsize(e.dtype);
  if (e.end - e.begin != nbytes)
    bad(file, fmt::format("{}: data_offsets [{}, {}] hold {} bytes, but a {} of shape {} has {}", where, e.begin, e.end,
                          e.end - e.begin, dtype_code(e.dtype), quote(shape), nbytes));
  return e;
}

}  // namespace

std::string_view dtype_code(DType dtype) {
  for (const auto& [code, t] : kCodes)
    if (t == dtype) return code;
  return "?";
}

DType dtype_from_code(std::string_view code, const std::string& file, const std::string& tensor) {
  for (const auto& [c, t] : kCodes)
    if (c == code) return t;
  bad(file, fmt::format("tensor \"{}\" has dtype \"{}\", which halfgrad has no tensor for (it reads F32, F64, F16, "
                        "BF16, I64, BOOL, F8_E4M3 and F8_E5M2); convert it before saving",
                        json_input::clip(tensor), json_input::clip(code)));
}

uint64_t header_length(const unsigned char (&prefix)[8], uint64_t file_size, const std::string& file) {
  if (file_size < 8) bad(file, fmt::format("{} bytes is too short for the 8-byte header length", file_size));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > kMaxHeaderSize)
    bad(file, fmt::format("the header length is {} bytes, above the limit of {} (not a safetensors file?)", n,
                          kMaxHeaderSize));
  if (n > file_size - 8)
    bad(file, fmt::format("the header length is {} bytes but the file has only {} after the length (truncated?)", n,
                          file_size - 8));
  if (n < 2) bad(file, fmt::format("the header length is {}: too short for a JSON object", n));
  return n;
}

Header parse_header(std::string_view text, uint64_t data_size, const std::string& file) {
  // Duplicate keys at any level, and nesting deeper than the format has, are
  // rejected while parsing.
  json_input::Parsed parsed = json_input::parse(text, kMaxDepth, kMaxHeaderSize);
  if (!parsed.ok()) bad(file, "the header " + parsed.error);
  const json root = std::move(parsed.value);
  if (!root.is_object()) bad(file, fmt::format("the header must be a JSON object, got a {}", root.type_name()));

  Header h;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;  // the reference reads a null as no metadata
      if (!value.is_object()) bad(file, fmt::format("__metadata__ must be an object of strings, got {}", quote(value)));
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) bad(file, fmt::format("__metadata__[\"{}\"] must be a string, got {}", json_input::clip(k), quote(v)));
        h.metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    h.entries.push_back(parse_entry(key, value, file));
  }
  // As the reference: in data order the ranges must tile [0, data_size).
  std::sort(h.entries.begin(), h.entries.end(),
            [](const Entry& a, const Entry& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
  uint64_t at = 0;
  for (const Entry& e : h.entries) {
    if (e.begin != at)
      bad(file, fmt::format("tensor \"{}\" starts at data offset {}, but the previous tensor ends at {} (the ranges must "
                            "cover the data in order, without gaps or overlaps)",
                            json_input::clip(e.name), e.begin, at));
    at = e.end;
  }
  if (at != data_size)
    bad(file, fmt::format("the tensors cover {} bytes of data but the file holds {} after the header", at, data_size));
  return h;
}

Header parse_bytes(const unsigned char* data, size_t size, const std::string& file) {
  unsigned char prefix[8] = {};
  std::copy_n(data, std::min<size_t>(size, 8), prefix);
  const uint64_t n = header_length(prefix, size, file);
  const std::string_view text(reinterpret_cast<const char*>(data) + 8, static_cast<size_t>(n));
  return parse_header(text, size - 8 - n, file);
}

std::string serialize_header(const std::vector<Entry>& entries, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!metadata.empty()) root["__metadata__"] = metadata;
  for (const Entry& e : entries) {
    HG_CHECK(e.name != "__metadata__", "save_safetensors: \"__metadata__\" is reserved and cannot name a tensor");
    HG_CHECK(!root.contains(e.name), "save_safetensors: the tensor name \"{}\" is given twice", e.name);
    root[e.name] = {{"dtype", dtype_code(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string text;
  try {
    text = root.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("save_safetensors: a tensor name or metadata string is not valid UTF-8 ({})", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  return out + text;
}

}  // namespace halfgrad::safetensors
