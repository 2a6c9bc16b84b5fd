// Multi-tensor ops over lists of tensors, one node for the whole list and
// one backend call (one kernel on a device) for up to PiecesLayout's
// capacity of pieces, as PyTorch's _foreach kernels: the inner-loop SGD
// step updates every named piece of a model's parameters with one op, and
// its gradient scales them back with one.
#pragma once

#include <span>
#include <vector>

#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/elementwise.hpp"

namespace platipus {

namespace detail {

template <class T, class B>
std::vector<const Tensor<T, B>*> values(std::span<const Var<T, B>> x) {
  std::vector<const Tensor<T, B>*> v;
  v.reserve(x.size());
  for (const auto& xi : x) v.push_back(&xi.value());
  return v;
}

// Sets input inputs[k]'s gradient to s * g[k] for every k, with one op.
template <class T, class B>
void set_scaled(Backward<T, B>& c, std::span<const Var<T, B>> g,
                std::span<const std::size_t> inputs, T s) {
  if (g.empty()) return;
  const auto scaled = foreach_scale(g, s);
  for (std::size_t k = 0; k < inputs.size(); ++k) c.set(inputs[k], scaled[k]);
}

}  // namespace detail

// s * x_i for every i.
template <class T, class B>
std::vector<Var<T, B>> foreach_scale(std::span<const Var<T, B>> x, T s) {
  check(!x.empty(), "foreach_scale", "no tensors given");
  const std::size_t n = x.size();
  return record_many(
      "foreach_scale", x, raw::foreach_map(UnaryOp::scale, detail::values(x), s),
      [n, s](Backward<T, B>& c) {
        std::vector<Var<T, B>> g;
        std::vector<std::size_t> inputs;
        for (std::size_t i = 0; i < n; ++i)
          if (c.needs(i) && c.grad(i).defined()) {
            g.push_back(c.grad(i));
            inputs.push_back(i);
          }
        detail::set_scaled(c, std::span<const Var<T, B>>(g), std::span<const std::size_t>(inputs),
                           s);
      },
      saves_nothing);
}

// a_i + s * b_i for every i (a_i and b_i of one shape).
template <class T, class B>
std::vector<Var<T, B>> foreach_add_scaled(std::span<const Var<T, B>> a,
                                          std::span<const Var<T, B>> b, T s) {
  check(a.size() == b.size() && !a.empty(), "foreach_add_scaled", "{} and {} tensors given",
        a.size(), b.size());
  std::vector<Var<T, B>> inputs(a.begin(), a.end());
  inputs.insert(inputs.end(), b.begin(), b.end());
  const std::size_t n = a.size();
  return record_many(
      "foreach_add_scaled", std::span<const Var<T, B>>(inputs),
      raw::foreach_axpy(detail::values(a), detail::values(b), s),
      [n, s](Backward<T, B>& c) {
        std::vector<Var<T, B>> g;  // the gradients into the b_i, scaled by one op
        std::vector<std::size_t> inputs;
        for (std::size_t i = 0; i < n; ++i) {
          const Var<T, B> gi = c.grad(i);
          if (!gi.defined()) continue;
          if (c.needs(i)) c.set(i, gi);
          if (c.needs(n + i)) {
            g.push_back(gi);
            inputs.push_back(n + i);
          }
        }
        detail::set_scaled(c, std::span<const Var<T, B>>(g), std::span<const std::size_t>(inputs),
                           s);
      },
      saves_nothing);
}

}  // namespace platipus
