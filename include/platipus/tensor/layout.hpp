// Raw layout kernels: transpose, expand (materialised broadcast), slice,
// pad (the adjoint of slice), concat and expand_concat, all on one
// strided-copy primitive.
#pragma once

#include <span>
#include <string_view>
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

namespace detail {
// The parts of a concat along axis `a` in their order, each copied from its
// own buffer into y, read with stride 0 along the axes it broadcasts.
template <class T, class B>
void concat_into(std::span<const Tensor<T, B>* const> parts, int a, Tensor<T, B>& y) {
  const Strides cd = contiguous_strides(y.shape());
  std::int64_t offset = 0;
  for (const auto* p : parts) {
    Shape block = y.shape();
    block[a] = p->shape()[a];
    const Strides cp = contiguous_strides(p->shape());
    Strides src{};
    for (int i = 0; i < block.rank(); ++i) {
      const auto s = static_cast<std::size_t>(i);
      src[s] = p->shape()[i] == block[i] ? cp[s] : 0;
    }
    copy_block<T, B>(p->data(), src, y.data() + offset * cd[static_cast<std::size_t>(a)], cd,
                     block);
    offset += block[a];
  }
}

// The shape of the parts joined along axis `a`, their other extents
// broadcast where `broadcast` allows it (NumPy's rules at one rank), else
// equal; checked, naming `who`.
template <class T, class B>
Shape joined_shape(std::span<const Tensor<T, B>* const> parts, int axis, bool broadcast,
                   std::string_view who) {
  check(!parts.empty(), who, "no tensors given");
  const Shape& first = parts[0]->shape();
  const int a = first.normalize_axis(axis, who);
  Shape out = first;
  out[a] = 0;
  for (const auto* p : parts) {
    check(p->rank() == first.rank(), who, "shape {} is not of {}'s rank", p->shape(), first);
    bool fits = true;
    for (int i = 0; fits && i < first.rank(); ++i) {
      if (i == a) continue;
      const std::int64_t d = p->shape()[i];
      fits = d == out[i] || (broadcast && (d == 1 || out[i] == 1));
      if (fits && broadcast && out[i] == 1) out[i] = d;
    }
    check(fits, who, "shape {} does not {} {} outside axis {}", p->shape(),
          broadcast ? "broadcast with" : "match", out, a);
    out[a] += p->shape()[a];
  }
  return out;
}
}  // namespace detail

// Joins tensors along `axis`; all other extents must agree. `parts` are
// pointers so that callers can concatenate without moving their tensors.
template <class T, class B>
Tensor<T, B> concat(std::span<const Tensor<T, B>* const> parts, int axis) {
  Tensor<T, B> y(detail::joined_shape(parts, axis, false, "concat"));
  detail::concat_into(parts, parts[0]->shape().normalize_axis(axis, "concat"), y);
  return y;
}

// concat of the parts each expanded to the others' extents outside `axis`
// (parts of one rank, NumPy's rules): the bits of expand, then concat, with
// one copy per part and no expanded tensor in between.
template <class T, class B>
Tensor<T, B> expand_concat(std::span<const Tensor<T, B>* const> parts, int axis) {
  Tensor<T, B> y(detail::joined_shape(parts, axis, true, "expand_concat"));
  detail::concat_into(parts, parts[0]->shape().normalize_axis(axis, "expand_concat"), y);
  return y;
}

}  // namespace platipus::raw
