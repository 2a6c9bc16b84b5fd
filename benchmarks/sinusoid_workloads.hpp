// The MLP workloads of benchmarks/README.md ("Workloads"), shared by the CPU
// and CUDA benchmark programs and kernel_counts, and matched by
// peers/meta_step.py: 25 sinusoid tasks of 10 support and 10 query points,
// on MAML's 1-40-40-1 ReLU network or the paper's (a 20-dim bias
// transformation and 3 x 100 ReLU).
#pragma once

#include "platipus/platipus.hpp"

namespace sinusoid_workloads {

using namespace platipus;

constexpr std::int64_t tasks = 25, points = 10;

inline nn::Sequential small_network() {
  return nn::mlp({.inputs = 1, .hidden = {40, 40}, .outputs = 1});
}
inline nn::Sequential paper_network() {
  return nn::mlp({.inputs = 1, .hidden = {100, 100, 100}, .outputs = 1, .bias_transform = 20});
}

// One meta-batch of the workload on backend B.
template <class B>
TaskBatch<float, B> batch(Generator& gen) {
  return data::SinusoidLineSampler<float, B>({.support = points, .query = points})
      .sample(tasks, gen);
}

}  // namespace sinusoid_workloads
