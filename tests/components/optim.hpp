// Tests of include/platipus/optim/: the optimisers against their update
// formulas and the cosine schedule.
// Part of components_test.cpp, which includes it once after helpers.hpp: the
// components' tests are one translation unit (build time).
#pragma once

TEST_CASE("Adam's first three steps follow the bias-corrected formulas", "[components][optim]") {
  // Non-default settings so that each constant matters.
  const optim::AdamSettings s{.learning_rate = 0.1, .beta1 = 0.8, .beta2 = 0.95, .epsilon = 1e-2};
  optim::Adam<double> adam(s);
  Tensor<double> p0 = Tensor<double>::from_host({3}, {0.5, -1.0, 2.0});
  Tensor<double> p1 = Tensor<double>::from_host({2}, {0.0, 3.0});
  const std::vector<std::vector<std::vector<double>>> grads{{{0.3, -2.0, 0.01}, {1.0, -0.5}},
                                                            {{-0.1, -1.5, 0.02}, {0.0, 4.0}},
                                                            {{0.7, 0.5, -0.03}, {-2.0, 0.1}}};
  std::vector<std::vector<double>> p{p0.to_vector(), p1.to_vector()}, m{{0, 0, 0}, {0, 0}}, v = m;
  for (int t = 1; t <= 3; ++t) {
    const auto& g = grads[static_cast<std::size_t>(t - 1)];
    const Tensor<double> g0 = Tensor<double>::from_host({3}, g[0]),
                         g1 = Tensor<double>::from_host({2}, g[1]);
    Tensor<double>* params[] = {&p0, &p1};
    const Tensor<double>* gs[] = {&g0, &g1};
    adam.step(params, gs);
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t e = 0; e < p[i].size(); ++e) {
        m[i][e] = s.beta1 * m[i][e] + (1 - s.beta1) * g[i][e];
        v[i][e] = s.beta2 * v[i][e] + (1 - s.beta2) * g[i][e] * g[i][e];
        const double m_hat = m[i][e] / (1 - std::pow(s.beta1, t)),
                     v_hat = v[i][e] / (1 - std::pow(s.beta2, t));
        p[i][e] -= s.learning_rate * m_hat / (std::sqrt(v_hat) + s.epsilon);
      }
    INFO("step " << t);
    CHECK(adam.steps() == t);
    CHECK(largest_difference(p0.to_vector(), p[0]) < 1e-13);
    CHECK(largest_difference(p1.to_vector(), p[1]) < 1e-13);
  }
}

TEST_CASE("Adam steps all its tensors with one backend call per capacity, each with its own bits",
          "[components][optim]") {
  using counted = CountingBackend<cpu>;
  constexpr int count = AdamLayout<float>::capacity + 6;
  const optim::AdamSettings s{.learning_rate = 0.05, .beta1 = 0.8, .beta2 = 0.95};
  std::vector<Tensor<float, counted>> together, apart, grads;
  for (int i = 0; i < count; ++i) {
    const Shape shape = i == 5 ? Shape{0} : Shape{i % 3 + 1, 4};  // one empty tensor
    Generator gen(static_cast<std::uint64_t>(500 + i));
    together.push_back(raw::normal<float>(shape, gen).to<counted>());
    apart.push_back(together.back().clone());
    grads.push_back(raw::normal<float>(shape, gen).to<counted>());
  }
  optim::Adam<float, counted> adam(s);
  std::vector<optim::Adam<float, counted>> one_each;
  for (int i = 0; i < count; ++i) one_each.emplace_back(s);
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor<float, counted>*> params;
    std::vector<const Tensor<float, counted>*> gs;
    for (std::size_t i = 0; i < together.size(); ++i) {
      params.push_back(&together[i]);
      gs.push_back(&grads[i]);
    }
    counted::reset();
    adam.step(params, gs);
    // 29 tensors with elements: 24 in the first call, 5 in the second.
    CHECK(counted::calls()["adam"] == 2);
    for (std::size_t i = 0; i < apart.size(); ++i) {
      Tensor<float, counted>* p[] = {&apart[i]};
      const Tensor<float, counted>* g[] = {&grads[i]};
      one_each[i].step(p, g);
    }
  }
  for (std::size_t i = 0; i < together.size(); ++i)
    CHECK(together[i].to<cpu>().to_vector() == apart[i].to<cpu>().to_vector());
}

