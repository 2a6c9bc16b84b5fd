// What a meta-step reports: the mean query loss, the mean support loss before
// adaptation and the mean KL term. The algorithms leave them on the backend
// as a [3] tensor, so that a meta-step never waits for the device; reading
// them (MetaStepResult::read) is what synchronises.
#pragma once

#include <array>

#include "platipus/autodiff.hpp"

namespace platipus {

struct MetaStepResult {
  double query_loss = 0;    // mean post-adaptation loss on the query sets
  double support_loss = 0;  // mean pre-adaptation loss on the support sets
  double kl = 0;            // mean KL term (PLATIPUS only)

  template <class T, class B>
  static MetaStepResult read(const Tensor<T, B>& statistics) {
    check(statistics.shape() == Shape{3}, "MetaStepResult::read",
          "statistics must be [3] (query loss, support loss, KL), got {}", statistics.shape());
    const auto v = statistics.to_vector();
    return {static_cast<double>(v[0]), static_cast<double>(v[1]), static_cast<double>(v[2])};
  }
};

// [query, support, kl] / tasks from single-value sums over a chunk of tasks
// (an undefined part counts 0), so that the chunks of a meta-batch add up to
// the batch means as their gradients do.
template <class T, class B>
Tensor<T, B> step_statistics(const Var<T, B>& query, const Var<T, B>& support, const Var<T, B>& kl,
                             std::int64_t tasks) {
  Tensor<T, B> sums = Tensor<T, B>::zeros(Shape{3});
  const std::array<const Var<T, B>*, 3> parts{&query, &support, &kl};
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i]->defined()) continue;
    check(parts[i]->numel() == 1, "step_statistics", "statistic {} is {}, not a single value", i,
          parts[i]->shape());
    B::copy(sums.data() + i, parts[i]->value().data(), sizeof(T));
  }
  return raw::map(UnaryOp::scale, sums, T(1) / static_cast<T>(tasks));
}

}  // namespace platipus
