// Multi-tensor ops over lists of tensors, one node for the whole list (as
// PyTorch's _foreach kernels): the inner-loop SGD step updates every named
// piece of a model's parameters with one op.
#pragma once

#include <vector>

#include "platipus/autodiff/ops/arithmetic.hpp"

namespace platipus {

// a_i + s * b_i for every i (a_i and b_i of one shape).
template <class T, class B>
std::vector<Var<T, B>> foreach_add_scaled(std::span<const Var<T, B>> a,
                                          std::span<const Var<T, B>> b, T s) {
  check(a.size() == b.size() && !a.empty(), "foreach_add_scaled", "{} and {} tensors given",
        a.size(), b.size());
  std::vector<Var<T, B>> inputs(a.begin(), a.end());
  inputs.insert(inputs.end(), b.begin(), b.end());
  std::vector<Tensor<T, B>> results;
  for (std::size_t i = 0; i < a.size(); ++i)
    results.push_back(raw::axpy(a[i].value(), b[i].value(), s));
  const std::size_t n = a.size();
  return record_many("foreach_add_scaled", std::span<const Var<T, B>>(inputs), std::move(results),
                     [n, s](Backward<T, B>& c) {
                       for (std::size_t i = 0; i < n; ++i) {
                         const Var<T, B> g = c.grad(i);
                         if (!g.defined()) continue;
                         if (c.needs(i)) c.set(i, g);
                         if (c.needs(n + i)) c.set(n + i, scale(g, s));
                       }
                     });
}

}  // namespace platipus
