// Raw batch normalisation and its backward, with shapes checked and the
// backend's NormLayout computed here. x is [..., N, C, positions...]: the
// leading axes are tasks, each normalised on its own; a task's channel C is
// normalised over its N samples and their positions (none for feature
// vectors [..., N, F], H W for images [..., N, C, H, W]).
#pragma once

#include <string_view>
#include <utility>

#include "platipus/tensor/tensor.hpp"

namespace platipus::raw {

// The groups of x with `positions` trailing position axes, checked; `who`
// names the op in messages.
inline NormLayout norm_layout(const Shape& x, int positions, std::string_view who) {
  check(positions >= 0 && x.rank() >= positions + 2, who,
        "the input must be [..., N, C] followed by {} position axes, got {}", positions, x);
  const int channel = x.rank() - positions - 1;
  NormLayout l{.outer = x.take_front(channel - 1).numel(),
               .n = x[channel - 1],
               .c = x[channel],
               .inner = x.drop_front(channel + 1).numel()};
  check(l.count() > 1, who,
        "the input {} has {} sample(s) of {} position(s) per channel: the batch statistics of a "
        "single value have no variance",
        x, l.n, l.inner);
  return l;
}

// The per-group statistics' shape: x's with N and the positions set to 1,
// so that it broadcasts against x.
inline Shape norm_statistics_shape(const Shape& x, int positions) {
  Shape s = x;
  const int channel = x.rank() - positions - 1;
  s[channel - 1] = 1;
  for (int a = channel + 1; a < x.rank(); ++a) s[a] = 1;
  return s;
}

// (x_hat, inv_std): x normalised per group, and 1 / sqrt(variance + epsilon).
template <class T, class B>
std::pair<Tensor<T, B>, Tensor<T, B>> batch_norm(const Tensor<T, B>& x, int positions, T epsilon) {
  constexpr std::string_view who = "batch_norm";
  check(epsilon > T(0), who, "epsilon must be positive, got {}", epsilon);
  const NormLayout l = norm_layout(x.shape(), positions, who);
  Tensor<T, B> x_hat(x.shape()), inv_std(norm_statistics_shape(x.shape(), positions));
  if (x.numel()) B::batch_norm(l, x.data(), epsilon, x_hat.data(), inv_std.data());
  return {std::move(x_hat), std::move(inv_std)};
}

// inv_std (g - mean(g) - x_hat mean(x_hat g)) per group: the gradient in x
// of <g, x_hat>.
template <class T, class B>
Tensor<T, B> batch_norm_backward(const Tensor<T, B>& x_hat, const Tensor<T, B>& inv_std,
                                 const Tensor<T, B>& g, int positions) {
  constexpr std::string_view who = "batch_norm_backward";
  const NormLayout l = norm_layout(x_hat.shape(), positions, who);
  check(g.shape() == x_hat.shape() &&
            inv_std.shape() == norm_statistics_shape(x_hat.shape(), positions),
        who, "x_hat {}, inv_std {} and the gradient {} do not match", x_hat.shape(),
        inv_std.shape(), g.shape());
  Tensor<T, B> dx(g.shape());
  if (g.numel()) B::batch_norm_backward(l, x_hat.data(), inv_std.data(), g.data(), dx.data());
  return dx;
}

}  // namespace platipus::raw
