// Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms
// for Convolutional Neural Networks", CVPR 2016) for the CPU's 3x3
// convolutions of stride 1 and padding 1, conv4's. A 2x2 block of outputs is
// A^T [(G g G^T) . (B^T d B)] A for the 4x4 block of input d under it and the
// filter g: 16 multiplications per pair of channels where a direct product
// takes 36, so the GEMMs, most of a conv4 meta-step, do 2.25 times fewer
// flops. The sum over input channels of those products is one GEMM per point
// of the 4x4 transformed tile: [c_out, c] times [c, tiles].
//   forward:        y = winograd(x, w)
//   input gradient: the forward of dy with the filters transposed and flipped
//                   (a "same" 3x3 correlation's adjoint is one too)
//   filter grad:    the forward's adjoint, G^T [sum over tiles of
//                   (A e A^T) . (B^T d B)] G for the output gradient's tiles e
// A tile reaching past the image's bottom or right edge reads zeros there and
// writes only its outputs inside.
#pragma once

#include <algorithm>
#include <cstdint>

#include <Eigen/Core>

#include "platipus/backend/cpu/lanes.hpp"
#include "platipus/backend/layouts.hpp"

namespace platipus::detail::winograd {

template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Where it pays (benchmarks/README.md): 16 channels or more on both sides
// (with fewer, as conv4's first layer's one, the 16 products are too thin
// to pay for the transforms) and images of 8 x 8 or more (measured: on
// Omniglot's 7 x 7 and 3 x 3 blocks the tiles' parts past the edge and the
// small products cost more than the saved flops).
inline bool applies(const ConvLayout& l) {
  return l.kernel == 3 && l.stride == 1 && l.padding == 1 && l.c >= 16 && l.c_out >= 16 &&
         l.h >= 8 && l.w >= 8;
}

constexpr int points = 16;  // of a 4x4 transformed tile

// A plane's 2x2 output tiles, and how many images one round of GEMMs takes:
// as many as give them about 512 columns (as im2col's images_per_gemm).
struct Tiling {
  std::int64_t rows, cols, per_image, images;
};
inline Tiling tiling(const ConvLayout& l) {
  const std::int64_t rows = (l.h + 1) / 2, cols = (l.w + 1) / 2;
  return {rows, cols, rows * cols, std::clamp<std::int64_t>(512 / (rows * cols), 1, l.n)};
}
// Entries of a plane inside its border of zeros, as transform_input reads it.
inline std::int64_t padded_size(const Tiling& s) {
  return (2 * s.rows + 2) * (2 * s.cols + 2);
}

// u = G g G^T for each 3x3 filter g of w [rows, cols, 3, 3], into
// u [16, rows, cols]; `transposed` reads w as [cols, rows, 3, 3] with each
// filter flipped (the input gradient's filters).
template <class T>
void transform_filters(const T* w, std::int64_t rows, std::int64_t cols, bool transposed, T* u) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const T* g = w + (transposed ? c * rows + r : r * cols + c) * 9;
      T f[3][3], t[4][3];
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) f[a][b] = transposed ? g[(2 - a) * 3 + 2 - b] : g[a * 3 + b];
      for (int b = 0; b < 3; ++b) {  // G f
        t[0][b] = f[0][b];
        t[1][b] = (f[0][b] + f[1][b] + f[2][b]) / 2;
        t[2][b] = (f[0][b] - f[1][b] + f[2][b]) / 2;
        t[3][b] = f[2][b];
      }
      for (int a = 0; a < 4; ++a) {  // (G f) G^T
        T* out = u + a * 4 * rows * cols + r * cols + c;
        const std::int64_t next = rows * cols;
        out[0] = t[a][0];
        out[next] = (t[a][0] + t[a][1] + t[a][2]) / 2;
        out[2 * next] = (t[a][0] - t[a][1] + t[a][2]) / 2;
        out[3 * next] = t[a][2];
      }
    }
}

