#include "day0/runtime/packed_int_source.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "day0/core/numeric.h"
#include "day0/model/packed_int_config.h"
#include "day0/quant/pack_quantized.h"

namespace day0 {
namespace {

constexpr const char* kPackedSuffixes[] = {".weight_packed", ".weight_scale", ".weight_zero_point",
                                           ".weight_shape"};
constexpr const char* kGptqSuffixes[] = {".qweight", ".qzeros", ".scales", ".g_idx"};
// AWQ GEMM packs column 8c + order[k] into nibble k, order = 0 2 4 6 1 3 5 7: column 8c + j sits in
// nibble kAwqNibble[j].
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

bool gptq_like(const PackedIntSpec& p) {
  return p.layout == PackedIntLayout::kGptq || p.layout == PackedIntLayout::kAwq;
}

const char* values_suffix(const PackedIntSpec& p) {
  return gptq_like(p) ? ".qweight" : ".weight_packed";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

Status bad(const TensorSource& s, const std::string& tensor, const std::string& what) {
  return invalid_argument(fmt::format("{}: tensor {}: {}", s.origin(), tensor, what));
}

Result<RawTensor> expect(const TensorSource& s, const std::string& name, const std::vector<int64_t>& shape,
                         DType dtype) {
  D0_ASSIGN_OR_RETURN(RawTensor t, s.get(name));
  if (t.dtype != dtype) {
    return bad(s, name, fmt::format("expected dtype {}, found {}", dtype_name(dtype), dtype_name(t.dtype)));
  }
  if (t.shape != shape) {
    return bad(s, name, fmt::format("expected shape {}, found {}", shape_text(shape), shape_text(t.shape)));
  }
  return t;
}

std::vector<int32_t> words_of(const RawTensor& t) {
  std::vector<int32_t> out(t.data.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), t.data.data(), out.size() * 4);
  return out;
}

Result<std::vector<float>> floats_of(const TensorSource& s, const RawTensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h = 0;
    switch (t.dtype) {
      case DType::kF32:
        std::memcpy(&out[i], t.data.data() + i * 4, 4);
        break;
      case DType::kBF16:
        std::memcpy(&h, t.data.data() + i * 2, 2);
        out[i] = bf16_to_f32(h);
        break;
      case DType::kF16:
        std::memcpy(&h, t.data.data() + i * 2, 2);
        out[i] = f16_to_f32(h);
        break;
      default:
        return bad(s, t.name,
                   fmt::format("expected a float scale (F32, BF16, F16), found {}", dtype_name(t.dtype)));
    }
  }
  return out;
}

// Unsigned code k of `word` (bits * k upwards).
int code_at(int32_t word, int k, int bits) {
  return static_cast<int>((static_cast<uint32_t>(word) >> (bits * k)) & ((1u << bits) - 1u));
}

// GPTQ / AWQ: codes q[i, o] (unsigned), zero points z[g(i), o] and scales s[g(i), o], transposed to
// [out, in] / [out, groups]; W[o, i] = (q - z) * s (GPTQ v1 zero points are stored minus one).
Result<IntCodes> gptq_awq_codes(const TensorSource& source, const std::string& stem,
                                const PackedIntSpec& packed) {
  const bool awq = packed.layout == PackedIntLayout::kAwq;
  const int bits = packed.bits;
  const int64_t f = 32 / bits;
  D0_ASSIGN_OR_RETURN(RawTensor w, source.get(stem + ".qweight"));
  if (w.dtype != DType::kI32 || w.shape.size() != 2) {
    return bad(source, w.name,
               fmt::format("expected I32 2-D, found {} {}", dtype_name(w.dtype), shape_text(w.shape)));
  }
  D0_ASSIGN_OR_RETURN(RawTensor s, source.get(stem + ".scales"));
  if (s.shape.size() != 2)
    return bad(source, s.name, fmt::format("expected 2-D, found {}", shape_text(s.shape)));
  const int64_t out = s.shape[1];
  int64_t in = awq ? w.shape[0] : w.shape[0] * f;
  std::vector<int32_t> g_idx;
  if (!awq) {
    D0_ASSIGN_OR_RETURN(RawTensor g, source.get(stem + ".g_idx"));
    if (g.dtype != DType::kI32 || g.shape.size() != 1) {
      return bad(
          source, g.name,
          fmt::format("expected I32 [in_features], found {} {}", dtype_name(g.dtype), shape_text(g.shape)));
    }
    in = g.shape[0];
    g_idx = words_of(g);
  }
  const std::vector<int64_t> want_w =
      awq ? std::vector<int64_t>{in, ceil_div(out, f)} : std::vector<int64_t>{ceil_div(in, f), out};
  if (w.shape != want_w) {
    return bad(source, w.name,
               fmt::format("expected shape {} for {} outputs and {} inputs, found {}", shape_text(want_w),
                           out, in, shape_text(w.shape)));
  }
  const int64_t group = packed.group_size > 0 ? packed.group_size : in;
  const int64_t groups = ceil_div(in, group);
  if (s.shape != std::vector<int64_t>{groups, out}) {
    return bad(source, s.name,
               fmt::format("expected shape {} (in_features / group_size {}, out_features), found {}",
                           shape_text({groups, out}), group, shape_text(s.shape)));
  }
  D0_ASSIGN_OR_RETURN(RawTensor z, expect(source, stem + ".qzeros", {groups, ceil_div(out, f)}, DType::kI32));
  D0_ASSIGN_OR_RETURN(std::vector<float> scale, floats_of(source, s));
  if (awq) {
    g_idx.resize(static_cast<size_t>(in));
    for (int64_t i = 0; i < in; ++i) g_idx[static_cast<size_t>(i)] = static_cast<int32_t>(i / group);
  }
  for (int64_t i = 0; i < in; ++i) {
    if (g_idx[static_cast<size_t>(i)] < 0 || g_idx[static_cast<size_t>(i)] >= groups) {
      return bad(
          source, stem + ".g_idx",
          fmt::format("input {} names group {}, outside [0, {})", i, g_idx[static_cast<size_t>(i)], groups));
    }
  }
  const std::vector<int32_t> qw = words_of(w), qz = words_of(z);
  // Position of output o inside its word.
  const auto slot = [&](int64_t o) { return awq && bits == 4 ? kAwqNibble[o % 8] : static_cast<int>(o % f); };
  IntCodes c;
  c.bits = bits;
  c.rows = out;
  c.cols = in;
  c.groups = groups;
  c.is_signed = false;
  c.group_of = std::move(g_idx);
  c.zero.resize(static_cast<size_t>(groups * out));
  c.scale.resize(static_cast<size_t>(groups * out));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      int zp = code_at(qz[static_cast<size_t>(g * ceil_div(out, f) + o / f)], slot(o), bits);
      if (packed.zero_offset) zp += 1;  // GPTQ v1 stores z - 1
      c.zero[static_cast<size_t>(o * groups + g)] = static_cast<float>(zp);
      c.scale[static_cast<size_t>(o * groups + g)] = scale[static_cast<size_t>(g * out + o)];
    }
  }
  c.q.resize(static_cast<size_t>(out * in));
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      const int q = awq ? code_at(qw[static_cast<size_t>(i * ceil_div(out, f) + o / f)], slot(o), bits)
                        : code_at(qw[static_cast<size_t>((i / f) * out + o)], static_cast<int>(i % f), bits);
      c.q[static_cast<size_t>(o * in + i)] = static_cast<int16_t>(q);
    }
  }
  return c;
}

