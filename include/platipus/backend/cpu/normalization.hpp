// Batch normalisation's two kernels on the CPU (NormLayout): the statistics,
// normalised values and scaled-and-shifted outputs of every group, and the
// closed-form backward with the scale's and shift's gradients. A group is
// `n` rows of `inner` contiguous elements: each row is summed in eight chains
// of T that the compiler keeps in vector registers, and the rows' sums are
// added in double, so float statistics over hundreds of thousands of
// elements keep their digits.
#pragma once

#include <cmath>
#include <cstdint>

#include "platipus/backend/layouts.hpp"

namespace platipus::detail::cpu_normalization {

// sum_p f(p) for p < n, in eight interleaved chains.
template <class T, class F>
double row_sum(std::int64_t n, F f) {
  constexpr std::int64_t lanes = 8;
  T chain[lanes] = {};
  std::int64_t p = 0;
  for (; p + lanes <= n; p += lanes)
    for (std::int64_t k = 0; k < lanes; ++k) chain[k] += f(p + k);
  T rest = 0;
  for (; p < n; ++p) rest += f(p);
  double total = rest;
  for (std::int64_t k = 0; k < lanes; ++k) total += chain[k];
  return total;
}

// The first element of row i (a sample) of group (o, ch).
inline std::int64_t row_start(const NormLayout& l, std::int64_t o, std::int64_t ch,
                              std::int64_t i) {
  return ((o * l.n + i) * l.c + ch) * l.inner;
}

template <class T>
void forward(const NormLayout& l, const T* x, T epsilon, const T* scale, const T* shift, T* x_hat,
             T* inv_std, T* y) {
  const double m = static_cast<double>(l.count());
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t ch = 0; ch < l.c; ++ch) {
      double sum = 0;
      for (std::int64_t i = 0; i < l.n; ++i) {
        const T* row = x + row_start(l, o, ch, i);
        sum += row_sum<T>(l.inner, [row](std::int64_t p) { return row[p]; });
      }
      const T mean = static_cast<T>(sum / m);
      double squares = 0;  // about the mean: no cancellation of two large sums
      for (std::int64_t i = 0; i < l.n; ++i) {
        const T* row = x + row_start(l, o, ch, i);
        squares += row_sum<T>(l.inner, [row, mean](std::int64_t p) {
          const T d = row[p] - mean;
          return d * d;
        });
      }
      const std::int64_t group = o * l.c + ch;
      const T r = static_cast<T>(1.0 / std::sqrt(squares / m + double(epsilon)));
      const T s = scale[group], b = shift[group];
      inv_std[group] = r;
      for (std::int64_t i = 0; i < l.n; ++i) {
        const std::int64_t start = row_start(l, o, ch, i);
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
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t ch = 0; ch < l.c; ++ch) {
      double sum_g = 0, sum_xg = 0;
      for (std::int64_t i = 0; i < l.n; ++i) {
        const std::int64_t start = row_start(l, o, ch, i);
        const T *gr = g + start, *xr = x_hat + start;
        sum_g += row_sum<T>(l.inner, [gr](std::int64_t p) { return gr[p]; });
        sum_xg += row_sum<T>(l.inner, [gr, xr](std::int64_t p) { return xr[p] * gr[p]; });
      }
      const std::int64_t group = o * l.c + ch;
      d_shift[group] = static_cast<T>(sum_g);
      d_scale[group] = static_cast<T>(sum_xg);
      const T mean_g = static_cast<T>(sum_g / m), mean_xg = static_cast<T>(sum_xg / m);
      const T rs = inv_std[group] * scale[group];
      for (std::int64_t i = 0; i < l.n; ++i) {
        const std::int64_t start = row_start(l, o, ch, i);
        for (std::int64_t p = start; p < start + l.inner; ++p)
          dx[p] = rs * (g[p] - mean_g - x_hat[p] * mean_xg);
      }
    }
}

}  // namespace platipus::detail::cpu_normalization
