// The algorithms of include/platipus/meta/algorithms/ behave as their papers
// say: MAML learns to adapt and its meta-gradient is second order,
// PLATIPUS's samples carry uncertainty that shrinks with data, and Meta-SGD,
// ANIL, Reptile and MAML++ match their definitions and learn; each refuses
// settings that make no sense.
// Part of learning_test.cpp, which includes it once after helpers.hpp: the
// learning tests are one translation unit (build time).
#pragma once

TEST_CASE(
    "second-order MAML learns sinusoids: adaptation beats no adaptation and joint pre-training",
    "[maml][learning][long]") {
  const Sampler sampler({.support = 10, .query = 10, .sinusoid_fraction = 1.0});
  const MamlSettings settings{.inner_loop = {.steps = 5, .learning_rate = 0.01},
                              .driver = {.threads = 2}};
  Generator init(1), data(2);
  Maml<nn::Sequential, MseLoss> maml(small_network(), MseLoss{}, settings, init);
  // Joint pre-training is MAML with no inner steps: the mean loss over tasks at theta.
  Generator init_joint(1);
  Maml<nn::Sequential, MseLoss> joint(small_network(), MseLoss{},
                                      {.inner_loop = {.steps = 0}, .driver = {.threads = 2}},
                                      init_joint);
  for (int step = 0; step < 1500; ++step) {
    const auto batch = sampler.sample(25, data);
    maml.meta_train_step(batch, data);
    joint.meta_train_step(batch, data);
  }
  // The jointly trained network, fine-tuned on the support set like MAML.
  Generator unused(0);
  Maml<nn::Sequential, MseLoss> fine_tuned(small_network(), MseLoss{}, settings, unused);
  fine_tuned.set_parameters(joint.parameters().clone());

  Generator held_out(99);
  const auto test = sampler.sample(200, held_out);
  const double before = mse(maml.predict(maml.parameters(), test.query_x), test.query_y);
  const double after =
      mse(maml.predict(maml.adapt_to(test.support_x, test.support_y, held_out), test.query_x),
          test.query_y);
  const double joint_after =
      mse(fine_tuned.predict(fine_tuned.adapt_to(test.support_x, test.support_y, held_out),
                             test.query_x),
          test.query_y);
  INFO("query MSE: MAML before adaptation " << before << ", after " << after
                                            << "; joint pre-training fine-tuned " << joint_after);
  CHECK(after < 0.5 * before);
  CHECK(after < 0.75 * joint_after);
}

TEST_CASE("the MAML class's meta-gradient matches finite differences and differs from first order",
          "[maml][grad]") {
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {8, 8}, .outputs = 1, .activation = nn::Activation::tanh});
  const data::SinusoidLineSampler<double> sampler({.support = 5, .query = 5});
  Generator init(3), gen(4);
  const auto batch = sampler.sample(4, gen);
  Maml<nn::Sequential, MseLoss, double> second(
      model, MseLoss{},
      {.inner_loop = {.steps = 3, .learning_rate = 0.05}, .driver = {.threads = 2}}, init);
  Generator init2(3);
  Maml<nn::Sequential, MseLoss, double> first(model, MseLoss{},
                                              {.inner_loop = {.steps = 3, .learning_rate = 0.05},
                                               .first_order = true,
                                               .driver = {.threads = 2}},
                                              init2);
  const auto g = second.meta_gradient(batch, gen).to_vector();
  const auto g_first = first.meta_gradient(batch, gen).to_vector();
  const auto errors = directional_errors(second, batch, gen, {g, g_first});
  const double worst = errors[0], first_order_gap = errors[1];
  INFO("worst relative error " << worst << ", first-order gap " << first_order_gap);
  CHECK(worst < 1e-6);
  CHECK(first_order_gap > 1e-3);
}

TEST_CASE("the diagonal Gaussian KL matches a Monte-Carlo estimate", "[platipus]") {
  Tape<double> tape;
  const auto mq = tape.constant(Tensor<double>::from_host({1, 3}, {0.3, -1.0, 2.0}));
  const auto lq =
      tape.constant(Tensor<double>::from_host({3}, {std::log(0.5), std::log(2.0), std::log(0.1)}));
  const auto mp = tape.constant(Tensor<double>::from_host({1, 3}, {0.0, 0.5, 1.5}));
  const auto lp =
      tape.constant(Tensor<double>::from_host({3}, {std::log(1.0), std::log(1.5), std::log(0.3)}));
  const double closed = kl_diagonal_gaussians(mq, lq, mp, lp).item();
  // E_q[log q(x) - log p(x)] by sampling x ~ q.
  Generator gen(6);
  const int n = 200000;
  const auto z = raw::normal<double>({n, 3}, gen).to_vector();
  const double m_q[] = {0.3, -1.0, 2.0}, v_q[] = {0.5, 2.0, 0.1}, m_p[] = {0.0, 0.5, 1.5},
               v_p[] = {1.0, 1.5, 0.3};
  double estimate = 0;
  for (int s = 0; s < n; ++s)
    for (int j = 0; j < 3; ++j) {
      const double x = m_q[j] + std::sqrt(v_q[j]) * z[static_cast<std::size_t>(s * 3 + j)];
      const double log_q =
          -0.5 * (std::log(2 * M_PI * v_q[j]) + (x - m_q[j]) * (x - m_q[j]) / v_q[j]);
      const double log_p =
          -0.5 * (std::log(2 * M_PI * v_p[j]) + (x - m_p[j]) * (x - m_p[j]) / v_p[j]);
      estimate += (log_q - log_p) / n;
    }
  CHECK(closed == Approx(estimate).epsilon(0.01));
  CHECK(kl_diagonal_gaussians(mq, lq, mq, lq).item() == Approx(0.0).margin(1e-12));
}

TEST_CASE("PLATIPUS samples differ, and their spread shrinks as support points are added",
          "[platipus][learning][long]") {
  const Sampler train({.support = 5, .query = 10});
  Generator init(7), data(8);
  PlatipusModel model(small_network(), MseLoss{},
                      {.inner_loop = {.steps = 5, .learning_rate = 0.01},
                       .kl_weight = 1.5,
                       .driver = {.threads = 2}},
                      init);
  for (int step = 0; step < 1000; ++step) model.meta_train_step(train.sample(25, data), data);

  const Sampler test({.support = 10, .query = 50});
  Generator held_out(9);
  const auto tasks = test.sample(50, held_out);
  const auto samples = model.sample(raw::slice(tasks.support_x, 0, 0, 1),
                                    raw::slice(tasks.support_y, 0, 0, 1), 4, held_out);
  const auto values = samples.to_vector();
  const auto size = static_cast<std::size_t>(model.model().layout().size());
  for (std::size_t a = 0; a < 4; ++a)
    for (std::size_t b = a + 1; b < 4; ++b) {
      double distance = 0;
      for (std::size_t i = 0; i < size; ++i)
        distance += std::abs(values[a * size + i] - values[b * size + i]);
      CHECK(distance > 1e-3);
    }
  const double one = spread(model, tasks, 1, held_out), five = spread(model, tasks, 5, held_out),
               ten = spread(model, tasks, 10, held_out);
  INFO("prediction variance with 1, 5, 10 support points: " << one << ", " << five << ", " << ten);
  // From 1 point to 5 or 10 the spread falls clearly. From 5 to 10 the change
  // is within what float rounding moves: with one chunk per task, the release
  // build trained a model whose spread fell from 5 to 10 points and the
  // sanitizer build (other float contractions) one whose spread rose (0.87 to
  // 0.96), so the test does not ask for it.
  CHECK(one > 1.5 * five);
  CHECK(one > 1.5 * ten);
}

