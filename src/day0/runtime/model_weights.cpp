#include "day0/runtime/model_weights.h"

#include <cstring>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "day0/core/numeric.h"
#include "day0/io/dequant.h"
#include "day0/model/nvfp4_config.h"
#include "day0/runtime/int_weight.h"

namespace day0 {
namespace {

std::string shape_text(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Replaces a trailing ".weight" by `suffix` (".bias", ".weight_scale_inv").
std::string sibling(const std::string& weight_name, const char* suffix) {
  const std::string tail = ".weight";
  if (weight_name.size() > tail.size() && weight_name.ends_with(tail)) {
    return weight_name.substr(0, weight_name.size() - tail.size()) + suffix;
  }
  return weight_name + suffix;
}

Result<std::vector<float>> to_f32(const RawTensor& t, int64_t offset, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  const uint8_t* base = t.data.data();
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(out.data(), base + offset * 4, static_cast<size_t>(n) * 4);
      break;
    case DType::kBF16:
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, base + (offset + i) * 2, 2);
        out[static_cast<size_t>(i)] = t.dtype == DType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
      }
      break;
    default:
      return unsupported(
          fmt::format("tensor {}: dtype {} cannot be read as float", t.name, dtype_name(t.dtype)));
  }
  return out;
}

// FP8 block scales as float32 multipliers: F32 / BF16 / F16 as they are, exponent bytes (F8_E8M0, or U8
// from writers without an E8M0 dtype) as 2^(u - 127), 0xFF NaN.
Result<std::vector<float>> fp8_scales_f32(const RawTensor& t, int64_t offset, int64_t n) {
  if (t.dtype != DType::kF8E8M0 && t.dtype != DType::kU8) return to_f32(t, offset, n);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out[static_cast<size_t>(i)] = e8m0_to_f32(t.data[static_cast<size_t>(offset + i)]);
  return out;
}

Result<WeightFormat> plain_format(const RawTensor& t) {
  switch (t.dtype) {
    case DType::kF32:
      return WeightFormat::kF32;
    case DType::kBF16:
      return WeightFormat::kBF16;
    case DType::kF16:
      return WeightFormat::kF16;
    default:
      return unsupported(
          fmt::format("tensor {}: dtype {} is not a supported weight dtype", t.name, dtype_name(t.dtype)));
  }
}

// The rows one rank's part of a [rows, cols] expert matrix takes, once its row ranges and its column range
// are checked to lie inside (the ranges come from our own shard rules: a bad one is a bug).
Result<int64_t> rows_of_part(const std::string& name, int64_t rows, int64_t cols,
                             std::span<const ShardRange> row_parts, ShardRange col_part) {
  int64_t part_rows = 0;
  for (const ShardRange& r : row_parts) {
    if (r.begin < 0 || r.end > rows || r.size() <= 0)
      return internal_error(fmt::format("tensor {}: rows [{}, {}) outside {}", name, r.begin, r.end, rows));
    part_rows += r.size();
  }
  if (col_part.begin < 0 || col_part.end > cols || col_part.size() <= 0) {
    return internal_error(
        fmt::format("tensor {}: columns [{}, {}) outside {}", name, col_part.begin, col_part.end, cols));
  }
  return part_rows;
}

}  // namespace

void IntProjections::count(const WeightView& w) {
  ++n;
  ++(w.format == WeightFormat::kInt8 ? n_int8 : n_int4);
  bytes += w.data_bytes() + w.scale_bytes();
  format = w.format;
  group = w.group;
  asymmetric = asymmetric || w.zeros != nullptr;
}

std::string IntProjections::label() const {
  if (n == 0) return "";
  if (n_int8 > 0 && n_int4 > 0) {
    return fmt::format("int4 g{0}{1} ({2} projections) + int8 g{0}{1} ({3}) x int8 activations", group,
                       asymmetric ? " asym" : "", n_int4, n_int8);
  }
  return fmt::format("{} g{}{} x int8 activations ({} projections)",
                     format == WeightFormat::kInt8 ? "int8" : "int4", group, asymmetric ? " asym" : "", n);
}

std::string_view WeightBinder::keep_name(const std::string& name) {
  // The experts of one stacked tensor are bound one after another: one copy of its name.
  if (!out_.name_store.empty() && out_.name_store.back() == name) return out_.name_store.back();
  out_.name_store.push_back(name);
  return out_.name_store.back();
}

Result<std::span<const float>> WeightBinder::floats(const RawTensor& t, int64_t offset, int64_t n) {
  // Shape-only sources: a span over the (unreadable) bytes; nothing reads it without a kernel.
  if (!out_.source->has_values())
    return std::span<const float>(reinterpret_cast<const float*>(t.data.data()), static_cast<size_t>(n));
  D0_ASSIGN_OR_RETURN(std::vector<float> values, to_f32(t, offset, n));
  out_.f32_store.push_back(std::move(values));
  return std::span<const float>(out_.f32_store.back());
}

