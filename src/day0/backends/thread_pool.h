#pragma once
// A small fork-join pool for kernels: the calling thread plus n_threads - 1 workers. One job at a time:
// parallel_for must not be called concurrently or from inside a job (nested calls run inline on the
// calling thread instead, so they are safe but serial).
//
// Waiting: between jobs a worker first spins (pause instructions) for a short budget, then sleeps on
// a condition variable; the caller waits for the workers the same way. A decode step hands out a few
// hundred jobs of tens of microseconds each, and waking a sleeping thread costs about as much as one
// such job (more on a virtual machine), so the spin keeps the handoff near the cost of a cache-line
// transfer. The budget (DAY0_SPIN_US, microseconds, default kDefaultSpinMicros, 0 = always sleep)
// bounds what an idle pool burns when no job follows.
//
// Errors: an exception thrown by the job on any thread (an InternalError from a check, bad_alloc, ...)
// becomes the exception of that run()/parallel_for() call: every thread finishes its part first, then
// the first exception caught is rethrown on the caller. The pool stays usable; nothing terminates.
//
// Allocation: jobs are passed as FunctionRef (a pointer to the caller's callable, no copy), so a call
// allocates nothing.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>  // not used here; kept for the files that reach <algorithm>, std::function through it
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace day0 {

// A non-owning reference to a callable: valid while the referenced callable lives (the duration of
// the call it is passed to).
template <typename Signature>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
      FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): binds lambdas at call sites
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index) once on each of the size() threads and returns when all are done.
  // Rethrows the first exception any of them threw (after all are done).
  void run(FunctionRef<void(int thread_index)> fn);

  // Splits [0, n) into contiguous chunks of at least `grain` items and calls fn(begin, end) on them,
  // spread over the threads. Returns when every chunk is done; exceptions as run().
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t begin, int64_t end)> fn);

 private:
  void worker_loop(int index);
  // Runs the job of thread `index`, keeping the first exception of the current run.
  void run_guarded(const FunctionRef<void(int)>& fn, int index);

  // Spins until pred() holds or the budget is spent; returns pred().
  template <typename Pred>
  bool spin_until(Pred pred) const;

  int n_threads_;
  int64_t spin_ns_;  // the spin budget in nanoseconds
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const FunctionRef<void(int)>* job_ = nullptr;  // published by the release store to generation_
  std::exception_ptr error_;                     // first exception of the current run (guarded by mutex_)
  std::atomic<uint64_t> generation_ = 0;         // bumped (under mutex_) once per run
  std::atomic<int> pending_ = 0;                 // workers still running the current job
  bool stop_ = false;                            // guarded by mutex_
  std::atomic<bool> in_job_ = false;             // read by jobs that call the pool again (nested: run inline)
};

inline constexpr int kDefaultSpinMicros = 100;

// Threads a pool should use when not told: env DAY0_THREADS if set and valid, else the hardware count.
int default_thread_count();
// The spin budget of new pools: env DAY0_SPIN_US (0 to 100000) if set and valid, else kDefaultSpinMicros.
int default_spin_micros();

}  // namespace day0
