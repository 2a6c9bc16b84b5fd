// Held-out evaluation of include/platipus/meta/scores/evaluation.hpp: the
// estimate, held-out losses and the regression and classification scores.
// Part of learning_test.cpp, which includes it once after helpers.hpp: the
// learning tests are one translation unit (build time).
#pragma once

TEST_CASE("estimate gives the mean and 1.96 standard errors, and refuses no values",
          "[evaluation]") {
  const std::vector<double> values{1, 2, 3, 4};
  const Estimate e = estimate(values);
  CHECK(e.mean == Approx(2.5));
  CHECK(e.interval == Approx(1.96 * std::sqrt(5.0 / 3.0) / 2));  // sample std over sqrt(n)
  CHECK(e.text() == "2.500 +- 1.265");
  CHECK(estimate(std::vector<double>{7}).interval == 0);
  CHECK_THROWS_WITH(estimate(std::vector<double>{}), Catch::Contains("no values"));
  // Of one score of each task.
  const std::vector<ClassificationScores> tasks{
      {.accuracy = 1}, {.accuracy = 2}, {.accuracy = 3}, {.accuracy = 4}};
  const Estimate of_tasks = estimate(tasks, &ClassificationScores::accuracy);
  CHECK((of_tasks.mean == e.mean && of_tasks.interval == e.interval));
}

TEST_CASE("held_out_losses gives each task's loss after adaptation, batch by batch",
          "[evaluation]") {
  const Sampler sampler({.support = 5, .query = 8});
  Generator init(1), gen(2), by_hand(2);
  const Maml<nn::Sequential, MseLoss> maml(
      small_network(), MseLoss{},
      {.inner_loop = {.steps = 2, .learning_rate = 0.01}, .driver = {.threads = 1}}, init);
  const auto losses = held_out_losses(maml, sampler, 30, gen, 20);
  REQUIRE(losses.size() == 30);
  // The same tasks and adaptation as evaluate() on the two batches, 20 then 10 tasks.
  for (const auto& [first, count] : {std::pair{0, 20}, std::pair{20, 10}}) {
    const auto batch = sampler.sample(count, by_hand);
    const double mean = maml.evaluate(batch, by_hand);
    const double ours =
        std::accumulate(losses.begin() + first, losses.begin() + first + count, 0.0) / count;
    CHECK(ours == Approx(mean).epsilon(1e-6));
  }
  CHECK(losses[0] != losses[1]);
  CHECK_THROWS_WITH(held_out_losses(maml, sampler, 0, gen), Catch::Contains("tasks"));
}

// Tasks of three classes for a classifier of 2-D points: uniform points,
// labels drawn at random (what the held-out scores do is the subject, not
// what a classifier learns).
struct ThreeClasses {
  TaskBatch<float> sample(std::int64_t tasks, Generator& gen) const {
    auto labels = [&](std::int64_t points) {
      std::vector<float> y;
      for (std::int64_t i = 0; i < tasks * points; ++i)
        y.push_back(static_cast<float>(gen.index(3)));
      return Tensor<float>::from_host({tasks, points, 1}, y);
    };
    auto support_x = raw::uniform<float>({tasks, 4, 2}, gen);
    auto support_y = labels(4);
    auto query_x = raw::uniform<float>({tasks, 6, 2}, gen);
    return {std::move(support_x), std::move(support_y), std::move(query_x), labels(6)};
  }
};

// Each task's scores as held_out_regression and held_out_classification
// must give them: the learner's models adapted batch by batch with draws
// from `models`, on tasks drawn from `tasks` alone; score(batch, [tasks,
// count, N, out] predictions, count) appends a batch's scores.
template <class Learner, class S, class Score>
void by_hand(const Learner& learner, const S& sampler, const std::vector<std::int64_t>& batches,
             std::int64_t count, Generator& tasks, Generator& models, Score score) {
  for (const std::int64_t size : batches) {
    const auto batch = sampler.sample(size, tasks);
    Tensor<float> params;
    if constexpr (requires { learner.adapt_to(batch.support_x, batch.support_y, models); })
      if (count == 1) params = learner.adapt_to(batch.support_x, batch.support_y, models);
    if (params.empty()) params = learner.sample(batch.support_x, batch.support_y, count, models);
    const auto p = learner.predict(params, batch.query_x).to_vector();
    score(batch, std::vector<double>(p.begin(), p.end()), count);
  }
}

