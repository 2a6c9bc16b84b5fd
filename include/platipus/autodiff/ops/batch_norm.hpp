// batch_norm and batch_norm_backward: batch normalisation with its scale and
// shift as a closed op family, as conv2d is. batch_norm keeps its results,
// y = x_hat scale + shift, the normalised x_hat and the per-group
// r = 1 / sqrt(variance + epsilon), and reads none of its input again. Its
// gradient is one op in closed form, three results from one pass:
//   dx = r scale (g - mean(g) - x_hat mean(x_hat g)),
//   d_scale = sum(x_hat g),  d_shift = sum(g)          (per group),
// (the normalisation's Jacobian is symmetric), whose own rule is written with
// batch_norm_backward itself (dx is linear in g) and a few per-group sums, so
// MAML's second order and PLATIPUS's third differentiate through batch norm
// without expanding it into chains of full-size elementwise ops. A sweep
// that records nothing (a meta-gradient's outer one) takes both rules in
// fused passes instead: batch_norm's whole gradient (from y, x_hat and r) in
// one raw::batch_norm_backward, batch_norm_backward's in
// raw::batch_norm_double_backward.
#pragma once

#include <array>
#include <vector>

#include "platipus/autodiff/grad_mode.hpp"
#include "platipus/autodiff/ops/arithmetic.hpp"
#include "platipus/autodiff/ops/broadcast.hpp"
#include "platipus/autodiff/ops/power.hpp"
#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/normalization.hpp"

