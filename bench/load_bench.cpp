// Checkpoint loading throughput: streaming every tensor of a multi-GB synthetic sharded checkpoint
// through the zero-copy reader (mmap + validated headers) versus plain sequential read() of the same
// files, with a warm page cache and a cold one (each file dropped with posix_fadvise(DONTNEED) before
// every iteration), plus the SHA-256 rate of `day0 verify`.
//
// DAY0_LOAD_BENCH_GB (default 2) sets the checkpoint size, DAY0_LOAD_BENCH_DIR (default
// /tmp/day0_load_bench) where it is written once and reused.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "day0/io/checkpoint.h"
#include "day0/io/safetensors_writer.h"
#include "day0/io/sha256.h"

namespace {

using namespace day0;

constexpr uint64_t kTensorBytes = 64ull << 20;
constexpr uint64_t kShardBytes = 512ull << 20;

std::string bench_dir() {
  const char* dir = std::getenv("DAY0_LOAD_BENCH_DIR");
  return dir != nullptr ? dir : "/tmp/day0_load_bench";
}

uint64_t bench_bytes() {
  const char* gb = std::getenv("DAY0_LOAD_BENCH_GB");
  const double v = gb != nullptr ? std::atof(gb) : 2.0;
  return static_cast<uint64_t>((v > 0 ? v : 2.0) * (1ull << 30));
}

uint64_t plain_read(const std::string& path);

// Writes the checkpoint once (or reuses one of the right size) and returns its shard paths.
const std::vector<std::string>& checkpoint_files() {
  static const std::vector<std::string> files = [] {
    const std::string dir = bench_dir();
    const uint64_t n_tensors = std::max<uint64_t>(1, bench_bytes() / kTensorBytes);
    auto existing = Checkpoint::open(dir);
    if (!existing.is_ok() || existing->tensor_names().size() != n_tensors) {
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      CheckpointWriter writer(kShardBytes);
      for (uint64_t t = 0; t < n_tensors; ++t) {
        PendingTensor tensor{fmt::format("model.layers.{}.mlp.down_proj.weight", t),
                             DType::kBF16,
                             {static_cast<int64_t>(kTensorBytes / 2 / 4096), 4096},
                             nullptr};
        tensor.fill = [t](std::span<uint8_t> out) {
          uint64_t x = 0x9e3779b97f4a7c15ull * (t + 1);
          for (size_t i = 0; i + 8 <= out.size(); i += 8) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            std::memcpy(out.data() + i, &x, 8);
          }
          return Status::ok();
        };
        if (!writer.add(std::move(tensor)).is_ok()) std::abort();
      }
      if (!writer.write(dir).is_ok()) std::abort();
    }
    auto layout = locate_checkpoint(dir);
    std::vector<std::string> paths;
    for (const auto& shard : layout->shards) paths.push_back(layout->shard_path(shard));
    for (const auto& p : paths) benchmark::DoNotOptimize(plain_read(p));  // warm the page cache once
    return paths;
  }();
  return files;
}

uint64_t total_size(const std::vector<std::string>& files) {
  uint64_t total = 0;
  for (const auto& f : files) total += std::filesystem::file_size(f);
  return total;
}

void drop_page_cache(const std::vector<std::string>& files) {
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Folds bytes so that the compiler cannot skip the reads; far faster than any storage.
uint64_t fold(const uint8_t* p, size_t n) {
  uint64_t acc = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    acc ^= v;
  }
  for (; i < n; ++i) acc ^= p[i];
  return acc;
}

uint64_t plain_read(const std::string& path) {
  constexpr size_t kChunk = 8u << 20;
  static thread_local std::unique_ptr<uint8_t[]> buffer(new uint8_t[kChunk]);
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) std::abort();
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  uint64_t acc = 0;
  ssize_t n;
  while ((n = ::read(fd, buffer.get(), kChunk)) > 0) acc ^= fold(buffer.get(), static_cast<size_t>(n));
  ::close(fd);
  return acc;
}

uint64_t stream_shard(const SafetensorsFile& shard) {
  shard.mapping().advise_sequential();
  shard.mapping().advise_willneed();
  uint64_t acc = 0;
  for (const auto& t : shard.tensors()) acc ^= fold(t.data.data(), t.data.size());
  return acc;
}

