// Tests of the synthetic samplers of include/platipus/data/ against the
// task families they describe (the image data sets: data_test.cpp).
// Part of components_test.cpp, which includes it once after helpers.hpp: the
// components' tests are one translation unit (build time).
#pragma once

TEST_CASE("SinusoidLineSampler draws [tasks, K, 1] inputs within [x_min, x_max]",
          "[components][data][sinusoid]") {
  const data::SinusoidLineSampler<float> sampler(
      {.support = 7, .query = 13, .x_min = -2, .x_max = 3});
  Generator gen(41);
  const auto batch = sampler.sample(9, gen);
  CHECK(batch.tasks() == 9);
  CHECK(batch.support_x.shape() == Shape{9, 7, 1});
  CHECK(batch.support_y.shape() == Shape{9, 7, 1});
  CHECK(batch.query_x.shape() == Shape{9, 13, 1});
  CHECK(batch.query_y.shape() == Shape{9, 13, 1});
  for (const auto* x : {&batch.support_x, &batch.query_x}) {
    const auto v = x->to_vector();
    CHECK(*std::min_element(v.begin(), v.end()) >= -2.0f);
    CHECK(*std::max_element(v.begin(), v.end()) <= 3.0f);
  }
  // Spread over the range, not stuck at one point.
  const auto q = batch.query_x.to_vector();
  CHECK(*std::min_element(q.begin(), q.end()) < -1.5f);
  CHECK(*std::max_element(q.begin(), q.end()) > 2.5f);
  CHECK_NOTHROW(batch.validate("test"));
}

TEST_CASE("without noise every label is the task's function at its input",
          "[components][data][sinusoid]") {
  const data::SinusoidLineSampler<double> sampler({.support = 6, .query = 8, .noise_std = 0});
  const std::vector<data::SineLineFunction> functions{
      {.sinusoid = true, .amplitude = 2.5, .phase = 0.7},
      {.sinusoid = false, .slope = -1.5, .intercept = 0.4},
      {.sinusoid = true, .amplitude = 0.3, .phase = 3.0},
  };
  Generator gen(42);
  const auto batch = sampler.sample(functions, gen);
  REQUIRE(batch.tasks() == 3);
  auto expected = [&](std::size_t task, double x) {
    const auto& f = functions[task];
    return f.sinusoid ? f.amplitude * std::sin(x + f.phase) : f.slope * x + f.intercept;
  };
  for (const auto& [xs, ys, n] : {std::tuple{&batch.support_x, &batch.support_y, 6},
                                  std::tuple{&batch.query_x, &batch.query_y, 8}}) {
    const auto x = xs->to_vector(), y = ys->to_vector();
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
        const std::size_t k = t * static_cast<std::size_t>(n) + i;
        CHECK(y[k] == Approx(expected(t, x[k])).margin(1e-12));
      }
  }
}

TEST_CASE("the share of sinusoid tasks is sinusoid_fraction", "[components][data][sinusoid]") {
  for (double fraction : {0.0, 0.3, 0.5, 1.0}) {
    const data::SinusoidLineSampler<float> sampler({.sinusoid_fraction = fraction});
    Generator gen(43);
    const int draws = 20000;
    int sinusoids = 0;
    for (int i = 0; i < draws; ++i) sinusoids += sampler.draw_function(gen).sinusoid ? 1 : 0;
    INFO("sinusoid_fraction " << fraction);
    CHECK(static_cast<double>(sinusoids) / draws == Approx(fraction).margin(0.015));
  }
}

