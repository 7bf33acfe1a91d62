#include "export/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <optional>
#include <set>

#include "core/json.hpp"

namespace biaslab {

namespace {

using ojson = Json;

// The spec's own bound on the header (the Rust reader rejects larger ones): a header that
// claims more is a corrupt length, not a real file.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

int itemsize(TensorDType t) {
  switch (t) {
    case TensorDType::f16:
    case TensorDType::bf16: return 2;
    case TensorDType::f32: return 4;
    case TensorDType::f64: return 8;
  }
  return 8;
}

bool parse_dtype(const std::string& s, TensorDType& out) {
  for (TensorDType t : {TensorDType::f16, TensorDType::bf16, TensorDType::f32, TensorDType::f64})
    if (s == tensor_dtype_name(t)) {
      out = t;
      return true;
    }
  return false;
}

// dtypes of the format that biaslab does not read: named as such rather than as "unknown".
bool is_other_safetensors_dtype(const std::string& s) {
  static const char* const kOthers[] = {"BOOL", "U8",  "I8",  "I16",     "U16",     "I32",
                                        "U32",  "I64", "U64", "F8_E5M2", "F8_E4M3"};
  for (const char* o : kOthers)
    if (s == o) return true;
  return false;
}

// Little-endian byte access, independent of the host's byte order.
std::uint64_t load_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void store_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

double half_to_double(std::uint64_t h) {
  const int sign = (h >> 15) & 1, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0) v = std::ldexp(double(mantissa), -24);  // subnormal
  else if (exponent == 31) v = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(double(mantissa | 0x400), exponent - 25);
  return sign ? -v : v;
}

double decode(const unsigned char* p, TensorDType t) {
  switch (t) {
    case TensorDType::f16: return half_to_double(load_le(p, 2));
    case TensorDType::bf16: {
      const std::uint32_t bits = static_cast<std::uint32_t>(load_le(p, 2)) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case TensorDType::f32: {
      const std::uint32_t bits = static_cast<std::uint32_t>(load_le(p, 4));
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case TensorDType::f64: {
      const std::uint64_t bits = load_le(p, 8);
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
  }
  return 0;
}

std::string quote(const std::string& s) {
  return s.size() <= 40 ? "'" + s + "'" : "'" + s.substr(0, 40) + "...'";
}

// A header value as shown in a message, at most about 80 characters: the header is untrusted,
// and one value can be megabytes long. Scalars and short flat arrays (shapes, offsets) print as
// JSON, as before; nested values and the rest of long ones become "...".
std::string brief(const ojson& v) {
  constexpr std::size_t kMaxChars = 60, kMaxItems = 8;
  if (v.is_object()) return v.empty() ? "{}" : "{...}";
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    const bool cut = s.size() > kMaxChars;
    // error_handler_t::replace: a UTF-8 sequence cut in half prints as U+FFFD, never throws.
    const ojson shown = cut ? s.substr(0, kMaxChars) : s;
    return shown.dump(-1, ' ', false, ojson::error_handler_t::replace) + (cut ? "..." : "");
  }
  if (!v.is_array()) return v.dump();  // number, bool or null
  std::string out = "[";
  std::size_t shown = 0;
  for (const auto& x : v) {
    if (x.is_structured() || shown == kMaxItems || out.size() > kMaxChars)
      return out + (shown ? "," : "") + "...]";
    out += (shown++ ? "," : "") + brief(x);  // a scalar: no deeper recursion
  }
  return out + "]";
}

bool non_negative_integer(const ojson& v, std::uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<std::uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
    out = static_cast<std::uint64_t>(v.get<std::int64_t>());
    return true;
  }
  return false;
}

struct Entry {
  std::string name;
  TensorDType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin, end;
};

// One header entry: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}.
Result<Entry> parse_entry(const std::string& name, const ojson& v, std::uint64_t data_size) {
  if (!v.is_object())
    return Error{name, "expected an object with dtype, shape and data_offsets, got " + brief(v)};
  Entry e{name, TensorDType::f64, {}, 0, 0};
  const auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return Error{name, "has no dtype string"};
  const std::string dts = dt->get<std::string>();
  if (!parse_dtype(dts, e.dtype)) {
    if (is_other_safetensors_dtype(dts))
      return Error{name, "dtype " + dts + " is not supported (biaslab reads F16, BF16, F32 and F64)"};
    return Error{name, "unknown dtype " + quote(dts)};
  }
  const auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return Error{name, "has no shape array"};
  std::uint64_t count = 1;
  for (const auto& d : *sh) {
    std::uint64_t n;
    if (!non_negative_integer(d, n) || n > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      return Error{name, "shape " + brief(*sh) + " must list non-negative integers"};
    if (n != 0 && count > std::numeric_limits<std::uint64_t>::max() / n / 8)
      return Error{name, "shape " + brief(*sh) + " is too large"};
    count *= n;
    e.shape.push_back(static_cast<std::int64_t>(n));
  }
  const auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 ||
      !non_negative_integer((*off)[0], e.begin) || !non_negative_integer((*off)[1], e.end))
    return Error{name, "data_offsets must be [begin, end] with non-negative integers"};
  if (e.begin > e.end)
    return Error{name, "data_offsets " + brief(*off) + " end before they begin"};
  if (e.end > data_size)
    return Error{name, "data_offsets " + brief(*off) + " run past the end of the data (" +
                           std::to_string(data_size) + " bytes)"};
  const std::uint64_t want = count * static_cast<std::uint64_t>(itemsize(e.dtype));
  if (e.end - e.begin != want)
    return Error{name, "data_offsets " + brief(*off) + " hold " + std::to_string(e.end - e.begin) +
                           " bytes but shape " + brief(*sh) + " of " + dts + " needs " +
                           std::to_string(want)};
  return e;
}

Result<TensorFile> read_impl(const std::string& bytes) {
  const std::uint64_t size = bytes.size();
  if (size < 8)
    return Error{"", "the file is " + std::to_string(size) +
                         " bytes long; a safetensors file starts with an 8-byte header length"};
  const auto* raw = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::uint64_t header_len = load_le(raw, 8);
  if (header_len > size - 8)
    return Error{"", "the header length is " + std::to_string(header_len) + " bytes but only " +
                         std::to_string(size - 8) + " bytes follow it"};
  if (header_len > kMaxHeaderBytes)
    return Error{"", "the header length " + std::to_string(header_len) +
                         " exceeds the format's limit of 100 MB"};

  // Duplicate tensor names are legal JSON but ambiguous; the parser keeps only the last one,
  // so they are caught while parsing. Containers nested deeper than kMaxNesting are dropped
  // unbuilt and the header is refused: nlohmann's DOM builder copies an object's earlier members
  // when it grows (ordered_json's members cannot be moved), recursing once per level, so a
  // header like {"x": {"shape": [[[[...]]]], "dtype": ...}} a few hundred thousand levels deep
  // overflowed the stack (fuzz/fuzz_safetensors.cpp on a crafted input). A valid header has 3.
  constexpr int kMaxNesting = 64;
  bool too_deep = false;
  std::set<std::string> seen;
  std::string duplicate;
  const ojson::parser_callback_t on_event = [&](int depth, ojson::parse_event_t event,
                                               ojson& parsed) {
    if (depth >= kMaxNesting && (event == ojson::parse_event_t::object_start ||
                                 event == ojson::parse_event_t::array_start)) {
      too_deep = true;
      return false;
    }
    if (event == ojson::parse_event_t::key && depth == 1 && parsed.is_string()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  const char* h = bytes.data() + 8;
  const ojson header = ojson::parse(h, h + header_len, on_event, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Error{"", "the header is not valid JSON"};
  if (too_deep)
    return Error{"", "the header nests deeper than " + std::to_string(kMaxNesting) +
                         " levels; a safetensors header has 3"};
  if (!header.is_object()) return Error{"", "the header must be a JSON object, got " + brief(header)};
  if (!duplicate.empty()) return Error{duplicate, "appears twice in the header"};

  TensorFile file;
  const std::uint64_t data_size = size - 8 - header_len;
  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) return Error{"__metadata__", "must be an object of strings"};
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string())
          return Error{"__metadata__." + m.key(), "must be a string, got " + brief(m.value())};
        file.metadata.emplace_back(m.key(), m.value().get<std::string>());
      }
      continue;
    }
    Result<Entry> e = parse_entry(item.key(), item.value(), data_size);
    if (!e) return e.error();
    entries.push_back(std::move(e).value());
  }

