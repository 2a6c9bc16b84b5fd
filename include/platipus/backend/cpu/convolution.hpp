// The CPU convolution and max pooling of platipus::cpu: im2col into a
// thread-local buffer, then one Eigen GEMM per image, or per few images
// side by side where an image has few output pixels (forward, input
// gradient), and the filter gradient's products summed in the GEMM's
// accumulator. A 1x1 convolution of stride 1 and no padding reads the image
// in place. 3x3 convolutions of stride 1 and padding 1 between 16 channels
// or more, on images of 8x8 or more, go to Winograd's F(2x2, 3x3) instead
// (winograd.hpp). Threads come from the caller: the meta-learner runs chunks
// of tasks on its pool, each chunk's groups in one call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "platipus/backend/cpu/lanes.hpp"
#include "platipus/backend/cpu/winograd.hpp"
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
// (the "same" padding of conv4) is the channel's plane shifted by
// (a - p) w + b - p: cell i of the row reads cell i + shift of the plane for
// i in [begin, end), except the cells of rows [top, bottom) outside columns
// [first, last), which read past a side border (as do all cells outside
// [begin, end)). So one copy fills the row and one add returns it.
struct PlaneShift {
  std::int64_t top, bottom, first, last, begin, end, shift;
  bool empty() const { return bottom == top || last == first; }
};
inline PlaneShift plane_shift(const ConvLayout& l, std::int64_t a, std::int64_t b) {
  const std::int64_t p = l.padding, w = l.w;
  const auto [first, last] = inside(l, b);
  const std::int64_t top = std::clamp(p - a, std::int64_t{0}, l.ho),
                     bottom = std::clamp(l.h + p - a, top, l.ho);  // rows [top, bottom) read x
  return {top, bottom, first, last, top * w + first, (bottom - 1) * w + last, (a - p) * w + b - p};
}

// Zeroes the cells of rows [top, bottom) that read past a side border.
template <class T>
void zero_sides(const ConvLayout& l, const PlaneShift& s, T* row) {
  for (std::int64_t i = s.top; i < s.bottom; ++i) {
    std::fill(row + i * l.w, row + i * l.w + s.first, T(0));
    std::fill(row + i * l.w + s.last, row + (i + 1) * l.w, T(0));
  }
}

template <class T>
void shifted_plane(const ConvLayout& l, const T* plane, std::int64_t a, std::int64_t b, T* out) {
  const std::int64_t size = l.ho * l.wo;
  const PlaneShift s = plane_shift(l, a, b);
  if (s.empty()) {
    std::fill(out, out + size, T(0));
    return;
  }
  std::fill(out, out + s.begin, T(0));
  std::copy(plane + s.begin + s.shift, plane + s.end + s.shift, out + s.begin);
  std::fill(out + s.end, out + size, T(0));
  zero_sides(l, s, out);
}

// y[j] += x[j] for j < n; the arrays do not overlap, so it vectorises.
template <class T>
void add_row(const T* __restrict x, T* __restrict y, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) y[j] += x[j];
}

// The adjoint of shifted_plane: plane += the row's cells at the pixels they
// read. The row's side cells are zeroed first (it is scratch), so that one
// contiguous add serves all its rows: adding zero leaves a pixel's bits as
// they were, and each pixel's terms keep their order.
template <class T>
void add_shifted_plane(const ConvLayout& l, T* row, std::int64_t a, std::int64_t b, T* plane) {
  const PlaneShift s = plane_shift(l, a, b);
  if (s.empty()) return;
  zero_sides(l, s, row);
  add_row(row + s.begin, plane + s.begin + s.shift, s.end - s.begin);
}