// compressed-tensors pack-quantized: signed codes, scales in the model dtype (`dtype`), zero points
// when asymmetric.
Result<IntCodes> compressed_tensors_codes(const TensorSource& source, const std::string& stem,
                                          const PackedIntSpec& packed, DType& dtype) {
  const int bits = packed_bits_of(packed, stem);
  const std::string shape_name = stem + ".weight_shape";
  D0_ASSIGN_OR_RETURN(RawTensor shape_t, source.get(shape_name));
  if (shape_t.shape != std::vector<int64_t>{2} ||
      (shape_t.dtype != DType::kI64 && shape_t.dtype != DType::kI32)) {
    return bad(source, shape_name,
               fmt::format("expected I64 [2] (rows, cols), found {} {}", dtype_name(shape_t.dtype),
                           shape_text(shape_t.shape)));
  }
  int64_t rows = 0, cols = 0;
  if (shape_t.dtype == DType::kI64) {
    std::memcpy(&rows, shape_t.data.data(), 8);
    std::memcpy(&cols, shape_t.data.data() + 8, 8);
  } else {
    int32_t r32 = 0, c32 = 0;
    std::memcpy(&r32, shape_t.data.data(), 4);
    std::memcpy(&c32, shape_t.data.data() + 4, 4);
    rows = r32;
    cols = c32;
  }
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  if (rows <= 0 || cols <= 0 || rows > kMaxDim || cols > kMaxDim) {
    return bad(source, shape_name, fmt::format("holds [{}, {}]: not a valid matrix shape", rows, cols));
  }
  const int64_t per_word = 32 / bits;
  D0_ASSIGN_OR_RETURN(RawTensor w,
                      expect(source, stem + ".weight_packed", {rows, ceil_div(cols, per_word)}, DType::kI32));
  D0_ASSIGN_OR_RETURN(RawTensor s, source.get(stem + ".weight_scale"));
  int64_t groups = packed.group_size > 0 ? cols / packed.group_size : 1;
  if (packed.group_size > 0 && cols % packed.group_size != 0) {
    return bad(
        source, stem + ".weight_packed",
        fmt::format("{} columns are not a multiple of the config's group_size {}", cols, packed.group_size));
  }
  if (s.shape != std::vector<int64_t>{rows, groups}) {
    return bad(source, s.name,
               fmt::format("expected shape {} (rows, cols / group_size), found {}",
                           shape_text({rows, groups}), shape_text(s.shape)));
  }
  IntCodes c;
  c.bits = bits;
  c.rows = rows;
  c.cols = cols;
  c.groups = groups;
  c.is_signed = true;
  D0_ASSIGN_OR_RETURN(c.scale, floats_of(source, s));
  c.zero.assign(c.scale.size(), 0.0f);
  const std::string zp_name = stem + ".weight_zero_point";
  if (!packed.symmetric) {
    D0_ASSIGN_OR_RETURN(RawTensor z,
                        expect(source, zp_name, {ceil_div(rows, per_word), groups}, DType::kI32));
    const std::vector<int8_t> zero_point = unpack_columns(words_of(z), rows, groups, bits);
    for (size_t i = 0; i < zero_point.size(); ++i) c.zero[i] = zero_point[i];
  } else if (source.contains(zp_name)) {
    return bad(source, zp_name, "present, but the config says symmetric (no zero points)");
  }
  const std::vector<int8_t> q = unpack_rows(words_of(w), rows, cols, bits);
  c.q.assign(q.begin(), q.end());
  c.group_of.resize(static_cast<size_t>(cols));
  for (int64_t k = 0; k < cols; ++k)
    c.group_of[static_cast<size_t>(k)] = static_cast<int32_t>(k / (cols / groups));
  dtype = s.dtype;
  return c;
}

}  // namespace

