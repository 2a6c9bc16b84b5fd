// A softmax cross-entropy's rows, and their gradient in the logits, by one
// backend call each (the formulas in backend/layouts.hpp,
// CrossEntropyLayout and CrossEntropyGradLayout): the raw kernels of the
// cross_entropy_with_logits op.
#pragma once

#include <optional>
#include <type_traits>

#include "platipus/tensor/elementwise.hpp"
#include "platipus/tensor/layout.hpp"
#include "platipus/tensor/tensor.hpp"

namespace platipus::raw {

template <class T, class B>
struct CrossEntropy {
  Tensor<T, B> loss;     // one a row: the logits' shape without its last axis
  Tensor<T, B> softmax;  // the logits' shape
  Tensor<T, B> one_hot;  // the one-hot rows of class indices (none for target rows)
};

// Logits [..., K] against target rows [..., K] that sum to one, or with
// `class_indices` against one class index a row [..., 1].
template <class T, class B>
CrossEntropy<T, B> cross_entropy(const Tensor<T, B>& logits, const Tensor<T, B>& targets,
                                 bool class_indices) {
  const std::string_view who =
      class_indices ? "sparse_cross_entropy_with_logits" : "cross_entropy_with_logits";
  check(logits.rank() >= 1, who, "logits must have a class axis, got a scalar");
  Shape target_shape = logits.shape();
  if (class_indices) target_shape[target_shape.rank() - 1] = 1;
  check(targets.shape() == target_shape, who, "targets {} must have the shape {} beside logits {}",
        targets.shape(), target_shape, logits.shape());
  const CrossEntropyLayout form{.rows = logits.dim(-1) ? logits.numel() / logits.dim(-1) : 0,
                                .classes = logits.dim(-1),
                                .class_indices = class_indices};
  CrossEntropy<T, B> out{Tensor<T, B>(logits.shape().take_front(logits.rank() - 1)),
                         Tensor<T, B>(logits.shape()),
                         class_indices ? Tensor<T, B>(logits.shape()) : Tensor<T, B>()};
  if (logits.numel() > 0)
    B::cross_entropy(form, logits.data(), targets.data(), out.loss.data(), out.softmax.data(),
                     out.one_hot.data());
  return out;
}

// The gradient in the logits [..., K] of cross_entropy's rows from their
// softmax p and target rows y [..., K]: from the gradient into the losses,
// a value a row (loss_grad, at the losses' shape [...] or one that
// broadcasts to it: read in place where it repeats along at most two runs
// of axes, else expanded first) or `uniform` in every row, and from the
// gradient into p (p_grad, at p's shape), each where given.
template <class T, class B>
Tensor<T, B> cross_entropy_backward(const Tensor<T, B>& p, const Tensor<T, B>& y,
                                    const std::type_identity_t<Tensor<T, B>>* loss_grad,
                                    std::optional<std::type_identity_t<T>> uniform,
                                    const std::type_identity_t<Tensor<T, B>>* p_grad) {
  constexpr std::string_view who = "cross_entropy_backward";
  check(p.rank() >= 1, who, "the softmax must have a class axis, got a scalar");
  check(y.shape() == p.shape(), who, "target rows {} must have the softmax's shape {}", y.shape(),
        p.shape());
  const Shape losses = p.shape().take_front(p.rank() - 1);
  Repetition repetition;
  Tensor<T, B> expanded;
  if (loss_grad) {
    check(broadcast_shapes(loss_grad->shape(), losses, who) == losses, who,
          "the losses' gradient {} must broadcast to the losses' shape {}", loss_grad->shape(),
          losses);
    if (const auto r = repetition_over(loss_grad->shape(), losses)) {
      repetition = *r;
    } else {
      expanded = expand(*loss_grad, losses);
      loss_grad = &expanded;
    }
  }
  if (p_grad)
    check(p_grad->shape() == p.shape(), who, "the softmax's gradient {} must have its shape {}",
          p_grad->shape(), p.shape());
  check(!(loss_grad && uniform), who, "the losses' gradient is given both per row and uniform");
  check(loss_grad || uniform || p_grad, who, "no gradient flows into the losses or the softmax");
  const CrossEntropyGradLayout<T> form{.rows = p.dim(-1) ? p.numel() / p.dim(-1) : 0,
                                       .classes = p.dim(-1),
                                       .from_loss = loss_grad || uniform,
                                       .uniform = uniform.value_or(T(0)),
                                       .repetition = repetition};
  Tensor<T, B> dz(p.shape());
  if (p.numel() > 0)
    B::cross_entropy_backward(form, p.data(), y.data(), loss_grad ? loss_grad->data() : nullptr,
                              p_grad ? p_grad->data() : nullptr, dz.data());
  return dz;
}

}  // namespace platipus::raw
