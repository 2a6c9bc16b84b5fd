// Data parallelism over the tasks of a meta-batch: the batch is cut into
// contiguous chunks of tasks (chunks_of), the pool's threads take chunks, each
// chunk records and differentiates its own tape, and the chunks'
// meta-gradients are summed in chunk order.
// Chunks share nothing but read-only inputs, so no op needs a lock; buffers a
// worker allocates are freed on that worker.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "platipus/core/thread_pool.hpp"
#include "platipus/meta/driver/concepts.hpp"

namespace platipus {

struct TaskRange {
  std::int64_t start = 0, count = 0;
};

// The pool a learner on backend B spreads a meta-batch's tasks over:
// `threads` threads when positive, else B::default_threads().
template <class B>
std::unique_ptr<ThreadPool> task_pool(int threads) {
  return std::make_unique<ThreadPool>(threads > 0 ? threads : B::default_threads());
}

// `parts` near-equal contiguous ranges covering [0, tasks), none empty.
inline std::vector<TaskRange> split_tasks(std::int64_t tasks, std::int64_t parts) {
  const std::int64_t n = std::max<std::int64_t>(1, std::min<std::int64_t>(parts, tasks));
  std::vector<TaskRange> ranges;
  for (std::int64_t i = 0, start = 0; i < n; ++i) {
    const std::int64_t count = tasks / n + (i < tasks % n ? 1 : 0);
    ranges.push_back({start, count});
    start += count;
  }
  return ranges;
}

// The tasks [start, start + count) of a meta-batch of `tasks` that `rank`
// of `size` computes: near-equal contiguous slices in rank order, so the
// ranks' slices are the meta-batch and each task keeps its global index
// (its noise, task_noise.hpp, is keyed by it).
inline TaskRange rank_tasks(std::int64_t tasks, int rank, int size) {
  check(size >= 1 && rank >= 0 && rank < size, "rank_tasks", "rank {} of {} ranks", rank, size);
  check(tasks >= size, "rank_tasks",
        "a meta-batch of {} task(s) cannot be cut over {} ranks: each rank needs one at least",
        tasks, size);
  return split_tasks(tasks, size)[static_cast<std::size_t>(rank)];
}

// `task_chunks` when a learner should cut its meta-batch into one chunk per
// pool thread: the fastest cut on a many-core CPU for some objectives, but the
// float sums then depend on the thread count.
inline constexpr int one_chunk_per_thread = -1;

// The chunks a meta-batch of `tasks` is cut into: `task_chunks` of them when
// positive, one per pool thread for `one_chunk_per_thread`, else (0) the
// backend's default, B::default_task_chunks (CPU: one per task). Any cut but
// one per thread is a function of the batch alone: each chunk's sums run
// inside it, then the chunks' sums are added in chunk order, so the same seed
// gives the same bits on any number of threads.
template <class B>
std::vector<TaskRange> chunks_of(std::int64_t tasks, int task_chunks, const ThreadPool& pool) {
  if (task_chunks == one_chunk_per_thread) return split_tasks(tasks, pool.size());
  return split_tasks(tasks, task_chunks > 0 ? task_chunks : B::default_task_chunks(tasks));
}

// Why meta-steps cannot be recorded as one stream's work (a CUDA graph);
// empty when they can.
template <class B>
std::string recording_obstacle(const ThreadPool& pool, int task_chunks) {
  if (task_chunks > 1)
    return fmt::format("task_chunks = {}: a recording holds one chunk; use task_chunks = 1",
                       task_chunks);
  if (task_chunks == 0 && B::default_task_chunks(2) > 1)
    return fmt::format(
        "task_chunks = 0: {} cuts a meta-batch into one chunk per task, a recording holds one; "
        "use task_chunks = 1",
        B::name);
  if (task_chunks == one_chunk_per_thread && pool.size() > 1)
    return fmt::format("threads = {}: a recording holds one thread's work; use threads = 1",
                       pool.size());
  return {};
}

template <class T, class B>
TaskBatch<T, B> slice_tasks(const TaskBatch<T, B>& batch, TaskRange r) {
  if (r.start == 0 && r.count == batch.tasks())
    return {Tensor<T, B>::view(batch.support_x, batch.support_x.shape()),
            Tensor<T, B>::view(batch.support_y, batch.support_y.shape()),
            Tensor<T, B>::view(batch.query_x, batch.query_x.shape()),
            Tensor<T, B>::view(batch.query_y, batch.query_y.shape())};
  return {raw::slice(batch.support_x, 0, r.start, r.count),
          raw::slice(batch.support_y, 0, r.start, r.count),
          raw::slice(batch.query_x, 0, r.start, r.count),
          raw::slice(batch.query_y, 0, r.start, r.count)};
}

// x [tasks, ...] -> [tasks * n, ...], each task repeated n times in a row:
// n draws per task run as a batch of tasks * n.
template <class T, class B>
Tensor<T, B> repeat_tasks(const Tensor<T, B>& x, std::int64_t n) {
  Shape with_axis{x.dim(0), 1}, expanded{x.dim(0), n}, merged{x.dim(0) * n};
  for (int a = 1; a < x.rank(); ++a) {
    with_axis.push_back(x.dim(a));
    expanded.push_back(x.dim(a));
    merged.push_back(x.dim(a));
  }
  return raw::expand(Tensor<T, B>::view(x, with_axis), expanded).reshaped(merged);
}

// The gradients and step statistics of each chunk, summed by the caller.
// One chunk runs on the calling thread, on its stream, which must not wait
// (a CUDA graph may be recording it): its results are taken from its tape
// (Tape::take), with no copy. Several are copied into buffers that the
// calling thread allocated (on CUDA, from its own caches) and that outlive
// the workers' tapes.
template <class T, class B>
class ChunkResults {
 public:
  ChunkResults(std::size_t chunks, std::span<const Shape> gradient_shapes, std::size_t statistics)
      : shapes_(gradient_shapes.begin(), gradient_shapes.end()), buffers_(chunks) {
    shapes_.push_back(Shape{static_cast<std::int64_t>(statistics)});  // step_statistics
    if (chunks == 1) return;
    for (auto& chunk : buffers_)
      for (const auto& s : shapes_) chunk.emplace_back(s);
  }

