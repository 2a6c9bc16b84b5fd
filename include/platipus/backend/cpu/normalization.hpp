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
#include <utility>
#include <vector>

#include "platipus/backend/layouts.hpp"

namespace platipus::detail::cpu_normalization {

// One 64-byte vector of T (two or four registers where vectors are narrower):
// the chains that a row's sums are kept in, whatever the machine.
template <class T>
using Chains [[gnu::vector_size(64)]] = T;

// The two sums over p < n of f(a[p], b[p]) (which returns a pair), each in
// interleaved chains of one Chains<T>, then added in double.
template <class T, class F>
std::array<double, 2> row_sums(const T* a, const T* b, std::int64_t n, F f) {
  using V = Chains<T>;
  constexpr std::int64_t lanes = sizeof(V) / sizeof(T);
  V first = {}, second = {};
  std::int64_t p = 0;
  for (; p + lanes <= n; p += lanes) {
    V va, vb;
    std::memcpy(&va, a + p, sizeof(V));
    std::memcpy(&vb, b + p, sizeof(V));
    const auto [u, v] = f(va, vb);
    first += u;
    second += v;
  }
  T rest_first = 0, rest_second = 0;
  for (; p < n; ++p) {
    const auto [u, v] = f(a[p], b[p]);
    rest_first += u;
    rest_second += v;
  }
  std::array<double, 2> total{rest_first, rest_second};
  for (std::int64_t k = 0; k < lanes; ++k) {
    total[0] += first[k];
    total[1] += second[k];
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
        const auto s = row_sums(row, row, l.inner, [k](auto v, auto) {
          const auto d = v - k;
          return std::pair{d, d * d};
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
                           start = row_start(l, o, group % l.c, i);
        const T mean = means[ch], r = inv_std[group], s = scale[group], b = shift[group];
        for (std::int64_t p = start; p < start + l.inner; ++p) {
          const T normalised = (x[p] - mean) * r;
          x_hat[p] = normalised;
          y[p] = normalised * s + b;
        }
      }
  }
}

template <class T>
void backward(const NormLayout& l, const T* x_hat, const T* inv_std, const T* scale, const T* g,
              T* dx, T* d_scale, T* d_shift) {
  const double m = static_cast<double>(l.count());
  const auto c = static_cast<std::size_t>(l.c);
  std::vector<double> sum_g(c), sum_xg(c);
  for (std::int64_t o = 0; o < l.outer; ++o) {
    std::fill(sum_g.begin(), sum_g.end(), 0.0);
    std::fill(sum_xg.begin(), sum_xg.end(), 0.0);
    for (std::int64_t i = 0; i < l.n; ++i)
      for (std::size_t ch = 0; ch < c; ++ch) {
        const std::int64_t start = row_start(l, o, std::int64_t(ch), i);
        const T *gr = g + start, *xr = x_hat + start;
        const auto s = row_sums(gr, xr, l.inner, [](auto gv, auto xv) {
          return std::pair{gv, xv * gv};
        });
        sum_g[ch] += s[0];
        sum_xg[ch] += s[1];
      }
    for (std::size_t ch = 0; ch < c; ++ch) {
      const std::int64_t group = o * l.c + std::int64_t(ch);
      d_shift[group] = static_cast<T>(sum_g[ch]);
      d_scale[group] = static_cast<T>(sum_xg[ch]);
    }
    for (std::int64_t i = 0; i < l.n; ++i)
      for (std::size_t ch = 0; ch < c; ++ch) {
        const std::int64_t group = o * l.c + std::int64_t(ch),
                           start = row_start(l, o, std::int64_t(ch), i);
        const T mean_g = static_cast<T>(sum_g[ch] / m), mean_xg = static_cast<T>(sum_xg[ch] / m);
        const T rs = inv_std[group] * scale[group];
        for (std::int64_t p = start; p < start + l.inner; ++p)
          dx[p] = rs * (g[p] - mean_g - x_hat[p] * mean_xg);
      }
  }
}

}  // namespace platipus::detail::cpu_normalization