TEST_CASE(
    "MAML + noise samples distinct models, spread by the noise, and plain MAML samples copies",
    "[maml][noise]") {
  const Sampler sampler({.support = 5, .query = 5});
  Generator gen(11);
  const auto batch = sampler.sample(3, gen);
  auto spread = [&](double noise) {
    Generator init(12);
    Maml<nn::Sequential, MseLoss> maml(
        small_network(), MseLoss{},
        {.inner_loop = {.gradient_noise = noise}, .driver = {.threads = 1}}, init);
    maml.meta_train_step(batch, gen);  // training runs with the noise too
    const auto samples = maml.sample(batch.support_x, batch.support_y, 4, gen).to_vector();
    const auto size = static_cast<std::size_t>(maml.model().layout().size());
    double distance = 0;
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t i = 0; i < size; ++i)
        distance += std::abs(samples[(t * 4 + 1) * size + i] - samples[(t * 4) * size + i]);
    return distance;
  };
  CHECK(spread(0.0) == 0.0);
  const double small = spread(0.1), large = spread(1.0);
  CHECK(small > 0.0);
  CHECK(large > 5 * small);
}

TEST_CASE("PLATIPUS anneals its KL weight linearly when asked", "[platipus]") {
  Generator init(13), gen(14);
  Platipus<nn::Sequential, MseLoss> model(
      nn::mlp({.inputs = 1, .hidden = {4}, .outputs = 1}), MseLoss{},
      {.kl_weight = 2.0, .kl_anneal_steps = 4, .driver = {.threads = 1}}, init);
  const auto batch = Sampler({.support = 2, .query = 2}).sample(2, gen);
  std::vector<double> weights;
  for (int step = 0; step < 6; ++step) {
    weights.push_back(model.current_schedule().kl_weight);
    model.meta_train_step(batch, gen);
  }
  CHECK(weights == std::vector<double>{0.0, 0.5, 1.0, 1.5, 2.0, 2.0});
  Generator init2(13);
  Platipus<nn::Sequential, MseLoss> plain(nn::mlp({.inputs = 1, .hidden = {4}, .outputs = 1}),
                                          MseLoss{}, {.kl_weight = 2.0, .driver = {.threads = 1}},
                                          init2);
  CHECK(plain.current_schedule().kl_weight == 2.0);
}

TEST_CASE("PLATIPUS's step sizes gamma stay positive: they are stored as logarithms",
          "[platipus]") {
  Generator init(76), gen(77);
  PlatipusModel model(small_network(), MseLoss{},
                      {.initial_gamma_p = 0.02, .initial_gamma_q = 0.03, .driver = {.threads = 1}},
                      init);
  CHECK(model.part(PlatipusModel::log_gamma_p).to_vector()[0] == Approx(std::log(0.02)));
  CHECK(model.part(PlatipusModel::log_gamma_q).to_vector()[0] == Approx(std::log(0.03)));
  // Many steps of Adam move a log by about the learning rate each; the step
  // size exp(log gamma) it stands for is positive whatever the log becomes.
  const Sampler sampler({.support = 5, .query = 10});
  for (int step = 0; step < 50; ++step) model.meta_train_step(sampler.sample(5, gen), gen);
  for (auto part : {PlatipusModel::log_gamma_p, PlatipusModel::log_gamma_q})
    for (float v : model.part(part).to_vector()) CHECK(std::isfinite(v));
}

TEST_CASE("PLATIPUS and MAML refuse settings that make no sense, naming the setting",
          "[platipus][errors]") {
  using Catch::Contains;
  Generator init(78);
  auto make = [&](PlatipusSettings s) {
    PlatipusModel(small_network(), MseLoss{}, s, init);
  };
  CHECK_THROWS_WITH(make({.initial_prior_variance = -1}), Contains("initial variances"));
  CHECK_THROWS_WITH(make({.initial_posterior_variance = 0}), Contains("initial variances"));
  CHECK_THROWS_WITH(make({.initial_gamma_p = 0}), Contains("gamma_p 0"));
  CHECK_THROWS_WITH(make({.initial_gamma_q = -0.1}), Contains("gamma_q -0.1"));
  CHECK_THROWS_WITH(make({.kl_weight = -1}), Contains("kl_weight"));
  CHECK_THROWS_WITH(make({.prior_likelihood_weight = -0.5}),
                    Contains("prior_likelihood_weight must be non-negative, got -0.5"));
  CHECK_THROWS_WITH(make({.prior_likelihood_weight = std::nan("")}),
                    Contains("prior_likelihood_weight must be finite"));
  CHECK_THROWS_WITH(make({.mean_steps = 0}), Contains("mean_steps"));
  CHECK_THROWS_WITH(make({.inner_loop = {.max_gradient_norm = -1}}),
                    Contains("inner_loop.max_gradient_norm"));
  // Inner-gradient noise is MAML + noise's; PLATIPUS's randomness is its sampled theta.
  CHECK_THROWS_WITH(make({.inner_loop = {.gradient_noise = 1}}),
                    Contains("inner_loop.gradient_noise must be 0"));
  PlatipusModel model(small_network(), MseLoss{}, {.driver = {.threads = 1}}, init);
  const auto batch = Sampler({.support = 2, .query = 2}).sample(1, init);
  CHECK_THROWS_WITH(model.sample(batch.support_x, batch.support_y, 0, init),
                    Contains("number of samples"));
  using MamlModel = Maml<nn::Sequential, MseLoss>;
  auto make_maml = [&](MamlSettings s) {
    MamlModel(small_network(), MseLoss{}, s, init);
  };
  CHECK_THROWS_WITH(make_maml({.inner_loop = {.gradient_noise = -1}}),
                    Contains("inner_loop.gradient_noise"));
  CHECK_THROWS_WITH(make_maml({.inner_loop = {.steps = -1}}), Contains("inner_loop.steps"));
  CHECK_THROWS_WITH(make_maml({.inner_loop = {.max_gradient_norm = -0.5}}),
                    Contains("inner_loop.max_gradient_norm"));
}

TEST_CASE(
    "a learner's own inner-loop defaults survive a designated initialiser that names other "
    "fields",
    "[platipus][metasgd][maml]") {
  const PlatipusSettings platipus{.inner_loop = {.steps = 2}};
  CHECK(platipus.inner_loop.steps == 2);
  CHECK(platipus.inner_loop.learning_rate == 1e-3);  // PLATIPUS's, not the general 0.01
  const MetaSgdSettings meta_sgd{.inner_loop = {.learning_rate = 0.1}};
  CHECK(meta_sgd.inner_loop.steps == 1);  // Meta-SGD's one step, not the general 5
  CHECK(meta_sgd.inner_loop.learning_rate == 0.1);
  const MamlSettings maml{.inner_loop = {.gradient_noise = 0.5}};
  CHECK(maml.inner_loop.steps == 5);
  CHECK(maml.inner_loop.learning_rate == 0.01);
  // The plain InnerLoop, which the inner loop's functions take, keeps every
  // field, and so does the way back.
  const PlatipusSettings full{.inner_loop = {.steps = 3,
                                             .learning_rate = 0.2,
                                             .gradient_noise = 0.1,
                                             .max_gradient_norm = 4,
                                             .evaluation_steps = 7}};
  const InnerLoop plain = full.inner_loop;
  CHECK(plain.steps == 3);
  CHECK(plain.learning_rate == 0.2);
  CHECK(plain.gradient_noise == 0.1);
  CHECK(plain.max_gradient_norm == 4);
  CHECK(plain.evaluation_steps == 7);
  MetaSgdSettings back;
  back.inner_loop = plain;
  CHECK(back.inner_loop.steps == 3);
  CHECK(back.inner_loop.learning_rate == 0.2);
  CHECK(back.inner_loop.evaluation_steps == 7);
  CHECK(back.inner_loop.for_evaluation().steps == 7);
}

// Each task's first inner-loop gradient norm: of its MSE on its support
// points at `parameters`.
template <class T>
std::vector<double> first_inner_gradient_norms(const nn::Sequential& model,
                                               const Tensor<T>& parameters,
                                               const TaskBatch<T>& batch) {
  Tape<T> tape;
  const auto phi = per_task(tape.variable(parameters), model.layout(), batch.tasks());
  const auto g = grad(task_loss(model, MseLoss{}, phi, tape.constant(batch.support_x),
                                tape.constant(batch.support_y)),
                      std::span<const Var<T>>(phi));
  std::vector<double> norms(static_cast<std::size_t>(batch.tasks()), 0.0);
  for (const auto& gi : g) {
    const auto v = gi.value().to_vector();
    const std::size_t row = v.size() / norms.size();
    for (std::size_t i = 0; i < v.size(); ++i) norms[i / row] += double(v[i]) * v[i];
  }
  for (auto& n : norms) n = std::sqrt(n);
  return norms;
}

