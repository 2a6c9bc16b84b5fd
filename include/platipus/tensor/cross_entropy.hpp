// A softmax cross-entropy's rows by one backend call (the formulas in
// backend/layouts.hpp, CrossEntropyLayout): the raw kernel of the
// cross_entropy_with_logits op.
#pragma once

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
  const CrossEntropyLayout form{.rows = logits.numel() / logits.dim(-1),
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

}  // namespace platipus::raw
