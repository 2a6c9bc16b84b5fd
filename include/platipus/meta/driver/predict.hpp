// Predictions of a model for one or many parameter vectors, outside any
// training tape.
#pragma once

#include "platipus/meta/driver/concepts.hpp"

namespace platipus {

// params [P], [T, P] or [T, S, P] (S sampled models per task); x [N, in] or
// [T, N, in] (images: [T, N, C, H, W]). Returns [..., N, out]: for [T, S, P]
// with [T, N, ...], every sample of task t predicts on task t's inputs: [T,
// S, N, out].
template <class M, class T, class B>
requires Model<M, T, B> Tensor<T, B> predict(const M& model, const Tensor<T, B>& params,
                                             const Tensor<T, B>& x) {
  check(params.rank() >= 1 && params.rank() <= 3, "predict",
        "parameters must be [P], [T, P] or [T, S, P], got {}", params.shape());
  Tape<T, B> tape;
  NoGradGuard no_grad;
  const bool per_sample = params.rank() == 3 && x.rank() >= 3;
  check(!per_sample || x.dim(0) == params.dim(0), "predict",
        "{} tasks of parameters {} but inputs {}", params.dim(0), params.shape(), x.shape());
  Shape shape = x.shape();  // with a sample axis after the task axis when per_sample
  if (per_sample) {
    const Shape sample = x.shape().drop_front(1);  // kept: dims() is a view into it
    shape = Shape{x.dim(0), 1};
    for (auto d : sample.dims()) shape.push_back(d);
  }
  const Tensor<T, B> inputs = Tensor<T, B>::view(x, shape);
  check(params.dim(-1) == model.layout().size(), "predict",
        "parameters {} do not match the model's {} values", params.shape(), model.layout().size());
  const auto pieces = unflatten(tape.constant(params), model.layout().shapes());
  return model.forward(std::span<const Var<T, B>>(pieces), tape.constant(inputs)).value().clone();
}

}  // namespace platipus