TEST_CASE("a meta-gradient through clipped inner gradients matches central finite differences",
          "[maml][grad]") {
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {8, 8}, .outputs = 1, .activation = nn::Activation::tanh});
  const data::SinusoidLineSampler<double> sampler({.support = 5, .query = 5});
  Generator init(3), gen(4);
  const auto batch = sampler.sample(6, gen);
  const MamlSettings unclipped{.inner_loop = {.steps = 3, .learning_rate = 0.02},
                               .driver = {.threads = 1}};
  Maml<nn::Sequential, MseLoss, double> plain(model, MseLoss{}, unclipped, init);
  // The bound: the median of the tasks' first inner-gradient norms, so that
  // the clip binds for some tasks and not for others.
  auto norms = first_inner_gradient_norms(model, plain.parameters(), batch);
  std::sort(norms.begin(), norms.end());
  const double bound = 0.5 * (norms[2] + norms[3]);
  INFO("task gradient norms from " << norms.front() << " to " << norms.back() << ", bound "
                                   << bound);
  MamlSettings clipped_settings = unclipped;
  clipped_settings.inner_loop.max_gradient_norm = bound;
  Generator init2(3);
  Maml<nn::Sequential, MseLoss, double> clipped(model, MseLoss{}, clipped_settings, init2);
  const auto g = clipped.meta_gradient(batch, gen).to_vector();
  const auto g_plain = plain.meta_gradient(batch, gen).to_vector();
  const double worst = directional_errors(clipped, batch, gen, {g})[0];
  INFO("worst relative error " << worst);
  CHECK(worst < 1e-6);
  // The clip changed the meta-gradient: it bound for some tasks.
  double gap = 0, scale = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    gap = std::max(gap, std::abs(g[i] - g_plain[i]));
    scale = std::max(scale, std::abs(g_plain[i]));
  }
  CHECK(gap > 1e-3 * scale);
}

TEST_CASE("a clip that does not bind leaves the float meta-gradient bit for bit as without one",
          "[maml][grad]") {
  const auto model = nn::mlp({.inputs = 1, .hidden = {16, 16}, .outputs = 1});
  const data::SinusoidLineSampler<float> sampler({.support = 5, .query = 5});
  Generator gen(4);
  const auto batch = sampler.sample(6, gen);
  auto meta_gradient = [&](double bound) {
    Generator init(3), draws(5);
    Maml<nn::Sequential, MseLoss> maml(
        model, MseLoss{},
        {.inner_loop = {.steps = 3, .learning_rate = 0.02, .max_gradient_norm = bound},
         .driver = {.threads = 1}},
        init);
    return maml.meta_gradient(batch, draws).to_vector();
  };
  // The largest first inner-gradient norm over the tasks.
  Generator start(3);
  const Maml<nn::Sequential, MseLoss> at_start(model, MseLoss{}, {}, start);
  const auto norms = first_inner_gradient_norms(model, at_start.parameters(), batch);
  const double largest = *std::max_element(norms.begin(), norms.end());
  INFO("largest task gradient norm " << largest);
  const auto plain = meta_gradient(0);
  // Every task within half the bound (the clip is not recorded on the CPU),
  // and the largest task within the bound but past half of it (recorded,
  // its factor exactly 1; later inner steps move the norms a little).
  CHECK(meta_gradient(100 * largest) == plain);
  CHECK(meta_gradient(1.5 * largest) == plain);
}

// A fixed inner step of 0.05 on MSE is past the stability limit for the
// sinusoid-or-line tasks of large amplitude: MAML's loss turned NaN within
// a few meta-steps. Clipping each task's inner gradient to norm 2 (a trust
// region of 0.1 per inner step) trains the same network for 2,000 steps.
TEST_CASE("an inner step that diverges trains for 2,000 meta-steps once its gradients are clipped",
          "[maml][stability][long]") {
  const Sampler sampler({.support = 5, .query = 10});
  auto run = [&](double clip, long steps) {
    Generator init(1), gen(2);
    Maml<nn::Sequential, MseLoss> maml(
        small_network(), MseLoss{},
        {.inner_loop = {.steps = 5, .learning_rate = 0.05, .max_gradient_norm = clip},
         .driver = {.threads = 1}},
        init);
    std::vector<double> losses;
    for (long step = 0; step < steps; ++step) {
      losses.push_back(maml.meta_train_step(sampler.sample(10, gen), gen).query_loss);
      if (!std::isfinite(losses.back())) break;
    }
    return losses;
  };
  const auto unclipped = run(0, 100);
  CHECK_FALSE(std::isfinite(unclipped.back()));
  const auto clipped = run(2, 2000);
  REQUIRE(clipped.size() == 2000);
  CHECK(std::all_of(clipped.begin(), clipped.end(), [](double l) { return std::isfinite(l); }));
  // The loss falls within a few hundred steps and then levels off (on this
  // task stream from 9.3 over the first 100 steps to 6.1-7.2 per later 100,
  // which float rounding of the CPU at hand moves): compare the first 100
  // steps with the last 500.
  const double first = std::accumulate(clipped.begin(), clipped.begin() + 100, 0.0) / 100,
               last = std::accumulate(clipped.end() - 500, clipped.end(), 0.0) / 500;
  INFO("mean query loss over the first 100 steps " << first << ", the last 500 " << last);
  CHECK(last < 0.85 * first);
}

// Before gammas were stored as logarithms this run diverged (a NaN query
// loss at meta-step 1801 with one chunk of tasks; at 1724 with seed 3):
// Adam's 1e-2 steps pushed gammas through zero, and the mean steps then
// ascended. With positive gammas but no bound on the inner step it diverged
// too, at step 1185 with one chunk per task: the meta-parameters stayed
// finite and ordinary, but the inner loop's fixed step of 0.01 blew up on
// single tasks (query losses of 1e3 to 5e9 in the 30 steps before the NaN).
// Clipping each inner gradient to norm 100 (a step of at most 1) fixes that.
TEST_CASE("PLATIPUS trains 2,000 meta-steps at meta learning rate 1e-2 without diverging",
          "[platipus][learning][stability][long]") {
  const Sampler sampler({.support = 5, .query = 10});
  Generator init(1), data(1, 2);
  PlatipusModel model(small_network(), MseLoss{},
                      {.inner_loop = {.steps = 5, .learning_rate = 0.01, .max_gradient_norm = 100},
                       .kl_weight = 1.5,
                       .initial_prior_variance = 1e-3,
                       .initial_posterior_variance = 1e-3,
                       .initial_gamma_p = 0.01,
                       .initial_gamma_q = 0.01,
                       .driver = {.meta_optimizer = {.learning_rate = 1e-2}, .threads = 1}},
                      init);
  double first = 0, last = 0;
  for (int step = 1; step <= 2000; ++step) {
    const auto result = model.meta_train_step(sampler.sample(25, data), data);
    REQUIRE(std::isfinite(result.query_loss));
    REQUIRE(std::isfinite(result.statistic("kl")));
    if (step <= 200) first += result.query_loss / 200;
    if (step > 1800) last += result.query_loss / 200;
  }
  INFO("mean query loss over the first and the last 200 steps: " << first << ", " << last);
  CHECK(last < 0.7 * first);
}

