#include "day0/io/gguf.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "day0/core/checked_math.h"
#include "day0/core/error.h"

namespace day0::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 20;

// Element size of a scalar value type; 0 for strings and arrays.
uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

bool valid_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(ValueType::kF64);
}

// A bounds-checked little-endian cursor over the file. Every read names the field it reads so that a
// failure says what was being read where.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }

  Status need(uint64_t n, std::string_view field) const {
    if (n > left()) {
      return data_loss(fmt::format("{}: {}: needs {} bytes at offset {}, the file has {} left (truncated?)",
                                   file_, field, n, pos_, left()));
    }
    return Status::ok();
  }
  template <typename T>
  Result<T> read(std::string_view field) {
    D0_RETURN_IF_ERROR(need(sizeof(T), field));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  Result<std::span<const uint8_t>> take(uint64_t n, std::string_view field) {
    D0_RETURN_IF_ERROR(need(n, field));
    std::span<const uint8_t> out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  Result<std::string_view> read_string(std::string_view field) {
    D0_ASSIGN_OR_RETURN(uint64_t len, read<uint64_t>(field));
    if (len > left()) {
      return data_loss(fmt::format("{}: {}: string length {} at offset {} runs past the end ({} bytes left)",
                                   file_, field, len, pos_ - 8, left()));
    }
    D0_ASSIGN_OR_RETURN(std::span<const uint8_t> s, take(len, field));
    return std::string_view(reinterpret_cast<const char*>(s.data()), s.size());
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& file_;
  uint64_t pos_ = 0;
};

Result<Value> read_scalar(Reader& r, ValueType t, const std::string& field) {
  Value v;
  v.type = t;
  switch (t) {
    case ValueType::kU8: {
      D0_ASSIGN_OR_RETURN(uint8_t x, r.read<uint8_t>(field));
      v.u64 = x;
      v.i64 = x;
      break;
    }
    case ValueType::kI8: {
      D0_ASSIGN_OR_RETURN(int8_t x, r.read<int8_t>(field));
      v.i64 = x;
      break;
    }
    case ValueType::kU16: {
      D0_ASSIGN_OR_RETURN(uint16_t x, r.read<uint16_t>(field));
      v.u64 = x;
      v.i64 = x;
      break;
    }
    case ValueType::kI16: {
      D0_ASSIGN_OR_RETURN(int16_t x, r.read<int16_t>(field));
      v.i64 = x;
      break;
    }
    case ValueType::kU32: {
      D0_ASSIGN_OR_RETURN(uint32_t x, r.read<uint32_t>(field));
      v.u64 = x;
      v.i64 = x;
      break;
    }
    case ValueType::kI32: {
      D0_ASSIGN_OR_RETURN(int32_t x, r.read<int32_t>(field));
      v.i64 = x;
      break;
    }
    case ValueType::kU64: {
      D0_ASSIGN_OR_RETURN(uint64_t x, r.read<uint64_t>(field));
      v.u64 = x;
      v.i64 = static_cast<int64_t>(x);
      break;
    }
    case ValueType::kI64: {
      D0_ASSIGN_OR_RETURN(int64_t x, r.read<int64_t>(field));
      v.i64 = x;
      break;
    }
    case ValueType::kF32: {
      D0_ASSIGN_OR_RETURN(float x, r.read<float>(field));
      v.f64 = x;
      break;
    }
    case ValueType::kF64: {
      D0_ASSIGN_OR_RETURN(double x, r.read<double>(field));
      v.f64 = x;
      break;
    }
    case ValueType::kBool: {
      D0_ASSIGN_OR_RETURN(uint8_t x, r.read<uint8_t>(field));
      if (x > 1) return parse_error(fmt::format("{}: a bool must be 0 or 1, found {}", field, x));
      v.u64 = x;
      break;
    }
    case ValueType::kString: {
      D0_ASSIGN_OR_RETURN(v.str, r.read_string(field));
      break;
    }
    case ValueType::kArray:
      D0_CHECK(false);
  }
  return v;
}

Result<Value> read_value(Reader& r, ValueType t, const std::string& field, const std::string& file,
                         int depth) {
  if (t != ValueType::kArray) return read_scalar(r, t, field);
  if (depth >= kMaxArrayDepth) {
    return parse_error(fmt::format("{}: {}: arrays nested deeper than {}", file, field, kMaxArrayDepth));
  }
  Value v;
  v.type = ValueType::kArray;
  D0_ASSIGN_OR_RETURN(uint32_t elem, r.read<uint32_t>(field + " (array element type)"));
  if (!valid_value_type(elem)) {
    return parse_error(fmt::format("{}: {}: unknown array element type {}", file, field, elem));
  }
  v.elem_type = static_cast<ValueType>(elem);
  D0_ASSIGN_OR_RETURN(v.count, r.read<uint64_t>(field + " (array length)"));
  const uint64_t size = scalar_size(v.elem_type);
  if (size > 0) {
    const auto total = checked_mul(v.count, size);
    if (!total || *total > r.left()) {
      return data_loss(fmt::format("{}: {}: an array of {} {} runs past the end ({} bytes left)", file, field,
                                   v.count, value_type_name(v.elem_type), r.left()));
    }
    D0_ASSIGN_OR_RETURN(v.raw, r.take(*total, field));
    if (v.elem_type == ValueType::kBool) {
      for (uint8_t b : v.raw) {
        if (b > 1) return parse_error(fmt::format("{}: {}: a bool element must be 0 or 1", file, field));
      }
    }
    return v;
  }
  // Strings take at least 8 bytes and arrays at least 12, so a count larger than that cannot fit.
  const uint64_t min_size = v.elem_type == ValueType::kString ? 8 : 12;
  if (v.count > r.left() / min_size) {
    return data_loss(fmt::format("{}: {}: {} {} elements cannot fit in the {} bytes left", file, field,
                                 v.count, value_type_name(v.elem_type), r.left()));
  }
  if (v.elem_type == ValueType::kString) v.strings.reserve(v.count);
  for (uint64_t i = 0; i < v.count; ++i) {
    const std::string element = fmt::format("{}[{}]", field, i);
    if (v.elem_type == ValueType::kString) {
      D0_ASSIGN_OR_RETURN(std::string_view s, r.read_string(element));
      v.strings.push_back(s);
    } else {
      D0_ASSIGN_OR_RETURN(Value inner, read_value(r, ValueType::kArray, element, file, depth + 1));
      (void)inner;
    }
  }
  return v;
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kU8:
      return "uint8";
    case ValueType::kI8:
      return "int8";
    case ValueType::kU16:
      return "uint16";
    case ValueType::kI16:
      return "int16";
    case ValueType::kU32:
      return "uint32";
    case ValueType::kI32:
      return "int32";
    case ValueType::kF32:
      return "float32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kArray:
      return "array";
    case ValueType::kU64:
      return "uint64";
    case ValueType::kI64:
      return "int64";
    case ValueType::kF64:
      return "float64";
  }
  return "?";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kU16:
    case ValueType::kI16:
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kU64:
    case ValueType::kI64:
      return true;
    default:
      return false;
  }
}

