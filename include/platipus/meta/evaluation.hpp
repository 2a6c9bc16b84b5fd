// Held-out evaluation as library API: each held-out task's loss after
// adaptation, and a mean with its 95% interval over tasks (the form of every
// score in the paper's tables and in docs/results.md).
//
//   const auto losses = held_out_losses(maml, sampler, 600, gen);
//   const Estimate e = estimate(losses);   // e.text(): "1.023 +- 0.081"
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "platipus/meta/concepts.hpp"

namespace platipus {

// A mean and the half-width of its normal-approximation 95% interval.
struct Estimate {
  double mean = 0, interval = 0;
  std::string text() const { return fmt::format("{:.3f} +- {:.3f}", mean, interval); }
};

// The mean of `values` with 1.96 standard errors (the sample standard
// deviation over sqrt(n)); an empty span is refused.
inline Estimate estimate(std::span<const double> values) {
  check(!values.empty(), "estimate", "no values to estimate from");
  const double n = static_cast<double>(values.size());
  double mean = 0, variance = 0;
  for (double v : values) mean += v / n;
  for (double v : values) variance += (v - mean) * (v - mean) / std::max(1.0, n - 1);
  return {mean, 1.96 * std::sqrt(variance / n)};
}

// Each of `tasks` fresh tasks' mean query loss (the learner's loss) after
// adapting to its support set: one model per task, from learner.sample
// (MAML's adapted weights; one PLATIPUS sample). Tasks are drawn `batch` at
// a time from `sampler` with gen, so memory stays small.
template <class Learner, TaskSamplerFor<Learner> Sampler>
std::vector<double> held_out_losses(const Learner& learner, const Sampler& sampler,
                                    std::int64_t tasks, Generator& gen, std::int64_t batch = 100) {
  check(tasks > 0 && batch > 0, "held_out_losses",
        "tasks and batch must be positive, got {} and {}", tasks, batch);
  std::vector<double> losses;
  for (std::int64_t done = 0; done < tasks; done += batch) {
    const auto b = sampler.sample(std::min(batch, tasks - done), gen);
    auto params = learner.sample(b.support_x, b.support_y, 1, gen);
    const std::int64_t size = params.dim(-1);
    const auto prediction =
        learner.predict(std::move(params).reshaped(Shape{b.tasks(), size}), b.query_x);
    using T = typename std::remove_cvref_t<decltype(prediction)>::value_type;
    using B = typename std::remove_cvref_t<decltype(prediction)>::backend;
    Tape<T, B> tape;
    NoGradGuard no_grad;
    const auto per_task =
        learner.loss()(tape.constant(prediction), tape.constant(b.query_y), 1).value().to_vector();
    losses.insert(losses.end(), per_task.begin(), per_task.end());
  }
  return losses;
}

}  // namespace platipus
