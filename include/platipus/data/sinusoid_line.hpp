// The PLATIPUS paper's multimodal 1-D regression tasks (Section 5): half
// sinusoids A sin(x + phase), A ~ U[0.1, 5], phase ~ U[0, pi]; half lines
// a x + b, a, b ~ U[-3, 3]; x ~ U[-5, 5]; labels get N(0, 0.3^2) noise.
#pragma once

#include <cmath>
#include <numbers>
#include <tuple>
#include <utility>
#include <vector>

#include "platipus/data/task_batch.hpp"

namespace platipus::data {

struct SineLineFunction {
  bool sinusoid = true;
  double amplitude = 1, phase = 0;  // sinusoid
  double slope = 0, intercept = 0;  // line
  double operator()(double x) const {
    return sinusoid ? amplitude * std::sin(x + phase) : slope * x + intercept;
  }
};

struct SinusoidLineSettings {
  std::int64_t support = 5;  // K points in D_train
  std::int64_t query = 10;   // points in D_test
  double noise_std = 0.3;
  double x_min = -5, x_max = 5;
  double amplitude_min = 0.1, amplitude_max = 5;
  double phase_min = 0, phase_max = std::numbers::pi;
  double line_min = -3, line_max = 3;  // slope and intercept
  double sinusoid_fraction = 0.5;
};

template <class T = float, class B = cpu>
class SinusoidLineSampler {
 public:
  explicit SinusoidLineSampler(SinusoidLineSettings s = {}) : settings_(s) {
    check(s.support > 0, "SinusoidLineSampler", "the support set is empty (support = {})",
          s.support);
    check(s.query > 0, "SinusoidLineSampler", "the query set is empty (query = {})", s.query);
    check(s.x_min < s.x_max, "SinusoidLineSampler", "empty input range [{}, {}]", s.x_min, s.x_max);
    check(s.noise_std >= 0, "SinusoidLineSampler", "negative noise std {}", s.noise_std);
  }

  const SinusoidLineSettings& settings() const { return settings_; }

  SineLineFunction draw_function(Generator& gen) const {
    const auto& s = settings_;
    SineLineFunction f;
    f.sinusoid = gen.uniform<double>() < s.sinusoid_fraction;
    if (f.sinusoid) {
      f.amplitude = gen.uniform(s.amplitude_min, s.amplitude_max);
      f.phase = gen.uniform(s.phase_min, s.phase_max);
    } else {
      f.slope = gen.uniform(s.line_min, s.line_max);
      f.intercept = gen.uniform(s.line_min, s.line_max);
    }
    return f;
  }

  TaskBatch<T, B> sample(std::int64_t tasks, Generator& gen) const {
    std::vector<SineLineFunction> functions;
    for (std::int64_t i = 0; i < tasks; ++i) functions.push_back(draw_function(gen));
    return sample(functions, gen);
  }

  // Support and query points for given functions, x uniform over the range.
  TaskBatch<T, B> sample(std::span<const SineLineFunction> functions, Generator& gen) const {
    check(!functions.empty(), "SinusoidLineSampler::sample", "no tasks requested");
    TaskBatch<T, B> batch;
    std::tie(batch.support_x, batch.support_y) = points(functions, settings_.support, gen);
    std::tie(batch.query_x, batch.query_y) = points(functions, settings_.query, gen);
    return batch;
  }

  // x [tasks, n, 1] uniform on the range and y = f(x) + noise.
  std::pair<Tensor<T, B>, Tensor<T, B>> points(std::span<const SineLineFunction> functions,
                                               std::int64_t n, Generator& gen) const {
    const auto tasks = static_cast<std::int64_t>(functions.size());
    std::vector<T> x(static_cast<std::size_t>(tasks * n)), y(x.size());
    for (std::int64_t t = 0; t < tasks; ++t)
      for (std::int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(t * n + i);
        const double xv = gen.uniform(settings_.x_min, settings_.x_max);
        x[k] = static_cast<T>(xv);
        y[k] = static_cast<T>(functions[static_cast<std::size_t>(t)](xv) +
                              settings_.noise_std * gen.normal<double>());
      }
    const Shape shape{tasks, n, 1};
    return {Tensor<T, B>::from_host(shape, x), Tensor<T, B>::from_host(shape, y)};
  }

 private:
  SinusoidLineSettings settings_;
};

}  // namespace platipus::data
