// kv_write and kv_copy_blocks: the cpu backend against the reference oracle, byte for byte, for every
// KV dtype (rows with ties, NaN, infinities, values past FP8's range, subnormals), hand-worked
// conversions, and copies applied in order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/backends/reference/reference_kernels.h"
#include "day0/core/numeric.h"

namespace day0 {
namespace {

// A pool of n_blocks blocks in its own bytes, filled with a marker so untouched bytes show.
struct TestPool {
  std::vector<std::vector<unsigned char>> first, second;
  std::vector<void*> first_ptrs, second_ptrs;
  KvBlockTable table;
  TestPool(KvDtype dtype, int64_t n_blocks, int64_t block_tokens, int64_t w1, int64_t w2) {
    const auto elem = static_cast<size_t>(kv_dtype_bytes(dtype));
    for (int64_t b = 0; b < n_blocks; ++b) {
      first.emplace_back(static_cast<size_t>(block_tokens * w1) * elem, 0xA5);
      second.emplace_back(static_cast<size_t>(block_tokens * w2) * elem, 0x5A);
    }
    for (auto& f : first) first_ptrs.push_back(f.data());
    for (auto& s : second) second_ptrs.push_back(s.data());
    table = {dtype,    block_tokens,      w1, w2, first_ptrs.data(), second_ptrs.data(),
             n_blocks, MemorySpace::kHost};
  }
  bool operator==(const TestPool& o) const { return first == o.first && second == o.second; }
};

std::vector<float> awkward_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  const float specials[] = {1.00390625f,  // halfway between two bf16 values: ties to even
                            1.01171875f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            500.0f,  // past FP8 E4M3's 448: saturates
                            -1e6f,
                            1e-9f,  // far below FP8's smallest subnormal
                            0.0009765625f,
                            240.0f,
                            3.0e38f};
  for (size_t i = 0; i < std::size(specials) && i * 7 < v.size(); ++i) v[i * 7] = specials[i];
  return v;
}

TEST(KvWrite, CpuEqualsReferenceByteForByteForEveryDtype) {
  BackendOptions options;
  options.n_threads = 2;
  auto cpu = make_backend("cpu", options);
  ASSERT_TRUE(cpu.is_ok());
  const int64_t rows = 37, w1 = 48, w2 = 24, block_tokens = 8, n_blocks = 9;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    SCOPED_TRACE(kv_dtype_name(dtype));
    const std::vector<float> first = awkward_rows(rows * w1, 1), second = awkward_rows(rows * w2, 2);
    std::vector<int64_t> slots(static_cast<size_t>(n_blocks * block_tokens));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), std::mt19937(7));
    slots.resize(static_cast<size_t>(rows));  // distinct slots scattered over the blocks
    TestPool ref_pool(dtype, n_blocks, block_tokens, w1, w2), cpu_pool(dtype, n_blocks, block_tokens, w1, w2);
    const TestPool untouched(dtype, n_blocks, block_tokens, w1, w2);
    KvWriteArgs a{ConstMatrix(first.data(), rows, w1), ConstMatrix(second.data(), rows, w2), slots,
                  ref_pool.table};
    ref::kv_write(a);
    a.pool = cpu_pool.table;
    (*cpu)->kv_write(a);
    EXPECT_TRUE(ref_pool == cpu_pool);
    EXPECT_FALSE(ref_pool == untouched);
    // Every written row reads back as the dtype's rounding of the input; the rest keeps its marker.
    std::vector<float> back(static_cast<size_t>(w1));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t s = slots[static_cast<size_t>(r)];
      const auto* row = ref_pool.first[static_cast<size_t>(s / block_tokens)].data() +
                        (s % block_tokens) * w1 * kv_dtype_bytes(dtype);
      kv_row_to_f32(dtype, row, w1, back.data());
      for (int64_t j = 0; j < w1; ++j) {
        const float x = first[static_cast<size_t>(r * w1 + j)], y = back[static_cast<size_t>(j)];
        if (std::isnan(x)) {
          EXPECT_TRUE(std::isnan(y));
        } else if (dtype == KvDtype::kF32) {
          EXPECT_EQ(std::memcmp(&x, &y, 4), 0);
        } else if (dtype == KvDtype::kBF16) {
          EXPECT_EQ(y, bf16_to_f32(f32_to_bf16(x)));
        } else {
          EXPECT_LE(std::fabs(y), 448.0f);
          if (std::fabs(x) <= 448.0f) {
            EXPECT_LE(std::fabs(y - x), std::fabs(x) / 16 + 1.0f / 512) << x;
          }
        }
      }
    }
  }
}