// v [16, c, tiles] = B^T d B for the 4x4 input block d of each tile of m
// images x [m, c, h, w] (padding 1: the block of tile (i, j) starts at
// (2 i - 1, 2 j - 1)), tile columns `ld` apart. Each plane is first copied
// into `padded` inside a border of zeros, every row split into its even
// and its odd columns: the block's columns 2 j .. 2 j + 3 are then even[j],
// odd[j], even[j + 1] and odd[j + 1], so that the loop over a row's tiles
// reads and writes in unit steps, in vectors (lanes.hpp; the same
// operations as on the block, so the same bits).
template <class T>
void transform_input(const ConvLayout& l, const Tiling& s, const T* x, std::int64_t m,
                     std::int64_t c, T* v, std::int64_t ld, T* padded) {
  const std::int64_t h = l.h, w = l.w, half = s.cols + 1, pw = 2 * half, next = c * ld;
  std::fill(padded, padded + padded_size(s), T(0));
  for (std::int64_t k = 0; k < m; ++k)
    for (std::int64_t ch = 0; ch < c; ++ch) {
      const T* plane = x + (k * c + ch) * h * w;
      for (std::int64_t r = 0; r < h; ++r) {  // x's column q is the padded one q + 1
        const T* from = plane + r * w;
        T* even = padded + (r + 1) * pw;
        T* odd = even + half;
        for (std::int64_t q = 0; 2 * q < w; ++q) odd[q] = from[2 * q];
        for (std::int64_t q = 0; 2 * q + 1 < w; ++q) even[q + 1] = from[2 * q + 1];
      }
      T* out = v + ch * ld + k * s.per_image;
      for (std::int64_t i = 0; i < s.rows; ++i) {
        const T* e0 = padded + 2 * i * pw;
        const T *e1 = e0 + pw, *e2 = e1 + pw, *e3 = e2 + pw;
        const T *o0 = e0 + half, *o1 = e1 + half, *o2 = e2 + half, *o3 = e3 + half;
        T* cell = out + i * s.cols;
        lanes::for_lanes<T>(s.cols, [&](std::int64_t j, auto vector) {
          using V = decltype(vector);
          const auto at = [j](const T* row, std::int64_t q) {
            return lanes::load<V>(row + j + q);
          };
          const V d[4][4] = {{at(e0, 0), at(o0, 0), at(e0, 1), at(o0, 1)},
                             {at(e1, 0), at(o1, 0), at(e1, 1), at(o1, 1)},
                             {at(e2, 0), at(o2, 0), at(e2, 1), at(o2, 1)},
                             {at(e3, 0), at(o3, 0), at(e3, 1), at(o3, 1)}};
          V t[4][4];
          for (int b = 0; b < 4; ++b) {  // B^T d
            t[0][b] = d[0][b] - d[2][b];
            t[1][b] = d[1][b] + d[2][b];
            t[2][b] = d[2][b] - d[1][b];
            t[3][b] = d[1][b] - d[3][b];
          }
          for (int a = 0; a < 4; ++a) {  // (B^T d) B
            T* point = cell + a * 4 * next + j;
            lanes::store(point, t[a][0] - t[a][2]);
            lanes::store(point + next, t[a][1] + t[a][2]);
            lanes::store(point + 2 * next, t[a][2] - t[a][1]);
            lanes::store(point + 3 * next, t[a][1] - t[a][3]);
          }
        });
      }
    }
}