TEST_CASE("AdamSettings::learning_rate_at follows a cosine to final_learning_rate, then stays",
          "[components][optim]") {
  const optim::AdamSettings cosine{
      .learning_rate = 1e-3, .annealing_steps = 100, .final_learning_rate = 1e-5};
  CHECK(cosine.learning_rate_at(0) == 1e-3);
  CHECK(cosine.learning_rate_at(25) == Approx(1e-5 + (1e-3 - 1e-5) * (1 + std::sqrt(0.5)) / 2));
  CHECK(cosine.learning_rate_at(50) == Approx((1e-3 + 1e-5) / 2));
  CHECK(cosine.learning_rate_at(100) == Approx(1e-5));
  CHECK(cosine.learning_rate_at(5000) == Approx(1e-5));
  const optim::AdamSettings constant{.learning_rate = 1e-3, .final_learning_rate = 1e-5};
  CHECK(constant.learning_rate_at(5000) == 1e-3);
}

TEST_CASE("Sgd steps p - learning_rate * g", "[components][optim]") {
  optim::Sgd<double> sgd({.learning_rate = 0.25});
  Tensor<double> p = Tensor<double>::from_host({3}, {1.0, -2.0, 0.5});
  for (int step = 0; step < 2; ++step) {
    const auto before = p.to_vector();
    const Tensor<double> g = Tensor<double>::from_host({3}, {0.4 * (step + 1), -1.0, 8.0});
    const auto gv = g.to_vector();
    Tensor<double>* params[] = {&p};
    const Tensor<double>* gs[] = {&g};
    sgd.step(params, gs);
    std::vector<double> expected(3);
    for (std::size_t e = 0; e < 3; ++e) expected[e] = before[e] - 0.25 * gv[e];
    CHECK(largest_difference(p.to_vector(), expected) < 1e-15);
  }
}

TEST_CASE("optimisers reject gradients that do not match their parameters",
          "[components][optim][errors]") {
  Tensor<float> p = Tensor<float>::zeros({3}), q = Tensor<float>::zeros({2});
  const Tensor<float> g_wrong = Tensor<float>::zeros({4}), g_q = Tensor<float>::zeros({2});
  Tensor<float>* one[] = {&p};
  Tensor<float>* two[] = {&p, &q};
  const Tensor<float>* wrong[] = {&g_wrong};
  const Tensor<float>* too_few[] = {&g_q};
  SECTION("Sgd") {
    optim::Sgd<float> sgd;
    CHECK_THROWS_WITH(sgd.step(one, wrong),
                      Contains("Sgd::step") && Contains("[3]") && Contains("[4]"));
    CHECK_THROWS_WITH(sgd.step(two, too_few),
                      Contains("Sgd::step") && Contains("2 parameters but 1 gradients"));
    CHECK(p.to_vector() == std::vector<float>(3, 0.0f));
  }
  SECTION("Adam") {
    optim::Adam<float> adam;
    CHECK_THROWS_WITH(adam.step(one, wrong),
                      Contains("Adam::step") && Contains("[3]") && Contains("[4]"));
    CHECK_THROWS_WITH(adam.step(two, too_few),
                      Contains("Adam::step") && Contains("2 parameters but 1 gradients"));
  }
  SECTION("Adam called with another set of parameters after its first step") {
    optim::Adam<float> adam;
    const Tensor<float> g_p = Tensor<float>::zeros({3});
    const Tensor<float>* right[] = {&g_p};
    adam.step(one, right);
    const Tensor<float>* both[] = {&g_p, &g_q};
    CHECK_THROWS_WITH(adam.step(two, both), Contains("Adam::step") && Contains("2"));
  }
}