Result<std::span<const float>> WeightBinder::fp8_scales(const RawTensor& t) {
  const auto n = static_cast<int64_t>(t.numel());
  if (!out_.source->has_values())
    return std::span<const float>(reinterpret_cast<const float*>(t.data.data()), static_cast<size_t>(n));
  D0_ASSIGN_OR_RETURN(std::vector<float> values, fp8_scales_f32(t, 0, n));
  out_.f32_store.push_back(std::move(values));
  return std::span<const float>(out_.f32_store.back());
}

Result<RawTensor> WeightBinder::expect(const std::string& name, std::vector<int64_t> shape) {
  D0_ASSIGN_OR_RETURN(RawTensor t, out_.source->get(name));
  if (t.shape != shape) {
    return invalid_argument(fmt::format("{}: tensor {}: expected shape {}, found {}", out_.source->origin(),
                                        name, shape_text(shape), shape_text(t.shape)));
  }
  return t;
}

// Copies `bytes` into owned storage when the pointer is not aligned for the element type (the
// safetensors format promises no alignment; kernels read whole elements).
static const void* aligned_bytes(ModelWeights& out, std::span<const uint8_t> bytes, size_t align) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % align == 0) return bytes.data();
  out.byte_store.emplace_back(bytes.begin(), bytes.end());
  return out.byte_store.back().data();
}

Result<Linear> WeightBinder::linear(const std::string& name, int64_t rows, int64_t cols, bool with_bias) {
  D0_ASSIGN_OR_RETURN(const IntWeight* kept, out_.source->int_weight(name));
  if (kept != nullptr) {  // an INT8 / INT4 projection kept quantized (packed_int_source.h)
    if (kept->rows != rows || kept->cols != cols) {
      return invalid_argument(fmt::format("{}: tensor {}: expected shape [{}, {}], found [{}, {}]",
                                          out_.source->origin(), name, rows, cols, kept->rows, kept->cols));
    }
    Linear l;
    l.w = kept->view();
    l.w.name = keep_name(name);
    out_.int_projections.count(l.w);
    if (with_bias) {
      D0_ASSIGN_OR_RETURN(auto bias, vector(sibling(name, ".bias"), rows));
      l.bias = bias.data();
    }
    return l;
  }
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, {rows, cols}));
  Linear l;
  l.w.rows = rows;
  l.w.cols = cols;
  if (t.dtype == DType::kF8E4M3) {
    const std::string scale_name = sibling(name, ".weight_scale_inv");
    const int64_t br = spec_.weights.block_rows, bc = spec_.weights.block_cols;
    if (br <= 0 || bc <= 0) return invalid_argument("FP8 weight " + name + " without a block size");
    D0_ASSIGN_OR_RETURN(RawTensor s, expect(scale_name, {(rows + br - 1) / br, (cols + bc - 1) / bc}));
    D0_ASSIGN_OR_RETURN(std::span<const float> scales, fp8_scales(s));
    bytes_bound_ += s.data.size();
    l.w.format = WeightFormat::kFp8Block;
    l.w.data = t.data.data();
    l.w.scales = scales.data();
    l.w.block_rows = br;
    l.w.block_cols = bc;
  } else {
    D0_ASSIGN_OR_RETURN(l.w.format, plain_format(t));
    l.w.data = aligned_bytes(out_, t.data, static_cast<size_t>(dtype_bits(t.dtype) / 8));
  }
  l.w.name = keep_name(name);
  bytes_bound_ += t.data.size();
  if (with_bias) {
    D0_ASSIGN_OR_RETURN(auto bias, vector(sibling(name, ".bias"), rows));
    l.bias = bias.data();
  }
  return l;
}

Result<std::span<const float>> WeightBinder::vector(const std::string& name, int64_t n) {
  D0_ASSIGN_OR_RETURN(RawTensor t, out_.source->get(name));
  // A [1, n] vector (a shared_expert_gate) reads as [n].
  if (t.numel() != n || (t.shape.size() != 1 && !(t.shape.size() == 2 && t.shape[0] == 1))) {
    return invalid_argument(fmt::format("{}: tensor {}: expected shape [{}], found {}", out_.source->origin(),
                                        name, n, shape_text(t.shape)));
  }
  bytes_bound_ += t.data.size();
  return floats(t, 0, n);
}

