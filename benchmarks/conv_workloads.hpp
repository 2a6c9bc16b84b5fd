// The image workloads of issue 9's benchmarks, shared by the CPU and CUDA
// benchmark programs and matched by peers/meta_step.py's conv4 networks:
// second-order MAML, float, 5-way 1-shot with 15 queries per class (5
// support and 75 query images per task), 5 inner SGD steps, softmax
// cross-entropy, on MAML's conv4 as the examples train it (with batch norm),
// or without batch norm as a named variant. Random images and labels: only
// the arithmetic is timed.
#pragma once

#include "platipus/platipus.hpp"

namespace conv_workloads {

using namespace platipus;

struct Workload {
  std::int64_t channels, size, filters, tasks;
};
constexpr Workload miniimagenet{.channels = 3, .size = 84, .filters = 32, .tasks = 4};
constexpr Workload omniglot{.channels = 1, .size = 28, .filters = 64, .tasks = 32};
constexpr std::int64_t ways = 5, shots = 1, queries = 15;

// As peers/meta_step.py's conv4 (--no-batch-norm for batch_norm = false).
inline nn::Sequential network(const Workload& w, bool batch_norm = true) {
  return nn::conv4({.channels = w.channels,
                    .size = w.size,
                    .filters = w.filters,
                    .outputs = ways,
                    .batch_norm = batch_norm});
}

inline MamlSettings settings(int threads) {
  return {.inner_loop = {.steps = 5, .learning_rate = 0.01},
          .driver = {.threads = threads, .task_chunks = one_chunk_per_thread}};
}

// Standard normal images, labels 0..ways-1 in turn.
template <class B>
TaskBatch<float, B> batch(const Workload& w, Generator& gen) {
  const auto images = [&](std::int64_t points) {
    return raw::normal<float>({w.tasks, points, w.channels, w.size, w.size}, gen).template to<B>();
  };
  const auto labels = [&](std::int64_t points) {
    std::vector<float> y;
    for (std::int64_t t = 0; t < w.tasks; ++t)
      for (std::int64_t p = 0; p < points; ++p) y.push_back(static_cast<float>(p % ways));
    return Tensor<float>::from_host({w.tasks, points, 1}, y).template to<B>();
  };
  return {images(ways * shots), labels(ways * shots), images(ways * queries),
          labels(ways * queries)};
}

}  // namespace conv_workloads
