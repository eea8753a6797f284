// A fixed pool of worker threads for data-parallel loops. The calling thread takes part, so a
// pool of N threads starts N-1 workers. Workers spin briefly before sleeping so back-to-back
// loops of a forward pass (hundreds per token) do not pay a futex wake each.
// Thread-safety: Run() must not be called concurrently from several threads on one pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvmem {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index) once on each of the size() threads and waits for all.
  void Run(const std::function<void(int)>& fn);

  // Splits [0, n) into chunks of `grain` and hands them out dynamically; fn(begin, end).
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvmem
