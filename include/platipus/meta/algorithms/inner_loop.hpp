// The inner loop shared by MAML, MAML + noise and PLATIPUS: K steps of SGD
// on the support set, all tasks at once. Parameters travel as their named
// pieces, each with a leading task axis, and one fused op updates them all.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "platipus/backend/cpu/cpu.hpp"
#include "platipus/meta/driver/concepts.hpp"
#include "platipus/meta/driver/task_noise.hpp"

namespace platipus {

template <class T, class B>
using Pieces = std::vector<Var<T, B>>;

// The defaults of the inner loop's steps and rate: the general ones, and
// each algorithm whose own differ names its own (PlatipusSettings,
// MetaSgdSettings).
struct InnerLoopDefaults {
  static constexpr int steps = 5;
  static constexpr double learning_rate = 0.01;
};

// The inner loop's settings, held as they are by every learner's settings
// (`inner_loop`) and set by the examples' --inner-* flags: one name per
// setting from the flag to the op. The defaults are a type parameter so that
// a learner's own survive a designated initialiser: with a member
// `InnerLoop inner_loop{.learning_rate = 1e-3}`,
// `PlatipusSettings{.inner_loop = {.steps = 10}}` would build the member from
// InnerLoop's defaults and silently take 0.01.
template <class Defaults>
struct BasicInnerLoop {
  int steps = Defaults::steps;
  double learning_rate = Defaults::learning_rate;  // alpha
  double gradient_noise = 0;  // std of Gaussian noise added to each gradient ("MAML + noise")
  // When > 0, each task's support-loss gradient (all pieces together) is
  // scaled down to this Euclidean norm before a step (clip_task_norms).
  double max_gradient_norm = 0;
  // The steps when a learner adapts outside meta-training (adapt_to,
  // sample, evaluate); unset, `steps`. MAML's image experiments train with 5
  // and test with 10 (Finn et al. 2017, Section 5.2).
  std::optional<int> evaluation_steps{};

  // The same settings under other defaults: every function of the inner
  // loop takes the plain InnerLoop.
  template <class Other>
  requires(!std::is_same_v<Other, Defaults>) operator BasicInnerLoop<Other>() const {
    return {.steps = steps,
            .learning_rate = learning_rate,
            .gradient_noise = gradient_noise,
            .max_gradient_norm = max_gradient_norm,
            .evaluation_steps = evaluation_steps};
  }

  // These settings with evaluation_steps as the steps.
  BasicInnerLoop for_evaluation() const {
    BasicInnerLoop loop = *this;
    loop.steps = evaluation_steps.value_or(steps);
    return loop;
  }

