#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "day0/backends/cpu/simd_level.h"
#include "day0/core/numeric.h"
#include "op_test_support.h"

namespace day0::test {

namespace {
constexpr float kSentinel = -12345.678f;
}

WeightView TestWeight::view() const {
  WeightView v;
  v.format = format;
  v.rows = rows;
  v.cols = cols;
  v.data = data.data();
  v.scales = scales.empty() ? nullptr : scales.data();
  v.block_rows = block_rows;
  v.block_cols = block_cols;
  v.zeros = zeros.empty() ? nullptr : zeros.data();
  v.group = group;
  v.fp4_scale_code = fp4_scale_code;
  v.fp4_global_scale = fp4_global_scale;
  v.int_scale_type = int_scale_type;
  return v;
}

TestWeight random_int_weight(WeightFormat format, int64_t rows, int64_t cols, int64_t group, bool asymmetric,
                             uint64_t seed, float amplitude) {
  TestWeight w;
  w.format = format;
  w.rows = rows;
  w.cols = cols;
  w.group = group;
  const WeightView shape = w.view();
  const int64_t row_bytes = shape.int_row_bytes();
  const int64_t groups = shape.int_groups();
  std::mt19937_64 rng(seed);
  w.data.assign(static_cast<size_t>(rows * row_bytes), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {  // padding columns keep code 0
      const auto code = static_cast<uint8_t>(rng());
      uint8_t* row = w.data.data() + r * row_bytes;
      if (format == WeightFormat::kInt8) {
        row[k] = code;
      } else {
        uint8_t& byte = row[(k / kIntBlock) * 16 + k % 16];
        byte = k % kIntBlock < 16 ? static_cast<uint8_t>((byte & 0xf0) | (code & 0x0f))
                                  : static_cast<uint8_t>((byte & 0x0f) | (code << 4));
      }
    }
  }
  const float range = format == WeightFormat::kInt8 ? 128.0f : 8.0f;
  std::uniform_real_distribution<float> s(0.5f * amplitude / range, 2.0f * amplitude / range);
  w.scales.resize(static_cast<size_t>(rows * groups) * 4);
  for (int64_t i = 0; i < rows * groups; ++i) {
    const float v = s(rng);
    std::memcpy(w.scales.data() + 4 * i, &v, 4);
  }
  if (asymmetric) {
    w.zeros.resize(static_cast<size_t>(rows * groups));
    for (float& z : w.zeros) {
      z = format == WeightFormat::kInt8 ? static_cast<float>(static_cast<int>(rng() % 64) - 32)
                                        : static_cast<float>(rng() % 16);
    }
  }
  return w;
}

bool format_fits(WeightFormat format, int64_t cols) {
  return format != WeightFormat::kMxfp4 || cols % 32 == 0;
}

std::vector<float> random_vector(int64_t n, uint64_t seed, float amplitude) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, amplitude);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

TestWeight random_weight(WeightFormat format, int64_t rows, int64_t cols, uint64_t seed, float amplitude) {
  TestWeight w;
  w.format = format;
  w.rows = rows;
  w.cols = cols;
  std::mt19937_64 rng(seed);
  const auto n = static_cast<size_t>(rows * cols);
  const auto values = random_vector(rows * cols, seed ^ 0x5eed, amplitude);
  auto put_u16 = [&](size_t i, uint16_t bits) { std::memcpy(w.data.data() + 2 * i, &bits, 2); };
  switch (format) {
    case WeightFormat::kF32:
      w.data.resize(n * 4);
      std::memcpy(w.data.data(), values.data(), n * 4);
      break;
    case WeightFormat::kBF16:
      w.data.resize(n * 2);
      for (size_t i = 0; i < n; ++i) put_u16(i, f32_to_bf16(values[i]));
      break;
    case WeightFormat::kF16:
      w.data.resize(n * 2);
      for (size_t i = 0; i < n; ++i) put_u16(i, f32_to_f16(values[i]));
      break;
    case WeightFormat::kFp8Block: {
      w.data.resize(n);
      for (auto& b : w.data) {
        do {
          b = static_cast<uint8_t>(rng());
        } while ((b & 0x7f) == 0x7f);  // no NaN encodings
      }
      const int64_t sr = (rows + 127) / 128;
      const int64_t sc = (cols + 127) / 128;
      w.scales.resize(static_cast<size_t>(sr * sc) * 4);
      std::uniform_real_distribution<float> s(0.5f * amplitude / 64, 2.0f * amplitude / 64);
      for (int64_t i = 0; i < sr * sc; ++i) {
        const float v = s(rng);
        std::memcpy(w.scales.data() + 4 * i, &v, 4);
      }
      break;
    }
    case WeightFormat::kMxfp4: {
      w.data.resize(n / 2);
      for (auto& b : w.data) b = static_cast<uint8_t>(rng());
      w.scales.resize(static_cast<size_t>(rows * (cols / 32)));
      for (auto& s : w.scales) s = static_cast<uint8_t>(122 + rng() % 6);
      break;
    }
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
      return random_int_weight(format, rows, cols,
                               cols % kIntBlock == 0 && cols > kIntBlock ? kIntBlock : cols,
                               format == WeightFormat::kInt4, seed, amplitude);
  }
  return w;
}