TEST_CASE("held_out_regression scores each task's own models, on tasks that no model draw moves",
          "[evaluation]") {
  const Sampler sampler({.support = 5, .query = 8});
  Generator init(1);
  const Maml<nn::Sequential, MseLoss> maml(
      small_network(), MseLoss{},
      {.inner_loop = {.steps = 2, .learning_rate = 0.01}, .driver = {.threads = 1}}, init);
  const Maml<nn::Sequential, MseLoss> noisy(
      small_network(), MseLoss{},
      {.inner_loop = {.steps = 2, .learning_rate = 0.01, .gradient_noise = 0.5},
       .driver = {.threads = 1}},
      init);
  const PlatipusModel platipus(small_network(), MseLoss{}, {.driver = {.threads = 1}}, init);
  CHECK_FALSE(maml.adapts_randomly());
  CHECK(noisy.adapts_randomly());
  CHECK(platipus.adapts_randomly());
  const double noise = 0.3;
  auto check_learner = [&](const auto& learner, std::int64_t count) {
    std::vector<std::int64_t> progress;
    Generator tasks(5), models(6);
    const auto scores = held_out_regression(learner, sampler,
                                            {.tasks = 30,
                                             .samples = 4,
                                             .batch = 20,
                                             .progress =
                                                 [&](std::int64_t done) {
                                                   progress.push_back(done);
                                                 }},
                                            noise, tasks, models);
    REQUIRE(scores.size() == 30);
    CHECK(progress == std::vector<std::int64_t>{20, 30});
    std::vector<RegressionScores> expected;
    Generator hand_tasks(5), hand_models(6);
    by_hand(learner, sampler, {20, 10}, count, hand_tasks, hand_models,
            [&](const auto& batch, const std::vector<double>& p, std::int64_t models_per_task) {
              const auto y = batch.query_y.to_vector();
              const std::size_t n = 8, per_task = n * static_cast<std::size_t>(models_per_task);
              for (std::size_t t = 0; t < static_cast<std::size_t>(batch.tasks()); ++t)
                expected.push_back(score_regression(
                    std::span(p).subspan(t * per_task, per_task),
                    std::vector<double>(y.begin() + t * n, y.begin() + (t + 1) * n), noise));
            });
    for (std::size_t t = 0; t < scores.size(); ++t) {
      CHECK(scores[t].mse == Approx(expected[t].mse).epsilon(1e-9));
      CHECK(scores[t].nll == Approx(expected[t].nll).epsilon(1e-9));
      CHECK(scores[t].coverage == expected[t].coverage);
      CHECK(scores[t].mse_per_sample == Approx(expected[t].mse_per_sample).epsilon(1e-9));
    }
    // The tasks' generator drew the tasks and nothing else.
    Generator only_tasks(5);
    sampler.sample(20, only_tasks);
    sampler.sample(10, only_tasks);
    CHECK(tasks.bits() == only_tasks.bits());
    return scores;
  };
  const auto deterministic = check_learner(maml, 1);
  for (const auto& s : deterministic) CHECK(s.mse_per_sample == Approx(s.mse).epsilon(1e-9));
  const auto sampled = check_learner(platipus, 4);
  // A mixture's mean is closer than its average member (Jensen).
  for (const auto& s : sampled) CHECK(s.mse <= s.mse_per_sample * (1 + 1e-9));
  check_learner(noisy, 4);
  Generator tasks(5), models(6);
  CHECK_THROWS_WITH(
      held_out_regression(maml, sampler, {.tasks = 10, .samples = 0}, noise, tasks, models),
      Catch::Contains("held_out_predictions") && Catch::Contains("positive"));
}

TEST_CASE("held_out_classification scores the models' mean softmax, or mean sigmoid of one logit",
          "[evaluation]") {
  Generator init(1);
  auto check_learner = [&](const auto& learner, const auto& sampler, std::size_t outputs) {
    Generator tasks(5), models(6);
    const auto scores = held_out_classification(
        learner, sampler, {.tasks = 7, .samples = 3, .batch = 4}, tasks, models);
    REQUIRE(scores.size() == 7);
    std::vector<ClassificationScores> expected;
    Generator hand_tasks(5), hand_models(6);
    by_hand(learner, sampler, {4, 3}, 3, hand_tasks, hand_models,
            [&](const auto& batch, const std::vector<double>& logits, std::int64_t count) {
              const auto labels = batch.query_y.to_vector();
              const std::size_t n = static_cast<std::size_t>(batch.query_x.dim(1));
              const std::size_t classes = std::max<std::size_t>(outputs, 2);
              for (std::size_t t = 0; t < static_cast<std::size_t>(batch.tasks()); ++t) {
                std::vector<double> p(n * classes);
                for (std::size_t m = 0; m < static_cast<std::size_t>(count); ++m)
                  for (std::size_t i = 0; i < n; ++i) {
                    const auto row = std::span(logits).subspan(
                        ((t * static_cast<std::size_t>(count) + m) * n + i) * outputs, outputs);
                    if (outputs == 1) {
                      const double one = 1 / (1 + std::exp(-row[0]));
                      p[2 * i] += (1 - one) / static_cast<double>(count);
                      p[2 * i + 1] += one / static_cast<double>(count);
                    } else {
                      double total = 0;
                      for (double l : row) total += std::exp(l);
                      for (std::size_t k = 0; k < outputs; ++k)
                        p[i * outputs + k] += std::exp(row[k]) / total / static_cast<double>(count);
                    }
                  }
                expected.push_back(score_classification(
                    p, std::vector<double>(labels.begin() + t * n, labels.begin() + (t + 1) * n),
                    classes));
              }
            });
    for (std::size_t t = 0; t < scores.size(); ++t) {
      CHECK(scores[t].accuracy == expected[t].accuracy);
      CHECK(scores[t].nll == Approx(expected[t].nll).epsilon(1e-9));
      CHECK(scores[t].ece == Approx(expected[t].ece).epsilon(1e-9).margin(1e-12));
    }
  };
  SECTION("K classes: the mean softmax") {
    const Platipus<nn::Sequential, SoftmaxCrossEntropyLoss> platipus(
        nn::mlp({.inputs = 2, .hidden = {16}, .outputs = 3}), SoftmaxCrossEntropyLoss{},
        {.driver = {.threads = 1}}, init);
    check_learner(platipus, ThreeClasses{}, 3);
  }
  SECTION("one logit: the mean sigmoid of binary classification") {
    const Platipus<nn::Sequential, BceWithLogitsLoss> platipus(
        nn::mlp({.inputs = 2, .hidden = {16}, .outputs = 1}), BceWithLogitsLoss{},
        {.driver = {.threads = 1}}, init);
    check_learner(platipus, data::CirclesSampler<float>({.support = 1, .query = 10}), 1);
  }
}
