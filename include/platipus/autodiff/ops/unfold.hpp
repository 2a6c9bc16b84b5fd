// unfold (im2col: the sliding windows of an image as columns, a gather) and
// the 2-D convolution and max pooling composed of it, matmul and where.
//
// These are the reference forms of the convolutional ops: every step is a
// recorded op whose backward is itself recorded (gather / scatter-add,
// matmul, where), so conv2d and max_pool2d are differentiable to any order
// on every backend as they stand, and a faster kernel (a backend
// convolution, cuDNN) can be tested against them. Per-task weights need no
// loop: x [..., N, C, H, W] with w [..., C_out, C, k, k] broadcasts the
// leading axes, as the task axis of MAML's inner loop.
#pragma once

#include <cstdint>
#include <vector>

#include "platipus/autodiff/ops/arithmetic.hpp"
#include "platipus/autodiff/ops/concat.hpp"
#include "platipus/autodiff/ops/index.hpp"
#include "platipus/autodiff/ops/matmul.hpp"
#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/autodiff/ops/where.hpp"

namespace platipus {

// The window of a 2-D sliding operation: a square kernel, its stride and the
// zero padding on each side of both spatial axes.
struct Window {
  std::int64_t kernel = 3, stride = 1, padding = 0;

  // The output extent along an axis of extent n (with padding), checked.
  std::int64_t output(std::int64_t n, std::string_view who) const {
    check(kernel > 0 && stride > 0 && padding >= 0, who,
          "kernel {} and stride {} must be positive and padding {} non-negative", kernel, stride,
          padding);
    check(n + 2 * padding >= kernel, who,
          "a {}-wide kernel does not fit an axis of {} (padding {})", kernel, n, padding);
    return (n + 2 * padding - kernel) / stride + 1;
  }
};

// x [..., C, H, W] -> [..., C * k * k, Ho * Wo]: column (i, j) holds the
// window at output position (i, j), rows in (channel, kernel row, kernel
// column) order (PyTorch's torch.nn.functional.unfold). Zero padding is
// taken first.
template <class T, class B>
Var<T, B> unfold(const Var<T, B>& x, const Window& window) {
  constexpr std::string_view who = "unfold";
  check(x.rank() >= 3, who, "the input must be [..., C, H, W], got {}", x.shape());
  const std::int64_t c = x.dim(-3), h = x.dim(-2), w = x.dim(-1);
  const std::int64_t ho = window.output(h, who), wo = window.output(w, who);
  const std::int64_t k = window.kernel, s = window.stride, p = window.padding;
  const std::int64_t hp = h + 2 * p, wp = w + 2 * p;
  Var<T, B> padded = x;
  if (p > 0) padded = pad(pad(x, -2, p, hp), -1, p, wp);
  Shape flat = x.shape().take_front(x.rank() - 2);
  flat.push_back(hp * wp);
  // Index (a, b, i, j) -> (i s + a) wp + (j s + b): per channel, k * k rows of Ho * Wo.
  std::vector<std::int64_t> positions;
  positions.reserve(static_cast<std::size_t>(k * k * ho * wo));
  for (std::int64_t a = 0; a < k; ++a)
    for (std::int64_t b = 0; b < k; ++b)
      for (std::int64_t i = 0; i < ho; ++i)
        for (std::int64_t j = 0; j < wo; ++j) positions.push_back((i * s + a) * wp + (j * s + b));
  const auto index =
      Index<B>::from_host(Shape{static_cast<std::int64_t>(positions.size())}, positions);
  Shape columns = x.shape().take_front(x.rank() - 3);
  columns.push_back(c * k * k);
  columns.push_back(ho * wo);
  return reshape(index_select(reshape(padded, flat), -1, index), columns);
}

// y = w * x + b, the 2-D cross-correlation of deep learning: x [..., N, C,
// H, W], w [..., C_out, C, k, k] (its leading axes broadcast against x's
// before N: one filter bank per task), b [..., C_out] or undefined ->
// [..., N, C_out, Ho, Wo].
template <class T, class B>
Var<T, B> conv2d(const Var<T, B>& x, const Var<T, B>& w, const Var<T, B>& b, const Window& window) {
  constexpr std::string_view who = "conv2d";
  check(x.rank() >= 4 && w.rank() >= 4, who,
        "the input must be [..., N, C, H, W] and the weights [..., C_out, C, k, k], got {} and {}",
        x.shape(), w.shape());
  const std::int64_t c_out = w.dim(-4), c = w.dim(-3), k = w.dim(-1);
  check(w.dim(-2) == k && k == window.kernel, who,
        "the weights {} must be square kernels of the window's size {}", w.shape(), window.kernel);
  check(x.dim(-3) == c, who, "the input {} has {} channels, the weights {} expect {}", x.shape(),
        x.dim(-3), w.shape(), c);
  const std::int64_t ho = window.output(x.dim(-2), who), wo = window.output(x.dim(-1), who);
  Shape rows = w.shape().take_front(w.rank() - 4);  // [..., 1, C_out, C k k]
  rows.push_back(1);
  rows.push_back(c_out);
  rows.push_back(c * k * k);
  Var<T, B> y = matmul(reshape(w, rows), unfold(x, window));  // [..., N, C_out, Ho Wo]
  Shape out = y.shape().take_front(y.rank() - 1);
  out.push_back(ho);
  out.push_back(wo);
  y = reshape(y, out);
  if (!b.defined()) return y;
  check(b.rank() >= 1 && b.dim(-1) == c_out, who, "the bias {} must end in C_out = {}", b.shape(),
        c_out);
  Shape bias = b.shape().take_front(b.rank() - 1);  // [..., 1, C_out, 1, 1]
  for (auto d : {std::int64_t{1}, c_out, std::int64_t{1}, std::int64_t{1}}) bias.push_back(d);
  return y + reshape(b, bias);
}

// The maximum over each k x k window (no padding): x [..., C, H, W] ->
// [..., C, Ho, Wo]. The gradient goes to the window's largest input; of
// equal ones, to the one first in row-major order.
template <class T, class B>
Var<T, B> max_pool2d(const Var<T, B>& x, const Window& window) {
  constexpr std::string_view who = "max_pool2d";
  check(window.padding == 0, who, "padding is not supported, got {}", window.padding);
  const auto columns = unfold(x, window);  // [..., C k k, Ho Wo]
  const std::int64_t kk = window.kernel * window.kernel;
  Shape split = columns.shape().take_front(columns.rank() - 2);
  split.push_back(x.dim(-3));
  split.push_back(kk);
  split.push_back(columns.dim(-1));
  const auto windows = reshape(columns, split);  // [..., C, k k, Ho Wo]
  Var<T, B> largest = slice(windows, -2, 0, 1);
  for (std::int64_t e = 1; e < kk; ++e) {
    const auto candidate = slice(windows, -2, e, 1);
    largest = where(greater(candidate, largest), candidate, largest);
  }
  Shape out = x.shape().take_front(x.rank() - 2);
  out.push_back(window.output(x.dim(-2), who));
  out.push_back(window.output(x.dim(-1), who));
  return reshape(largest, out);
}

}  // namespace platipus
