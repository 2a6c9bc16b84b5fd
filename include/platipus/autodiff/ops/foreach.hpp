// Multi-tensor ops over lists of tensors, one node for the whole list and
// one backend call (one kernel on a device) for up to PiecesLayout's
// capacity of pieces, as PyTorch's _foreach kernels: the inner-loop SGD
// step updates every named piece of a model's parameters with one op, and
// its gradient scales them back with one.
#pragma once

#include <map>
#include <span>
#include <utility>
#include <vector>

#include "platipus/autodiff/ops/arithmetic.hpp"
#include "platipus/autodiff/ops/exp_log.hpp"
#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/elementwise.hpp"

namespace platipus {

namespace detail {

template <class T, class B>
std::vector<const Tensor<T, B>*> values(std::span<const Var<T, B>> x) {
  std::vector<const Tensor<T, B>*> v;
  v.reserve(x.size());
  for (const auto& xi : x) v.push_back(&xi.value());
  return v;
}

// Sets input inputs[k]'s gradient to s * g[k] for every k, with one op.
template <class T, class B>
void set_scaled(Backward<T, B>& c, std::span<const Var<T, B>> g,
                std::span<const std::size_t> inputs, T s) {
  if (g.empty()) return;
  const auto scaled = foreach_scale(g, s);
  for (std::size_t k = 0; k < inputs.size(); ++k) c.set(inputs[k], scaled[k]);
}

// For an op whose output i answers input i: sets each input's gradient, for
// the outputs that received one, to adjoint(those gradients), one op for all.
template <class T, class B, class Adjoint>
void set_each(Backward<T, B>& c, Adjoint adjoint) {
  std::vector<Var<T, B>> g;
  std::vector<std::size_t> inputs;
  for (std::size_t i = 0; i < c.output_count(); ++i)
    if (c.needs(i) && c.grad(i).defined()) {
      g.push_back(c.grad(i));
      inputs.push_back(i);
    }
  if (g.empty()) return;
  const auto gradients = adjoint(std::span<const Var<T, B>>(g));
  for (std::size_t k = 0; k < inputs.size(); ++k) c.set(inputs[k], gradients[k]);
}

// foreach_sub_mul's and foreach_add_mul's rule (y_i = a_i -/+ r_i g_i)
// where the sweep records nothing: the products that give the r_i and g_i
// their gradients (-/+ h_i g_i and -/+ h_i r_i) by one foreach_mul call for
// all pieces, and the rates' sums over the tasks by one foreach_sum_to call
// per count of copies, where the recorded rule takes a mul, a neg and a
// sum_to a piece (issue 38). The bits are that rule's: signs passed on where
// nothing is summed, products negated before they are summed (as
// set_sum_to), and added in reduce's order.
template <class T, class B>
void set_mul_step_grads(Backward<T, B>& c, std::size_t n, bool add) {
  struct Product {
    std::size_t input;
    bool negated, summed;
  };
  std::vector<Product> products;
  std::vector<const Tensor<T, B>*> factors, hs;
  const auto product = [&](std::size_t input, const Var<T, B>& factor, const Var<T, B>& h,
                           bool negated) {
    const bool summed = c.input(input).shape() != h.shape();
    products.push_back({input, negated, summed});
    factors.push_back(&factor.value());
    hs.push_back(&h.value());
  };
  for (std::size_t i = 0; i < n; ++i) {
    const auto [h, negated] = c.signed_grad(i);
    if (!h.defined()) continue;
    if (c.needs(i)) c.set(i, h, negated);
    const bool product_negated = add ? negated : !negated;
    if (c.needs(n + i)) product(n + i, c.input(2 * n + i), h, product_negated);
    if (c.needs(2 * n + i)) product(2 * n + i, c.input(n + i), h, product_negated);
  }
  if (products.empty()) return;
  std::vector<bool> negate;  // where summed: a sum's terms are negated first
  for (const Product& p : products) negate.push_back(p.negated && p.summed);
  auto y = raw::foreach_mul(factors, hs, negate);
  std::map<std::int64_t, std::vector<std::size_t>> by_copies;  // the products to sum
  for (std::size_t k = 0; k < products.size(); ++k) {
    const Product& p = products[k];
    if (p.summed) {
      const std::int64_t rates = c.input(p.input).numel();
      by_copies[rates == 0 ? 0 : y[k].numel() / rates].push_back(k);
    } else {
      c.set(p.input, c.tape().constant(std::move(y[k])), p.negated);
    }
  }
  for (const auto& [copies, ks] : by_copies) {
    std::vector<Tensor<T, B>> rows;  // each product as [copies, its rates]
    rows.reserve(ks.size());
    for (const std::size_t k : ks)
      rows.push_back(Tensor<T, B>::view(y[k], Shape{copies, c.input(products[k].input).numel()}));
    std::vector<const Tensor<T, B>*> summands;
    for (const auto& row : rows) summands.push_back(&row);
    auto sums = raw::foreach_sum_to(summands);
    for (std::size_t j = 0; j < ks.size(); ++j) {
      const std::size_t input = products[ks[j]].input;
      c.set(input, c.tape().constant(std::move(sums[j]).reshaped(c.input(input).shape())));
    }
  }
}

// a_i - r_i g_i, or a_i + r_i g_i where `add`: foreach_sub_mul and
// foreach_add_mul.
template <class T, class B>
std::vector<Var<T, B>> foreach_mul_step(std::span<const Var<T, B>> a, std::span<const Var<T, B>> r,
                                        std::span<const Var<T, B>> g, bool add) {
  const char* name = add ? "foreach_add_mul" : "foreach_sub_mul";
  check(!a.empty(), name, "no tensors given");
  auto y = raw::foreach_sub_mul(values(a), values(r), values(g), add);
  std::vector<Var<T, B>> inputs(a.begin(), a.end());
  inputs.insert(inputs.end(), r.begin(), r.end());
  inputs.insert(inputs.end(), g.begin(), g.end());
  const std::size_t n = a.size();
  return record_many(
      name, std::span<const Var<T, B>>(inputs), std::move(y),
      [n, add](Backward<T, B>& c) {
        if (!GradMode::enabled()) return set_mul_step_grads(c, n, add);
        // A sweep that records: the product takes h, negated by one op for a
        // difference (as sub's rule), and gives it to each factor (as mul's).
        for (std::size_t i = 0; i < n; ++i) {
          const Var<T, B> h = c.grad(i);
          if (!h.defined()) continue;
          if (c.needs(i)) c.set(i, h);
          if (!c.needs(n + i) && !c.needs(2 * n + i)) continue;
          const Var<T, B> product_grad = add ? h : neg(h);
          if (c.needs(n + i)) set_sum_to(c, n + i, mul(product_grad, c.input(2 * n + i)), false);
          if (c.needs(2 * n + i))
            set_sum_to(c, 2 * n + i, mul(product_grad, c.input(n + i)), false);
        }
      },
      saves_inputs);
}

}  // namespace detail

// s * x_i for every i.
template <class T, class B>
std::vector<Var<T, B>> foreach_scale(std::span<const Var<T, B>> x, T s) {
  check(!x.empty(), "foreach_scale", "no tensors given");
  return record_many(
      "foreach_scale", x, raw::foreach_map(UnaryOp::scale, detail::values(x), s),
      [s](Backward<T, B>& c) {
        detail::set_each(c, [s](std::span<const Var<T, B>> g) { return foreach_scale(g, s); });
      },
      saves_nothing);
}

// a_i + s * b_i for every i (a_i and b_i of one shape). At s = 1 or -1 the
// bits of add or sub on each pair (a + (-1) b is a - b, rounded once), and
// its rule is theirs: the gradient, or its sign, passed on, a one-value
// gradient kept one value, no kernel (PLATIPUS's KL over pieces, issue 38).
template <class T, class B>
std::vector<Var<T, B>> foreach_add_scaled(std::span<const Var<T, B>> a,
                                          std::span<const Var<T, B>> b, T s) {
  check(a.size() == b.size() && !a.empty(), "foreach_add_scaled", "{} and {} tensors given",
        a.size(), b.size());
  std::vector<Var<T, B>> inputs(a.begin(), a.end());
  inputs.insert(inputs.end(), b.begin(), b.end());
  const std::size_t n = a.size();
  return record_many(
      "foreach_add_scaled", std::span<const Var<T, B>>(inputs),
      raw::foreach_axpy(detail::values(a), detail::values(b), s),
      [n, s](Backward<T, B>& c) {
        if (s == T(1) || s == T(-1)) {
          const bool sub = s == T(-1);
          for (std::size_t i = 0; i < n; ++i) {
            if (const auto u = c.uniform_grad(i)) {
              if (c.needs(i)) c.set_uniform(i, *u);
              if (c.needs(n + i)) c.set_uniform(n + i, sub ? -*u : *u);
              continue;
            }
            const auto [g, negated] = c.signed_grad(i);
            if (!g.defined()) continue;
            if (c.needs(i)) c.set(i, g, negated);
            if (c.needs(n + i)) c.set(n + i, g, negated != sub);
          }
          return;
        }
        std::vector<Var<T, B>> g;  // the gradients into the b_i, scaled by one op
        std::vector<std::size_t> inputs;
        for (std::size_t i = 0; i < n; ++i) {
          const Var<T, B> gi = c.grad(i);
          if (!gi.defined()) continue;
          if (c.needs(i)) c.set(i, gi);
          if (c.needs(n + i)) {
            g.push_back(gi);
            inputs.push_back(n + i);
          }
        }
        detail::set_scaled(c, std::span<const Var<T, B>>(g), std::span<const std::size_t>(inputs),
                           s);
      },
      saves_nothing);
}

// a_i - r_i * g_i for every i (g_i of a_i's shape, r_i's elements repeated
// along a_i's leading axes: raw::repeats_along_leading_axes), one op and
// one backend call for all: the inner loop's step with learned rates
// (Meta-SGD's alpha, PLATIPUS's gamma, MAML++'s), where a mul and a sub per
// piece were two nodes and two kernels (issue 38). The rule is sub's then
// mul's, so values and derivatives have their bits (negation being exact).
template <class T, class B>
std::vector<Var<T, B>> foreach_sub_mul(std::span<const Var<T, B>> a, std::span<const Var<T, B>> r,
                                       std::span<const Var<T, B>> g) {
  return detail::foreach_mul_step(a, r, g, false);
}

// a_i + r_i * g_i for every i, as foreach_sub_mul: PLATIPUS's draws
// mu + sigma eps over all pieces (Algorithm 1, steps 2 and 6), where a mul
// and an add per piece were two nodes and two kernels. The rule is add's
// then mul's.
template <class T, class B>
std::vector<Var<T, B>> foreach_add_mul(std::span<const Var<T, B>> a, std::span<const Var<T, B>> r,
                                       std::span<const Var<T, B>> g) {
  return detail::foreach_mul_step(a, r, g, true);
}

// exp(s x_i) for every i, as exp_scaled on each, with one op and one
// backend call: the standard deviations exp(log v / 2) of PLATIPUS's draws
// (Algorithm 1, steps 2 and 6) and the KL's exps over all pieces, where an
// exp_scaled per piece was a node and a kernel each (issue 38). The rule is
// exp_scaled's on each piece; where the sweep records nothing, its products
// h_i y_i are one foreach_mul call and their scaling one foreach_map call
// for all pieces, with the bits of the mul and scale per piece.
template <class T, class B>
std::vector<Var<T, B>> foreach_exp_scaled(std::span<const Var<T, B>> x, T s) {
  check(!x.empty(), "foreach_exp_scaled", "no tensors given");
  return record_many(
      "foreach_exp_scaled", x, raw::foreach_map(UnaryOp::exp_scaled, detail::values(x), s),
      [s](Backward<T, B>& c) {
        if (GradMode::enabled()) {
          for (std::size_t i = 0; i < c.output_count(); ++i)
            if (c.needs(i) && c.grad(i).defined())
              detail::set_exp_scaled_grad(c, i, mul(c.grad(i), c.output(i)), s);
          return;
        }
        std::vector<std::size_t> inputs;
        std::vector<const Tensor<T, B>*> hs, ys;
        std::vector<bool> negated;
        for (std::size_t i = 0; i < c.output_count(); ++i) {
          if (!c.needs(i)) continue;
          const auto [h, h_negated] = c.signed_grad(i);
          if (!h.defined()) continue;
          inputs.push_back(i);
          hs.push_back(&h.value());
          ys.push_back(&c.output(i).value());
          negated.push_back(h_negated);
        }
        if (inputs.empty()) return;
        auto products = raw::foreach_mul(hs, ys, std::vector<bool>(inputs.size(), false));
        if (s != T(-1)) {
          std::vector<const Tensor<T, B>*> p;
          for (const auto& pk : products) p.push_back(&pk);
          products = raw::foreach_map(UnaryOp::scale, p, s);
        }
        for (std::size_t k = 0; k < inputs.size(); ++k)  // s = -1: the sign passed on
          c.set(inputs[k], c.tape().constant(std::move(products[k])), negated[k] != (s == T(-1)));
      },
      Saved{.inputs = 0, .outputs = true});
}

// x_i^2 for every i, as square on each, with one op and one backend call:
// the KL's (m_q - m_p)^2 over all pieces, a kernel a piece before (issue
// 38). The rule is square's on each piece; where the sweep records nothing
// and the gradients h_i repeat along x_i's leading axes at most, the
// products h_i x_i are one foreach_mul call and their doubling one
// foreach_map call for all pieces, h_i's sign passed on: the bits of
// square's rule, (-h) x 2 being -(h x 2).
template <class T, class B>
std::vector<Var<T, B>> foreach_square(std::span<const Var<T, B>> x) {
  check(!x.empty(), "foreach_square", "no tensors given");
  return record_many(
      "foreach_square", x, raw::foreach_map(UnaryOp::square, detail::values(x), T(0)),
      [](Backward<T, B>& c) {
        std::vector<std::size_t> inputs;
        std::vector<const Tensor<T, B>*> hs, xs;
        std::vector<bool> negated;
        for (std::size_t i = 0; i < c.output_count(); ++i) {
          if (!c.needs(i)) continue;
          const Var<T, B> x = c.input(i);
          if (const auto u = c.uniform_grad(i)) {
            c.set(i, scale(x, T(2) * *u));
            continue;
          }
          const auto [h, h_negated] = c.signed_broadcast_grad(i);
          if (!h.defined()) continue;
          if (GradMode::enabled() || !raw::repeats_along_leading_axes(h.shape(), x.shape())) {
            c.set(i, scale(mul(c.broadcast_grad(i), x), T(2)));
            continue;
          }
          inputs.push_back(i);
          hs.push_back(&h.value());
          xs.push_back(&x.value());
          negated.push_back(h_negated);
        }
        if (inputs.empty()) return;
        const auto products = raw::foreach_mul(hs, xs, std::vector<bool>(inputs.size(), false));
        std::vector<const Tensor<T, B>*> p;
        for (const auto& pk : products) p.push_back(&pk);
        auto doubled = raw::foreach_map(UnaryOp::scale, p, T(2));
        for (std::size_t k = 0; k < inputs.size(); ++k)
          c.set(inputs[k], c.tape().constant(std::move(doubled[k])), negated[k]);
      },
      saves_inputs);
}

template <class T, class B>
std::vector<Var<T, B>> foreach_sum_to(std::span<const Var<T, B>> x);

// Each x_i [shape_i] expanded to [copies, shape_i] (a copy, as expand's) by
// one op: a model's parameters given a task axis, so that their gradients
// are per task (the inner loop's first step, per_task). Its adjoint sums
// the gradients back with one op, and that op's adjoint is this one.
template <class T, class B>
std::vector<Var<T, B>> foreach_expand(std::span<const Var<T, B>> x, std::int64_t copies) {
  check(!x.empty(), "foreach_expand", "no tensors given");
  return record_many(
      "foreach_expand", x, raw::foreach_expand(detail::values(x), copies),
      [](Backward<T, B>& c) {
        detail::set_each(c, [](std::span<const Var<T, B>> g) { return foreach_sum_to(g); });
      },
      saves_nothing);
}

// Each x_i [copies, shape_i] summed over its leading axis (copies the same
// for all) by one op: the adjoint of foreach_expand.
template <class T, class B>
std::vector<Var<T, B>> foreach_sum_to(std::span<const Var<T, B>> x) {
  check(!x.empty(), "foreach_sum_to", "no tensors given");
  const std::int64_t copies = x[0].rank() >= 1 ? x[0].dim(0) : 0;
  return record_many(
      "foreach_sum_to", x, raw::foreach_sum_to(detail::values(x)),
      [copies](Backward<T, B>& c) {
        detail::set_each(
            c, [copies](std::span<const Var<T, B>> g) { return foreach_expand(g, copies); });
      },
      saves_nothing);
}

}  // namespace platipus
