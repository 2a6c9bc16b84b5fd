// index_select (gather along an axis) and its adjoint index_add.
#pragma once

#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/index.hpp"

namespace platipus {

template <class T, class B>
Var<T, B> index_add(const Var<T, B>& g, int axis, const Index<B>& index, std::int64_t extent);

// y = x selected at `index` along `axis` (rows of an embedding, say).
template <class T, class B>
Var<T, B> index_select(const Var<T, B>& x, int axis, const Index<B>& index) {
  const int a = x.shape().normalize_axis(axis, "index_select");
  return record("index_select", {x}, raw::gather(x.value(), a, index),
                [a, index = index.clone()](Backward<T, B>& c) {
                  c.set(0, index_add(c.grad(), a, index, c.input(0).shape()[a]));
                });
}

// Zeros of extent `extent` along `axis`, with g's slices added at `index`
// (repeated indices accumulate).
template <class T, class B>
Var<T, B> index_add(const Var<T, B>& g, int axis, const Index<B>& index, std::int64_t extent) {
  const int a = g.shape().normalize_axis(axis, "index_add");
  return record("index_add", {g}, raw::scatter_add(g.value(), a, index, extent),
                [a, index = index.clone()](Backward<T, B>& c) {
                  c.set(0, index_select(c.grad(), a, index));
                });
}

}  // namespace platipus
