// Dequantisation of the ggml block formats, written from the GGUF format description:
//  - Q4_0 (18 bytes / 32): f16 d, 16 bytes of nibbles; element j < 16 is the low nibble of byte j, element
//    j + 16 its high nibble; x = (q - 8) * d.            Q4_1 (20 bytes): f16 d, f16 m, nibbles; x = q * d +
//    m.
//  - Q5_0 (22 bytes): f16 d, u32 high bits (bit j is the fifth bit of element j), nibbles as Q4_0;
//    x = (q - 16) * d.                                    Q5_1 (24 bytes): f16 d, f16 m, u32, nibbles; x = q
//    * d + m.
//  - Q8_0 (34 bytes): f16 d, 32 int8; x = q * d.
//  - Q4_K (144 bytes / 256): f16 d, f16 dmin, 12 bytes of eight 6-bit (scale, min) pairs, 128 bytes of
//    nibbles; sub-block s of 32 is x = d * scale_s * q - dmin * min_s. Chunk c of 64 elements takes the low
//    nibbles of bytes 32c..32c+31 (sub-block 2c), then their high nibbles (sub-block 2c + 1).
//  - Q5_K (176 bytes): as Q4_K plus 32 bytes of high bits before the nibbles: for sub-block s, bit s of
//    byte l is the fifth bit of its element l.
//  - Q6_K (210 bytes): 128 bytes of low nibbles, 64 of 2-bit high parts, 16 int8 scales, f16 d at the end;
//    x = d * scale * (q - 32), one scale per 16 elements.
#include <cstring>

#include <fmt/format.h>

#include "day0/core/numeric.h"
#include "day0/io/gguf.h"

namespace day0::gguf {
namespace {

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void q4_0_block(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void q4_1_block(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void q5_0_block(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint32_t qh = load_u32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo - 16) * d;
    y[j + 16] = static_cast<float>(hi - 16) * d;
  }
}

void q5_1_block(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint32_t qh = load_u32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo) * d + m;
    y[j + 16] = static_cast<float>(hi) * d + m;
  }
}

void q8_0_block(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// The 6-bit scale and min of sub-block s (0..7) from the 12 packed bytes: sub-blocks 0-3 use the low six
// bits of bytes s and s + 4; sub-blocks 4-7 take their low four bits from byte s + 4 (scale: low nibble,
// min: high nibble) and their top two bits from the spare top bits of bytes s - 4 (scale) and s (min).
void k_scale_min(const uint8_t* q, int s, int& scale, int& min) {
  if (s < 4) {
    scale = q[s] & 63;
    min = q[s + 4] & 63;
  } else {
    scale = (q[s + 4] & 0x0f) | ((q[s - 4] >> 6) << 4);
    min = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
  }
}

void q4_k_block(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int chunk = 0; chunk < 4; ++chunk) {
    int sc0, m0, sc1, m1;
    k_scale_min(scales, 2 * chunk, sc0, m0);
    k_scale_min(scales, 2 * chunk + 1, sc1, m1);
    const uint8_t* q = qs + 32 * chunk;
    float* out = y + 64 * chunk;
    for (int l = 0; l < 32; ++l) {
      out[l] = d * static_cast<float>(sc0) * static_cast<float>(q[l] & 0x0f) - dmin * static_cast<float>(m0);
      out[l + 32] =
          d * static_cast<float>(sc1) * static_cast<float>(q[l] >> 4) - dmin * static_cast<float>(m1);
    }
  }
}

void q5_k_block(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int chunk = 0; chunk < 4; ++chunk) {
    const int s0 = 2 * chunk;
    const int s1 = s0 + 1;
    int sc0, m0, sc1, m1;
    k_scale_min(scales, s0, sc0, m0);
    k_scale_min(scales, s1, sc1, m1);
    const uint8_t* q = qs + 32 * chunk;
    float* out = y + 64 * chunk;
    for (int l = 0; l < 32; ++l) {
      const int lo = (q[l] & 0x0f) | (((qh[l] >> s0) & 1) << 4);
      const int hi = (q[l] >> 4) | (((qh[l] >> s1) & 1) << 4);
      out[l] = d * static_cast<float>(sc0) * static_cast<float>(lo) - dmin * static_cast<float>(m0);
      out[l + 32] = d * static_cast<float>(sc1) * static_cast<float>(hi) - dmin * static_cast<float>(m1);
    }
  }
}

