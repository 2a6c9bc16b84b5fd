// Raw layout kernels: transpose, expand (materialised broadcast), slice,
// pad (the adjoint of slice) and concat, all on one strided-copy primitive.
#pragma once

#include <span>
#include <vector>

#include "platipus/tensor/tensor.hpp"

namespace platipus::raw {

namespace detail {

// Layout copying a block of extents `dims` from src (strides `ss`, offset
// already applied by the caller) to dst (strides `sd`), size-1 axes dropped.
inline CopyLayout copy_layout(const Shape& dims, const Strides& ss, const Strides& sd) {
  CopyLayout l;
  for (int i = 0; i < dims.rank(); ++i) {
    if (dims[i] == 1) continue;
    const auto q = static_cast<std::size_t>(l.rank++);
    const auto s = static_cast<std::size_t>(i);
    l.dims[q] = dims[i];
    l.stride_src[q] = ss[s];
    l.stride_dst[q] = sd[s];
  }
  return l;
}

template <class T, class B>
void copy_block(const T* src, const Strides& ss, T* dst, const Strides& sd, const Shape& dims) {
  if (dims.numel() == 0) return;
  B::strided_copy(src, dst, copy_layout(dims, ss, sd));
}

}  // namespace detail

// Swaps two axes (materialised).
template <class T, class B>
Tensor<T, B> transpose(const Tensor<T, B>& x, int axis0, int axis1) {
  const int a0 = x.shape().normalize_axis(axis0, "transpose");
  const int a1 = x.shape().normalize_axis(axis1, "transpose");
  Shape out_shape = x.shape();
  std::swap(out_shape[a0], out_shape[a1]);
  Tensor<T, B> y(out_shape);
  Strides src = contiguous_strides(x.shape());
  std::swap(src[static_cast<std::size_t>(a0)], src[static_cast<std::size_t>(a1)]);
  detail::copy_block<T, B>(x.data(), src, y.data(), contiguous_strides(out_shape), out_shape);
  return y;
}

// Broadcasts x to `shape` (NumPy rules), materialised.
template <class T, class B>
Tensor<T, B> expand(const Tensor<T, B>& x, const Shape& shape) {
  check(broadcast_shapes(x.shape(), shape, "expand") == shape, "expand", "cannot expand {} to {}",
        x.shape(), shape);
  Tensor<T, B> y(shape);
  const Strides cx = contiguous_strides(x.shape());
  Strides src{};
  for (int i = 0; i < shape.rank(); ++i) {
    const int ix = i - (shape.rank() - x.rank());
    src[static_cast<std::size_t>(i)] =
        (ix >= 0 && x.shape()[ix] != 1) ? cx[static_cast<std::size_t>(ix)] : 0;
  }
  detail::copy_block<T, B>(x.data(), src, y.data(), contiguous_strides(shape), shape);
  return y;
}

// x[..., start:start+length, ...] along `axis`.
template <class T, class B>
Tensor<T, B> slice(const Tensor<T, B>& x, int axis, std::int64_t start, std::int64_t length) {
  const int a = x.shape().normalize_axis(axis, "slice");
  check(start >= 0 && length >= 0 && start + length <= x.shape()[a], "slice",
        "range [{}, {}) is outside axis {} of shape {}", start, start + length, a, x.shape());
  Shape out_shape = x.shape();
  out_shape[a] = length;
  Tensor<T, B> y(out_shape);
  const Strides cs = contiguous_strides(x.shape());
  detail::copy_block<T, B>(x.data() + start * cs[static_cast<std::size_t>(a)], cs, y.data(),
                           contiguous_strides(out_shape), out_shape);
  return y;
}

// Zeros of extent `total` along `axis`, with x placed at offset `start`.
template <class T, class B>
Tensor<T, B> pad(const Tensor<T, B>& x, int axis, std::int64_t start, std::int64_t total) {
  const int a = x.shape().normalize_axis(axis, "pad");
  check(start >= 0 && start + x.shape()[a] <= total, "pad",
        "block of {} at offset {} does not fit in {}", x.shape()[a], start, total);
  Shape out_shape = x.shape();
  out_shape[a] = total;
  Tensor<T, B> y = Tensor<T, B>::zeros(out_shape);
  const Strides cd = contiguous_strides(out_shape);
  detail::copy_block<T, B>(x.data(), contiguous_strides(x.shape()),
                           y.data() + start * cd[static_cast<std::size_t>(a)], cd, x.shape());
  return y;
}

// Joins tensors along `axis`; all other extents must agree. `parts` are
// pointers so that callers can concatenate without moving their tensors.
template <class T, class B>
Tensor<T, B> concat(std::span<const Tensor<T, B>* const> parts, int axis) {
  check(!parts.empty(), "concat", "no tensors given");
  const Shape& first = parts[0]->shape();
  const int a = first.normalize_axis(axis, "concat");
  Shape out_shape = first;
  out_shape[a] = 0;
  for (const auto* p : parts) {
    bool same = p->rank() == first.rank();
    for (int i = 0; same && i < first.rank(); ++i) same = i == a || p->shape()[i] == first[i];
    check(same, "concat", "shape {} does not match {} outside axis {}", p->shape(), first, a);
    out_shape[a] += p->shape()[a];
  }
  Tensor<T, B> y(out_shape);
  const Strides cd = contiguous_strides(out_shape);
  std::int64_t offset = 0;
  for (const auto* p : parts) {
    detail::copy_block<T, B>(p->data(), contiguous_strides(p->shape()),
                             y.data() + offset * cd[static_cast<std::size_t>(a)], cd, p->shape());
    offset += p->shape()[a];
  }
  return y;
}

}  // namespace platipus::raw
