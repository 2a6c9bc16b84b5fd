// What the meta-learners require of their parts, written once as concepts
// (in the manner of dlib's layers_abstract.h): a Model and a Loss, and
// which task samplers (data/task_batch.hpp) a learner takes.
#pragma once

#include <concepts>

#include "platipus/autodiff.hpp"
#include "platipus/data/task_batch.hpp"
#include "platipus/nn/parameters.hpp"

namespace platipus {

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

// A sampler whose batches a learner (of scalar L::T on backend L::B) takes,
// used const as meta_train and held_out_losses use it.
template <class S, class L>
concept TaskSamplerFor = TaskSampler<const S, typename L::T, typename L::B>;

}  // namespace platipus