// Each half of 128 elements uses 64 bytes of ql, 32 of qh and 8 scales. Element l + 32k (k = 0..3,
// l = 0..31) of a half takes the low (k even) or high (k odd) nibble of ql[l + 32 (k % 2)] and bits
// 2k, 2k+1 of qh[l]; its scale is number 2k + l / 16 of the half.
void q6_k_block(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int sub = l / 16;
      for (int k = 0; k < 4; ++k) {
        const uint8_t low_byte = ql[l + 32 * (k % 2)];
        const int low = k < 2 ? (low_byte & 0x0f) : (low_byte >> 4);
        const int high = (qh[l] >> (2 * k)) & 3;
        const int q = (low | (high << 4)) - 32;
        y[l + 32 * k] = d * static_cast<float>(sc[sub + 2 * k]) * static_cast<float>(q);
      }
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

Status dequantize(uint32_t type, std::span<const uint8_t> src, std::span<float> out) {
  const std::optional<GgmlTypeInfo> info = ggml_type_info(type);
  if (!info) return unsupported(fmt::format("unknown ggml type {}", type));
  if (!info->dequantizable)
    return unsupported(fmt::format("ggml type {} cannot be dequantised yet", info->name));
  const uint64_t n = out.size();
  if (n % static_cast<uint64_t>(info->block_elems) != 0) {
    return out_of_range(
        fmt::format("{}: {} elements are not whole blocks of {}", info->name, n, info->block_elems));
  }
  const uint64_t n_blocks = n / static_cast<uint64_t>(info->block_elems);
  if (src.size() != n_blocks * static_cast<uint64_t>(info->block_bytes)) {
    return out_of_range(fmt::format("{}: {} elements need {} bytes, found {}", info->name, n,
                                    n_blocks * static_cast<uint64_t>(info->block_bytes), src.size()));
  }
  const uint8_t* s = src.data();
  float* y = out.data();
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      if (n > 0) std::memcpy(y, s, n * 4);
      return Status::ok();
    case GgmlType::kF16:
      for (uint64_t i = 0; i < n; ++i) y[i] = load_f16(s + 2 * i);
      return Status::ok();
    case GgmlType::kBF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, s + 2 * i, 2);
        y[i] = bf16_to_f32(v);
      }
      return Status::ok();
    default:
      break;
  }
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kQ4_0:
      block = q4_0_block;
      break;
    case GgmlType::kQ4_1:
      block = q4_1_block;
      break;
    case GgmlType::kQ5_0:
      block = q5_0_block;
      break;
    case GgmlType::kQ5_1:
      block = q5_1_block;
      break;
    case GgmlType::kQ8_0:
      block = q8_0_block;
      break;
    case GgmlType::kQ4_K:
      block = q4_k_block;
      break;
    case GgmlType::kQ5_K:
      block = q5_k_block;
      break;
    case GgmlType::kQ6_K:
      block = q6_k_block;
      break;
    default:
      return unsupported(fmt::format("ggml type {} cannot be dequantised yet", info->name));
  }
  for (uint64_t i = 0; i < n_blocks; ++i) {
    block(s + i * static_cast<uint64_t>(info->block_bytes), y + i * static_cast<uint64_t>(info->block_elems));
  }
  return Status::ok();
}

Result<std::vector<float>> dequantize_tensor(const TensorInfo& t) {
  std::vector<float> out(t.n_elements);
  Status st = dequantize(t.type, t.data, out);
  if (!st.is_ok()) return st.with_context("tensor " + t.name);
  return out;
}

}  // namespace day0::gguf
