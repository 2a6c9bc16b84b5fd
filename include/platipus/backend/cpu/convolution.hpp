// The CPU convolution and max pooling of platipus::cpu: im2col per image
// into a thread-local buffer, then one Eigen GEMM per image (forward, input
// gradient) or per group (filter gradient, the images' products summed in
// the GEMM's accumulator). A 1x1 convolution of stride 1 and no padding
// reads the image in place. Threads come from the caller: the meta-learner
// runs chunks of tasks on its pool, each chunk's groups in one call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "platipus/backend/layouts.hpp"

namespace platipus::detail::cpu_convolution {

template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

inline bool reads_in_place(const ConvLayout& l) {
  return l.kernel == 1 && l.stride == 1 && l.padding == 0;
}

// The output columns j whose input column j s + b - p lies inside [0, w):
// [first, last).
struct Inside {
  std::int64_t first, last;
};
inline Inside inside(const ConvLayout& l, std::int64_t b) {
  const std::int64_t offset = b - l.padding;  // input column = j s + offset
  std::int64_t first = offset < 0 ? (-offset + l.stride - 1) / l.stride : 0;
  std::int64_t last = l.w - offset <= 0 ? 0 : (l.w - offset - 1) / l.stride + 1;
  first = std::min(first, l.wo);
  last = std::clamp(last, first, l.wo);
  return {first, last};
}

// im2col's row (ch, a, b) for stride 1 and an output as wide as the input
// (the "same" padding of conv4): then the row is the channel's plane shifted
// by (a - p) w + b - p, so one copy fills it, and only the cells that read
// past a border (whole rows above and below, a column at each side) are
// then set to zero.
template <class T>
void shifted_plane(const ConvLayout& l, const T* plane, std::int64_t a, std::int64_t b, T* out) {
  const std::int64_t p = l.padding, w = l.w, size = l.ho * l.wo;
  const auto [first, last] = inside(l, b);
  const std::int64_t top = std::clamp(p - a, std::int64_t{0}, l.ho),
                     bottom = std::clamp(l.h + p - a, top, l.ho);  // rows [top, bottom) read x
  if (bottom == top || last == first) {
    std::fill(out, out + size, T(0));
    return;
  }
  const std::int64_t begin = top * w + first, end = (bottom - 1) * w + last,
                     shift = (a - p) * w + b - p;
  std::fill(out, out + begin, T(0));
  std::copy(plane + begin + shift, plane + end + shift, out + begin);
  std::fill(out + end, out + size, T(0));
  for (std::int64_t i = top; i < bottom; ++i) {
    for (std::int64_t j = 0; j < first; ++j) out[i * w + j] = T(0);
    for (std::int64_t j = last; j < w; ++j) out[i * w + j] = T(0);
  }
}

// col [c k k, ho wo] of one image x [c, h, w]: row (ch, a, b), column (i, j)
// holds x[ch, i s + a - p, j s + b - p], zero outside the image. Each row of
// output positions is zeros, a strided (for stride 1: contiguous) copy, zeros.
template <class T>
void im2col(const ConvLayout& l, const T* x, T* col) {
  const std::int64_t k = l.kernel, s = l.stride, p = l.padding;
  const bool same = s == 1 && l.wo == l.w;
  for (std::int64_t ch = 0; ch < l.c; ++ch)
    for (std::int64_t a = 0; a < k; ++a)
      for (std::int64_t b = 0; b < k; ++b) {
        if (same) {
          shifted_plane(l, x + ch * l.h * l.w, a, b, col + ((ch * k + a) * k + b) * l.ho * l.wo);
          continue;
        }
        const auto [first, last] = inside(l, b);
        for (std::int64_t i = 0; i < l.ho; ++i) {
          const std::int64_t row = i * s + a - p;
          T* out = col + ((ch * k + a) * k + b) * l.ho * l.wo + i * l.wo;
          if (row < 0 || row >= l.h) {
            std::fill(out, out + l.wo, T(0));
            continue;
          }
          const T* in = x + (ch * l.h + row) * l.w;  // input column j s + b - p
          std::fill(out, out + first, T(0));
          if (s == 1) {
            if (last > first) std::copy_n(in + (first + b - p), last - first, out + first);
          } else {
            for (std::int64_t j = first; j < last; ++j) out[j] = in[j * s + b - p];
          }
          std::fill(out + last, out + l.wo, T(0));
        }
      }
}

// y[j] += x[j] for j < n; the arrays do not overlap, so it vectorises.
template <class T>
void add_row(const T* __restrict x, T* __restrict y, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) y[j] += x[j];
}