  void store(std::size_t chunk, Tape<T, B>& tape, std::span<const Var<T, B>> grads,
             Tensor<T, B> statistics) {
    check(grads.size() + 1 == shapes_.size(), "ChunkResults", "{} gradients, expected {}",
          grads.size(), shapes_.size() - 1);
    for (std::size_t i = 0; i < grads.size(); ++i) check_shape(i, grads[i].shape(), "gradient");
    check_shape(grads.size(), statistics.shape(), "statistics");
    auto& dst = buffers_[chunk];
    if (buffers_.size() == 1) {
      for (std::size_t i = 0; i < grads.size(); ++i) {
        // Two parts may get the same gradient (add's rule gives both the same one).
        const auto first = static_cast<std::size_t>(
            std::find(grads.begin(), grads.begin() + i, grads[i]) - grads.begin());
        dst.push_back(first < i ? dst[first].clone() : tape.take(grads[i]));
      }
      dst.push_back(std::move(statistics));
      return;
    }
    for (std::size_t i = 0; i < grads.size(); ++i)
      B::copy(dst[i].data(), grads[i].value().data(), dst[i].bytes());
    B::copy(dst.back().data(), statistics.data(), dst.back().bytes());
    // A worker's stream must finish before the caller reads.
    B::synchronize();
  }

  struct Total {
    std::vector<Tensor<T, B>> gradients;
    Tensor<T, B> statistics;
  };
  Total sum() {
    std::vector<Tensor<T, B>> total = std::move(buffers_[0]);
    for (std::size_t c = 1; c < buffers_.size(); ++c)
      for (std::size_t i = 0; i < total.size(); ++i)
        total[i] = raw::map(BinaryOp::add, total[i], buffers_[c][i], "ChunkResults::sum");
    Tensor<T, B> statistics = std::move(total.back());
    total.pop_back();
    return {std::move(total), std::move(statistics)};
  }

 private:
  void check_shape(std::size_t i, const Shape& shape, std::string_view what) const {
    check(shape == shapes_[i], "ChunkResults", "{} is {}, expected {}", what, shape, shapes_[i]);
  }

  std::vector<Shape> shapes_;
  std::vector<std::vector<Tensor<T, B>>> buffers_;
};

}  // namespace platipus
