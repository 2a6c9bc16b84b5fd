// A squared-error loss as one op: (pred - target)^2 per point, mapped to
// the Gaussian NLL at a variance known on the host where one is given, and
// reduced over the axes after the batch axes by their mean or sum. mse_loss
// and gaussian_nll_loss (nn/losses.hpp) are built on it, where sub, square,
// (div, two shifts and a scale,) and the mean were a node and a kernel each
// (issue 38).
#pragma once

#include <cmath>
#include <numbers>
#include <optional>
#include <type_traits>

#include "platipus/autodiff/ops/arithmetic.hpp"
#include "platipus/autodiff/ops/broadcast.hpp"
#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/tensor/squared_error.hpp"

namespace platipus {

namespace detail {
template <class T>
T log_two_pi() {
  return static_cast<T>(std::log(2 * std::numbers::pi));
}
}  // namespace detail

// Per point q = (pred - target)^2, or where `variance` is given the Gaussian
// NLL ((q / variance + log variance) + log 2 pi) / 2; the points of each index
// of pred's first batch_dims axes reduced by their mean (or sum where not
// `mean`), none where batch_dims is pred's rank. One backend call, with the
// bits of sub, square, (div, shift, shift, scale,) and mean or sum on the
// CPU (raw::squared_error). It keeps d = pred - target as a second result
// for its rule, which is those ops' rules: a gradient u in every element
// (a mean's, a sum's) spread over the points, halved and divided by the
// variance on the host and doubled onto d by one scale, a tensor by the ops
// that did, d's own gradient (from rules that read it, under higher orders)
// added first. Values and derivatives of every order have the composite's
// bits.
template <class T, class B>
Var<T, B> squared_error(const Var<T, B>& pred, const Var<T, B>& target, int batch_dims, bool mean,
                        std::optional<std::type_identity_t<T>> variance = std::nullopt) {
  SquaredErrorLayout<T> form{.mean = mean, .gaussian = variance.has_value()};
  if (variance) {
    form.variance = *variance;
    form.log_variance = std::log(*variance);
    form.log_two_pi = detail::log_two_pi<T>();
  }
  auto [loss, difference] = raw::squared_error(pred.value(), target.value(), batch_dims, form);
  Shape kept = pred.shape().take_front(batch_dims);  // the loss at pred's rank
  while (kept.rank() < pred.rank()) kept.push_back(1);
  const std::int64_t points = pred.numel() / kept.numel();
  // The mean's scale, as mean_to's; none where it reduces nothing.
  const std::optional<T> spread =
      mean && points > 1 ? std::optional<T>(T(1) / static_cast<T>(points)) : std::nullopt;
  std::vector<Tensor<T, B>> results;
  results.push_back(std::move(loss));
  results.push_back(std::move(difference));
  const std::array<Var<T, B>, 2> inputs{pred, target};
  return record_many(
      "squared_error", std::span<const Var<T, B>>(inputs), std::move(results),
      [form, kept, spread](Backward<T, B>& c) {
        const Var<T, B> d = c.output(1);
        Var<T, B> g;  // pred's gradient through the loss
        if (const auto u = c.uniform_grad(0)) {
          T v = *u;
          if (spread) v = v * *spread;
          if (form.gaussian) {
            v = v * T(0.5);
            v = v / form.variance;
          }
          g = scale(d, T(2) * v);
        } else if (Var<T, B> h = c.grad(0); h.defined()) {
          if (spread) h = scale(h, *spread);
          h = reshape(h, kept);
          // A sweep that records expands it where the composite's did.
          if (GradMode::enabled()) h = expand(h, d.shape());
          if (form.gaussian) h = div(scale(h, T(0.5)), form.variance);
          g = scale(mul(h, d), T(2));
        }
        // d's other gradients reached it before square's, in the composite;
        // a sign passed on as sub's rule passes it.
        auto [g_d, negated] = c.signed_grad(1);
        if (g.defined()) {
          g_d = !g_d.defined() ? g : negated ? sub(g, g_d) : add(g_d, g);
          negated = false;
        }
        if (!g_d.defined()) return;
        if (c.needs(0)) c.set(0, g_d, negated);
        if (c.needs(1)) c.set(1, g_d, !negated);
      },
      Saved{.inputs = 0, .outputs = true})[0];
}

}  // namespace platipus
