#include "day0/backends/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DAY0_CPU_RELAX() _mm_pause()
#else
#define DAY0_CPU_RELAX() ((void)0)
#endif

namespace day0 {

int default_thread_count() {
  if (const char* env = std::getenv("DAY0_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0 && n <= 1024) return static_cast<int>(n);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

int default_spin_micros() {
  if (const char* env = std::getenv("DAY0_SPIN_US")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 0 && n <= 100000) return static_cast<int>(n);
  }
  return kDefaultSpinMicros;
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)), spin_ns_(int64_t{default_spin_micros()} * 1000) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);  // ends the spin of every worker
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

template <typename Pred>
bool ThreadPool::spin_until(Pred pred) const {
  if (spin_ns_ <= 0) return pred();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns_);
  for (;;) {
    // A poll is a load that hits this core's cache until the other thread writes the line; the clock
    // is read once per 64 of them (about a microsecond).
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      DAY0_CPU_RELAX();
    }
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    // With more runnable threads than cores (two pools side by side, a busy machine), the thread we
    // wait for may be waiting for this core: give it up (a no-op when nothing else is runnable).
    sched_yield();
  }
}

void ThreadPool::run_guarded(const FunctionRef<void(int)>& fn, int index) {
  try {
    fn(index);
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto changed = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(changed)) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, changed);
    }
    const FunctionRef<void(int)>* job = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      job = job_;
    }
    run_guarded(*job, index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Taken so that a caller between its check and its wait cannot miss the notification.
      std::lock_guard lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run(FunctionRef<void(int)> fn) {
  // Nested or single-threaded: run every index inline so the result is the same (exceptions simply
  // propagate).
  if (n_threads_ == 1 || in_job_.load(std::memory_order_relaxed)) {
    for (int i = 0; i < n_threads_; ++i) fn(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    error_ = nullptr;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    in_job_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();  // no system call when every worker is still spinning
  run_guarded(fn, 0);
  const auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  std::exception_ptr error;
  {
    // Every worker has finished with `fn` before it goes out of scope, whatever was thrown.
    spin_until(finished);
    std::unique_lock lock(mutex_);
    done_.wait(lock, finished);
    job_ = nullptr;
    in_job_.store(false, std::memory_order_relaxed);
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int64_t chunks = std::min<int64_t>(max_chunks, n_threads_);
  if (chunks <= 1 || in_job_.load(std::memory_order_relaxed)) {
    fn(0, n);
    return;
  }
  run([&](int t) {
    if (t >= chunks) return;
    const int64_t begin = n * t / chunks;
    const int64_t end = n * (t + 1) / chunks;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace day0
