// KL divergence between diagonal Gaussians, in closed form, from means and
// log-variances (the form in which platipus stores variances):
//
//   KL(N(m_q, v_q) || N(m_p, v_p)) = 1/2 sum_j [ log v_p - log v_q
//                                     + (v_q + (m_q - m_p)^2) / v_p - 1 ]
#pragma once

#include "platipus/autodiff.hpp"

namespace platipus {

// Means [batch..., D], log-variances broadcastable to them; the sum runs over
// the last axis, leaving one value per leading index.
template <class T, class B>
Var<T, B> kl_diagonal_gaussians(const Var<T, B>& mean_q, const Var<T, B>& log_var_q,
                                const Var<T, B>& mean_p, const Var<T, B>& log_var_p) {
  check(mean_q.shape() == mean_p.shape(), "kl_diagonal_gaussians",
        "means {} and {} differ in shape", mean_q.shape(), mean_p.shape());
  const auto log_ratio =
      sub(log_var_p, log_var_q);  // log v_p - log v_q; v_q / v_p = exp(-log_ratio)
  const auto terms = log_ratio + exp_scaled(log_ratio, T(-1)) +
                     square(mean_q - mean_p) * exp_scaled(log_var_p, T(-1));
  return 0.5 * sum(expand(terms, mean_q.shape()) - 1.0, {-1});
}

}  // namespace platipus
