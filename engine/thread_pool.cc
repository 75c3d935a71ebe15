#include "engine/thread_pool.h"

namespace soartune::engine {

ThreadPool::ThreadPool(int threads) {
  for (int p = 1; p < threads; ++p) workers_.emplace_back([this, p] { work(p); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int n, const std::function<void(int, int, int)>& fn) {
  const int parts = size();
  if (parts == 1 || n <= 1) {
    if (n > 0) fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    pending_ = parts - 1;
    ++generation_;
  }
  start_.notify_all();
  const int end0 = n / parts;
  if (end0 > 0) fn(0, end0, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::work(int part) {
  long seen = 0;
  for (;;) {
    const std::function<void(int, int, int)>* fn;
    int n;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      n = n_;
    }
    const int parts = size();
    const int b = static_cast<int>(static_cast<long>(n) * part / parts);
    const int e = static_cast<int>(static_cast<long>(n) * (part + 1) / parts);
    if (b < e) (*fn)(b, e, part);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace soartune::engine