Result<MatrixView<const int32_t>> WeightBinder::index_table(const std::string& name, int64_t rows,
                                                            int64_t cols, int64_t limit) {
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, {rows, cols}));
  if (t.dtype != DType::kI64 && t.dtype != DType::kI32) {
    return invalid_argument(fmt::format("{}: tensor {}: expected an integer table (I64 or I32), found {}",
                                        out_.source->origin(), name, dtype_name(t.dtype)));
  }
  bytes_bound_ += t.data.size();
  std::vector<int32_t>& table = out_.index_store.emplace_back(static_cast<size_t>(rows * cols), 0);
  if (out_.source->has_values()) {
    const size_t width = t.dtype == DType::kI64 ? sizeof(int64_t) : sizeof(int32_t);
    for (size_t i = 0; i < table.size(); ++i) {
      int64_t v = 0;  // the safetensors bytes promise no alignment
      if (width == sizeof(int64_t)) {
        std::memcpy(&v, t.data.data() + i * width, width);
      } else {
        int32_t narrow = 0;
        std::memcpy(&narrow, t.data.data() + i * width, width);
        v = narrow;
      }
      if (v < 0 || v >= limit) {
        return invalid_argument(fmt::format("{}: tensor {}: entry [{}, {}] is {}, outside [0, {})",
                                            out_.source->origin(), name, static_cast<int64_t>(i) / cols,
                                            static_cast<int64_t>(i) % cols, v, limit));
      }
      table[i] = static_cast<int32_t>(v);
    }
  }
  return MatrixView<const int32_t>(table.data(), rows, cols);
}

Result<std::span<const float>> WeightBinder::flat(const std::string& name, std::vector<int64_t> shape) {
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, std::move(shape)));
  bytes_bound_ += t.data.size();
  return floats(t, 0, t.numel());
}

Result<std::span<const float>> WeightBinder::flat_rows(const std::string& name, std::vector<int64_t> shape,
                                                       std::span<const ShardRange> rows) {
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, std::move(shape)));
  const int64_t per = t.shape[0] > 0 ? t.numel() / t.shape[0] : 0;  // elements a row of the first dim
  std::vector<float> values;                                        // [sum of the runs, ...]
  for (const ShardRange& r : rows) {
    if (r.begin < 0 || r.end > t.shape[0] || r.size() <= 0)
      return internal_error(
          fmt::format("tensor {}: rows [{}, {}) outside {}", name, r.begin, r.end, t.shape[0]));
    bytes_bound_ += static_cast<uint64_t>(r.size() * per * dtype_bits(t.dtype) / 8);
    if (!out_.source->has_values()) continue;
    D0_ASSIGN_OR_RETURN(std::vector<float> v, to_f32(t, r.begin * per, r.size() * per));
    values.insert(values.end(), v.begin(), v.end());
  }
  if (!out_.source->has_values())
    return std::span<const float>(reinterpret_cast<const float*>(t.data.data()), values.size());
  out_.f32_store.push_back(std::move(values));
  return std::span<const float>(out_.f32_store.back());
}

Result<std::span<const float>> WeightBinder::append_rows(std::span<const float> head, const std::string& name,
                                                         std::vector<int64_t> shape,
                                                         std::span<const ShardRange> rows) {
  int64_t per = 1;  // elements a row of the first dimension
  for (size_t d = 1; d < shape.size(); ++d) per *= shape[d];
  int64_t n = 0;  // elements of the runs
  for (const ShardRange& r : rows) n += r.size() * per;
  D0_ASSIGN_OR_RETURN(std::span<const float> part, flat_rows(name, std::move(shape), rows));
  // Over a shape-only source nothing is read (as floats()): a span of the joined size is what counts.
  if (!out_.source->has_values()) {
    return std::span<const float>(head.empty() ? part.data() : head.data(),
                                  head.size() + static_cast<size_t>(n));
  }
  std::vector<float> joined(head.begin(), head.end());  // [head rows | this tensor's rows] x K
  joined.insert(joined.end(), part.begin(), part.end());
  out_.f32_store.push_back(std::move(joined));
  return std::span<const float>(out_.f32_store.back());
}

std::span<const float> WeightBinder::plus_one(std::span<const float> w) {
  if (!out_.source->has_values()) return w;
  std::vector<float> gain(w.begin(), w.end());  // [n] the gain the norm applies
  for (float& g : gain) g = 1.0f + g;           // float32, as transformers' (1.0 + weight.float())
  out_.f32_store.push_back(std::move(gain));
  return std::span<const float>(out_.f32_store.back());
}

