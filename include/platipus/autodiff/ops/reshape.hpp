// reshape (one axis may be -1, inferred from the others) and transpose.
#pragma once

#include <vector>

#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/layout.hpp"

namespace platipus {

// `dims` with a single -1 replaced so that the element count is `numel`.
inline Shape infer_shape(std::span<const std::int64_t> dims, std::int64_t numel,
                         const Shape& from) {
  std::int64_t known = 1;
  int inferred = -1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      check(inferred < 0, "reshape", "more than one -1 in the target shape for {}", from);
      inferred = static_cast<int>(i);
    } else {
      known *= dims[i];
    }
  }
  std::vector<std::int64_t> out(dims.begin(), dims.end());
  if (inferred >= 0) {
    check(known > 0 && numel % known == 0, "reshape", "cannot infer -1 reshaping {}", from);
    out[static_cast<std::size_t>(inferred)] = numel / known;
  }
  Shape shape(out);
  check(shape.numel() == numel, "reshape", "cannot reshape {} ({} elements) into {}", from, numel,
        shape);
  return shape;
}

// The same elements under a new shape; no copy: the result views x's buffer,
// which its tape keeps alive.
template <class T, class B>
Var<T, B> reshape(const Var<T, B>& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  x.record()->viewed = true;
  return record(
      "reshape", {x}, Tensor<T, B>::view(x.value(), shape),
      [](Backward<T, B>& c) {
        if (const auto u = c.uniform_grad()) {
          c.set_uniform(0, *u);
          return;
        }
        // One value broadcast (a sum's or a mean's gradient) stays one value,
        // at the input's rank, so that no copy expands it (issue 38).
        if (const auto [g, negated] = c.signed_broadcast_grad(); g.numel() == 1) {
          c.set(0,
                reshape(g, Shape(std::vector<std::int64_t>(
                               static_cast<std::size_t>(c.input(0).rank()), 1))),
                negated);
          return;
        }
        const auto [g, negated] = c.signed_grad();
        c.set(0, reshape(g, c.input(0).shape()), negated);
      },
      saves_nothing);
}

template <class T, class B>
Var<T, B> reshape(const Var<T, B>& x, std::initializer_list<std::int64_t> dims) {
  return reshape(x, infer_shape(std::span(dims.begin(), dims.size()), x.numel(), x.shape()));
}

// Swaps two axes (by default the last two).
template <class T, class B>
Var<T, B> transpose(const Var<T, B>& x, int axis0 = -2, int axis1 = -1) {
  return record(
      "transpose", {x}, raw::transpose(x.value(), axis0, axis1),
      [axis0, axis1](Backward<T, B>& c) { c.set(0, transpose(c.grad(), axis0, axis1)); },
      saves_nothing);
}

}  // namespace platipus
