// What the meta-learners require of their parts, written once as concepts
// (in the manner of dlib's layers_abstract.h): a Model, a Loss and a
// TaskSampler, and the TaskBatch that flows between them.
#pragma once

#include <concepts>

#include "platipus/autodiff.hpp"
#include "platipus/nn/parameters.hpp"

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

// A model is a description plus a flat parameter vector:
//   layout()                 the named pieces of the vector (nn::ParamLayout);
//   forward(pieces, x)       the pieces in layout order, each [batch...,
//                            shape] (no batch axis, or a task axis), and
//                            x [..., N, in] -> predictions [..., N, out];
//                            written with differentiable ops;
//   initialize<T, B>(gen)    a fresh parameter vector [P].
// Between the model and the algorithms parameters travel as their pieces
// (see unflatten), so that an inner-loop step copies nothing.
template <class M, class T, class B>
concept Model = requires(const M& model, std::span<const Var<T, B>> pieces, const Var<T, B>& x,
                         Generator& gen) {
  { model.layout() } -> std::convertible_to<const nn::ParamLayout&>;
  { model.forward(pieces, x) } -> std::same_as<Var<T, B>>;
  { model.template initialize<T, B>(gen) } -> std::same_as<Tensor<T, B>>;
};

// A loss is a negative log-likelihood:
//   loss(prediction, target, batch_dims) -> the mean over every axis after
//   the first batch_dims, one value per leading index (per task);
//   check_targets(y, outputs, who)       optional: throws unless y holds
//                                        targets this loss can take for a
//                                        model of `outputs` outputs (0:
//                                        unknown); the learners call it once
//                                        per batch, so that the loss need not
//                                        read targets on every evaluation.
template <class L, class T, class B>
concept Loss = requires(const L& loss, const Var<T, B>& prediction, const Var<T, B>& target) {
  { loss(prediction, target, 1) } -> std::same_as<Var<T, B>>;
};

// The loss's check of targets y, where it has one.
template <class L, class M, class T, class B>
void check_targets(const L& loss, const M& model, const Tensor<T, B>& y, std::string_view who) {
  if constexpr (requires { loss.check_targets(y, std::int64_t{0}, who); }) {
    std::int64_t outputs = 0;
    if constexpr (requires { model.outputs(); }) outputs = model.outputs();
    loss.check_targets(y, outputs, who);
  }
}

// A batch's shapes, then its targets.
template <class L, class M, class T, class B>
void check_batch(const L& loss, const M& model, const TaskBatch<T, B>& batch,
                 std::string_view who) {
  batch.validate(who);
  check_targets(loss, model, batch.support_y, who);
  check_targets(loss, model, batch.query_y, who);
}

// A task sampler draws meta-batches:
//   sample(tasks, gen) -> a TaskBatch of that many tasks, reproducible from gen.
template <class S, class T, class B>
concept TaskSampler = requires(S& sampler, std::int64_t tasks, Generator& gen) {
  { sampler.sample(tasks, gen) } -> std::same_as<TaskBatch<T, B>>;
};

// A sampler whose batches a learner (of scalar L::T on backend L::B) takes,
// used const as meta_train and held_out_losses use it.
template <class S, class L>
concept TaskSamplerFor = TaskSampler<const S, typename L::T, typename L::B>;

}  // namespace platipus