Result<Linear> WeightBinder::linear_part(const std::string& name, int64_t rows, int64_t cols, ShardRange r,
                                         ShardRange c) {
  if (r.begin == 0 && r.end == rows && c.begin == 0 && c.end == cols) return linear(name, rows, cols);
  if (r.begin < 0 || r.end > rows || r.size() <= 0 || c.begin < 0 || c.end > cols || c.size() <= 0) {
    return internal_error(fmt::format("tensor {} [{}, {}]: part rows [{}, {}) columns [{}, {}) outside it",
                                      name, rows, cols, r.begin, r.end, c.begin, c.end));
  }
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, {rows, cols}));
  Linear l;
  if (t.dtype == DType::kF8E4M3) {
    D0_RETURN_IF_ERROR(fp8_part_scales(name, rows, cols, r, c, l.w));
  } else {
    D0_ASSIGN_OR_RETURN(l.w.format, plain_format(t));
  }
  const auto item = static_cast<size_t>(dtype_bits(t.dtype) / 8);
  l.w.rows = r.size();
  l.w.cols = c.size();
  l.w.name = keep_name(name);
  const size_t row_bytes = static_cast<size_t>(c.size()) * item;
  bytes_bound_ += static_cast<uint64_t>(r.size()) * row_bytes;
  const uint8_t* first = t.data.data() + (static_cast<size_t>(r.begin * cols + c.begin)) * item;
  if (c.size() == cols) {  // whole rows: a view
    l.w.data =
        aligned_bytes(out_, std::span<const uint8_t>(first, static_cast<size_t>(r.size()) * row_bytes), item);
    return l;
  }
  if (!out_.source->has_values()) {  // shape only: never read
    l.w.data = first;
    return l;
  }
  // A column range: row by row, only its bytes are read.
  std::vector<uint8_t> part(static_cast<size_t>(r.size()) * row_bytes);
  for (int64_t i = 0; i < r.size(); ++i)
    std::memcpy(part.data() + static_cast<size_t>(i) * row_bytes,
                first + static_cast<size_t>(i * cols) * item, row_bytes);
  out_.byte_store.push_back(std::move(part));
  l.w.data = out_.byte_store.back().data();
  return l;
}

Status WeightBinder::fp8_part_scales(const std::string& name, int64_t rows, int64_t cols, ShardRange r,
                                     ShardRange c, WeightView& w) {
  const std::string scale_name = sibling(name, ".weight_scale_inv");
  const int64_t br = spec_.weights.block_rows, bc = spec_.weights.block_cols;
  if (br <= 0 || bc <= 0) return invalid_argument("FP8 weight " + name + " without a block size");
  const int64_t grid_cols = (cols + bc - 1) / bc;
  D0_ASSIGN_OR_RETURN(RawTensor s, expect(scale_name, {(rows + br - 1) / br, grid_cols}));
  // The part's blocks: the largest that divide both the checkpoint's block and the part's offset, so
  // that each lies inside one checkpoint block (a 128-row block split at row 32 gives 32-row blocks;
  // splits on block boundaries keep the checkpoint's blocks).
  const int64_t pr = std::gcd(br, r.begin), pc = std::gcd(bc, c.begin);
  if (pr * pc < 128) {  // more than one float32 scale per 128 weight bytes: refuse rather than bloat
    return unsupported(fmt::format(
        "FP8 weight {}: its part at row {}, column {} cuts the {}x{} scale blocks into {}x{} blocks; not "
        "split yet",
        name, r.begin, c.begin, br, bc, pr, pc));
  }
  const int64_t part_rows = (r.size() + pr - 1) / pr, part_cols = (c.size() + pc - 1) / pc;
  w.format = WeightFormat::kFp8Block;
  w.block_rows = pr;
  w.block_cols = pc;
  bytes_bound_ += static_cast<uint64_t>(part_rows * part_cols) * sizeof(float);
  if (!out_.source->has_values()) {  // shape only: never read
    w.scales = s.data.data();
    return Status::ok();
  }
  D0_ASSIGN_OR_RETURN(std::vector<float> whole, fp8_scales_f32(s, 0, s.numel()));  // [rows / br, cols / bc]
  std::vector<float> part(static_cast<size_t>(part_rows * part_cols));  // [part rows / pr, part cols / pc]
  for (int64_t i = 0; i < part_rows; ++i) {
    for (int64_t j = 0; j < part_cols; ++j) {
      const int64_t from = (r.begin + i * pr) / br * grid_cols + (c.begin + j * pc) / bc;
      part[static_cast<size_t>(i * part_cols + j)] = whole[static_cast<size_t>(from)];
    }
  }
  out_.f32_store.push_back(std::move(part));
  w.scales = out_.f32_store.back().data();
  return Status::ok();
}

Result<std::span<const float>> WeightBinder::vector_part(const std::string& name, int64_t n,
                                                         ShardRange part) {
  if (part.begin == 0 && part.end == n) return vector(name, n);
  if (part.begin < 0 || part.end > n || part.size() <= 0)
    return internal_error(
        fmt::format("tensor {} [{}]: part [{}, {}) outside it", name, n, part.begin, part.end));
  D0_ASSIGN_OR_RETURN(RawTensor t, out_.source->get(name));
  if (t.numel() != n || (t.shape.size() != 1 && !(t.shape.size() == 2 && t.shape[0] == 1))) {
    return invalid_argument(fmt::format("{}: tensor {}: expected shape [{}], found {}", out_.source->origin(),
                                        name, n, shape_text(t.shape)));
  }
  bytes_bound_ += static_cast<uint64_t>(part.size()) * static_cast<uint64_t>(dtype_bits(t.dtype) / 8);
  return floats(t, part.begin, part.size());
}

