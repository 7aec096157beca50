#pragma once
// A small fork-join pool for kernels: the calling thread plus n_threads - 1 workers that sleep between
// jobs. One job at a time: parallel_for must not be called concurrently or from inside a job
// (nested calls run inline on the calling thread instead, so they are safe but serial).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace day0 {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index) once on each of the size() threads and returns when all are done.
  void run(const std::function<void(int thread_index)>& fn);

  // Splits [0, n) into contiguous chunks of at least `grain` items and calls fn(begin, end) on them,
  // spread over the threads. Returns when every chunk is done.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  bool in_job_ = false;
};

// Threads a pool should use when not told: env DAY0_THREADS if set and valid, else the hardware count.
int default_thread_count();

}  // namespace day0
