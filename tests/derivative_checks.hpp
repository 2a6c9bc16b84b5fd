// The test files' check of a function's derivatives: first order and second
// (through a vector-Jacobian product) against central finite differences, in
// double (autodiff/gradcheck.hpp), each failure with gradcheck's message;
// a meta-learner's gradient of each part against central differences, and
// the meta-loss it differentiates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "catch.hpp"
#include "platipus/platipus.hpp"

namespace platipus::testing {

inline void check_derivatives(const DoubleFunction<>& f,
                              const std::vector<Tensor<double>>& inputs) {
  const auto first = gradcheck(f, inputs);
  INFO("first order: " << first.message);
  CHECK(first);
  const auto second = gradgradcheck(f, inputs);
  INFO("second order: " << second.message);
  CHECK(second);
}

// Each part's gradient against central differences (step 1e-6) of
// objective() at `points` coordinates per part picked by `seed`, within
// `relative` (and an absolute 1e-8). Leaves every part as it was.
template <class Learner, class Objective>
void check_part_gradients(Learner& learner, const std::vector<Tensor<double>>& gradients,
                          Objective&& objective, double relative, std::uint64_t seed,
                          int points = 4) {
  Generator pick(seed);
  for (int p = 0; p < Learner::part_count; ++p) {
    const auto part = static_cast<typename Learner::Part>(p);
    for (int k = 0; k < points; ++k) {
      const auto i = static_cast<std::size_t>(pick.index(learner.part(part).numel()));
      auto values = learner.part(part).to_vector();
      const double h = 1e-6, original = values[i];
      auto at = [&](double value) {
        values[i] = value;
        learner.set_part(part, Tensor<double>::from_host(learner.part(part).shape(), values));
        return objective();
      };
      const double numeric = (at(original + h) - at(original - h)) / (2 * h);
      at(original);
      const double analytic = gradients[static_cast<std::size_t>(p)].to_vector()[i];
      INFO(Learner::part_names[static_cast<std::size_t>(p)] << "[" << i << "]: analytic "
                                                            << analytic << ", numeric " << numeric);
      CHECK(analytic == Approx(numeric).epsilon(relative).margin(1e-8));
    }
  }
}

// The meta-loss the driver differentiates at the learner's current parts:
// the objective's terms over the whole batch as one chunk, the mean over its
// tasks, under `schedule`, with the noise drawn from `noise` as a meta-step
// draws it (the same draw at every call).
template <class Learner, class T>
double meta_loss(const Learner& learner, const TaskBatch<T>& batch, const Generator& noise,
                 const typename Learner::Schedule& schedule) {
  Generator gen = noise;
  TaskNoise task_noise(gen);
  Tape<T> tape;
  std::vector<Var<T>> parts;
  for (int p = 0; p < Learner::part_count; ++p)
    parts.push_back(tape.variable(learner.part(static_cast<typename Learner::Part>(p))));
  const auto terms =
      learner.objective().chunk_terms(std::span<const Var<T>>(parts), batch, task_noise, schedule);
  return terms.objective.value().to_vector()[0] / static_cast<double>(batch.tasks());
}

}  // namespace platipus::testing