  // Throws platipus::error naming the setting that makes no sense.
  void validate(std::string_view who) const {
    check_non_negative(who, "inner_loop.steps", steps);
    check_non_negative(who, "inner_loop.evaluation_steps", evaluation_steps.value_or(0));
    check_finite(who, "inner_loop.learning_rate", learning_rate);
    check_non_negative(who, "inner_loop.gradient_noise", gradient_noise, "a standard deviation");
    check_non_negative(who, "inner_loop.max_gradient_norm", max_gradient_norm, "0: no clip");
  }
  // The same for an algorithm that takes no gradient noise.
  void validate_without_noise(std::string_view who) const {
    validate(who);
    check(gradient_noise == 0, who, "inner_loop.gradient_noise must be 0 (got {})", gradient_noise);
  }
};

using InnerLoop = BasicInnerLoop<InnerLoopDefaults>;

// Throws platipus::error naming `who` unless support_x is a non-empty
// [tasks, points, features] or [tasks, points, C, H, W] support set and
// support_y holds targets the loss can take (check_targets).
template <class M, class L, class T, class B>
void check_support_set(const M& model, const L& loss, const Tensor<T, B>& support_x,
                       const Tensor<T, B>& support_y, std::string_view who) {
  check((support_x.rank() == 3 || support_x.rank() == 5) && support_x.dim(1) > 0, who,
        "empty or malformed support set {}", support_x.shape());
  check_targets(loss, model, support_y, who);
}

// The pieces numbered in `chosen` expanded to [tasks, shape...] by one op
// (foreach_expand: one kernel on a device, and one for their gradients'
// sums, issue 38); the others as they are.
template <class T, class B>
Pieces<T, B> with_task_axis(Pieces<T, B> pieces, std::span<const std::size_t> chosen,
                            std::int64_t tasks) {
  if (chosen.empty()) return pieces;
  Pieces<T, B> shared;
  for (auto i : chosen) shared.push_back(pieces[i]);
  const auto expanded = foreach_expand(std::span<const Var<T, B>>(shared), tasks);
  for (std::size_t k = 0; k < chosen.size(); ++k) pieces[chosen[k]] = expanded[k];
  return pieces;
}

// The pieces of a flat vector [P], each expanded to a task axis: [tasks,
// shape...] (with_task_axis). Gradients with respect to the pieces are then
// per task. With `only`, just those pieces get the axis (ANIL's head); the
// others stay shared by the tasks (views, no copy).
template <class T, class B>
Pieces<T, B> per_task(const Var<T, B>& flat, const nn::ParamLayout& layout, std::int64_t tasks,
                      std::span<const std::size_t> only = {}) {
  Pieces<T, B> pieces = unflatten(flat, layout.shapes());
  std::vector<std::size_t> chosen;
  for (std::size_t i = 0; i < pieces.size(); ++i)
    if (only.empty() || std::find(only.begin(), only.end(), i) != only.end()) chosen.push_back(i);
  return with_task_axis(std::move(pieces), chosen, tasks);
}

// The flat vectors [batch..., P] of pieces [batch..., shape_k], as a tensor.
template <class T, class B>
Tensor<T, B> flat_values(const Pieces<T, B>& pieces, const nn::ParamLayout& layout) {
  NoGradGuard no_grad;
  const Shape batch = pieces[0].shape().take_front(pieces[0].rank() - layout.shapes()[0].rank());
  return flatten(std::span<const Var<T, B>>(pieces), batch, layout.shapes()).value().clone();
}

// Each task's mean loss [tasks].
template <class M, class L, class T, class B>
Var<T, B> task_losses(const M& model, const L& loss, const Pieces<T, B>& params, const Var<T, B>& x,
                      const Var<T, B>& y) {
  return loss(model.forward(std::span<const Var<T, B>>(params), x), y, 1);
}

// The sum over tasks of each task's mean loss: its gradient with respect to
// per-task parameters is, task by task, each task's own gradient.
template <class M, class L, class T, class B>
Var<T, B> task_loss(const M& model, const L& loss, const Pieces<T, B>& params, const Var<T, B>& x,
                    const Var<T, B>& y) {
  return sum(task_losses(model, loss, params, x, y));
}

// Each task's gradient scaled to Euclidean norm at most c over all its
// pieces: g * c / |g| where |g| > c. A fixed step alpha is stable only while
// alpha is below 2 / (the support loss's curvature), and a task far from the
// current meta-parameters can leave that region within the K steps; the clip
// bounds each inner step to alpha * c, a trust region. It is recorded like
// every op, so the meta-gradient differentiates through it (second order).
// Tasks whose gradient is within c are multiplied by exactly 1, so a run in
// which the clip never binds is bit for bit the run without it; the norm is
// taken of max(|g|^2, c^2), so no zero norm is ever divided by.
//
// On the CPU a chunk whose every task is within c / 2 skips the recorded
// clip and returns g itself: every factor would be exactly 1 and every
// derivative through the norms exactly 0, so the values and gradients are
// the same bits (up to the sign of a zero sum). The check sums in any
// order, vectorised: within c / 2 is far from any rounding of the recorded
// sum. The recorded sum is one serial chain of adds per task (its order
// fixes its bits); with its square, product and their rules it took two
// fifths of a MAML step on the paper's network. A device backend always records the
// clip: reading the norms on the host would stop its stream (and a CUDA
// graph's capture).
template <class T>
bool tasks_within_norm(const Pieces<T, cpu>& g, double c) {
  const std::int64_t tasks = g[0].shape()[0];
  std::vector<double> squared(static_cast<std::size_t>(tasks), 0.0);
  for (const auto& gi : g) {
    const std::int64_t n = gi.value().numel() / tasks;
    for (std::int64_t t = 0; t < tasks; ++t)
      squared[static_cast<std::size_t>(t)] += cpu::squared_norm(gi.value().data() + t * n, n);
  }
  // false for a NaN or an infinity: the recorded clip then sees them
  return std::all_of(squared.begin(), squared.end(), [&](double s) { return s <= c * c; });
}

template <class T, class B>
Pieces<T, B> clip_task_norms(const Pieces<T, B>& g, double c) {
  check_positive("clip_task_norms", "the norm bound", c);
  if constexpr (std::is_same_v<B, cpu>)
    if (tasks_within_norm(g, c / 2)) return g;
  Var<T, B> squared;  // [tasks]
  for (const auto& gi : g) {
    std::vector<int> axes;
    for (int a = 1; a < gi.rank(); ++a) axes.push_back(a);
    const Var<T, B> s = axes.empty() ? square(gi) : sum(square(gi), std::span<const int>(axes));
    squared = squared.defined() ? squared + s : s;
  }
  auto& tape = squared.tape();
  const Var<T, B> bound = tape.constant(Tensor<T, B>::full(squared.shape(), static_cast<T>(c * c)));
  const Var<T, B> over = greater(squared, bound);
  const Var<T, B> factor =
      where(over, scale(pow(where(over, squared, bound), T(-0.5)), static_cast<T>(c)),
            tape.constant(Tensor<T, B>::ones(squared.shape())));
  Pieces<T, B> clipped;
  for (const auto& gi : g) {
    Shape shape{gi.shape()[0]};
    for (int a = 1; a < gi.rank(); ++a) shape.push_back(1);
    clipped.push_back(gi * reshape(factor, shape));
  }
  return clipped;
}

template <class T, class B>
struct Adapted {
  Pieces<T, B> params;  // phi after the last step, pieces [T, shape...]
  // Each task's support loss at the start [T] (undefined when steps == 0).
  // The statistic, their sum, is taken by the learners that report it: a
  // kernel that most steps would spend on a value nobody reads (issue 38).
  Var<T, B> initial_losses;
};

// How an adaptation runs beyond its InnerLoop settings.
template <class T, class B>
struct AdaptOptions {
  bool create_graph = false;   // differentiable steps (second order)
  TaskNoise* noise = nullptr;  // the draws of inner_loop.gradient_noise
  // A rate per coordinate in place of alpha: pieces of the parameters'
  // shapes (shared by the tasks) or with the task axis (Meta-SGD's learned
  // alpha, PLATIPUS's gamma steps, MAML++'s per-layer rates).
  const Pieces<T, B>* rates = nullptr;
  // The indices of the pieces that adapt (ANIL's head); empty: all. The
  // others keep their values and need no task axis.
  std::vector<std::size_t> adapted = {};
  // No gradient leaves the steps (adaptation outside meta-training): each
  // step runs on a tape of its own, freed before the next, and the results
  // are constants on the caller's tape. Memory then holds one step's
  // activations instead of every step's (one tape held 16 GB for 10 test
  // steps of 10 PLATIPUS samples on 84 x 84 images), with the same values.
  bool detached = false;
};

// One step, phi - alpha * (clip(grad L(phi, D_train)) + noise) on the adapted
// pieces, and each task's support loss at the phi it descended: the step
// descends their sum, whose gradient needs no kernel to add them up
// (GradOptions::sum_outputs).
template <class M, class L, class T, class B>
Adapted<T, B> inner_step(const M& model, const L& loss, Pieces<T, B> phi, const Var<T, B>& x,
                         const Var<T, B>& y, const InnerLoop& loop,
                         const AdaptOptions<T, B>& options) {
  const auto& rates = options.rates;
  std::vector<std::size_t> adapted = options.adapted;
  if (adapted.empty())
    for (std::size_t i = 0; i < phi.size(); ++i) adapted.push_back(i);
  Pieces<T, B> moving;
  for (auto i : adapted) {
    check(i < phi.size(), "adapt", "piece {} of a model of {}", i, phi.size());
    moving.push_back(phi[i]);
  }
  const Var<T, B> support_losses = task_losses(model, loss, phi, x, y);
  auto g = grad(std::span<const Var<T, B>>(&support_losses, 1), std::span<const Var<T, B>>(moving),
                {}, {.create_graph = options.create_graph, .sum_outputs = true});
  if (loop.max_gradient_norm > 0) g = clip_task_norms(g, loop.max_gradient_norm);
  if (loop.gradient_noise > 0) {
    // The draws, their scaling and the sums for all pieces by one call each
    // (foreach_add_scaled at 1 has add's bits).
    check(options.noise != nullptr, "adapt", "gradient noise needs a generator");
    std::vector<Shape> shapes;
    for (const auto& gi : g) shapes.push_back(gi.shape());
    const auto draws = options.noise->template normal<T, B>(std::span<const Shape>(shapes));
    std::vector<const Tensor<T, B>*> values;
    for (const auto& d : draws) values.push_back(&d);
    Pieces<T, B> scaled;
    for (auto& s : raw::foreach_map(UnaryOp::scale, values, static_cast<T>(loop.gradient_noise)))
      scaled.push_back(g[0].tape().constant(std::move(s)));
    g = foreach_add_scaled(std::span<const Var<T, B>>(g), std::span<const Var<T, B>>(scaled), T(1));
  }
  if (rates) {
    Pieces<T, B> r;
    bool repeated = true;  // every rate one per parameter or per piece: one op
    for (std::size_t k = 0; k < adapted.size(); ++k) {
      r.push_back((*rates)[adapted[k]]);
      repeated = repeated && raw::repeats_along_leading_axes(r[k].shape(), moving[k].shape());
    }
    if (repeated)
      moving = foreach_sub_mul(std::span<const Var<T, B>>(moving), std::span<const Var<T, B>>(r),
                               std::span<const Var<T, B>>(g));
    else
      for (std::size_t k = 0; k < adapted.size(); ++k) moving[k] = moving[k] - r[k] * g[k];
  } else {
    moving = foreach_add_scaled(std::span<const Var<T, B>>(moving), std::span<const Var<T, B>>(g),
                                static_cast<T>(-loop.learning_rate));
  }
  for (std::size_t k = 0; k < adapted.size(); ++k) phi[adapted[k]] = moving[k];
  return {std::move(phi), support_losses};
}

// adapt with options.detached: the steps on tapes of their own, each
// starting from values; the rates are recorded again on each step's tape.
template <class M, class L, class T, class B>
Adapted<T, B> adapt_detached(const M& model, const L& loss, Pieces<T, B> phi, const Var<T, B>& x,
                             const Var<T, B>& y, const InnerLoop& loop,
                             const AdaptOptions<T, B>& options) {
  Tape<T, B>& caller = x.tape();
  std::vector<Tensor<T, B>> values;
  for (const auto& piece : phi) values.push_back(piece.value().clone());
  Tensor<T, B> initial_losses;
  for (int step = 0; step < loop.steps; ++step) {
    Tape<T, B> tape;
    Pieces<T, B> start, rates;
    for (auto& value : values) start.push_back(tape.variable(std::move(value)));
    if (options.rates)
      for (const auto& rate : *options.rates) rates.push_back(tape.constant_view(rate.value()));
    auto here = options;
    here.rates = options.rates ? &rates : nullptr;
    const auto next = inner_step(model, loss, std::move(start), tape.constant_view(x.value()),
                                 tape.constant_view(y.value()), loop, here);
    if (step == 0) initial_losses = next.initial_losses.value().clone();
    values.clear();
    for (const auto& piece : next.params) values.push_back(piece.value().clone());
  }
  phi.clear();
  for (auto& value : values) phi.push_back(caller.constant(std::move(value)));
  return {std::move(phi),
          loop.steps > 0 ? caller.constant(std::move(initial_losses)) : Var<T, B>()};
}

// phi_{k+1} = inner_step(phi_k), loop.steps times from phi_0 = params.
template <class M, class L, class T, class B>
Adapted<T, B> adapt(const M& model, const L& loss, Pieces<T, B> phi, const Var<T, B>& x,
                    const Var<T, B>& y, const InnerLoop& loop,
                    const AdaptOptions<T, B>& options = {}) {
  loop.validate("adapt");
  check(!options.rates || options.rates->size() == phi.size(), "adapt",
        "{} rate pieces for {} parameter pieces", options.rates ? options.rates->size() : 0,
        phi.size());
  check(!(options.detached && options.create_graph), "adapt",
        "detached steps cannot be differentiable");
  if (options.detached) return adapt_detached(model, loss, std::move(phi), x, y, loop, options);
  Var<T, B> initial_losses;
  for (int step = 0; step < loop.steps; ++step) {
    auto next = inner_step(model, loss, std::move(phi), x, y, loop, options);
    if (step == 0) initial_losses = next.initial_losses;
    phi = std::move(next.params);
  }
  return {phi, initial_losses};
}

// theta [P] adapted to each task's support set by the loop's evaluation
// steps, detached (adaptation outside meta-training): [tasks, P]. The
// test-time adaptation of MAML (MAML + noise with `noise`), Reptile and
// Meta-SGD (its rates per coordinate, [P], in place of alpha).
template <class M, class L, class T, class B>
Tensor<T, B> adapted_parameters(const M& model, const L& loss, const Tensor<T, B>& theta,
                                const Tensor<T, B>& support_x, const Tensor<T, B>& support_y,
                                const InnerLoop& loop, std::string_view who,
                                TaskNoise* noise = nullptr, const Tensor<T, B>* rates = nullptr) {
  check_support_set(model, loss, support_x, support_y, who);
  Tape<T, B> tape;
  const auto& layout = model.layout();
  Pieces<T, B> rate_pieces;
  if (rates) rate_pieces = unflatten(tape.constant(*rates), layout.shapes());
  const auto adapted =
      adapt(model, loss, per_task(tape.constant(theta), layout, support_x.dim(0)),
            tape.constant_view(support_x), tape.constant_view(support_y), loop.for_evaluation(),
            {.noise = noise, .rates = rates ? &rate_pieces : nullptr, .detached = true});
  return flat_values(adapted.params, layout);
}

}  // namespace platipus
