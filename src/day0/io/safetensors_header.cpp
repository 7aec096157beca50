#include "day0/io/safetensors_header.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "day0/core/checked_math.h"

namespace day0 {

namespace {

using nlohmann::json;

// Nesting deeper than this is never a valid header ({ "name": { "shape": [..] } } is depth 3); refusing
// it before parsing keeps a hostile file from building a huge recursive value.
constexpr int kMaxJsonDepth = 8;

bool nesting_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

Result<SafetensorsEntry> parse_entry(const std::string& name, const json& value) {
  const std::string where = "tensor '" + name + "'";
  if (!value.is_object()) return parse_error(where + ": expected an object, found " + value.type_name());
  SafetensorsEntry entry;
  entry.name = name;

  const auto dtype_it = value.find("dtype");
  if (dtype_it == value.end() || !dtype_it->is_string()) {
    return parse_error(where + ": 'dtype' missing or not a string");
  }
  const auto& dtype_name_str = dtype_it->get_ref<const std::string&>();
  const auto dtype = parse_dtype(dtype_name_str);
  if (!dtype) return unsupported(where + ": unknown dtype '" + dtype_name_str + "'");
  entry.dtype = *dtype;

  const auto shape_it = value.find("shape");
  if (shape_it == value.end() || !shape_it->is_array()) {
    return parse_error(where + ": 'shape' missing or not an array");
  }
  for (const auto& dim : *shape_it) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return parse_error(where + ": shape " + shape_it->dump() + ": expected non-negative integers");
    }
    entry.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
  }

  const auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return parse_error(where + ": 'data_offsets' must be [begin, end] with non-negative integers");
  }
  entry.begin = (*offsets_it)[0].get<uint64_t>();
  entry.end = (*offsets_it)[1].get<uint64_t>();
  if (entry.end < entry.begin) {
    return parse_error(
        fmt::format("{}: data_offsets [{}, {}]: end before begin", where, entry.begin, entry.end));
  }
  for (const auto& [key, unused] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return parse_error(where + ": unexpected key '" + key + "'");
    }
  }

  const auto numel = checked_product(entry.shape);
  const auto bits =
      numel ? checked_mul(*numel, static_cast<uint64_t>(dtype_bits(entry.dtype))) : std::nullopt;
  if (!bits) {
    return out_of_range(where + ": shape " + shape_it->dump() + " overflows 64-bit byte counts");
  }
  if (*bits % 8 != 0) {
    return parse_error(fmt::format("{}: {} elements of {} do not fill a whole number of bytes", where, *numel,
                                   dtype_name_str));
  }
  const uint64_t expected = *bits / 8;
  if (entry.byte_size() != expected) {
    return parse_error(fmt::format("{}: shape {} x {} needs {} bytes, data_offsets [{}, {}] hold {}", where,
                                   shape_it->dump(), dtype_name_str, expected, entry.begin, entry.end,
                                   entry.byte_size()));
  }
  return entry;
}

}  // namespace

uint64_t SafetensorsEntry::numel() const {
  return checked_product(shape).value_or(0);
}

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors[it->second];
}

Result<uint64_t> read_safetensors_header_length(std::span<const uint8_t> prefix, uint64_t file_size) {
  if (prefix.size() < 8 || file_size < 8) {
    return data_loss(fmt::format("file of {} bytes is too short for the 8-byte header length", file_size));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[static_cast<size_t>(i)];
  if (n > kMaxSafetensorsHeaderBytes) {
    return out_of_range(
        fmt::format("header length {} exceeds the limit of {} bytes", n, kMaxSafetensorsHeaderBytes));
  }
  if (n + 8 > file_size) {
    return data_loss(
        fmt::format("header length {} runs past the end of the file ({} bytes): truncated?", n, file_size));
  }
  return n;
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> file_prefix, uint64_t file_size,
                                                   bool allow_truncated_data) {
  D0_ASSIGN_OR_RETURN(const uint64_t n, read_safetensors_header_length(file_prefix, file_size));
  if (file_prefix.size() < n + 8) {
    return internal_error("parse_safetensors_header: caller passed fewer bytes than the header length");
  }
  const std::string_view text(reinterpret_cast<const char*>(file_prefix.data() + 8), n);
  if (!nesting_within(text, kMaxJsonDepth)) {
    return parse_error(fmt::format("header JSON nests deeper than {} levels", kMaxJsonDepth));
  }
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    return parse_error(std::string("header is not valid JSON: ") + e.what());
  }
  if (!root.is_object())
    return parse_error(std::string("header: expected a JSON object, found ") + root.type_name());

  SafetensorsHeader header;
  header.header_length = n;
  header.data_start = n + 8;
  header.data_size = file_size - header.data_start;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return parse_error("__metadata__: expected an object of strings");
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) return parse_error("__metadata__." + mkey + ": expected a string");
        header.metadata[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    D0_ASSIGN_OR_RETURN(auto entry, parse_entry(key, value));
    header.tensors.push_back(std::move(entry));
  }

  // Tiling check: sorted by (begin, end), the tensors must cover [0, data_size) exactly.
  std::sort(header.tensors.begin(), header.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& t : header.tensors) {
    if (t.begin < cursor) {
      return parse_error(fmt::format("tensor '{}' data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", t.name,
                                     t.begin, t.end, previous->name, previous->begin, previous->end));
    }
    if (t.begin > cursor) {
      return parse_error(
          fmt::format("gap of {} bytes before tensor '{}' (data_offsets [{}, {}], expected begin {})",
                      t.begin - cursor, t.name, t.begin, t.end, cursor));
    }
    cursor = t.end;
    previous = &t;
  }
  header.expected_file_size = header.data_start + cursor;
  if (cursor > header.data_size && allow_truncated_data) {
    header.truncated = true;
  } else if (cursor > header.data_size) {
    return data_loss(
        fmt::format("tensor '{}' ends at data byte {} but the file holds only {} data bytes "
                    "(file {} bytes): truncated",
                    previous->name, cursor, header.data_size, file_size));
  }
  if (cursor < header.data_size) {
    return parse_error(fmt::format("{} trailing bytes after the last tensor (data ends at {}, file holds {})",
                                   header.data_size - cursor, cursor, header.data_size));
  }
  for (size_t i = 0; i < header.tensors.size(); ++i) header.index_.emplace(header.tensors[i].name, i);
  return header;
}

}  // namespace day0