TEST_CASE("PLATIPUS's meta-gradient matches central finite differences of its objective",
          "[platipus][gradcheck]") {
  using DoublePlatipus = Platipus<nn::Sequential, GaussianNllLoss, double>;
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {6}, .outputs = 1, .activation = nn::Activation::tanh});
  Generator data(79);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  for (const Reduction query_reduction : {Reduction::sum, Reduction::mean})
    for (const double prior_likelihood_weight : {0.0, 0.6}) {
      Generator init(80);
      const PlatipusSettings settings{.inner_loop = {.steps = 2, .learning_rate = 0.02},
                                      .kl_weight = 0.7,
                                      .query_reduction = query_reduction,
                                      .prior_likelihood_weight = prior_likelihood_weight,
                                      // step 1 on the support and query points in
                                      // the two cases with a prior likelihood, on
                                      // the query points alone in the other two
                                      .posterior_data = prior_likelihood_weight > 0
                                                            ? PosteriorData::support_and_query
                                                            : PosteriorData::query,
                                      .initial_prior_variance = 0.05,
                                      .initial_posterior_variance = 0.02,
                                      .initial_gamma_p = 0.03,
                                      .initial_gamma_q = 0.05,
                                      .driver = {.threads = 1}};
      DoublePlatipus learner(model, GaussianNllLoss{.noise_std = 0.5}, settings, init);
      // The objective for one fixed draw of the noise: the same generator state every time.
      const Generator noise(81);
      const auto objective = objective_with_fixed_noise(learner, batch, noise, settings.kl_weight);
      Generator gen = noise;
      check_part_gradients(learner, learner.meta_gradient(batch, gen), objective, 1e-5, 82);
    }
}

// Step 1 on the support and query points together is step 1 on a query set
// that holds both: the KL, which depends on the means and variances alone, is
// the same as a query-only learner's on that batch, and not the same as its
// KL on the batch's own query set.
TEST_CASE("PLATIPUS's posterior can step on the support and query points together", "[platipus]") {
  using DoublePlatipus = Platipus<nn::Sequential, GaussianNllLoss, double>;
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {6}, .outputs = 1, .activation = nn::Activation::tanh});
  Generator data(87);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  auto make = [&](PosteriorData posterior_data) {
    Generator init(88);
    return DoublePlatipus(model, GaussianNllLoss{.noise_std = 0.5},
                          {.inner_loop = {.steps = 2, .learning_rate = 0.02},
                           .posterior_data = posterior_data,
                           .initial_prior_variance = 0.05,
                           .initial_posterior_variance = 0.02,
                           .initial_gamma_p = 0.03,
                           .initial_gamma_q = 0.05,
                           .driver = {.threads = 1}},
                          init);
  };
  const auto both = make(PosteriorData::support_and_query), query = make(PosteriorData::query);
  auto side_by_side = [](const Tensor<double>& a, const Tensor<double>& b) {
    const std::array parts{&a, &b};
    return raw::concat(std::span<const Tensor<double>* const>(parts), 1);
  };
  const TaskBatch<double> widened{.support_x = batch.support_x.clone(),
                                  .support_y = batch.support_y.clone(),
                                  .query_x = side_by_side(batch.support_x, batch.query_x),
                                  .query_y = side_by_side(batch.support_y, batch.query_y)};
  auto kl = [](const DoublePlatipus& learner, const TaskBatch<double>& b) {
    MetaStepResult result;
    Generator gen(89);
    learner.meta_gradient(b, gen, &result);
    return result.statistic("kl");
  };
  const double kl_both = kl(both, batch);
  CHECK(kl_both == Approx(kl(query, widened)).epsilon(1e-12));
  CHECK(std::abs(kl_both - kl(query, batch)) > 1e-3 * kl_both);
}

// Step 6 (docs/algorithms.md): with variances too small to matter, the
// prior's term is the summed query NLL of the model Algorithm 2 samples, and
// the meta-step's reported query loss and KL stay those of step 5.
TEST_CASE(
    "PLATIPUS's prior likelihood term is the query loss of the model it samples at meta-test "
    "time",
    "[platipus]") {
  using DoublePlatipus = Platipus<nn::Sequential, GaussianNllLoss, double>;
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {6}, .outputs = 1, .activation = nn::Activation::tanh});
  Generator data(83);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  const GaussianNllLoss loss{.noise_std = 0.5};
  auto make = [&](double weight) {
    Generator init(84);
    return DoublePlatipus(model, loss,
                          {.inner_loop = {.steps = 2, .learning_rate = 0.02},
                           .kl_weight = 0.7,
                           .prior_likelihood_weight = weight,
                           .initial_prior_variance = 1e-24,
                           .initial_posterior_variance = 1e-24,
                           .initial_gamma_p = 0.03,
                           .initial_gamma_q = 0.05,
                           .driver = {.threads = 1}},
                          init);
  };
  const auto paper = make(0), hybrid = make(2.5);
  // Without the KL (beta 0): with such variances it is about 1e23.
  const Generator noise(85);
  const double difference = objective_with_fixed_noise(hybrid, batch, noise, 0)() -
                            objective_with_fixed_noise(paper, batch, noise, 0)();
  Generator gen(86);
  const auto prediction =
      paper.predict(paper.sample(batch.support_x, batch.support_y, 1, gen), batch.query_x)
          .to_vector();
  const auto y = batch.query_y.to_vector();
  double nll = 0;  // summed over each task's points, the mean over tasks
  for (std::size_t i = 0; i < y.size(); ++i)
    nll += (std::pow(y[i] - prediction[i], 2) / (2 * 0.25) + std::log(0.5) +
            0.5 * std::log(2 * M_PI)) /
           static_cast<double>(batch.tasks());
  CHECK(difference == Approx(2.5 * nll).epsilon(1e-9));
  MetaStepResult paper_result, hybrid_result;
  Generator g1 = noise, g2 = noise;
  paper.meta_gradient(batch, g1, &paper_result);
  hybrid.meta_gradient(batch, g2, &hybrid_result);
  CHECK(hybrid_result.query_loss == paper_result.query_loss);
  CHECK(hybrid_result.statistic("kl") == paper_result.statistic("kl"));
}

TEST_CASE(
    "Meta-SGD with every rate alpha has MAML's meta-gradient, and its meta-gradient matches "
    "central finite differences",
    "[metasgd][gradcheck]") {
  using DoubleMetaSgd = MetaSgd<nn::Sequential, MseLoss, double>;
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {6}, .outputs = 1, .activation = nn::Activation::tanh});
  Generator data(91);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  const InnerLoop loop{.steps = 2, .learning_rate = 0.03};
  Generator maml_init(92), init(92), gen(93);
  const Maml<nn::Sequential, MseLoss, double> maml(
      model, MseLoss{}, {.inner_loop = loop, .driver = {.threads = 1}}, maml_init);
  DoubleMetaSgd learner(model, MseLoss{}, {.inner_loop = loop, .driver = {.threads = 1}}, init);
  const auto gradients = learner.meta_gradient(batch, gen);
  // With alpha = 0.03 everywhere, Meta-SGD's inner loop is MAML's.
  const auto maml_gradient = maml.meta_gradient(batch, gen).to_vector();
  const auto theta_gradient = gradients[DoubleMetaSgd::theta].to_vector();
  for (std::size_t i = 0; i < maml_gradient.size(); ++i)
    CHECK(theta_gradient[i] == Approx(maml_gradient[i]).epsilon(1e-12).margin(1e-15));
  // Both parts against central differences, after moving the rates apart.
  auto rates = learner.part(DoubleMetaSgd::learning_rate_scales).to_vector();
  Generator spread(94);
  for (auto& r : rates) r *= 0.5 + spread.uniform<double>();
  learner.set_part(DoubleMetaSgd::learning_rate_scales,
                   Tensor<double>::from_host({static_cast<std::int64_t>(rates.size())}, rates));
  const auto moved = learner.meta_gradient(batch, gen);
  auto objective = [&] {
    MetaStepResult result;
    learner.meta_gradient(batch, gen, &result);
    return result.query_loss;
  };
  check_part_gradients(learner, moved, objective, 1e-6, 95);
}