// col [c k k, ho wo] of one image x [c, h, w], its rows `ld` apart: row
// (ch, a, b), column (i, j) holds x[ch, i s + a - p, j s + b - p], zero
// outside the image. Each row of output positions is zeros, a strided (for
// stride 1: contiguous) copy, zeros.
template <class T>
void im2col(const ConvLayout& l, const T* x, T* col, std::int64_t ld) {
  const std::int64_t k = l.kernel, s = l.stride, p = l.padding;
  const bool same = s == 1 && l.wo == l.w;
  for (std::int64_t ch = 0; ch < l.c; ++ch)
    for (std::int64_t a = 0; a < k; ++a)
      for (std::int64_t b = 0; b < k; ++b) {
        if (same) {
          shifted_plane(l, x + ch * l.h * l.w, a, b, col + ((ch * k + a) * k + b) * ld);
          continue;
        }
        const auto [first, last] = inside(l, b);
        for (std::int64_t i = 0; i < l.ho; ++i) {
          const std::int64_t row = i * s + a - p;
          T* out = col + ((ch * k + a) * k + b) * ld + i * l.wo;
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

// The adjoint of im2col: x [c, h, w] += the columns' entries at their pixels
// (col is scratch: the "same" case zeroes its side cells).
template <class T>
void col2im_add(const ConvLayout& l, T* col, std::int64_t ld, T* x) {
  const std::int64_t k = l.kernel, s = l.stride, p = l.padding;
  const bool same = s == 1 && l.wo == l.w;
  for (std::int64_t ch = 0; ch < l.c; ++ch)
    for (std::int64_t a = 0; a < k; ++a)
      for (std::int64_t b = 0; b < k; ++b) {
        if (same) {
          add_shifted_plane(l, col + ((ch * k + a) * k + b) * ld, a, b, x + ch * l.h * l.w);
          continue;
        }
        const auto [first, last] = inside(l, b);
        for (std::int64_t i = 0; i < l.ho; ++i) {
          const std::int64_t row = i * s + a - p;
          if (row < 0 || row >= l.h) continue;
          const T* in = col + ((ch * k + a) * k + b) * ld + i * l.wo;
          T* out = x + (ch * l.h + row) * l.w;  // input column j s + b - p
          if (s == 1)
            add_row(in + first, out + first + b - p, last - first);
          else
            for (std::int64_t j = first; j < last; ++j) out[j * s + b - p] += in[j];
        }
      }
}

// Images per GEMM: one, or where an image has few output pixels (conv4's
// deeper blocks: 7x7 and 3x3 on Omniglot) as many as give the product about
// 512 columns, so that Eigen packs the filters once for all of them rather
// than once per image (a 64 x 576 filter matrix times 9 columns is mostly
// packing). A 1x1 convolution read in place takes one at a time.
inline std::int64_t images_per_gemm(const ConvLayout& l) {
  if (reads_in_place(l)) return 1;
  return std::clamp<std::int64_t>(512 / (l.ho * l.wo), 1, std::max<std::int64_t>(l.n, 1));
}

// The calling thread's buffer `which` (0 to 3: columns, products, ...) of at
// least `size` entries, its contents undefined. It only grows: resizing it
// down and up again, layer after layer, zeroed the regrown part every call
// (about 3% of a conv4 step in memset).
template <class T, int which>
T* scratch(std::int64_t size) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < static_cast<std::size_t>(size)) buffer.resize(static_cast<std::size_t>(size));
  return buffer.data();
}

// The three products by winograd.hpp, group by group, in the calling
// thread's buffers (transformed inputs, products, transformed filters, a
// padded plane), each group's bias [c_out] (or none) added as the outputs
// are written. `adjoint`: the input gradient, the forward of dy [.., c_out,
// h, w] by the filters transposed and flipped, into dx [.., c, h, w].
template <class T>
void winograd_convolve(const ConvLayout& l, const T* in, const T* w, bool adjoint, const T* bias,
                       T* out) {
  const auto s = winograd::tiling(l);
  const std::int64_t ld = s.images * s.per_image, hw = l.h * l.w, c_in = adjoint ? l.c_out : l.c,
                     c_out = adjoint ? l.c : l.c_out;
  T* v = scratch<T, 0>(winograd::points * c_in * ld);
  T* p = scratch<T, 1>(winograd::points * c_out * ld);
  T* u = scratch<T, 2>(winograd::points * c_out * c_in);
  T* padded = scratch<T, 3>(winograd::padded_size(s));
  for (std::int64_t g = 0; g < l.groups; ++g) {
    winograd::transform_filters(w + g * c_out * c_in * 9, c_out, c_in, adjoint, u);
    winograd::convolve(l, s, in + g * l.n * c_in * hw, c_in, c_out, u, v, p, padded,
                       bias ? bias + g * c_out : nullptr, out + g * l.n * c_out * hw);
  }
}

template <class T>
void winograd_weight_grad(const ConvLayout& l, const T* x, const T* dy, T* dw) {
  const auto s = winograd::tiling(l);
  const std::int64_t ld = s.images * s.per_image, hw = l.h * l.w, c = l.c, c_out = l.c_out;
  T* v = scratch<T, 0>(winograd::points * c * ld);
  T* e = scratch<T, 1>(winograd::points * c_out * ld);
  T* du = scratch<T, 2>(winograd::points * c_out * c);
  T* padded = scratch<T, 3>(winograd::padded_size(s));
  for (std::int64_t g = 0; g < l.groups; ++g)
    winograd::filter_grad(l, s, x + g * l.n * c * hw, dy + g * l.n * c_out * hw, v, e, du, padded,
                          dw + g * c_out * c * 9);
}

// m images' [rows, n] blocks, one after another, to one [rows, m n] matrix
// with the images side by side (or back, `to_blocks`).
template <class T>
void side_by_side(const T* from, std::int64_t m, std::int64_t rows, std::int64_t n, T* to,
                  bool to_blocks = false) {
  for (std::int64_t k = 0; k < m; ++k)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t block = (k * rows + r) * n, side = r * m * n + k * n;
      std::copy_n(from + (to_blocks ? side : block), n, to + (to_blocks ? block : side));
    }
}

