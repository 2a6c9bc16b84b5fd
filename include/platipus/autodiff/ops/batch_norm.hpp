// batch_norm and batch_norm_backward: batch normalisation as a closed op
// family, as conv2d is. batch_norm keeps only its own results, the
// normalised x_hat and the per-group 1 / sqrt(variance + epsilon) r (the
// input is not read again), and its gradient is one op in closed form,
//   dx = r (g - mean(g) - x_hat mean(x_hat g))   (J is symmetric),
// whose own rule is written with batch_norm_backward itself (its adjoint in
// g is itself) and a few per-group sums, so MAML's second order and
// PLATIPUS's third differentiate through normalisation without expanding it
// into a chain of full-size elementwise ops.
#pragma once

#include <algorithm>
#include <vector>

#include "platipus/autodiff/ops/arithmetic.hpp"
#include "platipus/autodiff/ops/broadcast.hpp"
#include "platipus/autodiff/ops/power.hpp"
#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/normalization.hpp"

namespace platipus {

// The gradient in x of <g, x_hat> for x_hat = batch_norm(x) with its r
// (inv_std), x_hat [..., N, C, positions...] and r its statistics' shape.
template <class T, class B>
Var<T, B> batch_norm_backward(const Var<T, B>& x_hat, const Var<T, B>& inv_std, const Var<T, B>& g,
                              int positions) {
  // Elements per group: mean over a group is sum_to(., r's shape) / count.
  const T count = static_cast<T>(x_hat.numel() / std::max<std::int64_t>(1, inv_std.numel()));
  return record("batch_norm_backward", {x_hat, inv_std, g},
                raw::batch_norm_backward(x_hat.value(), inv_std.value(), g.value(), positions),
                [positions, count](Backward<T, B>& c) {
                  const auto h = c.grad(), x_hat = c.input(0), r = c.input(1), g = c.input(2);
                  const Shape& groups = r.shape();
                  if (c.needs(2)) c.set(2, batch_norm_backward(x_hat, r, h, positions));
                  // d/dr of r (g - mean g - x_hat mean(x_hat g)) is the output over r.
                  if (c.needs(1)) c.set(1, div(sum_to(mul(h, c.output()), groups), r));
                  // d/dx_hat: -r (h mean(x_hat g) + g mean(x_hat h)).
                  if (c.needs(0)) {
                    const auto mean_xg = scale(sum_to(mul(x_hat, g), groups), T(1) / count);
                    const auto mean_xh = scale(sum_to(mul(x_hat, h), groups), T(1) / count);
                    c.set(0, neg(mul(r, add(mul(h, mean_xg), mul(g, mean_xh)))));
                  }
                });
}

// Batch normalisation without scale and shift: x [..., N, C, positions...]
// with `positions` trailing position axes (0 for feature vectors [..., N,
// F], 2 for images [..., N, C, H, W]) -> (x - mean) / sqrt(var + epsilon),
// mean and biased variance per task (the leading axes) and channel, over
// the N samples and their positions.
template <class T, class B>
Var<T, B> batch_norm(const Var<T, B>& x, int positions, T epsilon) {
  auto [x_hat, inv_std] = raw::batch_norm(x.value(), positions, epsilon);
  const T count = static_cast<T>(x_hat.numel() / inv_std.numel());
  std::vector<Tensor<T, B>> results;
  results.push_back(std::move(x_hat));
  results.push_back(std::move(inv_std));
  return record_many(
      "batch_norm", std::span<const Var<T, B>>(&x, 1), std::move(results),
      [positions, count](Backward<T, B>& c) {
        const auto x_hat = c.output(0), r = c.output(1), g = c.grad(0), g_r = c.grad(1);
        Var<T, B> dx;
        if (g.defined()) dx = batch_norm_backward(x_hat, r, g, positions);
        // r's own gradient (from a backward rule that read it): dr/dx = -r^2 x_hat / count.
        if (g_r.defined()) {
          const auto through_r = mul(x_hat, scale(mul(g_r, square(r)), T(-1) / count));
          dx = dx.defined() ? add(dx, through_r) : through_r;
        }
        c.set(0, dx);
      },
      Saved{.inputs = 0, .outputs = true})[0];
}

}  // namespace platipus
