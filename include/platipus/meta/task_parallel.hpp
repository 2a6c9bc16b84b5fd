// Data parallelism over the tasks of a meta-batch: the batch is cut into one
// contiguous chunk of tasks per pool thread, each chunk records and
// differentiates its own tape, and the chunks' meta-gradients are summed.
// Chunks share nothing but read-only inputs, so no op needs a lock; buffers a
// worker allocates are freed on that worker.
#pragma once

#include <algorithm>
#include <vector>

#include "platipus/core/thread_pool.hpp"
#include "platipus/meta/concepts.hpp"

namespace platipus {

struct TaskRange {
  std::int64_t start = 0, count = 0;
};

// `parts` near-equal contiguous ranges covering [0, tasks), none empty.
inline std::vector<TaskRange> split_tasks(std::int64_t tasks, int parts) {
  const std::int64_t n = std::max<std::int64_t>(1, std::min<std::int64_t>(parts, tasks));
  std::vector<TaskRange> ranges;
  for (std::int64_t i = 0, start = 0; i < n; ++i) {
    const std::int64_t count = tasks / n + (i < tasks % n ? 1 : 0);
    ranges.push_back({start, count});
    start += count;
  }
  return ranges;
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

// Per-chunk gradient buffers, allocated by the calling thread, filled by the
// workers, summed by the caller.
template <class T, class B>
class ChunkGradients {
 public:
  ChunkGradients(std::size_t chunks, std::span<const Shape> shapes) : buffers_(chunks) {
    for (auto& chunk : buffers_)
      for (const auto& s : shapes) chunk.emplace_back(s);
  }

  void store(std::size_t chunk, std::span<const Var<T, B>> grads) {
    for (std::size_t i = 0; i < grads.size(); ++i) {
      Tensor<T, B>& dst = buffers_[chunk][i];
      check(dst.shape() == grads[i].shape(), "ChunkGradients", "gradient {} is {}, expected {}", i,
            grads[i].shape(), dst.shape());
      B::copy(dst.data(), grads[i].value().data(), dst.bytes());
    }
    B::synchronize();  // the caller reads these after the worker returns
  }

  // The sum over chunks, one tensor per parameter.
  std::vector<Tensor<T, B>> sum() {
    std::vector<Tensor<T, B>> total = std::move(buffers_[0]);
    for (std::size_t c = 1; c < buffers_.size(); ++c)
      for (std::size_t i = 0; i < total.size(); ++i)
        total[i] = raw::map(BinaryOp::add, total[i], buffers_[c][i], "ChunkGradients::sum");
    return total;
  }

 private:
  std::vector<std::vector<Tensor<T, B>>> buffers_;
};

}  // namespace platipus