Result<IntCodes> packed_int_codes(const TensorSource& source, const std::string& stem,
                                  const PackedIntSpec& packed, DType& scale_dtype) {
  if (packed.bits != 4 && packed.bits != 8)
    return internal_error("packed_int_codes: not a pack-quantized spec");
  if (gptq_like(packed)) {
    scale_dtype = DType::kF32;
    return gptq_awq_codes(source, stem, packed);
  }
  return compressed_tensors_codes(source, stem, packed, scale_dtype);
}

Result<std::vector<float>> dequantize_packed_weight(const TensorSource& source, const std::string& stem,
                                                    const PackedIntSpec& packed, std::vector<int64_t>& shape,
                                                    DType& dtype) {
  D0_ASSIGN_OR_RETURN(IntCodes c, packed_int_codes(source, stem, packed, dtype));
  // W = (q - z) * s as float32: exact (|q - z| < 2^9, the scale has at most 24 significant bits).
  std::vector<float> out(static_cast<size_t>(c.rows * c.cols));
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t k = 0; k < c.cols; ++k) {
      const size_t g = static_cast<size_t>(r * c.groups + c.group_of[static_cast<size_t>(k)]);
      const int zp = static_cast<int>(c.zero[g]);
      out[static_cast<size_t>(r * c.cols + k)] =
          static_cast<float>(c.q[static_cast<size_t>(r * c.cols + k)] - zp) * c.scale[g];
    }
  }
  shape = {c.rows, c.cols};
  return out;
}