Result<WeightView> WeightBinder::stacked(const std::string& name, int64_t e, int64_t n_experts, int64_t rows,
                                         int64_t cols) {
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, {n_experts, rows, cols}));
  WeightView w;
  D0_ASSIGN_OR_RETURN(w.format, plain_format(t));
  const size_t item = static_cast<size_t>(dtype_bits(t.dtype) / 8);
  const size_t per = static_cast<size_t>(rows * cols) * item;
  w.rows = rows;
  w.cols = cols;
  w.data = aligned_bytes(out_, t.data.subspan(static_cast<size_t>(e) * per, per), item);
  w.name = keep_name(name);
  bytes_bound_ += per;
  return w;
}

Result<WeightView> WeightBinder::stacked_part(const std::string& name, int64_t e, int64_t n_experts,
                                              int64_t rows, int64_t cols,
                                              std::span<const ShardRange> row_parts, ShardRange col_part) {
  bool whole = col_part.begin == 0 && col_part.end == cols;
  int64_t next = 0;
  for (const ShardRange& r : row_parts) {
    whole = whole && r.begin == next;
    next = r.end;
  }
  if (whole && next == rows) return stacked(name, e, n_experts, rows, cols);
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, {n_experts, rows, cols}));
  WeightView w;
  D0_ASSIGN_OR_RETURN(w.format, plain_format(t));
  D0_ASSIGN_OR_RETURN(const int64_t part_rows, rows_of_part(name, rows, cols, row_parts, col_part));
  const size_t item = static_cast<size_t>(dtype_bits(t.dtype) / 8);
  const uint8_t* src = t.data.data() + static_cast<size_t>(e * rows * cols) * item;  // [rows, cols]
  const int64_t part_cols = col_part.size();
  bytes_bound_ += static_cast<uint64_t>(part_rows * part_cols) * item;
  w.rows = part_rows;
  w.cols = part_cols;
  w.name = keep_name(name);
  if (!out_.source->has_values()) {  // shape only: the view is never read
    w.data = src;
    return w;
  }
  std::vector<uint8_t> dst(static_cast<size_t>(part_rows * part_cols) * item);
  int64_t out_row = 0;
  for (const ShardRange& r : row_parts) {
    for (int64_t i = 0; i < r.size(); ++i) {
      std::memcpy(&dst[static_cast<size_t>((out_row + i) * part_cols) * item],
                  src + static_cast<size_t>((r.begin + i) * cols + col_part.begin) * item,
                  static_cast<size_t>(part_cols) * item);
    }
    out_row += r.size();
  }
  out_.byte_store.push_back(std::move(dst));
  w.data = out_.byte_store.back().data();
  return w;
}

Result<WeightView> WeightBinder::stacked_transposed(const std::string& name, int64_t e, int64_t n_experts,
                                                    int64_t rows, int64_t cols) {
  const ShardRange all_rows{0, rows};
  return stacked_transposed_part(name, e, n_experts, rows, cols, std::span(&all_rows, 1), {0, cols});
}

Result<WeightView> WeightBinder::stacked_transposed_part(const std::string& name, int64_t e,
                                                         int64_t n_experts, int64_t rows, int64_t cols,
                                                         std::span<const ShardRange> row_parts,
                                                         ShardRange col_part) {
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, {n_experts, cols, rows}));
  WeightView w;
  D0_ASSIGN_OR_RETURN(w.format, plain_format(t));
  D0_ASSIGN_OR_RETURN(const int64_t part_rows, rows_of_part(name, rows, cols, row_parts, col_part));
  const size_t item = static_cast<size_t>(dtype_bits(t.dtype) / 8);
  const uint8_t* src = t.data.data() + static_cast<size_t>(e * rows * cols) * item;  // [cols, rows]
  const int64_t part_cols = col_part.size();
  bytes_bound_ += static_cast<uint64_t>(part_rows * part_cols) * item;
  w.rows = part_rows;
  w.cols = part_cols;
  w.name = keep_name(name);
  if (!out_.source->has_values()) {  // shape only: the view, never read, needs no transposed copy
    w.data = src;
    return w;
  }
  std::vector<uint8_t> dst(static_cast<size_t>(part_rows * part_cols) * item);  // [part rows, part cols]
  int64_t out_row = 0;
  for (const ShardRange& r : row_parts) {
    for (int64_t c = 0; c < part_cols; ++c) {
      for (int64_t i = 0; i < r.size(); ++i) {
        std::memcpy(&dst[static_cast<size_t>((out_row + i) * part_cols + c) * item],
                    src + static_cast<size_t>((col_part.begin + c) * rows + r.begin + i) * item, item);
      }
    }
    out_row += r.size();
  }
  out_.byte_store.push_back(std::move(dst));
  w.data = out_.byte_store.back().data();
  return w;
}