TEST(KvWrite, HandWorkedConversions) {
  for (auto [dtype, value, bytes] :
       {std::tuple{KvDtype::kBF16, 1.0f, std::vector<unsigned char>{0x80, 0x3F}},
        std::tuple{KvDtype::kBF16, 1.00390625f, std::vector<unsigned char>{0x80, 0x3F}},  // tie: even
        std::tuple{KvDtype::kBF16, 1.01171875f, std::vector<unsigned char>{0x82, 0x3F}},  // tie: even (up)
        std::tuple{KvDtype::kFp8E4M3, 1.0f, std::vector<unsigned char>{0x38}},
        std::tuple{KvDtype::kFp8E4M3, 500.0f, std::vector<unsigned char>{0x7E}},  // saturates at 448
        std::tuple{KvDtype::kFp8E4M3, -448.0f, std::vector<unsigned char>{0xFE}}}) {
    TestPool pool(dtype, 1, 2, 1, 1);
    const float one[1] = {value};
    const int64_t slot[1] = {1};
    ref::kv_write({ConstMatrix(one, 1, 1), ConstMatrix(one, 1, 1), slot, pool.table});
    const auto elem = static_cast<size_t>(kv_dtype_bytes(dtype));
    EXPECT_EQ(std::vector<unsigned char>(pool.first[0].begin() + static_cast<std::ptrdiff_t>(elem),
                                         pool.first[0].end()),
              bytes)
        << value;
    EXPECT_EQ(pool.first[0][0], 0xA5);  // slot 0 untouched
  }
}

TEST(KvCopyBlocks, CpuEqualsReferenceAndAppliesInOrder) {
  auto cpu = make_backend("cpu");
  ASSERT_TRUE(cpu.is_ok());
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    SCOPED_TRACE(kv_dtype_name(dtype));
    const int64_t block_tokens = 4, w1 = 6, w2 = 3, n_blocks = 5;
    TestPool ref_pool(dtype, n_blocks, block_tokens, w1, w2), cpu_pool(dtype, n_blocks, block_tokens, w1, w2);
    for (TestPool* p : {&ref_pool, &cpu_pool}) {
      for (size_t b = 0; b < p->first.size(); ++b) {
        std::iota(p->first[b].begin(), p->first[b].end(), static_cast<unsigned char>(16 * b));
        std::iota(p->second[b].begin(), p->second[b].end(), static_cast<unsigned char>(16 * b + 7));
      }
    }
    // 0 -> 3 (2 rows), then 3 -> 4 (3 rows): the second copy reads what the first wrote.
    const std::vector<int32_t> src = {0, 3}, dst = {3, 4}, rows = {2, 3};
    const TestPool before = ref_pool;
    ref::kv_copy_blocks({src, dst, rows, ref_pool.table});
    (*cpu)->kv_copy_blocks({src, dst, rows, cpu_pool.table});
    EXPECT_TRUE(ref_pool == cpu_pool);
    const auto elem = static_cast<size_t>(kv_dtype_bytes(dtype));
    const size_t two = 2 * static_cast<size_t>(w1) * elem, three = 3 * static_cast<size_t>(w1) * elem;
    EXPECT_TRUE(std::equal(ref_pool.first[3].begin(),
                           ref_pool.first[3].begin() + static_cast<std::ptrdiff_t>(two),
                           before.first[0].begin()));
    EXPECT_TRUE(std::equal(ref_pool.first[3].begin() + static_cast<std::ptrdiff_t>(two),
                           ref_pool.first[3].end(),
                           before.first[3].begin() + static_cast<std::ptrdiff_t>(two)));  // row 2 on: kept
    EXPECT_TRUE(std::equal(ref_pool.first[4].begin(),
                           ref_pool.first[4].begin() + static_cast<std::ptrdiff_t>(two),
                           before.first[0].begin()));  // through block 3
    EXPECT_TRUE(std::equal(ref_pool.first[4].begin() + static_cast<std::ptrdiff_t>(two),
                           ref_pool.first[4].begin() + static_cast<std::ptrdiff_t>(three),
                           before.first[3].begin() + static_cast<std::ptrdiff_t>(two)));
    EXPECT_TRUE(ref_pool.first[0] == before.first[0] && ref_pool.second[0] == before.second[0]);
  }
}

TEST(KvWrite, RejectsADevicePoolAndSlotsOutsideThePool) {
  auto cpu = make_backend("cpu");
  ASSERT_TRUE(cpu.is_ok());
  TestPool pool(KvDtype::kBF16, 1, 2, 1, 1);
  const float one[1] = {1.0f};
  const int64_t outside[1] = {2};
  EXPECT_THROW((*cpu)->kv_write({ConstMatrix(one, 1, 1), ConstMatrix(one, 1, 1), outside, pool.table}),
               std::exception);
  KvBlockTable device = pool.table;
  device.space = MemorySpace::kDevice;
  const int64_t inside[1] = {1};
  EXPECT_THROW(ref::kv_write({ConstMatrix(one, 1, 1), ConstMatrix(one, 1, 1), inside, device}),
               std::exception);
}

}  // namespace
}  // namespace day0