  // The data must be covered exactly once, in some order: no overlaps (two tensors sharing
  // bytes), no gaps and no trailing bytes (room for hidden content).
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < at)
      return Error{e.name, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                               "] overlap those of " + prev->name + " [" + std::to_string(prev->begin) +
                               ", " + std::to_string(prev->end) + "]"};
    if (e.begin > at)
      return Error{e.name, "data_offsets begin at " + std::to_string(e.begin) + " but the previous tensor ends at " +
                               std::to_string(at) + " (a gap in the data)"};
    at = e.end;
    prev = &e;
  }
  if (at != data_size)
    return Error{"", std::to_string(data_size - at) + " bytes of data after the last tensor"};

  const unsigned char* data = raw + 8 + header_len;
  for (const Entry& e : entries) {
    Tensor t;
    t.name = e.name;
    t.dtype = e.dtype;
    t.shape = e.shape;
    const int w = itemsize(e.dtype);
    const std::uint64_t n = (e.end - e.begin) / w;
    t.values.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) t.values[i] = decode(data + e.begin + i * w, e.dtype);
    file.tensors.push_back(std::move(t));
  }
  return file;
}

Result<std::string> write_impl(const TensorFile& file) {
  ojson header = ojson::object();
  if (!file.metadata.empty()) {
    ojson meta = ojson::object();
    for (const auto& [k, v] : file.metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::uint64_t at = 0;
  for (const Tensor& t : file.tensors) {
    if (t.dtype != TensorDType::f32 && t.dtype != TensorDType::f64)
      return Error{t.name, std::string("cannot write dtype ") + tensor_dtype_name(t.dtype) +
                               " (biaslab writes F32 and F64)"};
    std::uint64_t count = 1;
    for (std::int64_t d : t.shape) {
      if (d < 0) return Error{t.name, "negative dimension in its shape"};
      count *= static_cast<std::uint64_t>(d);
    }
    if (count != t.values.size())
      return Error{t.name, "has " + std::to_string(t.values.size()) + " values but its shape holds " +
                               std::to_string(count)};
    if (t.name == "__metadata__" || header.contains(t.name))
      return Error{t.name, "is not a usable tensor name here (reserved or repeated)"};
    const std::uint64_t end = at + count * itemsize(t.dtype);
    header[t.name] = {{"dtype", tensor_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, end}}};
    at = end;
  }
  std::string text = header.dump(-1, ' ', false, ojson::error_handler_t::replace);
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // 8-byte aligned data, as the spec's writer does
  std::string out;
  out.reserve(8 + text.size() + at);
  store_le(out, text.size(), 8);
  out += text;
  for (const Tensor& t : file.tensors) {
    for (double v : t.values) {
      if (t.dtype == TensorDType::f64) {
        std::uint64_t bits;
        std::memcpy(&bits, &v, 8);
        store_le(out, bits, 8);
      } else {
        const float f = static_cast<float>(v);
        std::uint32_t bits;
        std::memcpy(&bits, &f, 4);
        store_le(out, bits, 4);
      }
    }
  }
  return out;
}

}  // namespace

const char* tensor_dtype_name(TensorDType t) {
  switch (t) {
    case TensorDType::f16: return "F16";
    case TensorDType::bf16: return "BF16";
    case TensorDType::f32: return "F32";
    case TensorDType::f64: return "F64";
  }
  return "?";
}

const Tensor* TensorFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Result<TensorFile> read_safetensors(const std::string& bytes) {
  try {
    return read_impl(bytes);
  } catch (const std::bad_alloc&) {
    return Error{"", "out of memory while reading the tensors"};
  } catch (const std::exception& e) {
    return Error{"", std::string("the tensor file could not be read: ") + e.what()};
  }
}

Result<std::string> write_safetensors(const TensorFile& file) {
  try {
    return write_impl(file);
  } catch (const std::bad_alloc&) {
    return Error{"", "out of memory while writing the tensors"};
  } catch (const std::exception& e) {
    return Error{"", std::string("the tensor file could not be written: ") + e.what()};
  }
}

}  // namespace biaslab
