// The kernels of platipus::cuda's GEMM convolution engine (im2col into a
// column buffer laid out for one GEMM per group, and its adjoint), declared
// for the host side (src/cuda/convolution.cpp); defined in
// backend/cuda/kernels.cuh and instantiated by nvcc in src/cuda/kernels.cu.
#pragma once

#include "platipus/backend/layouts.hpp"

namespace platipus::detail {

// col [groups, C k k, n, Ho Wo] of x [groups, n, C, H, W]: row (ch, a, b),
// column (image i, output position (oi, oj)) holds x[g, i, ch, oi s + a - p,
// oj s + b - p], zero outside the image.
template <class T>
void im2col(const ConvLayout& l, const T* x, T* col);

// The adjoint: dx [groups, n, C, H, W] = the sum, for each pixel, of the
// column entries that read it (a gather per pixel: no atomics, so the sum's
// order is fixed).
template <class T>
void col2im(const ConvLayout& l, const T* col, T* dx);

}  // namespace platipus::detail