TEST_CASE("Meta-SGD learns sinusoids in one inner step, and learns its rates",
          "[metasgd][learning][long]") {
  const Sampler sampler({.support = 10, .query = 10, .sinusoid_fraction = 1.0});
  Generator init(1), data(2);
  MetaSgd<nn::Sequential, MseLoss> learner(
      small_network(), MseLoss{},
      {.inner_loop = {.steps = 1, .learning_rate = 0.01}, .driver = {.threads = 2}}, init);
  for (int step = 0; step < 1500; ++step) learner.meta_train_step(sampler.sample(25, data), data);
  Generator held_out(99);
  const auto test = sampler.sample(200, held_out);
  const double before =
      mse(learner.predict(learner.part(decltype(learner)::theta), test.query_x), test.query_y);
  const double after =
      mse(learner.predict(learner.adapt_to(test.support_x, test.support_y, held_out), test.query_x),
          test.query_y);
  const auto rates = learner.part(decltype(learner)::learning_rate_scales).to_vector();
  const auto [low, high] = std::minmax_element(rates.begin(), rates.end());
  INFO("query MSE before adaptation " << before << ", after one step " << after
                                      << "; rate scales in [" << *low << ", " << *high << "]");
  CHECK(after < 0.5 * before);
  // The rates are learned: their scales are no longer all at their initial 1.
  CHECK(*high - *low > 0.1);
}

TEST_CASE("Meta-SGD refuses settings that make no sense, naming the setting", "[metasgd][errors]") {
  using Catch::Contains;
  Generator init(1);
  auto make = [&](MetaSgdSettings s) {
    MetaSgd<nn::Sequential, MseLoss>(small_network(), MseLoss{}, s, init);
  };
  CHECK_THROWS_WITH(make({.inner_loop = {.steps = -1}}), Contains("inner_loop.steps"));
  CHECK_THROWS_WITH(make({.inner_loop = {.gradient_noise = 0.5}}),
                    Contains("inner_loop.gradient_noise must be 0"));
  CHECK_THROWS_WITH(make({.driver = {.task_chunks = -2}}), Contains("task_chunks"));
}

TEST_CASE("first-order MAML's meta-gradient is the query loss's gradient at the adapted weights",
          "[maml][gradcheck]") {
  Generator data(31), init(32), gen(33);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(1, data);
  const DoubleMaml fomaml(tiny_network(), MseLoss{},
                          {.inner_loop = {.steps = 3, .learning_rate = 0.05},
                           .first_order = true,
                           .driver = {.threads = 1}},
                          init);
  const auto gradient = fomaml.meta_gradient(batch, gen).to_vector();
  // A learner with no inner steps at phi: its query loss is L(phi, D_test).
  Generator unused(0);
  DoubleMaml at_phi(tiny_network(), MseLoss{},
                    {.inner_loop = {.steps = 0}, .driver = {.threads = 1}}, unused);
  at_phi.set_parameters(
      fomaml.adapt_to(batch.support_x, batch.support_y, gen).reshaped(fomaml.parameters().shape()));
  const double worst = directional_errors(at_phi, batch, gen, {gradient})[0];
  INFO("worst relative error " << worst);
  CHECK(worst < 1e-6);
}

TEST_CASE(
    "ANIL's meta-gradient matches central finite differences, adapts only the head, and is "
    "MAML's when the head is every piece",
    "[anil][gradcheck]") {
  using DoubleAnil = Anil<nn::Sequential, MseLoss, double>;
  Generator data(41), init(42), maml_init(42), all_init(42), gen(43);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  const InnerLoop loop{.steps = 3, .learning_rate = 0.05};
  DoubleAnil anil(tiny_network(), MseLoss{}, {.inner_loop = loop, .driver = {.threads = 1}}, init);
  const auto& layout = anil.model().layout();
  REQUIRE(anil.objective().head().size() == 2);  // the last layer's weight and bias
  CHECK(layout.specs()[anil.objective().head()[0]].name == "layer4.weight");
  const auto gradient = anil.meta_gradient(batch, gen).to_vector();
  const double worst = directional_errors(anil, batch, gen, {gradient})[0];
  INFO("worst relative error " << worst);
  CHECK(worst < 1e-6);
  // The body learns through the head: its gradient is not zero.
  const auto body = layout.piece(anil.meta_gradient(batch, gen), "layer0.weight").to_vector();
  CHECK(std::any_of(body.begin(), body.end(), [](double g) { return std::abs(g) > 1e-6; }));
  // Adapted rows keep the body's values and move the head's.
  const auto adapted = anil.adapt_to(batch.support_x, batch.support_y, gen);
  for (std::int64_t t = 0; t < batch.tasks(); ++t) {
    CHECK(layout.piece(adapted, "layer0.weight", t).to_vector() ==
          layout.piece(anil.parameters(), "layer0.weight").to_vector());
    CHECK(layout.piece(adapted, "layer4.weight", t).to_vector() !=
          layout.piece(anil.parameters(), "layer2.weight").to_vector());
  }
  // With every piece in the head ANIL is MAML.
  std::vector<std::string> every;
  for (const auto& spec : layout.specs()) every.push_back(spec.name);
  const DoubleAnil all(tiny_network(), MseLoss{},
                       {.inner_loop = loop, .head = every, .driver = {.threads = 1}}, all_init);
  const DoubleMaml maml(tiny_network(), MseLoss{}, {.inner_loop = loop, .driver = {.threads = 1}},
                        maml_init);
  const auto a = all.meta_gradient(batch, gen).to_vector(),
             m = maml.meta_gradient(batch, gen).to_vector();
  for (std::size_t i = 0; i < m.size(); ++i)
    CHECK(a[i] == Approx(m[i]).epsilon(1e-12).margin(1e-15));
}

TEST_CASE(
    "Reptile's meta-gradient is mean(theta - phi), alpha times the joint loss's gradient "
    "after one step",
    "[reptile][gradcheck]") {
  using DoubleReptile = Reptile<nn::Sequential, MseLoss, double>;
  Generator data(51), gen(53);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  // All of each task's points: the data Reptile's inner loop trains on.
  const std::array<const Tensor<double>*, 2> xs{&batch.support_x, &batch.query_x},
      ys{&batch.support_y, &batch.query_y};
  const Tensor<double> all_x = raw::concat(std::span<const Tensor<double>*const>(xs), 1),
                       all_y = raw::concat(std::span<const Tensor<double>*const>(ys), 1);
  SECTION("K steps: the mean of theta - phi_i, phi_i from K plain SGD steps") {
    Generator init(52), maml_init(52);
    const InnerLoop loop{.steps = 4, .learning_rate = 0.05};
    const DoubleReptile reptile(tiny_network(), MseLoss{},
                                {.inner_loop = loop, .driver = {.threads = 2}}, init);
    const DoubleMaml sgd(tiny_network(), MseLoss{}, {.inner_loop = loop, .driver = {.threads = 1}},
                         maml_init);
    const auto gradient = reptile.meta_gradient(batch, gen).to_vector();
    const auto phi = sgd.adapt_to(all_x, all_y, gen).to_vector();
    const auto theta = reptile.parameters().to_vector();
    const std::size_t p = theta.size(), tasks = 3;
    for (std::size_t i = 0; i < p; ++i) {
      double mean = 0;
      for (std::size_t t = 0; t < tasks; ++t) mean += (theta[i] - phi[t * p + i]) / tasks;
      CHECK(gradient[i] == Approx(mean).epsilon(1e-12).margin(1e-15));
    }
  }
  SECTION(
      "one step: alpha times the gradient of the mean loss on all points, against central "
      "differences") {
    Generator init(52), joint_init(52);
    const double alpha = 0.05;
    const DoubleReptile reptile(
        tiny_network(), MseLoss{},
        {.inner_loop = {.steps = 1, .learning_rate = alpha}, .driver = {.threads = 1}}, init);
    auto gradient = reptile.meta_gradient(batch, gen).to_vector();
    for (auto& g : gradient) g /= alpha;
    // No inner steps and every point as the query set: the joint loss.
    DoubleMaml joint(tiny_network(), MseLoss{},
                     {.inner_loop = {.steps = 0}, .driver = {.threads = 1}}, joint_init);
    const TaskBatch<double> points{batch.support_x.clone(), batch.support_y.clone(), all_x.clone(),
                                   all_y.clone()};
    const double worst = directional_errors(joint, points, gen, {gradient})[0];
    INFO("worst relative error " << worst);
    CHECK(worst < 1e-6);
  }
}

