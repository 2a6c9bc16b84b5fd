// Raw reductions: sum, max or mean of a tensor down to a shape it
// broadcasts to ("sum_to", the adjoint of broadcasting), and over a list of
// axes.
#pragma once

#include <vector>

#include "platipus/tensor/tensor.hpp"

namespace platipus::raw {

namespace detail {

// Layout reducing `in`, whose elements lie at strides `stride_in`, to
// `out`, where `out` broadcasts to `in`; size-1 axes dropped and runs of kept
// / reduced axes merged where the input's run is one stride too.
inline ReduceLayout reduce_layout(const Shape& in, const Strides& stride_in, const Shape& out) {
  const Strides co = contiguous_strides(out);
  ReduceLayout l;
  l.in_numel = in.numel();
  l.out_numel = out.numel();
  for (int i = 0; i < in.rank(); ++i) {
    if (in[i] == 1) continue;
    const int io = i - (in.rank() - out.rank());
    const std::int64_t so = (io >= 0 && out[io] != 1) ? co[static_cast<std::size_t>(io)] : 0;
    const std::int64_t si = stride_in[static_cast<std::size_t>(i)];
    if (l.rank > 0) {
      const auto p = static_cast<std::size_t>(l.rank - 1);
      if (l.stride_out[p] == so * in[i] && l.stride_in[p] == si * in[i]) {
        l.dims[p] *= in[i];
        l.stride_out[p] = so;
        l.stride_in[p] = si;
        continue;
      }
    }
    const auto q = static_cast<std::size_t>(l.rank++);
    l.dims[q] = in[i];
    l.stride_in[q] = si;
    l.stride_out[q] = so;
  }
  return l;
}

// Reduces the tensor `in` at `x` (its elements at `stride_in`) to `shape`.
template <class T, class B>
Tensor<T, B> reduce_strided(ReduceOp op, const T* x, const Shape& in, const Strides& stride_in,
                            const Shape& shape) {
  const char* who = op == ReduceOp::mean ? "mean_to" : "sum_to";
  check(broadcast_shapes(shape, in, who) == in, who, "shape {} does not broadcast to {}", shape,
        in);
  Tensor<T, B> y(shape);
  if (y.numel() == 0) return y;
  if (in.numel() == 0) {
    check(op != ReduceOp::mean, who, "mean over an empty axis of {}", in);
    B::fill(y.data(), y.numel(), T(0));
    return y;
  }
  B::reduce(op, x, y.data(), reduce_layout(in, stride_in, shape));
  return y;
}

}  // namespace detail

// Reduces x to `shape`, which must broadcast to x's shape (NumPy rules).
template <class T, class B>
Tensor<T, B> reduce_to(ReduceOp op, const Tensor<T, B>& x, const Shape& shape) {
  return detail::reduce_strided<T, B>(op, x.data(), x.shape(), contiguous_strides(x.shape()),
                                      shape);
}

template <class T, class B>
Tensor<T, B> sum_to(const Tensor<T, B>& x, const Shape& shape) {
  return reduce_to(ReduceOp::sum, x, shape);
}

// sum_to over the number of elements summed into each, in one call.
template <class T, class B>
Tensor<T, B> mean_to(const Tensor<T, B>& x, const Shape& shape) {
  return reduce_to(ReduceOp::mean, x, shape);
}

// sum_to(slice(x, axis, start, length), shape) in one call, the slice read
// in place: the same bits (the same sums in the same order) without the
// slice's copy. The gradient of the bias transformation's v (issue 38).
template <class T, class B>
Tensor<T, B> sum_slice_to(const Tensor<T, B>& x, int axis, std::int64_t start, std::int64_t length,
                          const Shape& shape) {
  const int a = x.shape().normalize_axis(axis, "sum_slice_to");
  check(start >= 0 && length >= 0 && start + length <= x.shape()[a], "sum_slice_to",
        "range [{}, {}) is outside axis {} of shape {}", start, start + length, a, x.shape());
  Shape sliced = x.shape();
  sliced[a] = length;
  const Strides cs = contiguous_strides(x.shape());
  const T* first = x.numel() == 0 ? x.data() : x.data() + start * cs[static_cast<std::size_t>(a)];
  return detail::reduce_strided<T, B>(ReduceOp::sum, first, sliced, cs, shape);
}

// The shape of x with the given axes set to 1 (kept) — a reduction target.
inline Shape reduced_shape(const Shape& shape, std::span<const int> axes, std::string_view op) {
  Shape out = shape;
  for (int axis : axes) out[shape.normalize_axis(axis, op)] = 1;
  return out;
}

// The shape without the given axes (after a reduction that drops them).
inline Shape squeezed_shape(const Shape& shape, std::span<const int> axes, std::string_view op) {
  std::vector<bool> drop(static_cast<std::size_t>(shape.rank()), false);
  for (int axis : axes) drop[static_cast<std::size_t>(shape.normalize_axis(axis, op))] = true;
  Shape out;
  for (int i = 0; i < shape.rank(); ++i)
    if (!drop[static_cast<std::size_t>(i)]) out.push_back(shape[i]);
  return out;
}

}  // namespace platipus::raw
