// The inner loop shared by MAML, MAML + noise and PLATIPUS: K steps of SGD
// on the support set, all tasks at once. Parameters travel as their named
// pieces, each with a leading task axis, and one fused op updates them all.
#pragma once

#include <vector>

#include "platipus/meta/concepts.hpp"
#include "platipus/meta/task_noise.hpp"

namespace platipus {

template <class T, class B>
using Pieces = std::vector<Var<T, B>>;

struct InnerLoop {
  int steps = 5;
  double learning_rate = 0.01;
  bool create_graph = true;   // differentiate through the steps (second order)
  double gradient_noise = 0;  // std of Gaussian noise added to each gradient ("MAML + noise")
};

// The pieces of a flat vector [P] (views, no copy), each expanded to a task
// axis: [tasks, shape...]. Gradients with respect to the pieces are then
// per task.
template <class T, class B>
Pieces<T, B> per_task(const Var<T, B>& flat, const nn::ParamLayout& layout, std::int64_t tasks) {
  Pieces<T, B> pieces = unflatten(flat, layout.shapes());
  for (auto& p : pieces) {
    Shape shape{tasks};
    for (auto d : p.shape().dims()) shape.push_back(d);
    p = expand(p, shape);
  }
  return pieces;
}

// The flat vectors [batch..., P] of pieces [batch..., shape_k], as a tensor.
template <class T, class B>
Tensor<T, B> flat_values(const Pieces<T, B>& pieces, const nn::ParamLayout& layout) {
  NoGradGuard no_grad;
  const Shape batch = pieces[0].shape().take_front(pieces[0].rank() - layout.shapes()[0].rank());
  return flatten(std::span<const Var<T, B>>(pieces), batch, layout.shapes()).value().clone();
}

// The sum over tasks of each task's mean loss: its gradient with respect to
// per-task parameters is, task by task, each task's own gradient.
template <class M, class L, class T, class B>
Var<T, B> task_loss(const M& model, const L& loss, const Pieces<T, B>& params, const Var<T, B>& x,
                    const Var<T, B>& y) {
  return sum(loss(model.forward(std::span<const Var<T, B>>(params), x), y, 1));
}

template <class T, class B>
struct Adapted {
  Pieces<T, B> params;     // phi after the last step, pieces [T, shape...]
  Var<T, B> initial_loss;  // the summed support loss at the start (undefined when steps == 0)
};

// phi_{k+1} = phi_k - alpha * (grad L(phi_k, D_train) + noise), from phi_0 = params.
template <class M, class L, class T, class B>
Adapted<T, B> adapt(const M& model, const L& loss, Pieces<T, B> phi, const Var<T, B>& x,
                    const Var<T, B>& y, const InnerLoop& loop, TaskNoise* noise = nullptr) {
  check(loop.steps >= 0, "adapt", "inner_steps must be >= 0, got {}", loop.steps);
  Var<T, B> initial_loss;
  for (int step = 0; step < loop.steps; ++step) {
    const Var<T, B> support_loss = task_loss(model, loss, phi, x, y);
    if (step == 0) initial_loss = support_loss;
    auto g =
        grad(support_loss, std::span<const Var<T, B>>(phi), {.create_graph = loop.create_graph});
    if (loop.gradient_noise > 0) {
      check(noise != nullptr, "adapt", "gradient noise needs a generator");
      for (auto& gi : g)
        gi = gi +
             gi.tape().constant(raw::map(UnaryOp::scale, noise->template normal<T, B>(gi.shape()),
                                         static_cast<T>(loop.gradient_noise)));
    }
    phi = foreach_add_scaled(std::span<const Var<T, B>>(phi), std::span<const Var<T, B>>(g),
                             static_cast<T>(-loop.learning_rate));
  }
  return {phi, initial_loss};
}

}  // namespace platipus
