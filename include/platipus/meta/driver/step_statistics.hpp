// What a meta-step reports: the mean query loss, the mean support loss before
// adaptation, and the objective's own statistics by name (PLATIPUS: "kl",
// the mean KL term). The algorithms leave them on the backend as one
// tensor, so that a meta-step never waits for the device; reading them
// (MetaStepResult::read) is what synchronises.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "platipus/autodiff.hpp"

namespace platipus {

// One of an objective's own statistics of a meta-step: its name (from the
// objective's statistic_names) and its mean over the meta-batch's tasks.
struct Statistic {
  std::string_view name;
  double value = 0;
};

struct MetaStepResult {
  double query_loss = 0;                // mean post-adaptation loss on the query sets
  double support_loss = 0;              // mean pre-adaptation loss on the support sets
  std::vector<Statistic> statistics{};  // the objective's own, in its statistic_names' order

  // The statistic `name` (PLATIPUS: statistic("kl")); throws naming the
  // statistics there are when the objective reports no such one.
  double statistic(std::string_view name) const {
    for (const auto& s : statistics)
      if (s.name == name) return s.value;
    std::string there;
    for (const auto& s : statistics)
      there += fmt::format("{}'{}'", there.empty() ? "" : ", ", s.name);
    fail("MetaStepResult::statistic", "no statistic '{}' (this objective reports {})", name,
         there.empty() ? "none" : there);
  }

  // From a step_statistics tensor: [query, support, the objective's `names`].
  template <class T, class B>
  static MetaStepResult read(const Tensor<T, B>& values, std::span<const std::string_view> names) {
    check(values.shape() == Shape{2 + static_cast<std::int64_t>(names.size())},
          "MetaStepResult::read",
          "statistics must be [{}] (query loss, support loss and {} of the objective's), got {}",
          2 + names.size(), names.size(), values.shape());
    const auto v = values.to_vector();
    MetaStepResult result{.query_loss = static_cast<double>(v[0]),
                          .support_loss = static_cast<double>(v[1])};
    for (std::size_t i = 0; i < names.size(); ++i)
      result.statistics.push_back({.name = names[i], .value = static_cast<double>(v[2 + i])});
    return result;
  }
};

// [query, support, statistics...] / tasks from single-value sums over a chunk
// of tasks (an undefined one counts 0), so that the chunks of a meta-batch
// add up to the batch means as their gradients do. Each sum is scaled into
// its element of the result, all of them by one foreach call (the bits of
// a copy and a scale; a step's graph has no copy node for them).
template <class T, class B>
Tensor<T, B> step_statistics(const Var<T, B>& query, const Var<T, B>& support,
                             std::span<const Var<T, B>> statistics, std::int64_t tasks) {
  std::vector<const Var<T, B>*> parts{&query, &support};
  for (const auto& s : statistics) parts.push_back(&s);
  const bool all_defined = std::ranges::all_of(parts, [](const auto* p) { return p->defined(); });
  const Shape shape{static_cast<std::int64_t>(parts.size())};
  Tensor<T, B> means = all_defined ? Tensor<T, B>(shape) : Tensor<T, B>::zeros(shape);
  std::vector<const Tensor<T, B>*> sums;
  std::vector<Tensor<T, B>> slots;  // views of their elements of `means`
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i]->defined()) continue;
    check(parts[i]->numel() == 1, "step_statistics", "statistic {} is {}, not a single value", i,
          parts[i]->shape());
    sums.push_back(&parts[i]->value());
    slots.push_back(Tensor<T, B>::view(means.data() + i, parts[i]->shape()));
  }
  std::vector<Tensor<T, B>*> into;
  for (auto& slot : slots) into.push_back(&slot);
  raw::foreach_map_into(UnaryOp::scale, sums, into, T(1) / static_cast<T>(tasks));
  return means;
}

}  // namespace platipus
