// Helpers for the CUDA tests: inputs made on the host, the same computation
// on platipus::cpu and platipus::cuda, and element-wise comparison.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "../catch.hpp"
#include "platipus/backend/cuda/cuda.hpp"
#include "platipus/platipus.hpp"

namespace parity {

using namespace platipus;

// Relative to a tensor's largest magnitude: the backends sum in different
// orders and cuBLAS blocks its products differently from Eigen.
template <class T>
constexpr double tolerance = std::is_same_v<T, float> ? 1e-4 : 1e-10;

// Every element of `actual` within tol * max(max |expected|, 1e-3) of `expected`.
template <class T>
void check_close(const std::vector<T>& expected, const std::vector<T>& actual, double tol,
                 const std::string& what) {
  INFO(what);
  REQUIRE(expected.size() == actual.size());
  double scale = 1e-3, worst = 0;
  std::size_t at = 0;
  for (T v : expected) scale = std::max(scale, std::abs(static_cast<double>(v)));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double error =
        std::abs(static_cast<double>(expected[i]) - static_cast<double>(actual[i]));
    if (!(error <= worst)) worst = error, at = i;  // NaN counts as the worst
  }
  INFO("largest difference " << worst << " at element " << at << " of " << expected.size()
                             << " (expected "
                             << (expected.empty() ? 0.0 : static_cast<double>(expected[at]))
                             << ", scale " << scale << ")");
  CHECK(worst <= tol * scale);
}

template <class T, class B>
void check_close(const Tensor<T>& expected, const Tensor<T, B>& actual, double tol,
                 const std::string& what) {
  REQUIRE(expected.shape() == actual.shape());
  check_close(expected.to_vector(), actual.to_vector(), tol, what);
}

// Host inputs, drawn in double so that the float and double cases see the same numbers.
template <class T>
Tensor<T> from_doubles(const Shape& shape, const std::vector<double>& values) {
  return Tensor<T>::from_host(shape, std::vector<T>(values.begin(), values.end()));
}

template <class T>
Tensor<T> normal(const Shape& shape, std::uint64_t seed, double offset = 0, double scale = 1) {
  Generator gen(seed);
  auto v = raw::normal<double>(shape, gen).to_vector();
  for (auto& x : v) x = offset + scale * x;
  return from_doubles<T>(shape, v);
}

// In [0.5, 1.5]: for log, sqrt, pow and divisors.
template <class T>
Tensor<T> positive(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  auto v = raw::uniform<double>(shape, gen).to_vector();
  for (auto& x : v) x += 0.5;
  return from_doubles<T>(shape, v);
}

// Magnitudes in [0.2, 1.2] with random signs: away from relu's kink.
template <class T>
Tensor<T> away_from_zero(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  auto u = raw::uniform<double>(shape, gen).to_vector();
  const auto s = raw::uniform<double>(shape, gen).to_vector();
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = (s[i] < 0.5 ? -1 : 1) * (0.2 + u[i]);
  return from_doubles<T>(shape, u);
}

// The backend of the span of Vars an op case receives, for its Index arguments.
template <class Span>
using backend_of = typename Span::value_type::backend;

template <class T, class... Rest>
std::vector<Tensor<T>> list(Tensor<T> first, Rest... rest) {
  std::vector<Tensor<T>> v;
  v.push_back(std::move(first));
  (v.push_back(std::move(rest)), ...);
  return v;
}