namespace platipus {

namespace detail {
// Ones of r's shape: batch_norm_backward's scale for the gradient of the
// normalisation alone.
template <class T, class B>
Var<T, B> unit_scale(const Var<T, B>& r) {
  return r.tape().constant(Tensor<T, B>::ones(r.shape()));
}
template <class T, class B>
Var<T, B> sum_of(const Var<T, B>& a, const Var<T, B>& b) {
  return a.defined() ? (b.defined() ? add(a, b) : a) : b;
}
}  // namespace detail

// {dx, d_scale, d_shift}: the gradients of <g, y> for y = batch_norm(x) *
// scale + shift, from x_hat and r (inv_std) as batch_norm made them; scale,
// r, d_scale and d_shift have the statistics' shape.
template <class T, class B>
std::vector<Var<T, B>> batch_norm_backward(const Var<T, B>& x_hat, const Var<T, B>& inv_std,
                                           const Var<T, B>& scale, const Var<T, B>& g,
                                           int positions) {
  auto raw_grads =
      raw::batch_norm_backward(x_hat.value(), inv_std.value(), scale.value(), g.value(), positions);
  const T count = static_cast<T>(x_hat.numel() / inv_std.numel());  // elements per group
  std::vector<Tensor<T, B>> results;
  results.push_back(std::move(raw_grads.dx));
  results.push_back(std::move(raw_grads.d_scale));
  results.push_back(std::move(raw_grads.d_shift));
  const std::array<Var<T, B>, 4> inputs{x_hat, inv_std, scale, g};
  return record_many(
      "batch_norm_backward", std::span<const Var<T, B>>(inputs), std::move(results),
      [positions, count](Backward<T, B>& c) {
        const auto x_hat = c.input(0), r = c.input(1), s = c.input(2), g = c.input(3);
        const auto h = c.grad(0), k = c.grad(1), u = c.grad(2);  // into dx, d_scale, d_shift
        const Shape& groups = r.shape();
        if (h.defined() && !GradMode::enabled()) {  // nothing to record: two sweeps, fused
          auto d = raw::batch_norm_double_backward(x_hat.value(), r.value(), s.value(), g.value(),
                                                   c.output(1).value(), c.output(2).value(),
                                                   h.value(), k.defined() ? &k.value() : nullptr,
                                                   u.defined() ? &u.value() : nullptr, positions);
          Tape<T, B>& tape = c.tape();
          if (c.needs(0)) c.set(0, tape.constant(std::move(d.d_x_hat)));
          if (c.needs(1)) c.set(1, tape.constant(std::move(d.d_inv_std)));
          if (c.needs(2)) c.set(2, tape.constant(std::move(d.d_scale)));
          if (c.needs(3)) c.set(3, tape.constant(std::move(d.d_g)));
          return;
        }
        if (c.needs(3)) {
          Var<T, B> dg;
          if (h.defined()) dg = batch_norm_backward(x_hat, r, s, h, positions)[0];
          if (k.defined()) dg = detail::sum_of(dg, mul(x_hat, k));
          if (u.defined()) dg = detail::sum_of(dg, expand(u, g.shape()));
          c.set(3, dg);
        }
        // dx = r s (g - mean g - x_hat mean(x_hat g)), mean(x_hat g) = d_scale / count:
        // in x_hat, -r s (h mean(x_hat g) + g mean(x_hat h)), and d_scale's k g;
        // in s and r, r and s times <h, dx> / (r s), the per-group bracket
        // sum(h g) - (sum(h) sum(g) + sum(x_hat h) sum(x_hat g)) / count.
        Var<T, B> sum_xh;
        if (h.defined() && (c.needs(0) || c.needs(1) || c.needs(2)))
          sum_xh = sum_to(mul(x_hat, h), groups);
        if (c.needs(0)) {
          Var<T, B> d;
          if (h.defined()) {
            const auto mean_xg = platipus::scale(c.output(1), T(1) / count);
            const auto mean_xh = platipus::scale(sum_xh, T(1) / count);
            d = neg(mul(mul(r, s), add(mul(h, mean_xg), mul(g, mean_xh))));
          }
          if (k.defined()) d = detail::sum_of(d, mul(g, k));
          c.set(0, d);
        }
        if (!h.defined() || !(c.needs(1) || c.needs(2))) return;
        const auto bracket =
            sub(sum_to(mul(h, g), groups),
                platipus::scale(add(mul(sum_to(h, groups), c.output(2)), mul(sum_xh, c.output(1))),
                                T(1) / count));
        if (c.needs(2)) c.set(2, mul(r, bracket));
        if (c.needs(1)) c.set(1, mul(s, bracket));
      });
}

// Batch normalisation: x [..., N, C, positions...] with `positions` trailing
// position axes (0 for feature vectors [..., N, F], 2 for images [..., N, C,
// H, W]) -> (x - mean) / sqrt(var + epsilon) * scale + shift, mean and
// biased variance per task (the leading axes) and channel over the N
// samples and their positions; scale and shift broadcast to the statistics'
// shape (x's with N and the positions 1: [..., 1, C, 1, 1] for images) and
// may carry task axes that x lacks.
template <class T, class B>
Var<T, B> batch_norm(const Var<T, B>& x, const Var<T, B>& scale, const Var<T, B>& shift,
                     int positions, T epsilon) {
  constexpr std::string_view who = "batch_norm";
  raw::norm_layout(x.shape(), positions, who);  // checks x's shape first
  const Shape own = raw::norm_statistics_shape(x.shape(), positions);
  const Shape statistics =
      broadcast_shapes(broadcast_shapes(scale.shape(), shift.shape(), who), own, who);
  Var<T, B> input = x;
  if (statistics != own) {  // per-task scale and shift over images the tasks share
    Shape shape = statistics.take_front(statistics.rank() - positions - 2);
    for (int a = x.rank() - positions - 2; a < x.rank(); ++a) shape.push_back(x.dim(a));
    input = expand(x, shape);
  }
  const auto s = expand(scale, statistics), b = expand(shift, statistics);
  auto out = raw::batch_norm(input.value(), s.value(), b.value(), positions, epsilon);
  const T count = static_cast<T>(out.x_hat.numel() / out.inv_std.numel());
  std::vector<Tensor<T, B>> results;
  results.push_back(std::move(out.y));
  results.push_back(std::move(out.x_hat));
  results.push_back(std::move(out.inv_std));
  const std::array<Var<T, B>, 3> inputs{input, s, b};
  return record_many(
      "batch_norm", std::span<const Var<T, B>>(inputs), std::move(results),
      [positions, count](Backward<T, B>& c) {
        const auto x_hat = c.output(1), r = c.output(2), s = c.input(1);
        const auto gy = c.grad(0), gx = c.grad(1), gr = c.grad(2);
        if (gy.defined() && !GradMode::enabled()) {  // nothing to record: one fused kernel
          auto d = raw::batch_norm_backward(x_hat.value(), r.value(), s.value(), gy.value(),
                                            positions, gx.defined() ? &gx.value() : nullptr,
                                            gr.defined() ? &gr.value() : nullptr);
          Tape<T, B>& tape = c.tape();
          if (c.needs(0)) c.set(0, tape.constant(std::move(d.dx)));
          if (c.needs(1)) c.set(1, tape.constant(std::move(d.d_scale)));
          if (c.needs(2)) c.set(2, tape.constant(std::move(d.d_shift)));
          return;
        }
        Var<T, B> dx, ds, db;
        if (gy.defined()) {
          const auto d = batch_norm_backward(x_hat, r, s, gy, positions);
          dx = d[0], ds = d[1], db = d[2];
        }
        // x_hat's and r's own gradients (from rules that read them):
        // x_hat's is the normalisation's gradient, dr/dx = -r^2 x_hat / count.
        if (gx.defined())
          dx = detail::sum_of(
              dx, batch_norm_backward(x_hat, r, detail::unit_scale(r), gx, positions)[0]);
        if (gr.defined())
          dx = detail::sum_of(dx, mul(x_hat, platipus::scale(mul(gr, square(r)), T(-1) / count)));
        if (c.needs(0)) c.set(0, dx);
        if (c.needs(1)) c.set(1, ds);
        if (c.needs(2)) c.set(2, db);
      },
      Saved{.inputs = 0b010, .outputs = true})[0];
}

}  // namespace platipus