// An NVFP4 projection (model_spec.h, Nvfp4Layout): the nibbles and E4M3 scales bound as stored, the global
// scale read as the multiplier the kernels apply (io/dequant.h, nvfp4_global_multiplier). The activation
// scale is read and checked finite but not applied: activations stay float32 here, so there is nothing
// to quantize them with it.
Result<Linear> WeightBinder::nvfp4_linear(const std::string& name, int64_t rows, int64_t cols) {
  const Nvfp4Layout layout = spec_.weights.nvfp4.layout;
  std::string stem = name;
  for (const char* tail : {".weight_packed", ".weight"}) {
    if (stem.ends_with(tail)) {
      stem.resize(stem.size() - std::string_view(tail).size());
      break;
    }
  }
  const Nvfp4TensorNames names = nvfp4_tensor_names(layout, stem);
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(names.values, {rows, cols / 2}));
  D0_ASSIGN_OR_RETURN(RawTensor s, expect(names.scales, {rows, cols / 16}));
  if ((t.dtype != DType::kU8 && t.dtype != DType::kI8) || s.dtype != DType::kF8E4M3 || cols % 32 != 0) {
    return invalid_argument(fmt::format(
        "{}: NVFP4 weight {}: expected U8 [{}, {}] and F8_E4M3 scales {} [{}, {}] over a multiple of 32 "
        "columns, found {} and {}, {} columns",
        out_.source->origin(), names.values, rows, cols / 2, names.scales, rows, cols / 16,
        dtype_name(t.dtype), dtype_name(s.dtype), cols));
  }
  const auto scalar = [&](const std::string& scalar_name) -> Result<float> {
    D0_ASSIGN_OR_RETURN(RawTensor g, out_.source->get(scalar_name));
    if (g.dtype != DType::kF32 || g.numel() != 1) {
      return invalid_argument(fmt::format("{}: tensor {}: expected one F32 value, found {} {}",
                                          out_.source->origin(), scalar_name, dtype_name(g.dtype),
                                          shape_text(g.shape)));
    }
    bytes_bound_ += g.data.size();
    if (!out_.source->has_values()) return 1.0f;  // shape only: never read
    D0_ASSIGN_OR_RETURN(std::vector<float> v, to_f32(g, 0, 1));
    if (!std::isfinite(v[0])) {
      return invalid_argument(fmt::format("{}: tensor {}: the scale is {}, not a finite number",
                                          out_.source->origin(), scalar_name, v[0]));
    }
    return v[0];
  };
  D0_ASSIGN_OR_RETURN(const float stored, scalar(names.global_scale));
  if (spec_.weights.nvfp4.activation_scales) {
    D0_ASSIGN_OR_RETURN([[maybe_unused]] const float activation_scale, scalar(names.input_scale));
  }
  Linear l;
  l.w.format = WeightFormat::kMxfp4;
  l.w.fp4_scale_code = Fp4ScaleCode::kE4M3;
  l.w.fp4_global_scale = nvfp4_global_multiplier(stored, layout == Nvfp4Layout::kCompressedTensors
                                                             ? Nvfp4GlobalScale::kDivisor
                                                             : Nvfp4GlobalScale::kMultiplier);
  l.w.rows = rows;
  l.w.cols = cols;
  l.w.group = 16;
  l.w.data = t.data.data();
  l.w.scales = s.data.data();
  l.w.name = keep_name(names.values);
  bytes_bound_ += t.data.size() + s.data.size();
  return l;
}

Result<Linear> WeightBinder::fp4_linear(const std::string& name, int64_t rows, int64_t cols) {
  if (spec_.weights.nvfp4.layout != Nvfp4Layout::kNone) return nvfp4_linear(name, rows, cols);
  if (cols % 32 != 0)
    return invalid_argument(fmt::format("FP4 weight {}: {} columns is not a multiple of 32", name, cols));
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, {rows, cols / 2}));
  const std::string scale_name = sibling(name, ".weight_scale_inv");
  D0_ASSIGN_OR_RETURN(RawTensor s, out_.source->get(scale_name));
  // The group follows the scale grid, as the checkpoint has it: 32 or 16 columns.
  const bool grid_ok =
      s.shape.size() == 2 && s.shape[0] == rows && (s.shape[1] * 32 == cols || s.shape[1] * 16 == cols);
  if ((t.dtype != DType::kI8 && t.dtype != DType::kU8) ||
      (s.dtype != DType::kF8E8M0 && s.dtype != DType::kU8) || !grid_ok) {
    return invalid_argument(
        fmt::format("FP4 weight {}: expected I8 (or U8) [{}, {}] and E8M0 scales [{}, {} or {}] in {}, found "
                    "{} and {} [{}]",
                    name, rows, cols / 2, rows, cols / 32, cols / 16, scale_name, dtype_name(t.dtype),
                    dtype_name(s.dtype), fmt::join(s.shape, "x")));
  }
  Linear l;
  l.w.format = WeightFormat::kMxfp4;
  l.w.rows = rows;
  l.w.cols = cols;
  l.w.group = cols / s.shape[1];
  l.w.data = t.data.data();
  l.w.scales = s.data.data();
  l.w.name = keep_name(name);
  bytes_bound_ += t.data.size() + s.data.size();
  return l;
}