// On backend B: f's value, the gradient of <f, w> for fixed weights w, and
// the gradient of sum_i <grad_i, v_i> for fixed directions v_i (second
// order through create_graph), as host vectors in that order.
template <class T, class B, class F>
std::vector<std::vector<T>> derivatives(const F& f, const std::vector<Tensor<T>>& inputs) {
  Tape<T, B> tape;
  std::vector<Var<T, B>> x;
  for (const auto& t : inputs) x.push_back(tape.variable(t.template to<B>()));
  const Var<T, B> y = f(std::span<const Var<T, B>>(x));
  const auto weights = tape.constant(normal<T>(y.shape(), 101).template to<B>());
  const auto g = grad(sum(y * weights), std::span<const Var<T, B>>(x),
                      {.create_graph = true, .allow_unused = true});
  std::vector<std::vector<T>> out{y.to_vector()};
  Var<T, B> second;
  for (std::size_t i = 0; i < g.size(); ++i) {
    out.push_back(g[i].to_vector());
    if (!g[i].requires_grad()) continue;
    const auto term = sum(g[i] * tape.constant(normal<T>(g[i].shape(), 200 + i).template to<B>()));
    second = second.defined() ? second + term : term;
  }
  if (second.defined())
    for (const auto& h : grad(second, std::span<const Var<T, B>>(x), {.allow_unused = true}))
      out.push_back(h.to_vector());
  return out;
}

// f (a generic callable on a span of Vars) gives the same values, first
// and second derivatives on both backends.
template <class T, class F>
void check_op(const F& f, const std::vector<Tensor<T>>& inputs) {
  const auto expected = derivatives<T, cpu>(f, inputs);
  const auto actual = derivatives<T, cuda>(f, inputs);
  REQUIRE(expected.size() == actual.size());
  const std::size_t n = inputs.size();
  for (std::size_t k = 0; k < expected.size(); ++k) {
    const std::string what = k == 0   ? std::string("value")
                             : k <= n ? "first derivative, input " + std::to_string(k - 1)
                                      : "second derivative, input " + std::to_string(k - 1 - n);
    check_close(expected[k], actual[k], tolerance<T>, what);
  }
}

// The meta-learning tests' workload: the 1-40-40-1 ReLU network and
// sinusoid-or-line batches of 10 support and 10 query points.
inline nn::Sequential small_network() {
  return nn::mlp({.inputs = 1, .hidden = {40, 40}, .outputs = 1});
}

template <class T, class B = cpu>
TaskBatch<T, B> sinusoid_batch(std::uint64_t seed, std::int64_t tasks = 25) {
  Generator gen(seed);
  return data::SinusoidLineSampler<T, B>({.support = 10, .query = 10}).sample(tasks, gen);
}

// Few-shot image tasks: random images [tasks, points, 1, size, size] and
// labels 0..ways-1 in turn, `shots` support and `queries` query points per class.
template <class T>
TaskBatch<T> image_batch(std::uint64_t seed, std::int64_t tasks, std::int64_t ways,
                         std::int64_t shots, std::int64_t queries, std::int64_t size) {
  Generator gen(seed);
  const auto labels = [&](std::int64_t points) {
    std::vector<T> y;
    for (std::int64_t t = 0; t < tasks; ++t)
      for (std::int64_t p = 0; p < points; ++p) y.push_back(static_cast<T>(p % ways));
    return Tensor<T>::from_host({tasks, points, 1}, y);
  };
  return {raw::normal<T>({tasks, ways * shots, 1, size, size}, gen), labels(ways * shots),
          raw::normal<T>({tasks, ways * queries, 1, size, size}, gen), labels(ways * queries)};
}

// Each convolution engine in turn (a Catch2 generator), restored afterwards.
inline ConvolutionEngine each_convolution_engine() {
  return GENERATE(ConvolutionEngine::cudnn, ConvolutionEngine::gemm);  // automatic picks one
}
struct UsingEngine {
  ConvolutionEngine saved = cuda::convolution_engine();
  explicit UsingEngine(ConvolutionEngine engine) {
    cuda::set_convolution_engine(engine);
    UNSCOPED_INFO("convolution engine "
                  << (engine == ConvolutionEngine::gemm ? "gemm (im2col + cuBLAS)" : "cuDNN"));
  }
  UsingEngine(const UsingEngine&) = delete;
  UsingEngine& operator=(const UsingEngine&) = delete;
  ~UsingEngine() { cuda::set_convolution_engine(saved); }
};

template <class T>
TaskBatch<T, cuda> on_device(const TaskBatch<T>& b) {
  return {b.support_x.template to<cuda>(), b.support_y.template to<cuda>(),
          b.query_x.template to<cuda>(), b.query_y.template to<cuda>()};
}

}  // namespace parity
