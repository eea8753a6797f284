#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvmem {
namespace {
inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}
// Spin this many pauses before sleeping (workers) or yielding (the caller waiting for workers):
// long enough to bridge the gap between two loops of one forward pass, short enough that an
// oversubscribed machine (another process on our cores) gets the CPU back quickly.
constexpr int kSpinIterations = 1 << 12;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && i < kSpinIterations; ++i) {
      CpuRelax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::Run(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_.store(n_threads_ - 1, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  fn(0);
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    // A descheduled worker cannot finish while we spin on its core: yield after a while.
    if (i < kSpinIterations) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  Run([&](int) {
    for (;;) {
      int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
      if (begin >= n) break;
      fn(begin, std::min(n, begin + grain));
    }
  });
}

}  // namespace kvmem
