#include "day0/backends/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

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

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
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
    const FunctionRef<void(int)>* job = nullptr;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    run_guarded(*job, index);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
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
    pending_ = n_threads_ - 1;
    ++generation_;
    in_job_.store(true, std::memory_order_relaxed);
  }
  wake_.notify_all();
  run_guarded(fn, 0);
  std::exception_ptr error;
  {
    // Every worker has finished with `fn` before it goes out of scope, whatever was thrown.
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
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
