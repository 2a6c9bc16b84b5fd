// The safetensors format (Hugging Face): an 8-byte little-endian header
// length N, N bytes of a JSON object mapping each tensor's name to its dtype,
// shape and [begin, end) byte range in the data that follows, and an optional
// "__metadata__" object of strings. Python's `safetensors` and plain numpy
// read what this writes.
//
// The reader treats a file as hostile: it opens regular files only (a FIFO or
// a device such as /dev/zero is refused, not read), checks the header length
// against the file and a bound before reading the header, limits the JSON's
// nesting, refuses duplicate keys (JSON would keep the last silently), and
// checks every tensor's element count and byte count for overflow and its
// range against the data, so the ranges must be aligned and must tile the
// data exactly: no overlap, no gap, no trailing bytes. Only then is the data
// read.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "platipus/core/file.hpp"
#include "platipus/core/shape.hpp"

namespace platipus::io {

struct SafetensorsLimits {
  std::uint64_t max_header_bytes = std::uint64_t{100} << 20;  // the reference reader's bound
  int max_json_depth = 64;
};

// One tensor of a file: its data is bytes [begin, end) of SafetensorsFile::data.
struct SafetensorsEntry {
  std::string name, dtype;
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};

struct SafetensorsFile {
  std::vector<SafetensorsEntry> tensors;  // in the order of their data
  std::map<std::string, std::string> metadata;
  std::string data;
};

// Bytes per element of a safetensors dtype name; 0 for a name it does not have.
inline std::size_t safetensors_dtype_size(std::string_view dtype) {
  static const std::map<std::string_view, std::size_t> sizes{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},
      {"I32", 4},  {"F32", 4}, {"U64", 8}, {"I64", 8},     {"F64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// Parses JSON text refusing nesting deeper than `max_depth` and duplicate
// keys in any object; `what` names the text in the error.
inline nlohmann::json parse_json_strictly(std::string_view text, int max_depth,
                                          const std::string& what) {
  using nlohmann::json;
  std::vector<std::vector<std::string>> keys;  // the keys seen so far, per open object
  auto guard = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        check(depth < max_depth, "read_json", "{}: JSON nested deeper than {} levels", what,
              max_depth);
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case json::parse_event_t::key: {
        auto key = parsed.get<std::string>();
        check(std::find(keys.back().begin(), keys.back().end(), key) == keys.back().end(),
              "read_json", "{}: duplicate key \"{}\"", what, key);
        keys.back().push_back(std::move(key));
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), guard);
  } catch (const json::exception& e) {
    fail("read_json", "{}: malformed JSON: {}", what, e.what());
  }
}

namespace detail {

inline std::uint64_t read_u64_le(std::string_view bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = value << 8 | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  return value;
}

// One header entry, checked: dtype known, shape of non-negative dimensions,
// element and byte counts without overflow, an aligned range inside the data.
inline SafetensorsEntry tensor_entry(const std::string& name, const nlohmann::json& spec,
                                     std::uint64_t data_bytes, const std::string& where) {
  auto bad = [&](std::string_view why) {
    fail("read_safetensors", "{}: tensor '{}' {}", where, name, why);
  };
  if (!spec.is_object() || spec.size() != 3 || !spec.contains("dtype") || !spec.contains("shape") ||
      !spec.contains("data_offsets"))
    bad("must have exactly a dtype, a shape and data_offsets");
  SafetensorsEntry entry;
  entry.name = name;
  if (!spec["dtype"].is_string()) bad("has a dtype that is not a string");
  entry.dtype = spec["dtype"].get<std::string>();
  const std::size_t element = safetensors_dtype_size(entry.dtype);
  if (element == 0) bad(fmt::format("has an unknown dtype \"{}\"", entry.dtype));
  const auto& shape = spec["shape"];
  if (!shape.is_array() || shape.size() > 16) bad("has a shape that is not a list of <= 16 sizes");
  std::uint64_t count = 1;
  std::vector<std::int64_t> dims;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned()) bad("has a dimension that is not a non-negative integer");
    const auto size = d.get<std::uint64_t>();
    if (size > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        __builtin_mul_overflow(count, size, &count))
      bad(fmt::format("has a shape {} whose element count overflows", shape.dump()));
    dims.push_back(static_cast<std::int64_t>(size));
  }
  std::uint64_t bytes = 0;
  if (count > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
      __builtin_mul_overflow(count, std::uint64_t{element}, &bytes))
    bad(fmt::format("has a shape {} whose byte count overflows", shape.dump()));
  entry.shape = Shape(dims);
  const auto& range = spec["data_offsets"];
  if (!range.is_array() || range.size() != 2 || !range[0].is_number_unsigned() ||
      !range[1].is_number_unsigned())
    bad("has data_offsets that are not two non-negative integers");
  entry.begin = range[0].get<std::uint64_t>();
  entry.end = range[1].get<std::uint64_t>();
  if (entry.begin > entry.end || entry.end > data_bytes)
    bad(fmt::format("has data_offsets [{}, {}] outside the {} bytes of data", entry.begin,
                    entry.end, data_bytes));
  if (entry.end - entry.begin != bytes)
    bad(fmt::format("has {} bytes of data, but shape {} of {} needs {}", entry.end - entry.begin,
                    shape.dump(), entry.dtype, bytes));
  if (entry.begin % element != 0)
    bad(fmt::format("starts at byte {}, not aligned to its {}-byte elements", entry.begin,
                    element));
  return entry;
}

}  // namespace detail