TEST_CASE("amplitude, phase, slope and intercept are drawn within their ranges",
          "[components][data][sinusoid]") {
  const data::SinusoidLineSampler<float> sampler({.amplitude_min = 1,
                                                  .amplitude_max = 2,
                                                  .phase_min = 0.5,
                                                  .phase_max = 1,
                                                  .line_min = -1,
                                                  .line_max = 0.5});
  Generator gen(44);
  std::vector<double> amplitude, phase, slope, intercept;
  for (int i = 0; i < 4000; ++i) {
    const auto f = sampler.draw_function(gen);
    if (f.sinusoid) {
      amplitude.push_back(f.amplitude);
      phase.push_back(f.phase);
    } else {
      slope.push_back(f.slope);
      intercept.push_back(f.intercept);
    }
  }
  REQUIRE(amplitude.size() > 1000);
  REQUIRE(slope.size() > 1000);
  auto within = [](const std::vector<double>& v, double low, double high) {
    const auto m = moments_of(v);
    INFO("min " << m.min << " max " << m.max << " of range [" << low << ", " << high << "]");
    CHECK(m.min >= low);
    CHECK(m.max <= high);
    // Reaches both ends: the range is the one set, not a default.
    CHECK(m.min < low + 0.01 * (high - low));
    CHECK(m.max > high - 0.01 * (high - low));
  };
  within(amplitude, 1, 2);
  within(phase, 0.5, 1);
  within(slope, -1, 0.5);
  within(intercept, -1, 0.5);
}

TEST_CASE("label noise is N(0, noise_std^2) around the function", "[components][data][sinusoid]") {
  const data::SinusoidLineSampler<double> sampler({.support = 1000, .query = 1000});
  REQUIRE(sampler.settings().noise_std == 0.3);
  std::vector<data::SineLineFunction> functions;
  for (int t = 0; t < 10; ++t)
    functions.push_back(
        t % 2 ? data::SineLineFunction{.sinusoid = false, .slope = 0.2 * t, .intercept = -1}
              : data::SineLineFunction{.sinusoid = true, .amplitude = 0.5 + t, .phase = 0.1 * t});
  Generator gen(45);
  const auto batch = sampler.sample(functions, gen);
  std::vector<double> residuals;
  for (const auto& [xs, ys, n] : {std::tuple{&batch.support_x, &batch.support_y, 1000},
                                  std::tuple{&batch.query_x, &batch.query_y, 1000}}) {
    const auto x = xs->to_vector(), y = ys->to_vector();
    for (std::size_t k = 0; k < x.size(); ++k) residuals.push_back(y[k] - functions[k / n](x[k]));
  }
  const auto m = moments_of(residuals);
  CHECK(std::abs(m.mean) < 0.01);
  CHECK(std::sqrt(m.variance) == Approx(0.3).epsilon(0.03));
}

TEST_CASE("SinusoidLineSampler rejects empty sets and empty ranges",
          "[components][data][sinusoid][errors]") {
  using Sampler = data::SinusoidLineSampler<float>;
  CHECK_THROWS_AS(Sampler({.support = 0}), error);
  CHECK_THROWS_WITH(Sampler({.support = 0}),
                    Contains("SinusoidLineSampler") && Contains("support"));
  CHECK_THROWS_WITH(Sampler({.query = 0}), Contains("SinusoidLineSampler") && Contains("query"));
  CHECK_THROWS_WITH(Sampler({.x_min = 1, .x_max = 1}), Contains("SinusoidLineSampler"));
  CHECK_THROWS_WITH(Sampler({.noise_std = -0.1}),
                    Contains("SinusoidLineSampler") && Contains("noise"));
  Generator gen(46);
  CHECK_THROWS_AS(Sampler().sample(std::span<const data::SineLineFunction>(), gen), error);
}

TEST_CASE("circle tasks: support points lie in the circle, query labels say whether a point does",
          "[components][data][circles]") {
  const data::CirclesSampler<double> sampler(
      {.support = 3, .query = 40, .positive_fraction = 0.5, .domain = 5});
  // One circle in the middle, two that the domain's edges cut.
  const std::vector<data::Circle> circles{{2.5, 2.5, 1.0}, {0.4, 4.7, 1.5}, {4.9, 0.2, 0.8}};
  Generator gen(47);
  const auto batch = sampler.sample(circles, gen);
  CHECK(batch.support_x.shape() == Shape{3, 3, 2});
  CHECK(batch.support_y.shape() == Shape{3, 3, 1});
  CHECK(batch.query_x.shape() == Shape{3, 40, 2});
  CHECK(batch.query_y.shape() == Shape{3, 40, 1});
  const auto sx = batch.support_x.to_vector(), sy = batch.support_y.to_vector();
  const auto qx = batch.query_x.to_vector(), qy = batch.query_y.to_vector();
  for (std::size_t t = 0; t < circles.size(); ++t) {
    INFO("task " << t);
    for (std::size_t i = 0; i < 3; ++i) {
      const std::size_t k = t * 3 + i;
      CHECK(circles[t].contains(sx[2 * k], sx[2 * k + 1]));
      CHECK(sy[k] == 1.0);
    }
    for (std::size_t i = 0; i < 40; ++i) {
      const std::size_t k = t * 40 + i;
      CHECK((qy[k] == 1.0) == circles[t].contains(qx[2 * k], qx[2 * k + 1]));
      CHECK((qy[k] == 0.0 || qy[k] == 1.0));
    }
  }
  for (const auto* points : {&sx, &qx})
    for (double c : *points) {
      CHECK(c >= 0.0);
      CHECK(c <= 5.0);
    }
}

