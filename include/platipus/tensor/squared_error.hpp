// A squared-error loss's points, differences and reduction by one backend
// call (the formulas in backend/layouts.hpp, SquaredErrorLayout): the raw
// kernel of the squared_error op.
#pragma once

#include "platipus/tensor/tensor.hpp"

namespace platipus::raw {

template <class T, class B>
struct SquaredError {
  Tensor<T, B> loss;        // pred's first batch_dims axes
  Tensor<T, B> difference;  // pred - target
};

// `form` with its rows and points set from pred's shape: the points of a
// row are the elements of the axes after the first batch_dims, reduced by
// their sum or mean as form.mean says; none when batch_dims is pred's rank.
template <class T, class B>
SquaredError<T, B> squared_error(const Tensor<T, B>& pred, const Tensor<T, B>& target,
                                 int batch_dims, SquaredErrorLayout<T> form) {
  constexpr std::string_view who = "squared_error";
  check(pred.shape() == target.shape(), who, "pred {} and target {} differ in shape", pred.shape(),
        target.shape());
  check(batch_dims >= 0 && batch_dims <= pred.rank(), who,
        "batch_dims {} is out of range for shape {}", batch_dims, pred.shape());
  check(pred.numel() > 0, who, "empty input of shape {}", pred.shape());
  const Shape rows = pred.shape().take_front(batch_dims);
  form.rows = rows.numel();
  form.points = pred.numel() / form.rows;
  SquaredError<T, B> out{Tensor<T, B>(rows), Tensor<T, B>(pred.shape())};
  B::squared_error(form, pred.data(), target.data(), out.difference.data(), out.loss.data());
  return out;
}

}  // namespace platipus::raw