Result<Linear> WeightBinder::fp4_linear_part(const std::string& name, int64_t rows, int64_t cols,
                                             ShardRange r, ShardRange c) {
  if (r.begin < 0 || r.end > rows || r.size() <= 0 || c.begin < 0 || c.end > cols || c.size() <= 0) {
    return internal_error(
        fmt::format("FP4 weight {} [{}, {}]: part rows [{}, {}) columns [{}, {}) outside it", name, rows,
                    cols, r.begin, r.end, c.begin, c.end));
  }
  D0_ASSIGN_OR_RETURN(Linear whole, fp4_linear(name, rows, cols));
  const int64_t group = whole.w.group, groups = cols / group;
  bytes_bound_ -= static_cast<uint64_t>(rows * (cols / 2 + groups));  // counted below: the part only
  if (c.begin % group != 0 || c.size() % group != 0) {
    return unsupported(fmt::format(
        "FP4 weight {}: columns [{}, {}) of {} split a {}-column scale group; a split on whole groups is "
        "supported",
        name, c.begin, c.end, cols, group));
  }
  const auto* values = static_cast<const uint8_t*>(whole.w.data) + r.begin * (cols / 2);  // [rows, cols / 2]
  const auto* scales = static_cast<const uint8_t*>(whole.w.scales) + r.begin * groups;    // [rows, groups]
  Linear l = whole;
  l.w.rows = r.size();
  l.w.cols = c.size();
  const int64_t part_groups = c.size() / group, g0 = c.begin / group;
  bytes_bound_ += static_cast<uint64_t>(r.size() * (c.size() / 2 + part_groups));
  if (c.size() == cols) {  // whole rows: a view
    l.w.data = values;
    l.w.scales = scales;
    return l;
  }
  if (!out_.source->has_values()) return l;  // shape only: never read
  // Whole groups: their nibble bytes and scale bytes, row by row.
  const int64_t group_bytes = group / 2;
  // [part rows, c / 2] nibbles and [part rows, part groups] scale bytes.
  std::vector<uint8_t> part_values(static_cast<size_t>(r.size() * part_groups * group_bytes));
  std::vector<uint8_t> part_scales(static_cast<size_t>(r.size() * part_groups));
  for (int64_t i = 0; i < r.size(); ++i) {
    std::memcpy(&part_values[static_cast<size_t>(i * part_groups * group_bytes)],
                values + i * (cols / 2) + g0 * group_bytes, static_cast<size_t>(part_groups * group_bytes));
    std::memcpy(&part_scales[static_cast<size_t>(i * part_groups)], scales + i * groups + g0,
                static_cast<size_t>(part_groups));
  }
  out_.byte_store.push_back(std::move(part_values));
  l.w.data = out_.byte_store.back().data();
  out_.byte_store.push_back(std::move(part_scales));
  l.w.scales = out_.byte_store.back().data();
  return l;
}

Result<WeightView> WeightBinder::mxfp4(const std::string& prefix, int64_t e, int64_t n_experts, int64_t rows,
                                       int64_t cols) {
  if (cols % 32 != 0)
    return invalid_argument(fmt::format("MXFP4 tensor {}: {} columns is not a multiple of 32", prefix, cols));
  const int64_t groups = cols / 32;
  D0_ASSIGN_OR_RETURN(RawTensor blocks, expect(prefix + "_blocks", {n_experts, rows, groups, 16}));
  D0_ASSIGN_OR_RETURN(RawTensor scales, expect(prefix + "_scales", {n_experts, rows, groups}));
  if (blocks.dtype != DType::kU8 || (scales.dtype != DType::kU8 && scales.dtype != DType::kF8E8M0)) {
    return invalid_argument(fmt::format("MXFP4 tensor {}: expected U8 blocks and scales, found {} and {}",
                                        prefix, dtype_name(blocks.dtype), dtype_name(scales.dtype)));
  }
  WeightView w;
  w.format = WeightFormat::kMxfp4;
  w.rows = rows;
  w.cols = cols;
  w.data = blocks.data.data() + e * rows * groups * 16;
  w.scales = scales.data.data() + e * rows * groups;
  w.name = keep_name(prefix);
  bytes_bound_ += static_cast<uint64_t>(rows * groups * 17);  // 16 block bytes and 1 scale a group
  return w;
}