int64_t Value::int_at(uint64_t i) const {
  D0_CHECK(type == ValueType::kArray && i < count);
  const uint8_t* p = raw.data();
  switch (elem_type) {
    case ValueType::kU8:
    case ValueType::kBool:
      return p[i];
    case ValueType::kI8:
      return static_cast<int8_t>(p[i]);
    case ValueType::kU16: {
      uint16_t x;
      std::memcpy(&x, p + 2 * i, 2);
      return x;
    }
    case ValueType::kI16: {
      int16_t x;
      std::memcpy(&x, p + 2 * i, 2);
      return x;
    }
    case ValueType::kU32: {
      uint32_t x;
      std::memcpy(&x, p + 4 * i, 4);
      return x;
    }
    case ValueType::kI32: {
      int32_t x;
      std::memcpy(&x, p + 4 * i, 4);
      return x;
    }
    case ValueType::kU64:
    case ValueType::kI64: {
      int64_t x;
      std::memcpy(&x, p + 8 * i, 8);
      return x;
    }
    default:
      D0_CHECK(false);
  }
  return 0;
}

double Value::float_at(uint64_t i) const {
  D0_CHECK(type == ValueType::kArray && i < count);
  if (elem_type == ValueType::kF32) {
    float x;
    std::memcpy(&x, raw.data() + 4 * i, 4);
    return x;
  }
  if (elem_type == ValueType::kF64) {
    double x;
    std::memcpy(&x, raw.data() + 8 * i, 8);
    return x;
  }
  return static_cast<double>(int_at(i));
}

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type) {
  // Block sizes from the GGUF specification; 256-element "K" super-blocks.
  switch (type) {
    case 0:
      return GgmlTypeInfo{"F32", 1, 4, true};
    case 1:
      return GgmlTypeInfo{"F16", 1, 2, true};
    case 2:
      return GgmlTypeInfo{"Q4_0", 32, 18, true};
    case 3:
      return GgmlTypeInfo{"Q4_1", 32, 20, true};
    case 6:
      return GgmlTypeInfo{"Q5_0", 32, 22, true};
    case 7:
      return GgmlTypeInfo{"Q5_1", 32, 24, true};
    case 8:
      return GgmlTypeInfo{"Q8_0", 32, 34, true};
    case 9:
      return GgmlTypeInfo{"Q8_1", 32, 36, false};
    case 10:
      return GgmlTypeInfo{"Q2_K", 256, 84, false};
    case 11:
      return GgmlTypeInfo{"Q3_K", 256, 110, false};
    case 12:
      return GgmlTypeInfo{"Q4_K", 256, 144, true};
    case 13:
      return GgmlTypeInfo{"Q5_K", 256, 176, true};
    case 14:
      return GgmlTypeInfo{"Q6_K", 256, 210, true};
    case 15:
      return GgmlTypeInfo{"Q8_K", 256, 292, false};
    case 24:
      return GgmlTypeInfo{"I8", 1, 1, false};
    case 25:
      return GgmlTypeInfo{"I16", 1, 2, false};
    case 26:
      return GgmlTypeInfo{"I32", 1, 4, false};
    case 27:
      return GgmlTypeInfo{"I64", 1, 8, false};
    case 28:
      return GgmlTypeInfo{"F64", 1, 8, false};
    case 30:
      return GgmlTypeInfo{"BF16", 1, 2, true};
    default:
      return std::nullopt;
  }
}