TEST_CASE("the query sets hold positive_fraction positives", "[components][data][circles]") {
  for (const double fraction : {0.0, 0.25, 0.5, 1.0}) {
    const data::CirclesSampler<float> sampler({.query = 20, .positive_fraction = fraction});
    Generator gen(48);
    const auto batch = sampler.sample(10, gen);
    const auto y = batch.query_y.to_vector();
    const auto expected = static_cast<std::size_t>(std::round(fraction * 20));
    INFO("positive_fraction " << fraction);
    for (std::size_t t = 0; t < 10; ++t)
      CHECK(static_cast<std::size_t>(std::count(
                y.begin() + static_cast<std::ptrdiff_t>(t * 20),
                y.begin() + static_cast<std::ptrdiff_t>((t + 1) * 20), 1.0f)) == expected);
  }
}

TEST_CASE("sampled circles have centres and radii within their ranges, points within [0, domain]^2",
          "[components][data][circles]") {
  const data::CirclesSampler<double> sampler({.query = 10,
                                              .domain = 4,
                                              .centre_min = 1.5,
                                              .centre_max = 2.5,
                                              .radius_min = 0.3,
                                              .radius_max = 1.2});
  Generator gen(49);
  for (int i = 0; i < 500; ++i) {
    const auto c = sampler.draw_circle(gen);
    CHECK((c.cx >= 1.5 && c.cx <= 2.5 && c.cy >= 1.5 && c.cy <= 2.5));
    CHECK((c.radius >= 0.3 && c.radius <= 1.2));
  }
  const auto batch = sampler.sample(20, gen);
  for (const auto* x : {&batch.support_x, &batch.query_x}) {
    const auto v = x->to_vector();
    CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
    CHECK(*std::max_element(v.begin(), v.end()) <= 4.0);
  }
}

TEST_CASE("CirclesSampler rejects empty sets and a positive fraction outside [0, 1]",
          "[components][data][circles][errors]") {
  using Sampler = data::CirclesSampler<float>;
  CHECK_THROWS_WITH(Sampler({.support = 0}), Contains("CirclesSampler") && Contains("support"));
  CHECK_THROWS_WITH(Sampler({.query = 0}), Contains("CirclesSampler") && Contains("query"));
  CHECK_THROWS_WITH(Sampler({.positive_fraction = 1.5}), Contains("positive_fraction"));
  CHECK_THROWS_WITH(Sampler({.positive_fraction = -0.1}), Contains("positive_fraction"));
  Generator gen(50);
  CHECK_THROWS_AS(Sampler().sample(std::span<const data::Circle>(), gen), error);
}

// A domain in which no point can be drawn inside (or outside) a circle would
// make CirclesSampler::inside / outside loop forever, so such settings are
// refused when the sampler is made.
TEST_CASE("CirclesSampler rejects settings under which no point can be drawn",
          "[components][data][circles][errors]") {
  using Sampler = data::CirclesSampler<float>;
  CHECK_THROWS_AS(Sampler({.domain = 0}), error);
  CHECK_THROWS_AS(Sampler({.domain = -1}), error);
  CHECK_THROWS_AS(Sampler({.centre_min = 6, .centre_max = 7, .radius_max = 0.5}),
                  error);                                               // circles off the domain
  CHECK_THROWS_AS(Sampler({.radius_min = 8, .radius_max = 9}), error);  // circles cover the domain
  CHECK_THROWS_AS(Sampler({.radius_min = -1, .radius_max = -0.5}), error);
}