// y[image] = filters * col(image) + bias for the images of each group,
// `batch` at a time: their columns side by side in col [c k k, m ho wo], one
// product [c_out, m ho wo], then each image's [c_out, ho wo] block copied out
// and the group's bias [c_out] (if any) added while it is in cache (the
// same sums as adding it afterwards, without another sweep of y).
template <class T>
void forward(const ConvLayout& l, const T* x, const T* w, const T* bias, T* y) {
  if (winograd::applies(l)) return winograd_convolve(l, x, w, false, bias, y);
  const std::int64_t ckk = l.c * l.kernel * l.kernel, hw = l.h * l.w, howo = l.ho * l.wo,
                     batch = images_per_gemm(l);
  T* col = reads_in_place(l) ? nullptr : scratch<T, 0>(ckk * batch * howo);
  T* product = batch > 1 ? scratch<T, 1>(l.c_out * batch * howo) : nullptr;
  for (std::int64_t g = 0; g < l.groups; ++g) {
    const Eigen::Map<const Matrix<T>> filters(w + g * l.c_out * ckk, l.c_out, ckk);
    for (std::int64_t first = 0; first < l.n; first += batch) {
      const std::int64_t m = std::min(batch, l.n - first), width = m * howo,
                         image = g * l.n + first;
      const T* source = x + image * l.c * hw;
      for (std::int64_t k = 0; col && k < m; ++k)
        im2col(l, source + k * l.c * hw, col + k * howo, width);
      T* out = m > 1 ? product : y + image * l.c_out * howo;
      Eigen::Map<Matrix<T>>(out, l.c_out, width).noalias() =
          filters * Eigen::Map<const Matrix<T>>(col ? col : source, ckk, width);
      if (m > 1) side_by_side(product, m, l.c_out, howo, y + image * l.c_out * howo, true);
      for (std::int64_t k = 0; bias && k < m; ++k)
        for (std::int64_t ch = 0; ch < l.c_out; ++ch) {
          T* plane = y + ((image + k) * l.c_out + ch) * howo;
          const T b = bias[g * l.c_out + ch];
          for (std::int64_t p = 0; p < howo; ++p) plane[p] += b;
        }
    }
  }
}

// dx[image] = col2im(filters^T dy[image]), `batch` images at a time: their
// gradients gathered side by side into [c_out, m ho wo], one product.
template <class T>
void input_grad(const ConvLayout& l, const T* dy, const T* w, T* dx) {
  if (winograd::applies(l))
    return winograd_convolve(l, dy, w, true, static_cast<const T*>(nullptr), dx);
  const std::int64_t ckk = l.c * l.kernel * l.kernel, hw = l.h * l.w, howo = l.ho * l.wo,
                     batch = images_per_gemm(l);
  const bool in_place = reads_in_place(l);
  T* col = in_place ? nullptr : scratch<T, 0>(ckk * batch * howo);
  T* gathered = batch > 1 ? scratch<T, 1>(l.c_out * batch * howo) : nullptr;
  for (std::int64_t g = 0; g < l.groups; ++g) {
    const Eigen::Map<const Matrix<T>> filters(w + g * l.c_out * ckk, l.c_out, ckk);
    for (std::int64_t first = 0; first < l.n; first += batch) {
      const std::int64_t m = std::min(batch, l.n - first), width = m * howo,
                         image = g * l.n + first;
      const T* grad = dy + image * l.c_out * howo;
      if (m > 1) {
        side_by_side(grad, m, l.c_out, howo, gathered);
        grad = gathered;
      }
      T* target = dx + image * l.c * hw;
      const Eigen::Map<const Matrix<T>> grads(grad, l.c_out, width);
      if (in_place) {
        Eigen::Map<Matrix<T>>(target, ckk, howo).noalias() = filters.transpose() * grads;
        continue;
      }
      Eigen::Map<Matrix<T>>(col, ckk, width).noalias() = filters.transpose() * grads;
      std::fill(target, target + m * l.c * hw, T(0));
      for (std::int64_t k = 0; k < m; ++k)
        col2im_add(l, col + k * howo, width, target + k * l.c * hw);
    }
  }
}