// y [m, c_out, h, w] = A^T p A + bias for each tile's products p of p [16,
// c_out, tiles], bias [c_out] or none. The tiles wholly inside the plane go
// through one loop in vectors (lanes.hpp); those past its bottom or right edge (odd
// h or w) through the checked one.
template <class T>
void transform_output(const ConvLayout& l, const Tiling& s, const T* p, std::int64_t m,
                      std::int64_t c_out, std::int64_t ld, const T* bias, T* y) {
  const std::int64_t h = l.h, w = l.w, next = c_out * ld;
  for (std::int64_t k = 0; k < m; ++k)
    for (std::int64_t ch = 0; ch < c_out; ++ch) {
      T* plane = y + (k * c_out + ch) * h * w;
      const T* in = p + ch * ld + k * s.per_image;
      const T added = bias ? bias[ch] : T(-0.0);  // x + -0 is x for every x, -0 included
      for (std::int64_t i = 0; i < s.rows; ++i) {
        const T* cells = in + i * s.cols;
        T *top = plane + 2 * i * w, *bottom = top + w;
        const auto tile = [&]<class V>(std::int64_t j, V(&out)[2][2]) {
          V q[4][4], t[2][4];
          for (int a = 0; a < 4; ++a)
            for (int b = 0; b < 4; ++b) q[a][b] = lanes::load<V>(cells + (a * 4 + b) * next + j);
          for (int b = 0; b < 4; ++b) {  // A^T q
            t[0][b] = q[0][b] + q[1][b] + q[2][b];
            t[1][b] = q[1][b] - q[2][b] - q[3][b];
          }
          for (int a = 0; a < 2; ++a) {  // (A^T q) A, then the bias
            out[a][0] = (t[a][0] + t[a][1] + t[a][2]) + added;
            out[a][1] = (t[a][1] - t[a][2] - t[a][3]) + added;
          }
        };
        const std::int64_t inside = 2 * i + 1 < h ? w / 2 : 0;
        lanes::for_lanes<T>(inside, [&](std::int64_t j, auto vector) {
          decltype(vector) out[2][2];
          tile(j, out);
          lanes::store_interleaved(top + 2 * j, out[0][0], out[0][1]);
          lanes::store_interleaved(bottom + 2 * j, out[1][0], out[1][1]);
        });
        for (std::int64_t j = inside; j < s.cols; ++j) {
          T out[2][2];
          tile(j, out);
          for (std::int64_t a = 0; a < 2 && 2 * i + a < h; ++a) {
            T* row = top + a * w + 2 * j;
            row[0] = out[a][0];
            if (2 * j + 1 < w) row[1] = out[a][1];
          }
        }
      }
    }
}

// e' [16, c_out, tiles] = A e A^T for each 2x2 tile e of the output gradient
// dy [m, c_out, h, w] (zeros past the edges), the tiles inside the plane in
// one loop in vectors, as in transform_output.
template <class T>
void transform_output_grad(const ConvLayout& l, const Tiling& s, const T* dy, std::int64_t m, T* e,
                           std::int64_t ld) {
  const std::int64_t h = l.h, w = l.w, c_out = l.c_out, next = c_out * ld;
  for (std::int64_t k = 0; k < m; ++k)
    for (std::int64_t ch = 0; ch < c_out; ++ch) {
      const T* plane = dy + (k * c_out + ch) * h * w;
      T* out = e + ch * ld + k * s.per_image;
      for (std::int64_t i = 0; i < s.rows; ++i) {
        T* cells = out + i * s.cols;
        const T *top = plane + 2 * i * w, *bottom = top + w;
        const auto tile = [&]<class V>(std::int64_t j, const V(&g)[2][2]) {
          V t[4][2];
          for (int b = 0; b < 2; ++b) {  // A g
            t[0][b] = g[0][b];
            t[1][b] = g[0][b] + g[1][b];
            t[2][b] = g[0][b] - g[1][b];
            t[3][b] = -g[1][b];
          }
          for (int a = 0; a < 4; ++a) {  // (A g) A^T
            T* point = cells + a * 4 * next + j;
            lanes::store(point, t[a][0]);
            lanes::store(point + next, t[a][0] + t[a][1]);
            lanes::store(point + 2 * next, t[a][0] - t[a][1]);
            lanes::store(point + 3 * next, -t[a][1]);
          }
        };
        const std::int64_t inside = 2 * i + 1 < h ? w / 2 : 0;
        lanes::for_lanes<T>(inside, [&](std::int64_t j, auto vector) {
          using V = decltype(vector);
          const auto [top_even, top_odd] = lanes::load_deinterleaved<V>(top + 2 * j);
          const auto [bottom_even, bottom_odd] = lanes::load_deinterleaved<V>(bottom + 2 * j);
          const V g[2][2] = {{top_even, top_odd}, {bottom_even, bottom_odd}};
          tile(j, g);
        });
        for (std::int64_t j = inside; j < s.cols; ++j) {
          T g[2][2];
          for (std::int64_t a = 0; a < 2; ++a)
            for (std::int64_t b = 0; b < 2; ++b)
              g[a][b] = 2 * i + a < h && 2 * j + b < w ? top[a * w + 2 * j + b] : T(0);
          tile(j, g);
        }
      }
    }
}

