// KL divergence between diagonal Gaussians, in closed form, from means and
// log-variances (the form in which platipus stores variances):
//
//   KL(N(m_q, v_q) || N(m_p, v_p)) = 1/2 sum_j [ log v_p - log v_q
//                                     + (v_q + (m_q - m_p)^2) / v_p - 1 ]
#pragma once

#include <span>
#include <vector>

#include "platipus/autodiff.hpp"

namespace platipus {

namespace detail {

inline void check_kl_means(const Shape& mean_q, const Shape& mean_p) {
  check(mean_q == mean_p, "kl_diagonal_gaussians", "means {} and {} differ in shape", mean_q,
        mean_p);
}

// The KL from r + exp(-r) (r = log v_p - log v_q, exp(-r) = v_q / v_p),
// (m_q - m_p)^2 and 1 / v_p.
template <class T, class B>
Var<T, B> kl_from_ratios(const Var<T, B>& ratios, const Var<T, B>& squared_difference,
                         const Var<T, B>& inverse_var_p) {
  const auto terms = ratios + squared_difference * inverse_var_p;
  return 0.5 * sum(expand(terms, squared_difference.shape()) - 1.0, {-1});
}

}  // namespace detail

// Means [batch..., D], log-variances broadcastable to them; the sum runs over
// the last axis, leaving one value per leading index.
template <class T, class B>
Var<T, B> kl_diagonal_gaussians(const Var<T, B>& mean_q, const Var<T, B>& log_var_q,
                                const Var<T, B>& mean_p, const Var<T, B>& log_var_p) {
  detail::check_kl_means(mean_q.shape(), mean_p.shape());
  const auto log_ratio = sub(log_var_p, log_var_q);
  return detail::kl_from_ratios(log_ratio + exp_scaled(log_ratio, T(-1)), square(mean_q - mean_p),
                                exp_scaled(log_var_p, T(-1)));
}

// The sum of kl_diagonal_gaussians over pieces i (mean_q[i], log_var_q[i],
// mean_p[i], log_var_p[i]), added in order, with its bits: PLATIPUS's KL
// over a model's parameter pieces. The exps of all pieces are two
// foreach_exp_scaled ops where they were two exp_scaled a piece, the
// differences log v_p - log v_q and m_q - m_p and the sums r + exp(-r) three
// foreach_add_scaled ops (at -1, 1 and -1: sub's and add's bits) where they
// were three a piece, the squares (m_q - m_p)^2 one foreach_square, and
// the terms, their sums and the sum over pieces one kl_from_ratios op where
// the log-variances have one shape [n_i] and the means [rows..., n_i] (issue
// 38).
template <class T, class B>
Var<T, B> kl_diagonal_gaussians(std::span<const Var<T, B>> mean_q,
                                std::span<const Var<T, B>> log_var_q,
                                std::span<const Var<T, B>> mean_p,
                                std::span<const Var<T, B>> log_var_p) {
  const std::size_t n = mean_q.size();
  check(n > 0 && log_var_q.size() == n && mean_p.size() == n && log_var_p.size() == n,
        "kl_diagonal_gaussians", "{}, {}, {} and {} pieces given (means and log-variances of q, p)",
        n, log_var_q.size(), mean_p.size(), log_var_p.size());
  for (std::size_t i = 0; i < n; ++i) detail::check_kl_means(mean_q[i].shape(), mean_p[i].shape());
  bool same_shapes = true;  // else the log-variances broadcast, piece by piece
  for (std::size_t i = 0; i < n; ++i) same_shapes &= log_var_p[i].shape() == log_var_q[i].shape();
  std::vector<Var<T, B>> log_ratio;
  if (same_shapes) {
    log_ratio = foreach_add_scaled(log_var_p, log_var_q, T(-1));
  } else {
    for (std::size_t i = 0; i < n; ++i) log_ratio.push_back(sub(log_var_p[i], log_var_q[i]));
  }
  const std::span<const Var<T, B>> r(log_ratio);
  const auto ratios =
      foreach_add_scaled(r, std::span<const Var<T, B>>(foreach_exp_scaled(r, T(-1))), T(1));
  const auto squared_difference =
      foreach_square(std::span<const Var<T, B>>(foreach_add_scaled(mean_q, mean_p, T(-1))));
  const auto inverse_var_p = foreach_exp_scaled(log_var_p, T(-1));
  using Span = std::span<const Var<T, B>>;
  const auto values = [](const std::vector<Var<T, B>>& x) {
    return detail::values(Span(x));
  };
  const auto rv = values(ratios), sv = values(squared_difference), wv = values(inverse_var_p);
  using Values = std::span<const Tensor<T, B>* const>;
  if (raw::kl_from_ratios_takes(Values(rv), Values(sv), Values(wv)))
    return kl_from_ratios(Span(ratios), Span(squared_difference), Span(inverse_var_p));
  Var<T, B> kl;
  for (std::size_t i = 0; i < n; ++i) {
    const auto term = detail::kl_from_ratios(ratios[i], squared_difference[i], inverse_var_p[i]);
    kl = kl.defined() ? kl + term : term;
  }
  return kl;
}

}  // namespace platipus
