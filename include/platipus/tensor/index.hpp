// Raw gather along an axis (index_select) and its adjoint, scatter-add.
// Indices are an Index<B>: int64 values on the same backend.
#pragma once

#include "platipus/tensor/tensor.hpp"

namespace platipus {

template <class B = cpu>
using Index = Tensor<std::int64_t, B>;

namespace raw {

namespace detail {

inline IndexLayout index_layout(const Shape& large, int axis, std::int64_t count) {
  IndexLayout l;
  for (int i = 0; i < axis; ++i) l.outer *= large[i];
  for (int i = axis + 1; i < large.rank(); ++i) l.inner *= large[i];
  l.source_axis = large[axis];
  l.count = count;
  return l;
}

template <class B>
void check_index(const Index<B>& index, std::int64_t extent, std::string_view op) {
  check(index.rank() == 1, op, "index must be 1-D, got shape {}", index.shape());
  for (std::int64_t i : index.to_vector())
    check(i >= 0 && i < extent, op, "index {} is out of range for an axis of extent {}", i, extent);
}

}  // namespace detail

// y = x.index_select(axis, index): y's axis has index.numel() entries.
template <class T, class B>
Tensor<T, B> gather(const Tensor<T, B>& x, int axis, const Index<B>& index) {
  const int a = x.shape().normalize_axis(axis, "index_select");
  detail::check_index(index, x.shape()[a], "index_select");
  Shape out_shape = x.shape();
  out_shape[a] = index.numel();
  Tensor<T, B> y(out_shape);
  if (y.numel())
    B::gather(x.data(), index.data(), y.data(), detail::index_layout(x.shape(), a, index.numel()));
  return y;
}

// Zeros of extent `extent` along `axis`, with g's slices added at `index`.
template <class T, class B>
Tensor<T, B> scatter_add(const Tensor<T, B>& g, int axis, const Index<B>& index,
                         std::int64_t extent) {
  const int a = g.shape().normalize_axis(axis, "index_add");
  check(g.shape()[a] == index.numel(), "index_add", "{} indices for {} slices of shape {}",
        index.numel(), g.shape()[a], g.shape());
  detail::check_index(index, extent, "index_add");
  Shape out_shape = g.shape();
  out_shape[a] = extent;
  Tensor<T, B> y(out_shape);  // the backend writes it whole
  if (y.numel())
    B::scatter_add(g.data(), index.data(), y.data(),
                   detail::index_layout(out_shape, a, index.numel()));
  return y;
}

}  // namespace raw
}  // namespace platipus
