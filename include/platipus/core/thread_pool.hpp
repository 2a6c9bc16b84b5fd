// A small fixed pool of worker threads for coarse-grained parallel work
// (chunks of a meta-batch's tasks). The calling thread takes part, so a pool
// of size 1 runs everything inline. Workers persist, which keeps their
// thread-local buffer caches warm between calls. A thread that waits (a worker
// for the next job, the caller for the workers) spins for up to `spin` before
// it sleeps on a condition variable, as OpenMP runtimes do: a meta-step of an
// MLP is a fraction of a millisecond, and a sleeping thread takes tens of
// microseconds to wake.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace platipus {

class ThreadPool {
 public:
  // `threads` in all, the caller included; 0 means one per hardware thread.
  explicit ThreadPool(int threads = 0) {
    const int n =
        threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { work(); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls f(i) for every i in [0, count), spread over the pool; returns when
  // all calls are done and rethrows the first exception any of them threw.
  void run(int count, const std::function<void(int)>& f) {
    if (count <= 0) return;
    if (workers_.empty() || count == 1) {
      for (int i = 0; i < count; ++i) f(i);
      return;
    }
    Job job(&f, count);
    {
      std::lock_guard lock(mutex_);
      job_ = &job;
      published_.store(++generation_);
    }
    wake_.notify_all();
    drain(job);
    spin_until([&] { return job.finished.load() >= count && job.active.load() == 0; });
    std::unique_lock lock(mutex_);
    // Workers join a job only under the lock and leave it under the lock, so
    // once none is active and the job is withdrawn, none can touch it again.
    done_.wait(lock, [&] { return job.active == 0 && job.next.load() >= count; });
    job_ = nullptr;
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  struct Job {
    Job(const std::function<void(int)>* work, int n) : f(work), count(n) {}
    const std::function<void(int)>* f;
    int count;
    std::atomic<int> next{0}, finished{0};
    std::atomic<int> active{0};  // workers inside drain(), changed under mutex_
    std::exception_ptr error;
  };

  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      Job* job = nullptr;
      spin_until([&] { return published_.load() != seen; });
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || (job_ != nullptr && generation_ != seen); });
        if (stopping_) return;
        seen = generation_;
        job = job_;
        ++job->active;
      }
      drain(*job);
      {
        std::lock_guard lock(mutex_);
        --job->active;
      }
      done_.notify_all();
    }
  }

  // Takes indices until none are left.
  void drain(Job& job) {
    for (;;) {
      const int i = job.next.fetch_add(1);
      if (i >= job.count) return;
      try {
        (*job.f)(i);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!job.error) job.error = std::current_exception();
      }
      job.finished.fetch_add(1);
    }
  }

  // Returns when ready() holds or `spin` has passed, whichever is first; the
  // caller then waits under the lock for what it spun for.
  template <class Ready>
  static void spin_until(Ready ready) {
    constexpr auto spin = std::chrono::microseconds(200);
    const auto until = std::chrono::steady_clock::now() + spin;
    for (int i = 0; !ready(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (i % 64 == 63 && std::chrono::steady_clock::now() > until) return;
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
  std::atomic<std::uint64_t> published_{0};  // generation_, read while spinning
  bool stopping_ = false;
};

}  // namespace platipus
