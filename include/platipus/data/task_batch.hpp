// What task samplers hand the learners: a batch of tasks (TaskBatch), the
// TaskSampler concept, and ambiguous tasks (AmbiguousTasks, Table 1). Below
// the algorithms, so that the data layer needs nothing of meta/.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "platipus/core/philox.hpp"
#include "platipus/tensor/tensor.hpp"

namespace platipus {

// A batch of tasks, each with a support set D_train = (support_x, support_y)
// and a query set D_test = (query_x, query_y), with a leading task axis:
// x is [tasks, points, features] or, for images, [tasks, points, C, H, W];
// y is [tasks, points, outputs].
template <class T, class B = cpu>
struct TaskBatch {
  Tensor<T, B> support_x, support_y, query_x, query_y;

  std::int64_t tasks() const { return support_x.dim(0); }

  // Throws naming the mismatch when the four tensors do not form a batch.
  void validate(std::string_view who) const {
    check(!support_x.empty() && (support_x.rank() == 3 || support_x.rank() == 5) &&
              support_x.dim(1) > 0,
          who,
          "the support set is empty or not [tasks, points, features] or [tasks, points, C, H, "
          "W] (got {})",
          support_x.shape());
    check(support_y.rank() == 3 && support_y.dim(0) == support_x.dim(0) &&
              support_y.dim(1) == support_x.dim(1),
          who, "support x {} and y {} do not match", support_x.shape(), support_y.shape());
    check(query_x.rank() == support_x.rank() && query_x.dim(0) == support_x.dim(0) &&
              query_x.shape().drop_front(2) == support_x.shape().drop_front(2),
          who, "query x {} does not match support x {}", query_x.shape(), support_x.shape());
    check(
        query_y.rank() == 3 && query_y.dim(0) == query_x.dim(0) && query_y.dim(1) == query_x.dim(1),
        who, "query x {} and y {} do not match", query_x.shape(), query_y.shape());
  }
};

// A task sampler draws meta-batches:
//   sample(tasks, gen) -> a TaskBatch of that many tasks, reproducible from gen.
template <class S, class T, class B>
concept TaskSampler = requires(S& sampler, std::int64_t tasks, Generator& gen) {
  { sampler.sample(tasks, gen) } -> std::same_as<TaskBatch<T, B>>;
};

// Ambiguous classification tasks: support x [tasks, points, ...] and labels
// [tasks, points, 1]; for each candidate c, query x [tasks, points_c, ...]
// and labels [tasks, points_c, 1]. `names[t]` says what task t is (for
// figures and reports), `candidate_names[t][c]` what its candidate c is.
template <class T, class B = cpu>
struct AmbiguousTasks {
  Tensor<T, B> support_x, support_y;
  std::vector<Tensor<T, B>> candidate_x, candidate_y;
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> candidate_names;

  std::int64_t tasks() const { return support_x.dim(0); }
  std::int64_t candidates() const { return static_cast<std::int64_t>(candidate_x.size()); }

  // Throws naming the mismatch when the tensors do not form such tasks.
  void validate(std::string_view who) const {
    check(!candidate_x.empty() && candidate_y.size() == candidate_x.size(), who,
          "{} candidate inputs and {} candidate label sets", candidate_x.size(),
          candidate_y.size());
    const auto view = [](const Tensor<T, B>& t) {
      return Tensor<T, B>::view(t, t.shape());
    };
    for (std::size_t c = 0; c < candidate_x.size(); ++c)
      TaskBatch<T, B>{view(support_x), view(support_y), view(candidate_x[c]), view(candidate_y[c])}
          .validate(who);
  }
};

}  // namespace platipus
