// sum and mean over all axes or a list of axes, built on sum_to, mean_to
// and reshape.
#pragma once

#include <vector>

#include "platipus/autodiff/ops/arithmetic.hpp"
#include "platipus/autodiff/ops/broadcast.hpp"
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

// sum_to(x, shape) scaled by 1 / n, n the elements summed into each, in
// one backend call (ReduceOp::mean) with the bits of the two. x itself when
// the shapes agree.
template <class T, class B>
Var<T, B> mean_to(const Var<T, B>& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  auto y = raw::mean_to(x.value(), shape);
  const T s = T(1) / static_cast<T>(y.numel() > 0 ? x.numel() / y.numel() : 1);
  return record(
      "mean_to", {x}, std::move(y),
      [s](Backward<T, B>& c) {  // scale's rule, then sum_to's
        if (const auto u = c.uniform_grad())
          c.set_uniform(0, *u * s);
        else
          c.set(0, detail::unexpanded(scale(c.broadcast_grad(), s), c.input(0).shape()));
      },
      saves_nothing);
}

template <class T, class B>
Var<T, B> mean(const Var<T, B>& x, std::span<const int> axes, bool keep_dims = false) {
  std::int64_t count = 1;
  for (int axis : axes) count *= x.shape()[x.shape().normalize_axis(axis, "mean")];
  check(count > 0, "mean", "mean over an empty axis of {}", x.shape());
  const Var<T, B> kept = mean_to(x, raw::reduced_shape(x.shape(), axes, "mean"));
  return keep_dims ? kept : reshape(kept, raw::squeezed_shape(x.shape(), axes, "mean"));
}

template <class T, class B>
Var<T, B> mean(const Var<T, B>& x, std::initializer_list<int> axes, bool keep_dims = false) {
  return mean(x, std::span<const int>(axes.begin(), axes.size()), keep_dims);
}

template <class T, class B>
Var<T, B> mean(const Var<T, B>& x) {
  check(x.numel() > 0, "mean", "mean of an empty tensor of shape {}", x.shape());
  return reshape(mean_to(x, Shape{}), Shape{});
}

}  // namespace platipus