std::vector<int64_t> TensorInfo::hf_shape() const {
  return {dims.rbegin(), dims.rend()};
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  D0_ASSIGN_OR_RETURN(MappedFile map, MappedFile::open(path));
  // The views point into the map's pages, which do not move when the MappedFile object does.
  D0_ASSIGN_OR_RETURN(GgufFile file, parse(map.bytes(), path));
  file.map_ = std::move(map);
  return file;
}

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  GgufFile f;
  f.name_ = name;
  Reader r(bytes, f.name_);
  D0_ASSIGN_OR_RETURN(uint32_t magic, r.read<uint32_t>("magic"));
  if (magic != kMagic)
    return parse_error(fmt::format("{}: not a GGUF file (the first 4 bytes are not \"GGUF\")", name));
  D0_ASSIGN_OR_RETURN(f.version_, r.read<uint32_t>("version"));
  if (f.version_ != 2 && f.version_ != 3) {
    return unsupported(fmt::format("{}: GGUF version {}; versions 2 and 3 are supported", name, f.version_));
  }
  D0_ASSIGN_OR_RETURN(uint64_t n_tensors, r.read<uint64_t>("tensor_count"));
  D0_ASSIGN_OR_RETURN(uint64_t n_kv, r.read<uint64_t>("metadata_kv_count"));
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least 8 + 4 + 4
  // + 8.
  if (n_kv > r.left() / 13) {
    return data_loss(fmt::format("{}: metadata_kv_count {} cannot fit in the {} bytes of the file", name,
                                 n_kv, bytes.size()));
  }
  if (n_tensors > r.left() / 24) {
    return data_loss(fmt::format("{}: tensor_count {} cannot fit in the {} bytes of the file", name,
                                 n_tensors, bytes.size()));
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    D0_ASSIGN_OR_RETURN(std::string_view key_view, r.read_string(fmt::format("metadata key #{}", i)));
    std::string key(key_view);
    D0_ASSIGN_OR_RETURN(uint32_t type, r.read<uint32_t>(key + " (value type)"));
    if (!valid_value_type(type))
      return parse_error(fmt::format("{}: {}: unknown value type {}", name, key, type));
    D0_ASSIGN_OR_RETURN(Value v, read_value(r, static_cast<ValueType>(type), key, name, 0));
    if (f.metadata_.count(key))
      return parse_error(fmt::format("{}: metadata key {} appears twice", name, key));
    f.metadata_.emplace(std::move(key), std::move(v));
  }
  if (const Value* a = f.find("general.alignment")) {
    if (a->type != ValueType::kU32 || a->u64 == 0 || (a->u64 & (a->u64 - 1)) != 0 || a->u64 > kMaxAlignment) {
      return parse_error(
          fmt::format("{}: general.alignment must be a uint32 power of two up to {}", name, kMaxAlignment));
    }
    f.alignment_ = a->u64;
  }
  f.tensors_.reserve(n_tensors);
  std::vector<uint64_t> relative_offsets;
  relative_offsets.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    D0_ASSIGN_OR_RETURN(std::string_view tname, r.read_string(fmt::format("tensor #{} name", i)));
    t.name = std::string(tname);
    const std::string field = fmt::format("tensor {}", t.name);
    D0_ASSIGN_OR_RETURN(uint32_t n_dims, r.read<uint32_t>(field + " n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return parse_error(fmt::format("{}: {}: n_dims {} (expected 1 to {})", name, field, n_dims, kMaxDims));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      D0_ASSIGN_OR_RETURN(uint64_t dim, r.read<uint64_t>(field + " dims"));
      if (dim == 0 || dim > static_cast<uint64_t>(INT64_MAX)) {
        return parse_error(
            fmt::format("{}: {}: dimension {} is {} (expected a positive size)", name, field, d, dim));
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    D0_ASSIGN_OR_RETURN(t.type, r.read<uint32_t>(field + " type"));
    D0_ASSIGN_OR_RETURN(uint64_t offset, r.read<uint64_t>(field + " offset"));
    const std::optional<GgmlTypeInfo> info = ggml_type_info(t.type);
    if (!info) return unsupported(fmt::format("{}: {}: unknown ggml type {}", name, field, t.type));
    const auto n = checked_product(t.dims);
    if (!n) return out_of_range(fmt::format("{}: {}: the element count overflows", name, field));
    t.n_elements = *n;
    if (t.dims[0] % info->block_elems != 0) {
      return parse_error(fmt::format("{}: {}: {} rows of {} elements are not whole blocks of {}", name, field,
                                     info->name, t.dims[0], info->block_elems));
    }
    const auto n_bytes = checked_mul(t.n_elements / static_cast<uint64_t>(info->block_elems),
                                     static_cast<uint64_t>(info->block_bytes));
    if (!n_bytes) return out_of_range(fmt::format("{}: {}: the byte size overflows", name, field));
    t.bytes = *n_bytes;
    if (offset % f.alignment_ != 0) {
      return parse_error(fmt::format("{}: {}: offset {} is not a multiple of the alignment {}", name, field,
                                     offset, f.alignment_));
    }
    if (f.tensor_index_.count(t.name)) return parse_error(fmt::format("{}: {} appears twice", name, field));
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    relative_offsets.push_back(offset);
    f.tensors_.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment after the tensor infos.
  const uint64_t end_of_infos = r.pos();
  const auto padded = checked_add(end_of_infos, f.alignment_ - 1);
  if (!padded) return out_of_range(fmt::format("{}: the data section offset overflows", name));
  f.data_offset_ = *padded / f.alignment_ * f.alignment_;
  for (size_t i = 0; i < f.tensors_.size(); ++i) {
    TensorInfo& t = f.tensors_[i];
    const auto start = checked_add(f.data_offset_, relative_offsets[i]);
    const auto end = start ? checked_add(*start, t.bytes) : std::nullopt;
    if (!end || *end > bytes.size()) {
      return data_loss(fmt::format("{}: tensor {}: data [{}, {}) runs past the end of the file ({} bytes)",
                                   name, t.name, start.value_or(0), end.value_or(UINT64_MAX), bytes.size()));
    }
    t.offset = *start;
    t.data = bytes.subspan(*start, t.bytes);
  }
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(f.tensors_.size());
  for (const TensorInfo& t : f.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    if (prev.offset + prev.bytes > by_offset[i]->offset) {
      return parse_error(fmt::format("{}: tensors {} and {} overlap (bytes [{}, {}) and [{}, ...))", name,
                                     prev.name, by_offset[i]->name, prev.offset, prev.offset + prev.bytes,
                                     by_offset[i]->offset));
    }
  }
  return f;
}

const Value* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const TensorInfo* GgufFile::find_tensor(std::string_view tensor) const {
  auto it = tensor_index_.find(tensor);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return not_found(fmt::format("{}: metadata {} is missing", name_, key));
  if (v->type != ValueType::kString) {
    return invalid_argument(
        fmt::format("{}: {}: expected a string, found {}", name_, key, value_type_name(v->type)));
  }
  return std::string(v->str);
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return not_found(fmt::format("{}: metadata {} is missing", name_, key));
  if (!v->is_integer()) {
    return invalid_argument(
        fmt::format("{}: {}: expected an integer, found {}", name_, key, value_type_name(v->type)));
  }
  if (v->type == ValueType::kU64 && v->u64 > static_cast<uint64_t>(INT64_MAX)) {
    return out_of_range(fmt::format("{}: {}: {} is too large", name_, key, v->u64));
  }
  return v->i64;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return not_found(fmt::format("{}: metadata {} is missing", name_, key));
  // A float32 is returned as the shortest decimal that rounds to it (1e-05, not 9.99999974e-06): the
  // value the writer meant, which is what a config.json would carry.
  if (v->type == ValueType::kF32) return std::stod(fmt::format("{}", static_cast<float>(v->f64)));
  if (v->is_float()) return v->f64;
  if (v->is_integer()) return static_cast<double>(v->i64);
  return invalid_argument(
      fmt::format("{}: {}: expected a number, found {}", name_, key, value_type_name(v->type)));
}

std::optional<int64_t> GgufFile::optional_int(std::string_view key) const {
  auto r = get_int(key);
  return r.is_ok() ? std::optional<int64_t>(*r) : std::nullopt;
}

std::optional<double> GgufFile::optional_float(std::string_view key) const {
  auto r = get_float(key);
  return r.is_ok() ? std::optional<double>(*r) : std::nullopt;
}

std::optional<bool> GgufFile::optional_bool(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr || v->type != ValueType::kBool) return std::nullopt;
  return v->u64 != 0;
}

}  // namespace day0::gguf
