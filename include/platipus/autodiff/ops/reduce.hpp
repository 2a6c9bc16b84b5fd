// sum and mean over all axes or a list of axes, built on sum_to and reshape.
#pragma once

#include <vector>

#include "platipus/autodiff/ops/arithmetic.hpp"
#include "platipus/autodiff/ops/reshape.hpp"

namespace platipus {

// Sum over `axes` (negative axes count from the end); the reduced axes are
// dropped unless keep_dims.
template <class T, class B>
Var<T, B> sum(const Var<T, B>& x, std::span<const int> axes, bool keep_dims = false) {
  const Var<T, B> kept = sum_to(x, raw::reduced_shape(x.shape(), axes, "sum"));
  return keep_dims ? kept : reshape(kept, raw::squeezed_shape(x.shape(), axes, "sum"));
}

template <class T, class B>
Var<T, B> sum(const Var<T, B>& x, std::initializer_list<int> axes, bool keep_dims = false) {
  return sum(x, std::span<const int>(axes.begin(), axes.size()), keep_dims);
}

// Sum of all elements, a scalar of shape [].
template <class T, class B>
Var<T, B> sum(const Var<T, B>& x) {
  return reshape(sum_to(x, Shape{}), Shape{});
}

template <class T, class B>
Var<T, B> mean(const Var<T, B>& x, std::span<const int> axes, bool keep_dims = false) {
  std::int64_t count = 1;
  for (int axis : axes) count *= x.shape()[x.shape().normalize_axis(axis, "mean")];
  check(count > 0, "mean", "mean over an empty axis of {}", x.shape());
  return scale(sum(x, axes, keep_dims), T(1) / static_cast<T>(count));
}

template <class T, class B>
Var<T, B> mean(const Var<T, B>& x, std::initializer_list<int> axes, bool keep_dims = false) {
  return mean(x, std::span<const int>(axes.begin(), axes.size()), keep_dims);
}

template <class T, class B>
Var<T, B> mean(const Var<T, B>& x) {
  check(x.numel() > 0, "mean", "mean of an empty tensor of shape {}", x.shape());
  return scale(sum(x), T(1) / static_cast<T>(x.numel()));
}

}  // namespace platipus
