// A fixed set of worker threads for data-parallel loops. Idle workers sleep on a condition variable
// (no spinning), so a busy shared machine does not lose time to threads waiting for a descheduled peer.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace soartune::engine {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);   // threads <= 1: everything runs on the caller
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Splits [0, n) into size() contiguous parts and runs fn(begin, end, part) on each, the caller taking
  // part 0; returns when all are done. Not reentrant.
  void parallel_for(int n, const std::function<void(int begin, int end, int part)>& fn);

 private:
  void work(int part);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int, int, int)>* fn_ = nullptr;
  int n_ = 0;
  long generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace soartune::engine