TEST_CASE(
    "MAML++'s meta-gradient: MAML's at equal rates, its multi-step loss, first order while "
    "annealing, and both parts (theta, log-rates) against central finite differences",
    "[mamlpp][gradcheck]") {
  using DoubleMamlPlusPlus = MamlPlusPlus<nn::Sequential, MseLoss, double>;
  Generator data(61), gen(63);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  const InnerLoop loop{.steps = 3, .learning_rate = 0.05};
  const MamlPlusPlusSettings last_step_only{.inner_loop = loop,
                                            .multi_step_loss_steps = 0,
                                            .first_order_steps = 0,
                                            .driver = {.threads = 1}};
  auto maml_gradient = [&](int steps, bool first_order) {
    Generator init(62);
    return DoubleMaml(tiny_network(), MseLoss{},
                      {.inner_loop = {.steps = steps, .learning_rate = loop.learning_rate},
                       .first_order = first_order,
                       .driver = {.threads = 1}},
                      init)
        .meta_gradient(batch, gen)
        .to_vector();
  };
  auto theta_gradient = [&](const MamlPlusPlusSettings& settings) {
    Generator init(62);
    return DoubleMamlPlusPlus(tiny_network(), MseLoss{}, settings, init)
        .meta_gradient(batch, gen)[DoubleMamlPlusPlus::theta]
        .to_vector();
  };
  SECTION("the last step's loss at the initial rates is MAML's objective") {
    const auto g = theta_gradient(last_step_only), m = maml_gradient(3, false);
    for (std::size_t i = 0; i < m.size(); ++i)
      CHECK(g[i] == Approx(m[i]).epsilon(1e-12).margin(1e-15));
  }
  SECTION("at step 0 the multi-step loss weighs the K steps' query losses equally") {
    auto settings = last_step_only;
    settings.multi_step_loss_steps = 100;
    const auto g = theta_gradient(settings);
    std::vector<double> expected(g.size(), 0.0);
    for (int k = 1; k <= 3; ++k) {
      const auto m = maml_gradient(k, false);
      for (std::size_t i = 0; i < m.size(); ++i) expected[i] += m[i] / 3;
    }
    for (std::size_t i = 0; i < g.size(); ++i)
      CHECK(g[i] == Approx(expected[i]).epsilon(1e-12).margin(1e-15));
  }
  SECTION("during derivative-order annealing the gradient is first order") {
    auto settings = last_step_only;
    settings.first_order_steps = 10;
    const auto g = theta_gradient(settings), m = maml_gradient(3, true);
    for (std::size_t i = 0; i < m.size(); ++i)
      CHECK(g[i] == Approx(m[i]).epsilon(1e-12).margin(1e-15));
  }
  SECTION("theta and the per-layer per-step rates against central differences") {
    Generator init(62);
    DoubleMamlPlusPlus learner(tiny_network(), MseLoss{}, last_step_only, init);
    auto rates = learner.part(DoubleMamlPlusPlus::log_learning_rates).to_vector();
    Generator spread(64);
    for (auto& r : rates) r += spread.uniform<double>() - 0.5;
    learner.set_part(DoubleMamlPlusPlus::log_learning_rates,
                     Tensor<double>::from_host(
                         learner.part(DoubleMamlPlusPlus::log_learning_rates).shape(), rates));
    auto objective = [&] {
      MetaStepResult result;
      learner.meta_gradient(batch, gen, &result);
      return result.query_loss;
    };
    check_part_gradients(learner, learner.meta_gradient(batch, gen), objective, 1e-6, 65);
  }
}

TEST_CASE("MAML++ anneals its step-loss weights towards the last step", "[mamlpp]") {
  Generator init(1);
  const MamlPlusPlus<nn::Sequential, MseLoss> learner(
      tiny_network(), MseLoss{},
      {.inner_loop = {.steps = 4},
       .multi_step_loss_steps = 100,
       .first_order_steps = 0,
       .driver = {.meta_optimizer = {.learning_rate = 1e-3}, .threads = 1, .task_chunks = 1}},
      init);
  const auto& o = learner.objective();
  CHECK(o.multi_step_weights(0) == std::vector<double>(4, 0.25));
  double previous_last = 0;
  for (int step : {0, 10, 50, 90, 99}) {
    const auto w = o.multi_step_weights(step);
    CHECK(std::accumulate(w.begin(), w.end(), 0.0) == Approx(1.0));
    CHECK(w.back() > previous_last);
    CHECK(w[0] >= 0.03 / 4);
    previous_last = w.back();
  }
  CHECK(o.multi_step_weights(100) == std::vector<double>{0, 0, 0, 1});
  CHECK_THAT(learner.replay_obstacle(), Catch::Contains("multi-step loss"));
}

template <class Learner>
void check_adaptation_halves_the_error(Learner& learner) {
  const auto [before, after] = before_and_after_training(learner);
  INFO("query MSE before adaptation " << before << ", after " << after);
  CHECK(after < 0.5 * before);
}

TEST_CASE(
    "first-order MAML, ANIL, Reptile and MAML++ learn sinusoids: adaptation halves the query "
    "error",
    "[maml][anil][reptile][mamlpp][learning][long]") {
  const InnerLoop loop{.steps = 5, .learning_rate = 0.01};
  Generator init(1);
  SECTION("first-order MAML") {
    Maml<nn::Sequential, MseLoss> learner(
        small_network(), MseLoss{},
        {.inner_loop = loop, .first_order = true, .driver = {.threads = 2}}, init);
    check_adaptation_halves_the_error(learner);
  }
  SECTION("ANIL") {
    Anil<nn::Sequential, MseLoss> learner(small_network(), MseLoss{},
                                          {.inner_loop = loop, .driver = {.threads = 2}}, init);
    check_adaptation_halves_the_error(learner);
  }
  SECTION("Reptile") {
    Reptile<nn::Sequential, MseLoss> learner(small_network(), MseLoss{},
                                             {.inner_loop = loop, .driver = {.threads = 2}}, init);
    check_adaptation_halves_the_error(learner);
  }
  SECTION("MAML++") {
    MamlPlusPlus<nn::Sequential, MseLoss> learner(small_network(), MseLoss{},
                                                  {.inner_loop = loop,
                                                   .multi_step_loss_steps = 150,
                                                   .first_order_steps = 500,
                                                   .driver = {.threads = 2}},
                                                  init);
    check_adaptation_halves_the_error(learner);
  }
}

// A learner of sinusoids with the given inner loop, from the initial
// parameters of Generator(1).
template <class Learner>
Learner learner_with(const InnerLoop& loop) {
  Generator init(1);
  return Learner(small_network(), MseLoss{}, {.inner_loop = loop}, init);
}

// A learner that trains with 2 inner steps and evaluates with 7 adapts as one
// with 7 steps does, and not as one with 2.
template <class Learner>
void check_evaluation_steps(const TaskBatch<float>& batch) {
  const InnerLoop two{.steps = 2, .learning_rate = 0.01}, seven{.steps = 7, .learning_rate = 0.01};
  InnerLoop two_then_seven = two;
  two_then_seven.evaluation_steps = 7;
  const auto adapted = [&](const InnerLoop& loop) {
    Generator gen(5);
    if constexpr (requires(Learner l) { l.sample(batch.support_x, batch.support_y, 3, gen); })
      return learner_with<Learner>(loop)
          .sample(batch.support_x, batch.support_y, 3, gen)
          .to_vector();
    else
      return learner_with<Learner>(loop)
          .adapt_to(batch.support_x, batch.support_y, gen)
          .to_vector();
  };
  const auto phi = adapted(two_then_seven);
  CHECK(phi == adapted(seven));
  CHECK(phi != adapted(two));
}