GuardedMatrix::GuardedMatrix(int64_t rows, int64_t cols, float fill)
    : rows_(rows), cols_(cols), storage_(static_cast<size_t>(2 * kGuard + rows * (cols + kPad)), kSentinel) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) storage_[static_cast<size_t>(kGuard + r * (cols + kPad) + c)] = fill;
  }
}

void GuardedMatrix::fill_random(uint64_t seed, float amplitude) {
  const auto v = random_vector(rows_ * cols_, seed, amplitude);
  for (int64_t r = 0; r < rows_; ++r) {
    for (int64_t c = 0; c < cols_; ++c) {
      storage_[static_cast<size_t>(kGuard + r * (cols_ + kPad) + c)] = v[static_cast<size_t>(r * cols_ + c)];
    }
  }
}

bool GuardedMatrix::guards_intact() const {
  for (size_t i = 0; i < storage_.size(); ++i) {
    const auto off = static_cast<int64_t>(i) - kGuard;
    const bool inside = off >= 0 && off < rows_ * (cols_ + kPad) && off % (cols_ + kPad) < cols_;
    if (!inside && storage_[i] != kSentinel) return false;
  }
  return true;
}

std::vector<float> GuardedMatrix::values() const {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(rows_ * cols_));
  for (int64_t r = 0; r < rows_; ++r) {
    for (int64_t c = 0; c < cols_; ++c)
      out.push_back(storage_[static_cast<size_t>(kGuard + r * (cols_ + kPad) + c)]);
  }
  return out;
}

double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0.0;
  double den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return num / den;
}

std::vector<NamedBackend> backends_under_test() {
  std::vector<NamedBackend> out;
  for (SimdLevel level : available_simd_levels()) {
    BackendOptions opts;
    opts.simd = level;
    opts.n_threads = 2;
    // Both routes of the BF16 GEMM where the CPU has vdpbf16ps (AMX takes BF16 GEMMs before either).
    if (level == SimdLevel::kAvx512 && cpu_has_avx512_bf16()) {
      for (bool dot : {true, false}) {
        opts.bf16_dot_gemm = dot;
        out.push_back({fmt::format("cpu/{}/{}", simd_level_name(level), dot ? "bf16-dot" : "bf16-fma"),
                       std::move(make_backend("cpu", opts).value())});
      }
      continue;
    }
    out.push_back(
        {fmt::format("cpu/{}", simd_level_name(level)), std::move(make_backend("cpu", opts).value())});
  }
  BackendOptions partial;
  partial.n_threads = 2;
  partial.quiet = true;
  out.push_back({"partial", std::move(open_backend("partial", partial).value())});
  return out;
}

std::unique_ptr<Backend> reference_backend() {
  return std::move(make_backend("reference").value());
}

void CaseTable::add(const std::string& op, const std::string& backend, const std::string& shape, double error,
                    double tolerance, bool guards_ok) {
  ++cases_;
  if (error <= tolerance && guards_ok) return;
  ++failures_;
  failed_.push_back({op, backend, shape, error, tolerance, guards_ok});
}

std::string CaseTable::failure_table() const {
  std::string out = fmt::format("{:<16} {:<12} {:<44} {:>12} {:>10} {}\n", "op", "backend", "case", "nmse",
                                "tolerance", "guards");
  for (const auto& r : failed_) {
    out += fmt::format("{:<16} {:<12} {:<44} {:>12.3e} {:>10.1e} {}\n", r.op, r.backend, r.shape, r.error,
                       r.tolerance, r.guards_ok ? "ok" : "OVERWRITTEN");
  }
  return out;
}

}  // namespace day0::test