// Runs fn(i) for every shard i on `threads` threads.
template <typename Fn>
void parallel_over(size_t n, int threads, Fn fn) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) fn(i);
    });
  }
  for (auto& th : pool) th.join();
}

void set_rate(benchmark::State& state, uint64_t bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["GB"] = static_cast<double>(bytes) / 1e9;
}

void BM_PlainSequentialRead(benchmark::State& state) {
  const auto& files = checkpoint_files();
  const bool cold = state.range(0) != 0;
  const int threads = static_cast<int>(state.range(1));
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      drop_page_cache(files);
      state.ResumeTiming();
    }
    std::atomic<uint64_t> acc{0};
    parallel_over(files.size(), threads, [&](size_t i) { acc ^= plain_read(files[i]); });
    benchmark::DoNotOptimize(acc.load());
  }
  set_rate(state, total_size(files));
}

void BM_CheckpointStream(benchmark::State& state) {
  const auto& files = checkpoint_files();
  const bool cold = state.range(0) != 0;
  const int threads = static_cast<int>(state.range(1));
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      drop_page_cache(files);
      state.ResumeTiming();
    }
    auto ckpt = Checkpoint::open(bench_dir());  // maps and validates every shard inside the timing
    if (!ckpt.is_ok()) {
      state.SkipWithError(ckpt.status().to_string().c_str());
      return;
    }
    std::atomic<uint64_t> acc{0};
    parallel_over(ckpt->shards().size(), threads, [&](size_t i) { acc ^= stream_shard(ckpt->shards()[i]); });
    benchmark::DoNotOptimize(acc.load());
  }
  set_rate(state, total_size(files));
}

void BM_Sha256Shards(benchmark::State& state) {
  const auto& files = checkpoint_files();
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    auto digests = sha256_files(files, threads);
    benchmark::DoNotOptimize(digests.data());
  }
  set_rate(state, total_size(files));
}

// Plain read and checkpoint stream alternating within one benchmark (A, B, A, B ...), so that both
// rates come from the same minutes on a shared host; counters give each rate and their ratio.
void BM_InterleavedReadVsStream(benchmark::State& state) {
  const auto& files = checkpoint_files();
  const bool cold = state.range(0) != 0;
  const int threads = static_cast<int>(state.range(1));
  const uint64_t bytes = total_size(files);
  double plain_s = 0, stream_s = 0;
  for (auto _ : state) {
    for (int which = 0; which < 2; ++which) {
      if (cold) drop_page_cache(files);
      const auto t0 = std::chrono::steady_clock::now();
      std::atomic<uint64_t> acc{0};
      if (which == 0) {
        parallel_over(files.size(), threads, [&](size_t i) { acc ^= plain_read(files[i]); });
      } else {
        auto ckpt = Checkpoint::open(bench_dir());
        if (!ckpt.is_ok()) {
          state.SkipWithError(ckpt.status().to_string().c_str());
          return;
        }
        parallel_over(ckpt->shards().size(), threads,
                      [&](size_t i) { acc ^= stream_shard(ckpt->shards()[i]); });
      }
      benchmark::DoNotOptimize(acc.load());
      (which == 0 ? plain_s : stream_s) +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  const double n = static_cast<double>(state.iterations()) * static_cast<double>(bytes);
  state.counters["plain_GBps"] = n / plain_s / 1e9;
  state.counters["stream_GBps"] = n / stream_s / 1e9;
  state.counters["stream_vs_plain"] = plain_s / stream_s;
  state.counters["GB"] = static_cast<double>(bytes) / 1e9;
}

// Args: {cold (0/1), threads}.
BENCHMARK(BM_PlainSequentialRead)
    ->ArgNames({"cold", "threads"})
    ->Args({0, 1})
    ->Args({0, 2})
    ->Args({1, 1})
    ->Args({1, 2})
    ->Iterations(3)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CheckpointStream)
    ->ArgNames({"cold", "threads"})
    ->Args({0, 1})
    ->Args({0, 2})
    ->Args({1, 1})
    ->Args({1, 2})
    ->Iterations(3)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_InterleavedReadVsStream)
    ->ArgNames({"cold", "threads"})
    ->Args({0, 2})
    ->Args({1, 2})
    ->Iterations(5)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sha256Shards)
    ->ArgNames({"threads"})
    ->Arg(1)
    ->Arg(2)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