Result<WeightView> WeightBinder::mxfp4_part(const std::string& prefix, int64_t e, int64_t n_experts,
                                            int64_t rows, int64_t cols, ShardRange r, ShardRange c) {
  if (r.begin < 0 || r.end > rows || r.size() <= 0 || c.begin < 0 || c.end > cols || c.size() <= 0) {
    return internal_error(
        fmt::format("MXFP4 tensor {} [{}, {}]: part rows [{}, {}) columns [{}, {}) outside it", prefix, rows,
                    cols, r.begin, r.end, c.begin, c.end));
  }
  D0_ASSIGN_OR_RETURN(WeightView whole, mxfp4(prefix, e, n_experts, rows, cols));
  bytes_bound_ -= static_cast<uint64_t>(rows * (cols / 32) * 17);  // counted below: the part only
  const int64_t groups = cols / 32;
  const auto* blocks = static_cast<const uint8_t*>(whole.data) + r.begin * groups * 16;  // [rows, groups, 16]
  const auto* scales = static_cast<const uint8_t*>(whole.scales) + r.begin * groups;     // [rows, groups]
  WeightView w = whole;
  w.rows = r.size();
  w.cols = c.size();
  if (c.size() == cols) {  // whole rows: a view
    w.data = blocks;
    w.scales = scales;
    bytes_bound_ += static_cast<uint64_t>(r.size() * groups * 17);
    return w;
  }
  if (c.begin % 32 == 0 && c.size() % 32 == 0) {  // whole groups: their bytes, row by row
    const int64_t g0 = c.begin / 32, gn = c.size() / 32;
    bytes_bound_ += static_cast<uint64_t>(r.size() * gn * 17);
    if (!out_.source->has_values()) return w;                                   // shape only: never read
    std::vector<uint8_t> part_blocks(static_cast<size_t>(r.size() * gn * 16));  // [part rows, gn, 16]
    std::vector<uint8_t> part_scales(static_cast<size_t>(r.size() * gn));       // [part rows, gn]
    for (int64_t i = 0; i < r.size(); ++i) {
      std::memcpy(&part_blocks[static_cast<size_t>(i * gn * 16)], blocks + (i * groups + g0) * 16,
                  static_cast<size_t>(gn * 16));
      std::memcpy(&part_scales[static_cast<size_t>(i * gn)], scales + i * groups + g0,
                  static_cast<size_t>(gn));
    }
    out_.byte_store.push_back(std::move(part_blocks));
    w.data = out_.byte_store.back().data();
    out_.byte_store.push_back(std::move(part_scales));
    w.scales = out_.byte_store.back().data();
    return w;
  }
  // A split inside a 32-column group (2880 columns over 4 ranks, a 32-wide miniature over
  // 2): the part as BF16, which holds every MXFP4 value exactly (2 significant bits, an E8M0 scale),
  // at 2 bytes an element instead of 17/32.
  w.format = WeightFormat::kBF16;
  w.scales = nullptr;
  bytes_bound_ += static_cast<uint64_t>(r.size() * c.size() * 2);
  if (!out_.source->has_values()) return w;
  std::vector<float> row(static_cast<size_t>(cols));                        // [cols] one dequantised row
  std::vector<uint8_t> part(static_cast<size_t>(r.size() * c.size()) * 2);  // [part rows, part cols] BF16
  for (int64_t i = 0; i < r.size(); ++i) {
    dequant_mxfp4(std::span(blocks + i * groups * 16, static_cast<size_t>(groups * 16)),
                  std::span(scales + i * groups, static_cast<size_t>(groups)), row);
    for (int64_t j = 0; j < c.size(); ++j) {
      const uint16_t bits = f32_to_bf16(row[static_cast<size_t>(c.begin + j)]);
      std::memcpy(&part[static_cast<size_t>(i * c.size() + j) * 2], &bits, 2);
    }
  }
  out_.byte_store.push_back(std::move(part));
  w.data = out_.byte_store.back().data();
  return w;
}

Result<const float*> WeightBinder::stacked_vector_part(const std::string& name, int64_t e, int64_t n_experts,
                                                       int64_t n, std::span<const ShardRange> parts) {
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, {n_experts, n}));
  std::vector<float> values;  // [sum of the parts]
  for (const ShardRange& p : parts) {
    if (p.begin < 0 || p.end > n || p.size() <= 0)
      return internal_error(fmt::format("tensor {}: part [{}, {}) outside {}", name, p.begin, p.end, n));
    bytes_bound_ += static_cast<uint64_t>(p.size() * dtype_bits(t.dtype) / 8);
    if (!out_.source->has_values()) continue;
    D0_ASSIGN_OR_RETURN(std::vector<float> v, to_f32(t, e * n + p.begin, p.size()));
    values.insert(values.end(), v.begin(), v.end());
  }
  if (!out_.source->has_values()) return reinterpret_cast<const float*>(t.data.data());
  out_.f32_store.push_back(std::move(values));
  return out_.f32_store.back().data();
}

Result<const float*> WeightBinder::stacked_vector(const std::string& name, int64_t e, int64_t n_experts,
                                                  int64_t n) {
  D0_ASSIGN_OR_RETURN(RawTensor t, expect(name, {n_experts, n}));
  D0_ASSIGN_OR_RETURN(std::span<const float> values, floats(t, e * n, n));
  bytes_bound_ += static_cast<uint64_t>(n * dtype_bits(t.dtype) / 8);
  return values.data();
}

}  // namespace day0
