// PLATIPUS's KL over a model's pieces from its ratios, as one op: one
// backend call forward, and one backward where the sweep records nothing,
// where a mul, an add, a shift, a sum, a scale and an add a piece were six
// nodes and kernels each way (issue 38). kl_diagonal_gaussians over pieces
// (meta/algorithms/kl_divergence.hpp) is built on it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "platipus/autodiff/ops/arithmetic.hpp"
#include "platipus/autodiff/ops/broadcast.hpp"
#include "platipus/autodiff/ops/foreach.hpp"
#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/tensor/kl_from_ratios.hpp"

namespace platipus {

// The sum over pieces i, in order, of 1/2 sum_j ((r_i[j] + s_i[..., j]
// w_i[j]) - 1), one value per leading index of the s_i: the KL between
// diagonal Gaussians q and p from r = log v_p - log v_q + v_q / v_p, s =
// (m_q - m_p)^2 and w = 1 / v_p (r_i and w_i [n_i], s_i [rows..., n_i]),
// with the bits of those ops on each piece (raw::kl_from_ratios). The rule
// is theirs: with h the output's gradient halved, r_i's gradient is h summed
// over the rows, s_i's h w_i and w_i's the sum of h s_i; where the sweep
// records nothing, all of them by one backend call.
template <class T, class B>
Var<T, B> kl_from_ratios(std::span<const Var<T, B>> r, std::span<const Var<T, B>> s,
                         std::span<const Var<T, B>> w) {
  const auto rv = detail::values(r), sv = detail::values(s), wv = detail::values(w);
  using Values = std::span<const Tensor<T, B>* const>;
  auto y = raw::kl_from_ratios(Values(rv), Values(sv), Values(wv));
  std::vector<Var<T, B>> inputs(r.begin(), r.end());
  inputs.insert(inputs.end(), s.begin(), s.end());
  inputs.insert(inputs.end(), w.begin(), w.end());
  const std::size_t n = r.size();
  return record(
      "kl_from_ratios", std::span<const Var<T, B>>(inputs), std::move(y),
      [n](Backward<T, B>& c) {
        const auto u = c.uniform_grad();
        if (!GradMode::enabled()) {
          std::vector<const Tensor<T, B>*> s_values, w_values;
          for (std::size_t i = 0; i < n; ++i) {
            s_values.push_back(&c.input(n + i).value());
            w_values.push_back(&c.input(2 * n + i).value());
          }
          std::vector<bool> wanted;
          for (std::size_t k = 0; k < 3 * n; ++k) wanted.push_back(c.needs(k));
          Var<T, B> g;  // undefined where the gradient is u in every element
          T scale = u ? *u * T(0.5) : T(0.5);
          if (!u) {
            const auto [gradient, negated] = c.signed_grad();
            if (!gradient.defined()) return;
            g = gradient;
            if (negated) scale = -scale;  // (-g) / 2 is g (-1/2) to the bit
          }
          auto d = raw::kl_from_ratios_backward(Values(s_values), Values(w_values),
                                                g.defined() ? &g.value() : nullptr, scale, wanted);
          for (std::size_t k = 0; k < 3 * n; ++k)
            if (wanted[k]) c.set(k, c.tape().constant(std::move(d[k])));
          return;
        }
        // A sweep that records: each piece's ops' rules, last piece first,
        // as the sweep meets them in the composite.
        Shape kept = c.output().shape();
        kept.push_back(1);
        for (std::size_t i = n; i-- > 0;) {
          if (!c.needs(i) && !c.needs(n + i) && !c.needs(2 * n + i)) continue;
          const Var<T, B> si = c.input(n + i), wi = c.input(2 * n + i);
          const Var<T, B> h = u ? c.tape().filled(si.shape(), *u * T(0.5))
                                : expand(reshape(scale(c.grad(), T(0.5)), kept), si.shape());
          if (c.needs(i)) c.set(i, sum_to(h, c.input(i).shape()));
          if (c.needs(n + i)) c.set(n + i, mul(h, wi));
          if (c.needs(2 * n + i)) c.set(2 * n + i, sum_to(mul(h, si), wi.shape()));
        }
      },
      Saved{.inputs = n >= 32 ? 0u : ~std::uint32_t{0} << n, .outputs = false});
}

}  // namespace platipus
