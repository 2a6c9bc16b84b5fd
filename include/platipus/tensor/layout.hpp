// Raw layout kernels: transpose, expand (materialised broadcast), slice,
// pad (the adjoint of slice), concat, and expand_pad and expand_concat, whose
// parts broadcast: all strided copies (a pad's and a concat's blocks in one
// backend call).
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

// Blocks written by one backend call per CopiesLayout's capacity
// (foreach_strided_copy), each copied as copy_block would or, from a null
// source, zeros: a concat's parts, a pad's block and its zeros.
template <class T, class B>
class BlockCopies {
 public:
  void add(const T* src, const Strides& ss, T* dst, const Strides& sd, const Shape& dims) {
    if (dims.numel() == 0) return;
    if (layout_.count == layout_.capacity) run();
    const auto i = static_cast<std::size_t>(layout_.count++);
    layout_.src[i] = src;
    layout_.dst[i] = dst;
    layout_.copy[i] = copy_layout(dims, ss, sd);
    layout_.n[i] = dims.numel();
  }
  void run() {
    if (layout_.count > 0) B::foreach_strided_copy(layout_);
    layout_ = {};
  }

 private:
  CopiesLayout<T> layout_;
};

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

// x expanded to `shape` outside `axis` (NumPy's rules at one rank) and
// placed at offset `start` along it, zeros elsewhere: the bits of expand,
// then pad, in one call and without the expanded tensor.
template <class T, class B>
Tensor<T, B> expand_pad(const Tensor<T, B>& x, int axis, std::int64_t start, const Shape& shape,
                        std::string_view who = "expand_pad") {
  const int a = x.shape().normalize_axis(axis, who);
  check(shape.rank() == x.rank(), who, "cannot pad {} to {}", x.shape(), shape);
  Shape block = shape;
  block[a] = x.shape()[a];
  check(broadcast_shapes(x.shape(), block, who) == block, who, "cannot expand {} to {}", x.shape(),
        block);
  check(start >= 0 && start + block[a] <= shape[a], who,
        "block of {} at offset {} does not fit in {}", block[a], start, shape[a]);
  const Strides cx = contiguous_strides(x.shape());
  Strides src{};
  for (int i = 0; i < x.rank(); ++i) {
    const auto k = static_cast<std::size_t>(i);
    src[k] = x.shape()[i] == block[i] ? cx[k] : 0;
  }
  Tensor<T, B> y(shape);
  const Strides cd = contiguous_strides(shape);
  const std::int64_t step = cd[static_cast<std::size_t>(a)], end = start + block[a];
  Shape zeros = shape;  // before the block, then after it
  zeros[a] = start;
  detail::BlockCopies<T, B> copies;
  copies.add(nullptr, {}, y.data(), cd, zeros);
  copies.add(x.data(), src, y.data() + start * step, cd, block);
  zeros[a] = shape[a] - end;
  copies.add(nullptr, {}, y.data() + end * step, cd, zeros);
  copies.run();
  return y;
}

// Zeros of extent `total` along `axis`, with x placed at offset `start`.
template <class T, class B>
Tensor<T, B> pad(const Tensor<T, B>& x, int axis, std::int64_t start, std::int64_t total) {
  Shape shape = x.shape();
  shape[x.shape().normalize_axis(axis, "pad")] = total;
  return expand_pad(x, axis, start, shape, "pad");
}

namespace detail {
// The parts of a concat along axis `a` in their order, each copied from its
// own buffer into y, read with stride 0 along the axes it broadcasts.
template <class T, class B>
void concat_into(std::span<const Tensor<T, B>* const> parts, int a, Tensor<T, B>& y) {
  const Strides cd = contiguous_strides(y.shape());
  BlockCopies<T, B> copies;
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
    copies.add(p->data(), src, y.data() + offset * cd[static_cast<std::size_t>(a)], cd, block);
    offset += block[a];
  }
  copies.run();
}

// The shape of the parts joined along axis `a` (normalised), their other
// extents broadcast where `broadcast` allows it (NumPy's rules at one rank),
// else equal; checked, naming `who`.
template <class T, class B>
Shape joined_shape(std::span<const Tensor<T, B>* const> parts, int a, bool broadcast,
                   std::string_view who) {
  const Shape& first = parts[0]->shape();
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

// concat's and expand_concat's one body: the parts joined along `axis`,
// broadcast outside it where `broadcast` allows.
template <class T, class B>
Tensor<T, B> join(std::span<const Tensor<T, B>* const> parts, int axis, bool broadcast,
                  std::string_view who) {
  check(!parts.empty(), who, "no tensors given");
  const int a = parts[0]->shape().normalize_axis(axis, who);
  Tensor<T, B> y(joined_shape(parts, a, broadcast, who));
  concat_into(parts, a, y);
  return y;
}
}  // namespace detail

// Joins tensors along `axis`; all other extents must agree. `parts` are
// pointers so that callers can concatenate without moving their tensors.
template <class T, class B>
Tensor<T, B> concat(std::span<const Tensor<T, B>* const> parts, int axis) {
  return detail::join(parts, axis, false, "concat");
}

// concat of the parts each expanded to the others' extents outside `axis`
// (parts of one rank, NumPy's rules): the bits of expand, then concat, with
// no expanded tensor in between.
template <class T, class B>
Tensor<T, B> expand_concat(std::span<const Tensor<T, B>* const> parts, int axis) {
  return detail::join(parts, axis, true, "expand_concat");
}

}  // namespace platipus::raw
