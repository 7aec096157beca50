// Zero heap allocations per decoded token after warm-up. This area is its own executable because it
// replaces the global operator new with a counting one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "day0/runtime/model_loader.h"

// The replaced operator delete frees what the replaced operator new took from malloc; GCC's inliner
// at -O1 (the sanitizer build) pairs the builtin new with free and warns regardless.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* counted(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                              : std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) {
  return counted(n, 0);
}
void* operator new[](std::size_t n) {
  return counted(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return counted(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace day0 {
namespace {

int64_t allocations_during(const std::function<void()>& fn) {
  g_allocations = 0;
  g_counting = true;
  fn();
  g_counting = false;
  return g_allocations.load();
}

// Dense and MoE models, both KV dtypes that matter, 2 pool threads: once the
// cache has room reserved and one step of each shape ran, decode steps touch the heap 0 times.
TEST(ZeroAllocation, DecodeStepsAfterWarmUpAllocateNothing) {
  EXPECT_GT(allocations_during([] { delete new int(1); }), 0);  // the counter counts
  // Dense, MoE (softmax top-k; DeepSeek's grouped noaux_tc router with MLA absorbed over pages) and
  // gpt-oss (sinks, sliding window giving blocks back).
  for (const char* name : {"llama3", "qwen3", "qwen3-moe", "deepseek-v3", "gpt-oss"}) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16}) {
      auto model = load_model(std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name);
      ASSERT_TRUE(model.is_ok()) << model.status().to_string();
      EngineOptions o;
      o.kv_dtype = dtype;
      o.kv_block_tokens = 4;  // block boundaries inside the measured steps
      auto handle = open_engine(*model, "cpu", o, 2);
      ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
      Engine& e = *handle->engine;
      KvCache cache = e.new_cache();
      cache.reserve(64);
      const std::vector<int32_t> prompt = {1, 5, 9, 2};
      int32_t token = 0;
      auto step = [&](std::span<const int32_t> ids) {
        const SequenceStep s{&cache, ids};
        auto logits = e.forward(std::span(&s, 1), true);
        if (!logits.is_ok()) std::abort();
        const float* row = logits->row(0);
        token = static_cast<int32_t>(std::max_element(row, row + logits->cols) - row);
      };
      step(prompt);
      for (int i = 0; i < 3; ++i) step(std::span(&token, 1));  // warm-up: the decode shape
      const int64_t n = allocations_during([&] {
        for (int i = 0; i < 24; ++i) step(std::span(&token, 1));
      });
      EXPECT_EQ(n, 0) << name << " " << kv_dtype_name(dtype) << ": heap allocations in 24 decode steps";
    }
  }
}

}  // namespace
}  // namespace day0
