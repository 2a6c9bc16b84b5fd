// The PLATIPUS paper's 1-shot 2-D classification tasks (Section 5, after
// Grant et al. 2017): points in [0, 5]^2, a circle with centre ~ U[1, 4]^2
// and radius ~ U[0.1, 2]; inside is positive. D_train holds positive
// examples only (one, in the paper); D_test holds positives and negatives.
#pragma once

#include <cmath>
#include <numbers>
#include <tuple>
#include <vector>

#include "platipus/data/task_batch.hpp"

namespace platipus::data {

struct Circle {
  double cx = 2.5, cy = 2.5, radius = 1;
  bool contains(double x, double y) const {
    return (x - cx) * (x - cx) + (y - cy) * (y - cy) <= radius * radius;
  }
};

struct CirclesSettings {
  std::int64_t support = 1;        // positive examples in D_train
  std::int64_t query = 20;         // points in D_test
  double positive_fraction = 0.5;  // of D_test; the rest is drawn outside the circle
  double domain = 5;
  double centre_min = 1, centre_max = 4;
  double radius_min = 0.1, radius_max = 2;
};

template <class T = float, class B = cpu>
class CirclesSampler {
 public:
  explicit CirclesSampler(CirclesSettings s = {}) : settings_(s) {
    check(s.support > 0, "CirclesSampler", "the support set is empty (support = {})", s.support);
    check(s.query > 0, "CirclesSampler", "the query set is empty (query = {})", s.query);
    check(s.positive_fraction >= 0 && s.positive_fraction <= 1, "CirclesSampler",
          "positive_fraction {} is outside [0, 1]", s.positive_fraction);
    // Points are drawn by rejection: a centre inside the domain keeps part of
    // every disc inside it, and a radius below half the diagonal leaves part
    // of the domain outside every disc, so both loops end.
    check(s.domain > 0, "CirclesSampler", "the domain [0, {}]^2 is empty", s.domain);
    check(0 <= s.centre_min && s.centre_min <= s.centre_max && s.centre_max <= s.domain,
          "CirclesSampler", "centres [{}, {}] must lie within the domain [0, {}]", s.centre_min,
          s.centre_max, s.domain);
    check(0 < s.radius_min && s.radius_min <= s.radius_max &&
              s.radius_max < s.domain / std::numbers::sqrt2,
          "CirclesSampler",
          "radii [{}, {}] must be positive and below half the domain's diagonal ({})", s.radius_min,
          s.radius_max, s.domain / std::numbers::sqrt2);
  }

  const CirclesSettings& settings() const { return settings_; }

  Circle draw_circle(Generator& gen) const {
    const auto& s = settings_;
    return {gen.uniform(s.centre_min, s.centre_max), gen.uniform(s.centre_min, s.centre_max),
            gen.uniform(s.radius_min, s.radius_max)};
  }

  TaskBatch<T, B> sample(std::int64_t tasks, Generator& gen) const {
    std::vector<Circle> circles;
    for (std::int64_t i = 0; i < tasks; ++i) circles.push_back(draw_circle(gen));
    return sample(circles, gen);
  }

  TaskBatch<T, B> sample(std::span<const Circle> circles, Generator& gen) const {
    check(!circles.empty(), "CirclesSampler::sample", "no tasks requested");
    const auto tasks = static_cast<std::int64_t>(circles.size());
    const auto& s = settings_;
    std::vector<T> sx, sy, qx, qy;
    const auto positives =
        static_cast<std::int64_t>(std::lround(s.positive_fraction * static_cast<double>(s.query)));
    for (const auto& c : circles) {
      for (std::int64_t i = 0; i < s.support; ++i) push_point(inside(c, gen), T(1), sx, sy);
      for (std::int64_t i = 0; i < s.query; ++i)
        push_point(i < positives ? inside(c, gen) : outside(c, gen), i < positives ? T(1) : T(0),
                   qx, qy);
    }
    TaskBatch<T, B> batch;
    batch.support_x = Tensor<T, B>::from_host({tasks, s.support, 2}, sx);
    batch.support_y = Tensor<T, B>::from_host({tasks, s.support, 1}, sy);
    batch.query_x = Tensor<T, B>::from_host({tasks, s.query, 2}, qx);
    batch.query_y = Tensor<T, B>::from_host({tasks, s.query, 1}, qy);
    return batch;
  }

  // A point uniform over the disc (clipped to the domain by rejection).
  std::pair<double, double> inside(const Circle& c, Generator& gen) const {
    for (;;) {
      const double r = c.radius * std::sqrt(gen.uniform<double>()),
                   a = 2 * std::numbers::pi * gen.uniform<double>();
      const double x = c.cx + r * std::cos(a), y = c.cy + r * std::sin(a);
      if (x >= 0 && x <= settings_.domain && y >= 0 && y <= settings_.domain) return {x, y};
    }
  }

  // A point uniform over the domain outside the disc.
  std::pair<double, double> outside(const Circle& c, Generator& gen) const {
    for (;;) {
      const double x = gen.uniform(0.0, settings_.domain), y = gen.uniform(0.0, settings_.domain);
      if (!c.contains(x, y)) return {x, y};
    }
  }

 private:
  static void push_point(std::pair<double, double> p, T label, std::vector<T>& xs,
                         std::vector<T>& ys) {
    xs.push_back(static_cast<T>(p.first));
    xs.push_back(static_cast<T>(p.second));
    ys.push_back(label);
  }

  CirclesSettings settings_;
};

}  // namespace platipus::data
