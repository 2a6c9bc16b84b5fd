// unfold (im2col: the sliding windows of an image as columns, a gather
// whose backward is a scatter-add, so differentiable to any order). A
// convolution is matmul(filters, unfold(x)): the tests check the backend's
// conv2d against that composition.
#pragma once

#include <cstdint>
#include <vector>

#include "platipus/autodiff/ops/concat.hpp"
#include "platipus/autodiff/ops/index.hpp"
#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/tensor/convolution.hpp"

namespace platipus {

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

}  // namespace platipus