// dw [c_out, c, 3, 3] = G^T du G for each filter's du of du [16, c_out, c].
template <class T>
void transform_filter_grad(const T* du, std::int64_t c_out, std::int64_t c, T* dw) {
  const std::int64_t next = c_out * c;
  for (std::int64_t r = 0; r < c_out * c; ++r) {
    T q[4][4], t[3][4];
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) q[a][b] = du[(a * 4 + b) * next + r];
    for (int b = 0; b < 4; ++b) {  // G^T q
      t[0][b] = q[0][b] + (q[1][b] + q[2][b]) / 2;
      t[1][b] = (q[1][b] - q[2][b]) / 2;
      t[2][b] = (q[1][b] + q[2][b]) / 2 + q[3][b];
    }
    T* g = dw + r * 9;
    for (int a = 0; a < 3; ++a) {  // (G^T q) G
      g[a * 3 + 0] = t[a][0] + (t[a][1] + t[a][2]) / 2;
      g[a * 3 + 1] = (t[a][1] - t[a][2]) / 2;
      g[a * 3 + 2] = (t[a][1] + t[a][2]) / 2 + t[a][3];
    }
  }
}

// y [n, c_out, h, w] = the convolution of x [n, c_in, h, w] by the filters
// transformed into u [16, c_out, c_in], plus bias [c_out] (or none),
// `images` at a time.
template <class T>
void convolve(const ConvLayout& l, const Tiling& s, const T* x, std::int64_t c_in,
              std::int64_t c_out, const T* u, T* v, T* p, T* padded, const T* bias, T* y) {
  const std::int64_t ld = s.images * s.per_image;
  for (std::int64_t first = 0; first < l.n; first += s.images) {
    const std::int64_t m = std::min(s.images, l.n - first), width = m * s.per_image;
    transform_input(l, s, x + first * c_in * l.h * l.w, m, c_in, v, ld, padded);
    for (int point = 0; point < points; ++point)
      Eigen::Map<Matrix<T>, 0, Eigen::OuterStride<>>(p + point * c_out * ld, c_out, width,
                                                     Eigen::OuterStride<>(ld))
          .noalias() = Eigen::Map<const Matrix<T>>(u + point * c_out * c_in, c_out, c_in) *
                       Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>(
                           v + point * c_in * ld, c_in, width, Eigen::OuterStride<>(ld));
    transform_output(l, s, p, m, c_out, ld, bias, y + first * c_out * l.h * l.w);
  }
}

// du [16, c_out, c] = the sum over x [n, c, h, w]'s tiles of (A e A^T) .
// (B^T d B), `images` at a time, then dw [c_out, c, 3, 3] = G^T du G.
template <class T>
void filter_grad(const ConvLayout& l, const Tiling& s, const T* x, const T* dy, T* v, T* e, T* du,
                 T* padded, T* dw) {
  const std::int64_t ld = s.images * s.per_image, c = l.c, c_out = l.c_out;
  std::fill(du, du + points * c_out * c, T(0));
  for (std::int64_t first = 0; first < l.n; first += s.images) {
    const std::int64_t m = std::min(s.images, l.n - first), width = m * s.per_image;
    transform_input(l, s, x + first * c * l.h * l.w, m, c, v, ld, padded);
    transform_output_grad(l, s, dy + first * c_out * l.h * l.w, m, e, ld);
    for (int point = 0; point < points; ++point)
      Eigen::Map<Matrix<T>>(du + point * c_out * c, c_out, c).noalias() +=
          Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>(e + point * c_out * ld, c_out, width,
                                                               Eigen::OuterStride<>(ld)) *
          Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>(v + point * c * ld, c, width,
                                                               Eigen::OuterStride<>(ld))
              .transpose();
  }
  transform_filter_grad(du, c_out, c, dw);
}

}  // namespace platipus::detail::winograd