PackedIntSource::PackedIntSource(std::shared_ptr<const TensorSource> packed_source, PackedIntSpec packed,
                                 bool exact_f32, bool keep_int)
    : inner_(std::move(packed_source)),
      packed_(std::move(packed)),
      exact_f32_(exact_f32),
      keep_int_(keep_int) {
  const std::string suffix = values_suffix(packed_);
  for (const auto& name : inner_->names()) {
    if (name.ends_with(suffix)) {
      const std::string stem = name.substr(0, name.size() - suffix.size());
      weights_[stem + ".weight"] = stem;
    }
  }
}

bool PackedIntSource::contains(const std::string& name) const {
  if (weights_.count(name)) return true;
  if (gptq_like(packed_)) {
    for (const char* suffix : kGptqSuffixes) {
      if (name.ends_with(suffix)) return false;
    }
  } else {
    for (const char* suffix : kPackedSuffixes) {
      if (name.ends_with(suffix)) return false;
    }
  }
  return inner_->contains(name);
}

Result<RawTensor> PackedIntSource::get(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) {
    if (!contains(name))
      return not_found(fmt::format("{}: tensor {} is not in the checkpoint", origin(), name));
    return inner_->get(name);
  }
  std::lock_guard lock(mutex_);
  auto cached = cache_.find(name);
  if (cached == cache_.end()) {
    Dequantized d;
    D0_ASSIGN_OR_RETURN(std::vector<float> values,
                        dequantize_packed_weight(*inner_, it->second, packed_, d.shape, d.dtype));
    if (exact_f32_) d.dtype = DType::kF32;
    if (d.dtype == DType::kF32) {
      d.bytes.resize(values.size() * 4);
      std::memcpy(d.bytes.data(), values.data(), d.bytes.size());
    } else {
      // The float32 product rounded to the scale's dtype, as compressed-tensors' (q - zp) * scale gives it
      // when the model is loaded in that dtype (in float32 transformers keeps the exact product).
      d.bytes.resize(values.size() * 2);
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = d.dtype == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
        std::memcpy(d.bytes.data() + i * 2, &h, 2);
      }
    }
    cached = cache_.emplace(name, std::move(d)).first;
  }
  const Dequantized& d = cached->second;
  return RawTensor{name, d.dtype, d.shape, d.bytes};
}

Result<const IntWeight*> PackedIntSource::int_weight(const std::string& name) const {
  auto it = weights_.find(name);
  if (!keep_int_ || it == weights_.end()) return static_cast<const IntWeight*>(nullptr);
  std::lock_guard lock(mutex_);
  auto cached = int_cache_.find(name);
  if (cached == int_cache_.end()) {
    DType scale_dtype = DType::kF32;
    D0_ASSIGN_OR_RETURN(IntCodes codes, packed_int_codes(*inner_, it->second, packed_, scale_dtype));
    Result<IntWeight> repacked = repack_int_weight(codes);
    std::unique_ptr<IntWeight> kept;
    if (repacked.is_ok()) kept = std::make_unique<IntWeight>(std::move(repacked).value());
    cached = int_cache_.emplace(name, std::move(kept)).first;
  }
  return static_cast<const IntWeight*>(cached->second.get());
}

std::vector<std::string> PackedIntSource::names() const {
  std::vector<std::string> out;
  for (const auto& name : inner_->names()) {
    if (contains(name)) out.push_back(name);
  }
  for (const auto& [name, stem] : weights_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const TensorSource> unpacked_source(std::shared_ptr<const TensorSource> source,
                                                    const ModelSpec& spec, bool exact_f32, bool keep_int) {
  if (spec.weights.packed.bits == 0) return source;
  return std::make_shared<PackedIntSource>(std::move(source), spec.weights.packed, exact_f32, keep_int);
}

ModelSpec unpacked_spec(const ModelSpec& spec) {
  ModelSpec out = spec;
  out.weights.packed = PackedIntSpec{};
  return out;
}

}  // namespace day0