TEST_CASE("inner_loop.evaluation_steps sets the steps of adapt_to and sample, not of training",
          "[maml][platipus][anil][metasgd][reptile][mamlpp]") {
  data::SinusoidLineSampler<float> tasks({.support = 5, .query = 5});
  Generator gen(3);
  const auto batch = tasks.sample(4, gen);
  check_evaluation_steps<Maml<nn::Sequential, MseLoss>>(batch);
  check_evaluation_steps<Anil<nn::Sequential, MseLoss>>(batch);
  check_evaluation_steps<MetaSgd<nn::Sequential, MseLoss>>(batch);
  check_evaluation_steps<Reptile<nn::Sequential, MseLoss>>(batch);
  check_evaluation_steps<Platipus<nn::Sequential, MseLoss>>(batch);
  // Training keeps `steps`: a meta-step's query loss is that of a learner
  // without evaluation_steps.
  const InnerLoop two{.steps = 2, .learning_rate = 0.01};
  InnerLoop two_then_seven = two;
  two_then_seven.evaluation_steps = 7;
  auto a = learner_with<Platipus<nn::Sequential, MseLoss>>(two_then_seven),
       b = learner_with<Platipus<nn::Sequential, MseLoss>>(two);
  Generator ga(9), gb(9);
  CHECK(a.meta_train_step(batch, ga).query_loss == b.meta_train_step(batch, gb).query_loss);
  // MAML++ learns one rate per step, so its steps cannot change at test time.
  CHECK_THROWS_WITH((learner_with<MamlPlusPlus<nn::Sequential, MseLoss>>(two_then_seven)),
                    Catch::Contains("evaluation_steps must equal inner_loop.steps"));
  CHECK_THROWS_WITH((learner_with<Maml<nn::Sequential, MseLoss>>({.evaluation_steps = -1})),
                    Catch::Contains("evaluation_steps must be non-negative"));
}

TEST_CASE("detached inner steps give the values of steps on one tape", "[maml][metasgd][anil]") {
  Generator init(1), gen(2);
  const auto network = nn::mlp({.inputs = 1, .hidden = {16}, .outputs = 1});
  const auto& layout = network.layout();
  InnerLoop loop{.steps = 3, .learning_rate = 0.05};
  const auto x = raw::normal<float>({2, 20, 1}, gen), y = raw::normal<float>({2, 20, 1}, gen);
  Tape<float> tape;
  const auto start = per_task(tape.variable(raw::normal<float>({layout.size()}, init)), layout, 2);
  const auto rates =
      unflatten(tape.constant(raw::normal<float>({layout.size()}, init)) * 0.01f, layout.shapes());
  // Plain steps, Meta-SGD's rates, ANIL's head.
  for (const auto& options : {AdaptOptions<float, cpu>{}, AdaptOptions<float, cpu>{.rates = &rates},
                              AdaptOptions<float, cpu>{.adapted = {2, 3}}}) {
    auto detached = options;
    detached.detached = true;
    const auto one_tape =
        adapt(network, MseLoss{}, start, tape.constant(x), tape.constant(y), loop, options);
    const auto stepwise =
        adapt(network, MseLoss{}, start, tape.constant(x), tape.constant(y), loop, detached);
    CHECK(flat_values(stepwise.params, layout).to_vector() ==
          flat_values(one_tape.params, layout).to_vector());
    CHECK(stepwise.initial_losses.value().to_vector() ==
          one_tape.initial_losses.value().to_vector());
  }
  // MAML + noise's draws: the same, in the same order.
  loop.gradient_noise = 0.1;
  const auto noisy = [&](bool detached) {
    Generator g(4);
    TaskNoise n(g);
    return flat_values(adapt(network, MseLoss{}, start, tape.constant(x), tape.constant(y), loop,
                             {.noise = &n, .detached = detached})
                           .params,
                       layout)
        .to_vector();
  };
  CHECK(noisy(true) == noisy(false));
  CHECK_THROWS_WITH(adapt(network, MseLoss{}, start, tape.constant(x), tape.constant(y), loop,
                          {.create_graph = true, .detached = true}),
                    Catch::Contains("detached steps cannot be differentiable"));
}

TEST_CASE("rates that broadcast along a piece's rows step as the same rates written out",
          "[metasgd]") {
  // Rates written out per parameter take one foreach_sub_mul for all pieces;
  // a rate per row of the [16, 16] weights (a broadcast that does not repeat
  // along the leading axes) takes a mul and a sub per piece: the same values.
  Generator init(1), gen(2);
  const auto network = nn::mlp({.inputs = 1, .hidden = {16, 16}, .outputs = 1});
  const auto& layout = network.layout();
  const InnerLoop loop{.steps = 2, .learning_rate = 0.05};
  const auto x = raw::normal<float>({2, 20, 1}, gen), y = raw::normal<float>({2, 20, 1}, gen);
  Tape<float> tape;
  const auto start = per_task(tape.variable(raw::normal<float>({layout.size()}, init)), layout, 2);
  auto rows =
      unflatten(tape.constant(raw::uniform<float>({layout.size()}, init)) * 0.05f, layout.shapes());
  std::size_t hidden = 0;
  while (layout.shapes()[hidden] != Shape{16, 16}) ++hidden;
  rows[hidden] = tape.constant(raw::uniform<float>({16, 1}, gen)) * 0.05f;
  REQUIRE_FALSE(raw::repeats_along_leading_axes(rows[hidden].shape(), {2, 16, 16}));
  auto written = rows;
  written[hidden] = expand(rows[hidden], {16, 16});
  const auto stepped = [&](const Pieces<float, cpu>& rates) {
    return flat_values(adapt(network, MseLoss{}, start, tape.constant(x), tape.constant(y), loop,
                             {.rates = &rates})
                           .params,
                       layout)
        .to_vector();
  };
  CHECK(stepped(rows) == stepped(written));
}

TEST_CASE("adaptation outside meta-training holds one inner step's memory", "[maml][platipus]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("not measured under AddressSanitizer, whose quarantine holds freed blocks back");
  return;
#endif
  Generator init(1), gen(2);
  const auto network = nn::mlp({.inputs = 1, .hidden = {256, 256}, .outputs = 1});
  const InnerLoop loop{.steps = 1, .learning_rate = 1e-3, .evaluation_steps = 60};
  const Maml<nn::Sequential, MseLoss> maml(network, MseLoss{}, {.inner_loop = loop}, init);
  const Platipus<nn::Sequential, MseLoss> platipus(network, MseLoss{}, {.inner_loop = loop}, init);
  const auto x = raw::normal<float>({2, 1000, 1}, gen), y = raw::normal<float>({2, 1000, 1}, gen);
  // One step's activations and gradients, 2 tasks x 1000 points through two
  // layers of 256, are about 20 MB; 60 steps on one tape would hold 1.2 GB.
  reset_peak_resident();
  const long before = resident_kib();
  maml.adapt_to(x, y, gen);
  platipus.sample(x, y, 1, gen);
  const long peak = peak_resident_kib();
  INFO("resident " << before << " KiB before, peak " << peak << " KiB");
  CHECK(peak - before < 200 * 1024);
}

TEST_CASE("ANIL, Reptile and MAML++ refuse settings that make no sense, naming the setting",
          "[anil][reptile][mamlpp][errors]") {
  using Catch::Contains;
  Generator init(1);
  CHECK_THROWS_WITH((Anil<nn::Sequential, MseLoss>(small_network(), MseLoss{},
                                                   {.head = {"layer9.weight"}}, init)),
                    Contains("no parameter named 'layer9.weight'"));
  CHECK_THROWS_WITH((Reptile<nn::Sequential, MseLoss>(small_network(), MseLoss{},
                                                      {.inner_loop = {.gradient_noise = 1}}, init)),
                    Contains("inner_loop.gradient_noise must be 0"));
  CHECK_THROWS_WITH((MamlPlusPlus<nn::Sequential, MseLoss>(small_network(), MseLoss{},
                                                           {.first_order_steps = -1}, init)),
                    Contains("first_order_steps"));
  CHECK_THROWS_WITH((MamlPlusPlus<nn::Sequential, MseLoss>(
                        small_network(), MseLoss{},
                        {.driver = {.meta_optimizer = {.learning_rate = 1e-3,
                                                       .annealing_steps = 10,
                                                       .final_learning_rate = 1}}},
                        init)),
                    Contains("MamlPlusPlus") && Contains("meta_optimizer.final_learning_rate"));
  CHECK_THROWS_WITH((Maml<nn::Sequential, MseLoss>(
                        small_network(), MseLoss{},
                        {.driver = {.meta_optimizer = {.annealing_steps = -1}}}, init)),
                    Contains("Maml") && Contains("meta_optimizer.annealing_steps"));
}