// Reads and checks a safetensors file; throws platipus::error naming the file
// and what is wrong.
inline SafetensorsFile read_safetensors(const RegularFile& file,
                                        const SafetensorsLimits& limits = {}) {
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  const std::string where = file.path().string();
  check(file.size() >= 8, "read_safetensors", "{}: {} bytes, too short for a safetensors file",
        where, file.size());
  const std::string prefix = file.read(0, 8);
  const std::uint64_t header_bytes = detail::read_u64_le(prefix);
  check(header_bytes >= 2 && header_bytes <= limits.max_header_bytes &&
            header_bytes <= file.size() - 8,
        "read_safetensors",
        "{}: not a safetensors file (header length {} for a file of {} bytes, at most {})", where,
        header_bytes, file.size(), limits.max_header_bytes);
  const std::string text = file.read(8, header_bytes);
  check(text.front() == '{', "read_safetensors", "{}: the header is not a JSON object", where);
  const auto header = parse_json_strictly(text, limits.max_json_depth, where + " (header)");
  check(header.is_object(), "read_safetensors", "{}: the header is not a JSON object", where);

  SafetensorsFile out;
  const std::uint64_t data_bytes = file.size() - 8 - header_bytes;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      check(value.is_object(), "read_safetensors", "{}: __metadata__ is not an object", where);
      for (const auto& [name, text_value] : value.items()) {
        check(text_value.is_string(), "read_safetensors",
              "{}: __metadata__ entry '{}' is not a string", where, name);
        out.metadata.emplace(name, text_value.get<std::string>());
      }
    } else {
      out.tensors.push_back(detail::tensor_entry(key, value, data_bytes, where));
    }
  }
  // The ranges must tile [0, data_bytes): sorted, each starts where the last ended.
  std::ranges::sort(out.tensors, {}, [](const auto& t) { return std::pair{t.begin, t.end}; });
  std::uint64_t covered = 0;
  for (const auto& t : out.tensors) {
    check(t.begin == covered, "read_safetensors",
          "{}: tensor '{}' starts at byte {} of the data, where {} was expected (tensors "
          "overlap or leave a gap)",
          where, t.name, t.begin, covered);
    covered = t.end;
  }
  check(covered == data_bytes, "read_safetensors",
        "{}: {} bytes of data follow the header, but its tensors cover {}", where, data_bytes,
        covered);
  out.data = file.read(8 + header_bytes, data_bytes);
  return out;
}

inline SafetensorsFile read_safetensors(const std::filesystem::path& path,
                                        const SafetensorsLimits& limits = {}) {
  return read_safetensors(RegularFile(path), limits);
}

// A tensor to write: `bytes` holds its little-endian values.
struct SafetensorsTensor {
  std::string name, dtype;
  Shape shape;
  std::string_view bytes;
};

// The file's bytes: the header padded with spaces to a multiple of 8 bytes
// (so every tensor of 8-byte or smaller elements stays aligned), then the data
// in the order given.
inline std::string encode_safetensors(const std::vector<SafetensorsTensor>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    check(t.name != "__metadata__" && !header.contains(t.name), "write_safetensors",
          "tensor name '{}' is reserved or used twice", t.name);
    const auto element = safetensors_dtype_size(t.dtype);
    check(element != 0 && t.bytes.size() == static_cast<std::size_t>(t.shape.numel()) * element,
          "write_safetensors", "tensor '{}': {} bytes do not hold {} of {}", t.name, t.bytes.size(),
          t.shape, t.dtype);
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", std::vector<std::int64_t>(t.shape.begin(), t.shape.end())},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i)
    file[static_cast<std::size_t>(i)] = static_cast<char>(text.size() >> (8 * i) & 0xff);
  file += text;
  for (const auto& t : tensors) file.append(t.bytes);
  return file;
}

// Writes a safetensors file atomically (core/file.hpp's rules for the path).
inline void write_safetensors(const std::filesystem::path& path,
                              const std::vector<SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  write_file_atomically(path, encode_safetensors(tensors, metadata));
}

}  // namespace platipus::io
