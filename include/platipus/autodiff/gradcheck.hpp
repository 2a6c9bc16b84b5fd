// gradcheck / gradgradcheck: compare reverse-mode derivatives of a user
// function with central finite differences, in double precision.
//
//   auto f = [](std::span<const Var<double>> x) { return sum(tanh(x[0]) * x[1]); };
//   REQUIRE(gradcheck(f, inputs));       // first derivatives
//   REQUIRE(gradgradcheck(f, inputs));   // second derivatives
//
// f takes the inputs as Vars on a fresh tape and returns a Var of any shape.
// gradgradcheck checks the function (x, v) -> d<f(x), v>/dx, built with
// create_graph, against finite differences of itself, as PyTorch does.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "platipus/autodiff/grad.hpp"
#include "platipus/autodiff/ops/concat.hpp"
#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/tensor/random.hpp"

namespace platipus {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // pass when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-4;
};

struct GradcheckResult {
  bool ok = true;
  double max_error = 0;  // largest |analytic - numeric| seen
  std::string message;   // the first mismatch, when !ok
  explicit operator bool() const { return ok; }
};

template <class B = cpu>
using DoubleFunction = std::function<Var<double, B>(std::span<const Var<double, B>>)>;

namespace detail {

template <class B>
std::vector<double> evaluate(const DoubleFunction<B>& f,
                             std::span<const Tensor<double, B>> inputs) {
  // Recorded, not under NoGradGuard: f may itself take gradients (gradgradcheck).
  Tape<double, B> tape;
  std::vector<Var<double, B>> x;
  for (const auto& t : inputs) x.push_back(tape.variable(t));
  return f(x).to_vector();
}

}  // namespace detail

template <class B = cpu>
GradcheckResult gradcheck(const std::type_identity_t<DoubleFunction<B>>& f,
                          const std::vector<Tensor<double, B>>& inputs,
                          GradcheckOptions options = {}) {
  // Analytic Jacobian, one output element (one seed) at a time.
  Tape<double, B> tape;
  std::vector<Var<double, B>> x;
  for (const auto& t : inputs) x.push_back(tape.variable(t));
  const Var<double, B> y = f(x);
  check(y.defined(), "gradcheck", "the function returned an undefined Var");
  const auto out_count = static_cast<std::size_t>(y.numel());
  // analytic[i][e * out_count + j] = d y_j / d x_i[e]
  std::vector<std::vector<double>> analytic(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    analytic[i].resize(static_cast<std::size_t>(inputs[i].numel()) * out_count);
  for (std::size_t j = 0; j < out_count; ++j) {
    std::vector<double> seed(out_count, 0.0);
    seed[j] = 1.0;
    const Var<double, B> s = tape.constant(Tensor<double, B>::from_host(y.shape(), seed));
    const auto g = grad(std::span<const Var<double, B>>(&y, 1), std::span<const Var<double, B>>(x),
                        std::span<const Var<double, B>>(&s, 1), {.allow_unused = true});
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto gi = g[i].to_vector();
      for (std::size_t e = 0; e < gi.size(); ++e) analytic[i][e * out_count + j] = gi[e];
    }
  }

  // Numeric Jacobian by central differences, one input element at a time.
  GradcheckResult result;
  std::vector<Tensor<double, B>> probe;
  for (const auto& t : inputs) probe.push_back(t.clone());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::vector<double> values = inputs[i].to_vector();
    for (std::size_t e = 0; e < values.size(); ++e) {
      const double original = values[e];
      values[e] = original + options.eps;
      probe[i].assign(values);
      const auto plus = detail::evaluate<B>(f, probe);
      values[e] = original - options.eps;
      probe[i].assign(values);
      const auto minus = detail::evaluate<B>(f, probe);
      values[e] = original;
      probe[i].assign(values);
      for (std::size_t j = 0; j < out_count; ++j) {
        const double numeric = (plus[j] - minus[j]) / (2 * options.eps);
        const double a = analytic[i][e * out_count + j];
        const double error = std::abs(a - numeric);
        result.max_error = std::max(result.max_error, error);
        if (result.ok && !(error <= options.atol + options.rtol * std::abs(numeric))) {
          result.ok = false;
          result.message =
              fmt::format("d output[{}] / d input {}[{}]: analytic {:.10g}, numeric {:.10g}", j, i,
                          e, a, numeric);
        }
      }
    }
  }
  return result;
}

template <class B = cpu>
GradcheckResult gradgradcheck(const std::type_identity_t<DoubleFunction<B>>& f,
                              const std::vector<Tensor<double, B>>& inputs,
                              GradcheckOptions options = {}, std::uint64_t seed = 0) {
  // A random direction v for the vector-Jacobian product, fixed by `seed`.
  Shape out_shape;
  {
    Tape<double, B> tape;
    std::vector<Var<double, B>> x;
    for (const auto& t : inputs) x.push_back(tape.variable(t));
    out_shape = f(x).shape();
  }
  Generator gen(seed);
  std::vector<Tensor<double, B>> extended;
  for (const auto& t : inputs) extended.push_back(t.clone());
  extended.push_back(raw::normal<double, B>(out_shape, gen));
  const std::size_t n = inputs.size();

  // (x, v) -> concat_i flatten(d<f(x), v>/dx_i), recorded with create_graph.
  DoubleFunction<B> vjp = [&f, n](std::span<const Var<double, B>> xv) {
    const auto x = xv.first(n);
    const Var<double, B> y = f(x);
    const auto g = grad(std::span<const Var<double, B>>(&y, 1), x, xv.subspan(n, 1),
                        {.create_graph = true, .allow_unused = true});
    std::vector<Var<double, B>> flat;
    for (const auto& gi : g) flat.push_back(reshape(gi, {-1}));
    return concat(std::span<const Var<double, B>>(flat), 0);
  };
  return gradcheck<B>(vjp, extended, options);
}

}  // namespace platipus
