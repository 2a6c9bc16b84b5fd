// logsumexp, softmax and log_softmax along an axis, and the softmax
// cross-entropy of logits against target rows or class indices as one op.
#pragma once

#include <utility>

#include "platipus/autodiff/grad_mode.hpp"
#include "platipus/autodiff/ops/exp_log.hpp"
#include "platipus/autodiff/ops/reduce.hpp"
#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/tensor/cross_entropy.hpp"

namespace platipus {

namespace detail {
// {exp(x - m), m} with m the maximum of x over the reduced shape `kept`.
template <class T, class B>
std::pair<Tensor<T, B>, Tensor<T, B>> exp_below_max(const Tensor<T, B>& x, const Shape& kept,
                                                    std::string_view who) {
  Tensor<T, B> m = raw::reduce_to(ReduceOp::max, x, kept);
  return {raw::map(UnaryOp::exp, raw::map(BinaryOp::sub, x, m, who)), std::move(m)};
}
}  // namespace detail

// log sum_i exp(x_i) along `axis`, evaluated stably as m + log sum exp(x - m)
// with m the maximum. d/dx = exp(x - lse) = softmax(x).
template <class T, class B>
Var<T, B> logsumexp(const Var<T, B>& x, int axis, bool keep_dims = false) {
  const int a = x.shape().normalize_axis(axis, "logsumexp");
  const std::array<int, 1> axes{a};
  const Shape kept = raw::reduced_shape(x.shape(), axes, "logsumexp");
  const auto [e, m] = detail::exp_below_max(x.value(), kept, "logsumexp");
  Tensor<T, B> lse =
      raw::map(BinaryOp::add, raw::map(UnaryOp::log, raw::sum_to(e, kept)), m, "logsumexp");
  const Shape out_shape = keep_dims ? kept : raw::squeezed_shape(x.shape(), axes, "logsumexp");
  return record("logsumexp", {x}, std::move(lse).reshaped(out_shape), [kept](Backward<T, B>& c) {
    const auto g = reshape(c.grad(), kept), lse_kept = reshape(c.output(), kept);
    c.set(0, mul(g, exp(sub(c.input(0), lse_kept))));
  });
}

template <class T, class B>
Var<T, B> log_softmax(const Var<T, B>& x, int axis = -1) {
  return sub(x, logsumexp(x, axis, true));
}

template <class T, class B>
Var<T, B> softmax(const Var<T, B>& x, int axis = -1) {
  return exp(log_softmax(x, axis));
}

namespace detail {
// u (p - y): the cross-entropy's gradient in the logits where the losses'
// is u in every row (a mean's or a sum's, known on the host), as one op and
// one call (raw::cross_entropy_backward) where sub and scale were two
// kernels, with their bits; its gradient in p is u times its own, as
// scale's rule gives it (issue 38). y is a constant.
template <class T, class B>
Var<T, B> uniform_cross_entropy_gradient(const Var<T, B>& p, const Var<T, B>& y, T u) {
  return taking_parts(record(
      "cross_entropy_backward", {p},
      raw::cross_entropy_backward(p.value(), y.value(), nullptr, u, nullptr),
      [u](Backward<T, B>& c) { detail::set_scaled(c, u); }, saves_nothing));
}

// The cross-entropy op over raw::cross_entropy's results, y the target rows
// its rule reads (a constant input).
template <class T, class B>
Var<T, B> record_cross_entropy(const Var<T, B>& logits, raw::CrossEntropy<T, B> computed,
                               Tensor<T, B> target_rows) {
  std::vector<Tensor<T, B>> results;
  results.push_back(std::move(computed.loss));
  results.push_back(std::move(computed.softmax));
  const std::array<Var<T, B>, 2> inputs{logits, logits.tape().constant(std::move(target_rows))};
  return record_many(
      "cross_entropy_with_logits", std::span<const Var<T, B>>(inputs), std::move(results),
      [](Backward<T, B>& c) {
        const auto p = c.output(1), gp = c.grad(1);
        const auto u = c.uniform_grad(0);
        if (!GradMode::enabled()) {  // nothing records: one call, the bits of the ops below
          // A broadcast losses' gradient (a per-task mean's) is read in place.
          const Var<T, B> gl = u ? Var<T, B>() : c.broadcast_grad(0);
          c.set(0, c.tape().constant(raw::cross_entropy_backward(
                       p.value(), c.input(1).value(), gl.defined() ? &gl.value() : nullptr, u,
                       gp.defined() ? &gp.value() : nullptr)));
          return;
        }
        Var<T, B> dz;
        // A mean's or a sum's gradient known on the host scales p - y with
        // no fill (issue 38): u (p - y) has the bits of the filled product.
        if (u) {
          dz = uniform_cross_entropy_gradient(p, c.input(1), *u);
        } else if (const auto gl = c.broadcast_grad(0); gl.defined()) {
          Shape rows = gl.shape();  // kept's shape, or one that broadcasts to it
          rows.push_back(1);
          dz = mul(reshape(gl, rows), sub(p, c.input(1)));
        }
        if (gp.defined()) {
          const auto pg = mul(p, gp);
          const auto jacobian_product = sub(pg, mul(p, sum(pg, {-1}, true)));
          dz = dz.defined() ? add(dz, jacobian_product) : jacobian_product;
        }
        c.set(0, dz);
      },
      Saved{.inputs = 0b10, .outputs = true})[0];
}
}  // namespace detail

// -sum_k y_k log softmax(z)_k over the last axis, for logits z [..., K] and
// target rows y [..., K] that sum to one (one-hot labels): lse(z) - <y, z>,
// one value per row [...]. One op and one backend call (raw::cross_entropy)
// where log_softmax, mul and sum took ten kernels, with their bits on the
// CPU (issue 38). It keeps p = softmax(z) as a second result, its gradient
// is g (p - y), and p's own gradient (from rules that read it, under higher
// orders) is the softmax Jacobian's product p (h - <p, h>), all written with
// the library's ops, so every order differentiates through it; a sweep that
// records nothing (a meta-gradient's outer one) takes the whole rule in one
// raw::cross_entropy_backward call with those ops' bits. y is a constant.
template <class T, class B>
Var<T, B> cross_entropy_with_logits(const Var<T, B>& logits, Tensor<T, B> targets) {
  auto computed = raw::cross_entropy(logits.value(), targets, false);
  return detail::record_cross_entropy(logits, std::move(computed), std::move(targets));
}

// The same against one class index a row, [..., 1] (TensorFlow's "sparse"
// form): y is their one-hot rows, made by the same call (where arange and
// equal were two kernels more).
template <class T, class B>
Var<T, B> sparse_cross_entropy_with_logits(const Var<T, B>& logits,
                                           const Tensor<T, B>& class_indices) {
  auto computed = raw::cross_entropy(logits.value(), class_indices, true);
  Tensor<T, B> one_hot = std::move(computed.one_hot);
  return detail::record_cross_entropy(logits, std::move(computed), std::move(one_hot));
}

}  // namespace platipus
