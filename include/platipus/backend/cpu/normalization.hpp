// Batch normalisation's two kernels on the CPU (NormLayout): the statistics,
// normalised values and scaled-and-shifted outputs of every group, and the
// closed-form backward with the scale's and shift's gradients. Each kernel
// sweeps the memory in order, twice: once for the per-group sums (every
// channel's at once), once for the results. A row of `inner` contiguous
// elements is summed in one 64-byte vector of chains, and the rows' sums are
// added in double, so float statistics over hundreds of thousands of
// elements keep their digits and the order does not depend on the machine.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "platipus/backend/layouts.hpp"

namespace platipus::detail::cpu_normalization {

// One 64-byte vector of T (two or four registers where vectors are narrower):
// the chains that a row's sums are kept in, whatever the machine.
template <class T>
using Chains [[gnu::vector_size(64)]] = T;

// The S sums over p < n of the terms f(values, terms) writes from the I
// rows' values at p (arrays of vectors, then of scalars), each summed in
// interleaved chains of one Chains<T> and then in double. (Plain arrays:
// GCC drops a vector type's attribute in a template argument.)
template <std::size_t S, class T, std::size_t I, class F>
std::array<double, S> row_sums(const std::array<const T*, I>& rows, std::int64_t n, F f) {
  using V = Chains<T>;
  constexpr std::int64_t lanes = sizeof(V) / sizeof(T);
  V chains[S] = {}, values[I], terms[S];
  std::int64_t p = 0;
  for (; p + lanes <= n; p += lanes) {
    for (std::size_t i = 0; i < I; ++i) std::memcpy(&values[i], rows[i] + p, sizeof(V));
    f(values, terms);
    for (std::size_t k = 0; k < S; ++k) chains[k] += terms[k];
  }
  T rest[S] = {}, rest_values[I], rest_terms[S];
  for (; p < n; ++p) {
    for (std::size_t i = 0; i < I; ++i) rest_values[i] = rows[i][p];
    f(rest_values, rest_terms);
    for (std::size_t k = 0; k < S; ++k) rest[k] += rest_terms[k];
  }
  std::array<double, S> total;
  for (std::size_t k = 0; k < S; ++k) {
    total[k] = rest[k];
    for (std::int64_t lane = 0; lane < lanes; ++lane) total[k] += chains[k][lane];
  }
  return total;
}

// The first element of row i (a sample) of group (o, ch).
inline std::int64_t row_start(const NormLayout& l, std::int64_t o, std::int64_t ch,
                              std::int64_t i) {
  return ((o * l.n + i) * l.c + ch) * l.inner;
}

// The variance comes from sums of x - k and (x - k)^2 with k the group's
// first element, a value of the group's spread, so that the one sweep does
// not cancel two large sums when the mean is far from zero.
template <class T>
void forward(const NormLayout& l, const T* x, T epsilon, const T* scale, const T* shift, T* x_hat,
             T* inv_std, T* y) {
  const double m = static_cast<double>(l.count());
  const auto c = static_cast<std::size_t>(l.c);
  std::vector<double> sums(c), squares(c);
  std::vector<T> offsets(c), means(c);
  for (std::int64_t o = 0; o < l.outer; ++o) {
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(squares.begin(), squares.end(), 0.0);
    for (std::size_t ch = 0; ch < c; ++ch) offsets[ch] = x[row_start(l, o, std::int64_t(ch), 0)];
    for (std::int64_t i = 0; i < l.n; ++i)
      for (std::size_t ch = 0; ch < c; ++ch) {
        const T* row = x + row_start(l, o, std::int64_t(ch), i);
        const T k = offsets[ch];
        const auto s = row_sums<2>(std::array{row}, l.inner, [k](const auto* v, auto* terms) {
          terms[0] = v[0] - k;
          terms[1] = terms[0] * terms[0];
        });
        sums[ch] += s[0];
        squares[ch] += s[1];
      }
    for (std::size_t ch = 0; ch < c; ++ch) {
      const double shifted_mean = sums[ch] / m;
      const double variance = std::max(squares[ch] / m - shifted_mean * shifted_mean, 0.0);
      const std::int64_t group = o * l.c + std::int64_t(ch);
      means[ch] = static_cast<T>(offsets[ch] + shifted_mean);
      inv_std[group] = static_cast<T>(1.0 / std::sqrt(variance + double(epsilon)));
    }
    for (std::int64_t i = 0; i < l.n; ++i)
      for (std::size_t ch = 0; ch < c; ++ch) {
        const std::int64_t group = o * l.c + std::int64_t(ch),
                           start = row_start(l, o, std::int64_t(ch), i);
        const T mean = means[ch], r = inv_std[group], s = scale[group], b = shift[group];
        for (std::int64_t p = start; p < start + l.inner; ++p) {
          const T normalised = (x[p] - mean) * r;
          x_hat[p] = normalised;
          y[p] = normalised * s + b;
        }
      }
  }
}

// With g_x_hat (or null) and g_inv_std (per group, or null) the gradients
// flowing into batch_norm's other two results, dx takes their terms too,
// r (g_x_hat - mean(g_x_hat) - x_hat mean(x_hat g_x_hat)) and
// -x_hat g_inv_std r^2 / count: batch_norm's whole gradient in one kernel
// for a sweep that records nothing (a meta-gradient's outer one).
template <class T>
void backward(const NormLayout& l, const T* x_hat, const T* inv_std, const T* scale, const T* g,
              const T* g_x_hat, const T* g_inv_std, T* dx, T* d_scale, T* d_shift) {
  const double m = static_cast<double>(l.count());
  const auto c = static_cast<std::size_t>(l.c);
  std::vector<std::array<double, 4>> sums(c);  // of g, x_hat g, g_x_hat, x_hat g_x_hat
  for (std::int64_t o = 0; o < l.outer; ++o) {
    std::fill(sums.begin(), sums.end(), std::array<double, 4>{});
    for (std::int64_t i = 0; i < l.n; ++i)
      for (std::size_t ch = 0; ch < c; ++ch) {
        const std::int64_t start = row_start(l, o, std::int64_t(ch), i);
        auto& to = sums[ch];
        if (g_x_hat) {
          const auto s = row_sums<4>(std::array{g + start, x_hat + start, g_x_hat + start}, l.inner,
                                     [](const auto* v, auto* terms) {
                                       terms[0] = v[0];
                                       terms[1] = v[1] * v[0];
                                       terms[2] = v[2];
                                       terms[3] = v[1] * v[2];
                                     });
          for (std::size_t q = 0; q < 4; ++q) to[q] += s[q];
        } else {
          const auto s = row_sums<2>(std::array{g + start, x_hat + start}, l.inner,
                                     [](const auto* v, auto* terms) {
                                       terms[0] = v[0];
                                       terms[1] = v[1] * v[0];
                                     });
          to[0] += s[0];
          to[1] += s[1];
        }
      }
    for (std::size_t ch = 0; ch < c; ++ch) {
      const std::int64_t group = o * l.c + std::int64_t(ch);
      d_shift[group] = static_cast<T>(sums[ch][0]);
      d_scale[group] = static_cast<T>(sums[ch][1]);
    }
    for (std::int64_t i = 0; i < l.n; ++i)
      for (std::size_t ch = 0; ch < c; ++ch) {
        const std::int64_t group = o * l.c + std::int64_t(ch),
                           start = row_start(l, o, std::int64_t(ch), i);
        const auto [sum_g, sum_xg, sum_h, sum_xh] = sums[ch];
        const T mean_g = static_cast<T>(sum_g / m), mean_xg = static_cast<T>(sum_xg / m),
                mean_h = static_cast<T>(sum_h / m), mean_xh = static_cast<T>(sum_xh / m);
        const T r = inv_std[group], rs = r * scale[group];
        const T by_inv_std = g_inv_std ? g_inv_std[group] * (r * r) * (T(-1) / T(m)) : T(0);
        for (std::int64_t p = start; p < start + l.inner; ++p) {
          T d = rs * (g[p] - mean_g - x_hat[p] * mean_xg);
          if (g_x_hat) d = d + r * (g_x_hat[p] - mean_h - x_hat[p] * mean_xh);
          if (g_inv_std) d = d + x_hat[p] * by_inv_std;
          dx[p] = d;
        }
      }
  }
}

// batch_norm_backward's own gradients, for a gradient sweep that records
// nothing (a meta-gradient's outer sweep): with dx, d_scale = sum_xg and
// d_shift = sum_g its results and h, k, u the gradients flowing into them,
// the gradients of <h, dx> + <k, d_scale> + <u, d_shift> in x_hat, inv_std,
// scale and g. With A = sum(h), X = sum(x_hat h), C = sum(h g) per group and
// bracket = C - (A sum_g + X sum_xg) / count:
//   d_x_hat = g k - r s (h sum_xg + g X) / count,   d_inv_std = s bracket,
//   d_g = r s (h - (A + x_hat X) / count) + x_hat k + u,   d_scale = r bracket.
template <class T>
void double_backward(const NormLayout& l, const T* x_hat, const T* inv_std, const T* scale,
                     const T* g, const T* sum_xg, const T* sum_g, const T* h, const T* k,
                     const T* u, T* d_x_hat, T* d_inv_std, T* d_scale, T* d_g) {
  const double m = static_cast<double>(l.count());
  const auto c = static_cast<std::size_t>(l.c);
  std::vector<std::array<double, 3>> sums(c);
  for (std::int64_t o = 0; o < l.outer; ++o) {
    std::fill(sums.begin(), sums.end(), std::array<double, 3>{});
    for (std::int64_t i = 0; i < l.n; ++i)
      for (std::size_t ch = 0; ch < c; ++ch) {
        const std::int64_t start = row_start(l, o, std::int64_t(ch), i);
        const auto s = row_sums<3>(std::array{h + start, x_hat + start, g + start}, l.inner,
                                   [](const auto* v, auto* terms) {
                                     terms[0] = v[0];
                                     terms[1] = v[1] * v[0];
                                     terms[2] = v[0] * v[2];
                                   });
        for (std::size_t q = 0; q < 3; ++q) sums[ch][q] += s[q];
      }
    for (std::size_t ch = 0; ch < c; ++ch) {
      const std::int64_t group = o * l.c + std::int64_t(ch);
      const auto [a, x, hg] = sums[ch];
      const double bracket = hg - (a * sum_g[group] + x * sum_xg[group]) / m;
      d_scale[group] = static_cast<T>(inv_std[group] * bracket);
      d_inv_std[group] = static_cast<T>(scale[group] * bracket);
      const T rs = inv_std[group] * scale[group], mean_h = static_cast<T>(a / m),
              mean_xh = static_cast<T>(x / m), mean_xg = static_cast<T>(sum_xg[group] / m),
              kg = k ? k[group] : T(0), ug = u ? u[group] : T(0);
      for (std::int64_t i = 0; i < l.n; ++i) {
        const std::int64_t start = row_start(l, o, std::int64_t(ch), i);
        for (std::int64_t p = start; p < start + l.inner; ++p) {
          d_g[p] = rs * (h[p] - mean_h - x_hat[p] * mean_xh) + x_hat[p] * kg + ug;
          d_x_hat[p] = g[p] * kg - rs * (h[p] * mean_xg + g[p] * mean_xh);
        }
      }
    }
  }
}

}  // namespace platipus::detail::cpu_normalization
