// What a meta-training run will take of the machine's memory, known before
// it starts: a run too big for the machine is then refused in seconds, with
// what it needs and what is available, instead of being killed by the
// kernel's OOM killer hours in (the default MiniImagenet run once asked for
// two PLATIPUS tasks of 11.7 GB each on a 24 GB machine and was killed 13
// minutes in; --inner-steps 100000 grew to 22 GB).
//
//   const auto available = memory::available_bytes();  // before the probe
//   const TaskMemory need{.task_bytes = measure_task_bytes(maml, sampler, gen).value_or(0),
//                         .tasks_at_once = tasks_at_once(25, 2),
//                         .available = available};
//   check(need.fits(), "memory", "...");
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "platipus/core/memory.hpp"
#include "platipus/meta/driver/task_parallel.hpp"

namespace platipus {

// A lower bound on the bytes of one meta-step of `meta_batch` tasks: each of
// the K inner steps of second-order MAML keeps every task's `parameters` on
// the tape, and the activations and the gradient's graph come on top.
inline double meta_step_bytes_bound(std::int64_t meta_batch, std::int64_t parameters,
                                    int inner_steps, std::size_t scalar_bytes) {
  check(meta_batch >= 0 && parameters >= 0 && inner_steps >= 0, "meta_step_bytes_bound",
        "meta_batch, parameters and inner_steps must be non-negative, got {}, {} and {}",
        meta_batch, parameters, inner_steps);
  return static_cast<double>(meta_batch) * static_cast<double>(parameters) *
         static_cast<double>(scalar_bytes) * (inner_steps + 1.0);
}

// The threads of one of the `local_ranks` processes on a machine of `cores`
// cores: `threads` when positive, else (0, "the backend's default") an equal
// share of the cores, at least one, rather than all of them for each.
inline int threads_per_rank(int threads, int cores, int local_ranks) {
  check(threads >= 0 && cores >= 1 && local_ranks >= 1, "threads_per_rank",
        "threads must be non-negative and cores and local ranks positive, got {}, {} and {}",
        threads, cores, local_ranks);
  return threads > 0 ? threads : std::max(1, cores / local_ranks);
}

// The tasks in flight at once on one machine: each of its `local_ranks`
// processes runs min(threads, its slice of the meta-batch) tasks at once
// (one chunk per task; rank 0's slice is the largest of `ranks`).
inline std::int64_t tasks_at_once(std::int64_t meta_batch, int threads, int ranks = 1,
                                  int local_ranks = 1) {
  check(threads >= 1 && local_ranks >= 1 && local_ranks <= ranks, "tasks_at_once",
        "threads must be positive and local ranks in [1, ranks = {}], got {} and {}", ranks,
        threads, local_ranks);
  const std::int64_t slice = rank_tasks(meta_batch, 0, ranks).count;
  return std::min<std::int64_t>(slice, threads) * local_ranks;
}

// The peak bytes that one task's meta-gradient adds to this process's
// resident memory, measured by running it on a task drawn from `sampler`
// with gen (a stream of its own keeps training's draws unchanged). Empty
// where it cannot be measured: on a device backend, or where Linux's peak
// counter cannot be reset.
template <class Learner, TaskSamplerFor<Learner> Sampler>
std::optional<std::uint64_t> measure_task_bytes(const Learner& learner, const Sampler& sampler,
                                                Generator& gen) {
  using TensorType = std::remove_cvref_t<decltype(*learner.state()[0].second)>;
  if (!std::is_same_v<typename TensorType::backend, cpu> || !memory::reset_peak_resident())
    return std::nullopt;
  const std::uint64_t before = memory::resident_bytes();
  learner.meta_gradient(sampler.sample(1, gen), gen);
  const std::uint64_t peak = memory::peak_resident_bytes();
  return peak - std::min(before, peak);
}

// A run's tasks in flight against the memory available.
struct TaskMemory {
  std::uint64_t task_bytes = 0;    // one task's peak (measure_task_bytes)
  std::int64_t tasks_at_once = 1;  // tasks_at_once(...)
  std::uint64_t available = 0;     // memory::available_bytes() before measuring; 0: unknown

  std::uint64_t bytes() const { return task_bytes * static_cast<std::uint64_t>(tasks_at_once); }
  bool fits() const { return available == 0 || bytes() <= available; }
  // The most tasks at once that fit (0: not even one).
  std::int64_t tasks_that_fit() const {
    if (task_bytes == 0 || available == 0) return tasks_at_once;
    return static_cast<std::int64_t>(available / task_bytes);
  }
};

}  // namespace platipus