// dw[group] = sum over its images of dy[image] col(image)^T, `batch` images
// per GEMM (the gradients gathered side by side as in input_grad).
template <class T>
void weight_grad(const ConvLayout& l, const T* x, const T* dy, T* dw) {
  if (winograd::applies(l)) return winograd_weight_grad(l, x, dy, dw);
  const std::int64_t ckk = l.c * l.kernel * l.kernel, hw = l.h * l.w, howo = l.ho * l.wo,
                     batch = images_per_gemm(l);
  T* col = reads_in_place(l) ? nullptr : scratch<T, 0>(ckk * batch * howo);
  T* gathered = batch > 1 ? scratch<T, 1>(l.c_out * batch * howo) : nullptr;
  for (std::int64_t g = 0; g < l.groups; ++g) {
    Eigen::Map<Matrix<T>> grad(dw + g * l.c_out * ckk, l.c_out, ckk);
    grad.setZero();
    for (std::int64_t first = 0; first < l.n; first += batch) {
      const std::int64_t m = std::min(batch, l.n - first), width = m * howo,
                         image = g * l.n + first;
      const T* source = x + image * l.c * hw;
      for (std::int64_t k = 0; col && k < m; ++k)
        im2col(l, source + k * l.c * hw, col + k * howo, width);
      const T* dys = dy + image * l.c_out * howo;
      if (m > 1) {
        side_by_side(dys, m, l.c_out, howo, gathered);
        dys = gathered;
      }
      grad.noalias() += Eigen::Map<const Matrix<T>>(dys, l.c_out, width) *
                        Eigen::Map<const Matrix<T>>(col ? col : source, ckk, width).transpose();
    }
  }
}

// 2x2 windows of stride 2, conv4's: the window's four values compared in
// the general loop's order (the same maxima and positions), a row of
// windows in vectors (lanes.hpp; twice as fast as the scalar loop, which
// was 5% of a MiniImagenet step).
template <class T>
void max_pool_2x2(const PoolLayout& l, const T* x, T* y, std::int64_t* positions) {
  for (std::int64_t plane = 0; plane < l.planes; ++plane)
    for (std::int64_t i = 0; i < l.ho; ++i) {
      const std::int64_t top = (plane * l.h + 2 * i) * l.w, out = (plane * l.ho + i) * l.wo;
      const T *a = x + top, *b = a + l.w;
      lanes::for_lanes<T>(l.wo, [&](std::int64_t j, auto vector) {
        using V = decltype(vector);
        const auto [a0, a1] = lanes::load_deinterleaved<V>(a + 2 * j);
        const auto [b0, b1] = lanes::load_deinterleaved<V>(b + 2 * j);
        // Selects, not a branch: which is larger is a coin toss on
        // activations. `best` is the window's row-major position, 0..3.
        using Index = std::conditional_t<std::is_same_v<V, T>, std::int64_t,
                                         decltype(a0 > a0)>;  // the lanes' integers
        V value = a0;
        Index best{};
        const auto take = [&](const V& candidate, int at) {
          const auto larger = candidate > value;
          value = larger ? candidate : value;
          best = larger ? Index{} + at : best;
        };
        take(a1, 1);
        take(b0, 2);
        take(b1, 3);
        lanes::store(y + out + j, value);
        const Index offset =
            (best >> 1) * static_cast<std::conditional_t<sizeof(T) == 4, int, std::int64_t>>(l.w) +
            (best & 1);
        if constexpr (std::is_same_v<V, T>) {
          positions[out + j] = top + 2 * j + offset;
        } else {
          constexpr int width = sizeof(V) / sizeof(T);
          using Positions = lanes::Lanes<std::int64_t, width * 8>;
          const Positions column = []<std::size_t... k>(std::index_sequence<k...>) {
            return Positions{std::int64_t(2 * k)...};
          }
          (std::make_index_sequence<width>{});
          lanes::store(positions + out + j,
                       __builtin_convertvector(offset, Positions) + column + (top + 2 * j));
        }
      });
    }
}

template <class T>
void max_pool(const PoolLayout& l, const T* x, T* y, std::int64_t* positions) {
  if (l.kernel == 2 && l.stride == 2) return max_pool_2x2(l, x, y, positions);
  for (std::int64_t plane = 0; plane < l.planes; ++plane)
    for (std::int64_t i = 0; i < l.ho; ++i)
      for (std::int64_t j = 0; j < l.wo; ++j) {
        std::int64_t best = (plane * l.h + i * l.stride) * l.w + j * l.stride;
        T value = x[best];
        for (std::int64_t a = 0; a < l.kernel; ++a)
          for (std::int64_t b = 0; b < l.kernel; ++b) {
            // Selects, not a branch: which is larger is a coin toss on
            // activations, and a mispredicted branch cost a conv4 step 8%.
            const std::int64_t at = (plane * l.h + i * l.stride + a) * l.w + j * l.stride + b;
            const bool larger = x[at] > value;
            value = larger ? x[at] : value;
            best = larger ? at : best;
          }
        const std::int64_t out = (plane * l.ho + i) * l.wo + j;
        y[out] = value;
        positions[out] = best;
      }
}

}  // namespace platipus::detail::cpu_convolution