// The adjoint of im2col: x [c, h, w] += the columns' entries at their pixels.
template <class T>
void col2im_add(const ConvLayout& l, const T* col, T* x) {
  const std::int64_t k = l.kernel, s = l.stride, p = l.padding;
  for (std::int64_t ch = 0; ch < l.c; ++ch)
    for (std::int64_t a = 0; a < k; ++a)
      for (std::int64_t b = 0; b < k; ++b) {
        const auto [first, last] = inside(l, b);
        for (std::int64_t i = 0; i < l.ho; ++i) {
          const std::int64_t row = i * s + a - p;
          if (row < 0 || row >= l.h) continue;
          const T* in = col + ((ch * k + a) * k + b) * l.ho * l.wo + i * l.wo;
          T* out = x + (ch * l.h + row) * l.w;  // input column j s + b - p
          if (s == 1)
            add_row(in + first, out + first + b - p, last - first);
          else
            for (std::int64_t j = first; j < last; ++j) out[j * s + b - p] += in[j];
        }
      }
}

// The calling thread's column buffer for one image.
template <class T>
T* columns(const ConvLayout& l) {
  thread_local std::vector<T> buffer;
  buffer.resize(static_cast<std::size_t>(l.c * l.kernel * l.kernel * l.ho * l.wo));
  return buffer.data();
}

template <class T>
void forward(const ConvLayout& l, const T* x, const T* w, T* y) {
  const std::int64_t ckk = l.c * l.kernel * l.kernel, hw = l.h * l.w, howo = l.ho * l.wo;
  T* col = reads_in_place(l) ? nullptr : columns<T>(l);
  for (std::int64_t g = 0; g < l.groups; ++g) {
    const Eigen::Map<const Matrix<T>> filters(w + g * l.c_out * ckk, l.c_out, ckk);
    for (std::int64_t i = 0; i < l.n; ++i) {
      const std::int64_t image = g * l.n + i;
      const T* source = x + image * l.c * hw;
      if (col) im2col(l, source, col);
      Eigen::Map<Matrix<T>> out(y + image * l.c_out * howo, l.c_out, howo);
      out.noalias() = filters * Eigen::Map<const Matrix<T>>(col ? col : source, ckk, howo);
    }
  }
}

template <class T>
void input_grad(const ConvLayout& l, const T* dy, const T* w, T* dx) {
  const std::int64_t ckk = l.c * l.kernel * l.kernel, hw = l.h * l.w, howo = l.ho * l.wo;
  const bool in_place = reads_in_place(l);
  T* col = in_place ? nullptr : columns<T>(l);
  for (std::int64_t g = 0; g < l.groups; ++g) {
    const Eigen::Map<const Matrix<T>> filters(w + g * l.c_out * ckk, l.c_out, ckk);
    for (std::int64_t i = 0; i < l.n; ++i) {
      const std::int64_t image = g * l.n + i;
      const Eigen::Map<const Matrix<T>> grad(dy + image * l.c_out * howo, l.c_out, howo);
      T* target = dx + image * l.c * hw;
      if (in_place) {
        Eigen::Map<Matrix<T>>(target, ckk, howo).noalias() = filters.transpose() * grad;
        continue;
      }
      Eigen::Map<Matrix<T>>(col, ckk, howo).noalias() = filters.transpose() * grad;
      std::fill(target, target + l.c * hw, T(0));
      col2im_add(l, col, target);
    }
  }
}

template <class T>
void weight_grad(const ConvLayout& l, const T* x, const T* dy, T* dw) {
  const std::int64_t ckk = l.c * l.kernel * l.kernel, hw = l.h * l.w, howo = l.ho * l.wo;
  T* col = reads_in_place(l) ? nullptr : columns<T>(l);
  for (std::int64_t g = 0; g < l.groups; ++g) {
    Eigen::Map<Matrix<T>> grad(dw + g * l.c_out * ckk, l.c_out, ckk);
    grad.setZero();
    for (std::int64_t i = 0; i < l.n; ++i) {
      const std::int64_t image = g * l.n + i;
      const T* source = x + image * l.c * hw;
      if (col) im2col(l, source, col);
      grad.noalias() += Eigen::Map<const Matrix<T>>(dy + image * l.c_out * howo, l.c_out, howo) *
                        Eigen::Map<const Matrix<T>>(col ? col : source, ckk, howo).transpose();
    }
  }
}

template <class T>
void max_pool(const PoolLayout& l, const T* x, T* y, std::int64_t* positions) {
  for (std::int64_t plane = 0; plane < l.planes; ++plane)
    for (std::int64_t i = 0; i < l.ho; ++i)
      for (std::int64_t j = 0; j < l.wo; ++j) {
        std::int64_t best = (plane * l.h + i * l.stride) * l.w + j * l.stride;
        for (std::int64_t a = 0; a < l.kernel; ++a)
          for (std::int64_t b = 0; b < l.kernel; ++b) {
            const std::int64_t at = (plane * l.h + i * l.stride + a) * l.w + j * l.stride + b;
            if (x[at] > x[best]) best = at;
          }
        const std::int64_t out = (plane * l.ho + i) * l.wo + j;
        y[out] = x[best];
        positions[out] = best;
      }
}

}  // namespace platipus::detail::cpu_convolution