TEST_CASE(
    "MAML's meta-gradient through a small convolutional network matches central finite "
    "differences and differs from first order",
    "[maml][conv][gradcheck]") {
  const auto model = nn::conv4({.channels = 1,
                                .size = 6,
                                .filters = 2,
                                .blocks = 1,
                                .outputs = 2,
                                .activation = nn::Activation::tanh});
  Generator data(71), init(72), first_init(72), gen(73);
  const auto batch = prototype_tasks<double>(2, 2, 1, 2, 6, data);
  const InnerLoop loop{.steps = 2, .learning_rate = 0.1};
  using ConvMaml = Maml<nn::Sequential, SoftmaxCrossEntropyLoss, double>;
  ConvMaml second(model, SoftmaxCrossEntropyLoss{}, {.inner_loop = loop, .driver = {.threads = 1}},
                  init);
  const ConvMaml first(model, SoftmaxCrossEntropyLoss{},
                       {.inner_loop = loop, .first_order = true, .driver = {.threads = 1}},
                       first_init);
  const auto g = second.meta_gradient(batch, gen).to_vector();
  const auto g_first = first.meta_gradient(batch, gen).to_vector();
  const auto errors = directional_errors(second, batch, gen, {g, g_first});
  INFO("worst relative error " << errors[0] << ", first-order gap " << errors[1]);
  CHECK(errors[0] < 1e-6);
  CHECK(errors[1] > 1e-3);
}

TEST_CASE(
    "PLATIPUS's meta-gradient through a small convolutional network matches central "
    "finite differences",
    "[platipus][conv][gradcheck]") {
  using ConvPlatipus = Platipus<nn::Sequential, SoftmaxCrossEntropyLoss, double>;
  const auto model = nn::conv4({.channels = 1,
                                .size = 6,
                                .filters = 2,
                                .blocks = 1,
                                .outputs = 2,
                                .activation = nn::Activation::tanh});
  Generator data(74), init(75);
  const auto batch = prototype_tasks<double>(2, 2, 1, 2, 6, data);
  const PlatipusSettings settings{.inner_loop = {.steps = 2, .learning_rate = 0.1},
                                  .kl_weight = 0.5,
                                  .initial_prior_variance = 0.05,
                                  .initial_posterior_variance = 0.02,
                                  .driver = {.threads = 1}};
  ConvPlatipus learner(model, SoftmaxCrossEntropyLoss{}, settings, init);
  const Generator noise(76);  // one fixed draw of the noise for every evaluation
  const auto objective = objective_with_fixed_noise(learner, batch, noise, settings.kl_weight);
  Generator gen = noise;
  check_part_gradients(learner, learner.meta_gradient(batch, gen), objective, 1e-6, 77);
}

TEST_CASE(
    "MAML with a convolutional network learns few-shot image tasks: accuracy after "
    "adaptation far above before",
    "[maml][conv][learning]") {
  const std::int64_t ways = 3, size = 8;
  const auto model =
      nn::conv4({.channels = 1, .size = size, .filters = 4, .blocks = 2, .outputs = ways});
  Generator init(1), data(2);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss> maml(
      model, SoftmaxCrossEntropyLoss{},
      {.inner_loop = {.steps = 3, .learning_rate = 0.5}, .driver = {.threads = 2}}, init);
  for (int step = 0; step < 300; ++step)
    maml.meta_train_step(prototype_tasks<float>(8, ways, 1, 2, size, data), data);
  Generator held_out(99);
  const auto test = prototype_tasks<float>(100, ways, 1, 5, size, held_out);
  auto accuracy = [&](const Tensor<float>& params) {
    const auto logits = maml.predict(params, test.query_x).to_vector();
    const auto labels = test.query_y.to_vector();
    double correct = 0;
    for (std::size_t p = 0; p < labels.size(); ++p) {
      const auto row = logits.begin() + static_cast<std::ptrdiff_t>(p * ways);
      correct += std::max_element(row, row + ways) - row == static_cast<std::ptrdiff_t>(labels[p]);
    }
    return correct / static_cast<double>(labels.size());
  };
  const double before = accuracy(maml.parameters());
  const double after = accuracy(maml.adapt_to(test.support_x, test.support_y, held_out));
  INFO("query accuracy before adaptation " << before << ", after " << after);
  CHECK(before < 0.5);
  CHECK(after > 0.8);
}

// Every buffer of a meta-step returns to the thread caches, so after a few
// steps that fill them a conv4 meta-step takes no new memory. (Under
// AddressSanitizer, 100 steps of the live heap: the sanitized build is
// several times slower.)
TEST_CASE("the resident memory of conv4 meta-steps does not grow over 1,000 steps",
          "[maml][conv][memory]") {
#if defined(__SANITIZE_ADDRESS__)
  constexpr int steps = 100;
#else
  constexpr int steps = 1000;
#endif
  const std::int64_t ways = 3, size = 16;
  Generator init(41), data(42);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss> maml(
      nn::conv4({.channels = 1, .size = size, .filters = 8, .blocks = 2, .outputs = ways}),
      SoftmaxCrossEntropyLoss{},
      {.inner_loop = {.steps = 2, .learning_rate = 0.1}, .driver = {.threads = 2}}, init);
  const auto batch = prototype_tasks<float>(4, ways, 1, 3, size, data);
  for (int step = 0; step < 20; ++step) maml.meta_train_step(batch, data);
  const long before = resident_kib();
  for (int step = 0; step < steps; ++step) maml.meta_train_step(batch, data);
  const long after = resident_kib();
  INFO("resident " << before << " KiB after 20 steps, " << after << " KiB after " << steps
                   << " more");
  // One step's activations alone are over 1 MB: a leak of a step's buffers
  // would grow by 100 MB at least.
  CHECK(after - before < 4096);
}

TEST_CASE("Sequential tracks image shapes and refuses layers that do not fit them",
          "[conv][errors]") {
  using Catch::Contains;
  const auto net = nn::conv4({.channels = 3, .size = 84, .filters = 32, .outputs = 5});
  CHECK(net.input_shape() == Shape{3, 84, 84});
  CHECK(net.outputs() == 5);
  // 84 -> 42 -> 21 -> 10 -> 5: 32 x 5 x 5 features into the linear layer
  // after four blocks of [conv, batch norm, ReLU, pool] and a flatten.
  CHECK(net.layout().find("layer17.weight").shape == Shape{32 * 5 * 5, 5});
  CHECK(net.layout().find("layer1.scale").shape == Shape{32});
  CHECK(net.layout().find("layer1.shift").shape == Shape{32});
  const auto strided =
      nn::conv4({.channels = 1, .size = 28, .filters = 64, .outputs = 5, .strided = true});
  CHECK(strided.layout().find("layer13.weight").shape ==
        Shape{64 * 2 * 2, 5});  // 28 -> 14 -> 7 -> 4 -> 2
  CHECK_THROWS_WITH(nn::Sequential(Shape{1, 8, 8}).linear(3), Contains("flatten()"));
  CHECK_THROWS_WITH(nn::Sequential(4).conv2d(2), Contains("images [C, H, W]"));
  CHECK_THROWS_WITH(nn::Sequential(Shape{1, 2, 2}).conv2d(2, {.kernel = 5}),
                    Contains("does not fit"));
}
