// Tests of include/platipus/meta/scores/: the uncertainty scores and the
// ambiguity evaluation, by hand.
// Part of components_test.cpp, which includes it once after helpers.hpp: the
// components' tests are one translation unit (build time).
#pragma once

TEST_CASE("score_regression: one model is one Gaussian, by hand", "[components][uncertainty]") {
  const double sigma = 0.5;
  // Targets 0, 0.5, 1, 2 against predictions 0: z = 0, 1, 2, 4.
  const std::vector<double> prediction{0, 0, 0, 0}, target{0, 0.5, 1, 2};
  const auto s = score_regression(prediction, target, sigma);
  const double log_norm = std::log(sigma) + 0.5 * std::log(2 * M_PI);
  CHECK(s.mse == Approx((0 + 0.25 + 1 + 4) / 4.0));
  CHECK(s.nll == Approx(log_norm + (0 + 0.5 + 2 + 8) / 4.0));
  // The central 90% interval is +-1.645 sigma: z = 0 and 1 lie inside, 2 and 4 outside.
  CHECK(s.coverage == Approx(0.5));
  CHECK(score_regression(prediction, target, sigma, 0.99).coverage == Approx(0.75));
}

TEST_CASE("score_regression: S models form an equal-weight mixture, by hand",
          "[components][uncertainty]") {
  const double sigma = 1.0;
  // Two models predicting -3 and 3 for one point; targets 0 and 3.
  const std::vector<double> predictions{-3, -3, 3, 3}, target{0, 3};
  const auto s = score_regression(predictions, target, sigma);
  auto density = [&](double y, double mean) {
    return std::exp(-0.5 * (y - mean) * (y - mean)) / std::sqrt(2 * M_PI);
  };
  const double nll0 = -std::log(0.5 * density(0, -3) + 0.5 * density(0, 3)),
               nll1 = -std::log(0.5 * density(3, -3) + 0.5 * density(3, 3));
  CHECK(s.nll == Approx((nll0 + nll1) / 2));
  CHECK(s.mse == Approx((0 + 9) / 2.0));  // the mixture's mean is 0
  // The mixture's 5% and 95% quantiles are about -4.28 and 4.28: both targets lie inside.
  CHECK(s.coverage == Approx(1.0));
  // A target far from every component does not underflow to an infinite NLL.
  const auto far = score_regression(std::vector<double>{0, 0}, std::vector<double>{100}, 0.1);
  CHECK(std::isfinite(far.nll));
  CHECK(far.nll == Approx(std::log(0.1) + 0.5 * std::log(2 * M_PI) + 0.5 * 1e6));
  CHECK(far.coverage == 0.0);
}

TEST_CASE("score_binary_classification: accuracy, NLL and ECE by hand",
          "[components][uncertainty]") {
  const std::vector<double> p{0.9, 0.8, 0.3, 0.6}, labels{1, 0, 0, 1};
  const auto s = score_binary_classification(p, labels, 10);
  CHECK(s.accuracy == Approx(0.75));
  CHECK(s.nll == Approx(-(std::log(0.9) + std::log(0.2) + std::log(0.7) + std::log(0.6)) / 4));
  // Confidences 0.9, 0.8, 0.7, 0.6 fall in bins 9, 8, 7, 6, one point each:
  // |1 - 0.9| + |0 - 0.8| + |1 - 0.7| + |1 - 0.6|, over 4 points.
  CHECK(s.ece == Approx((0.1 + 0.8 + 0.3 + 0.4) / 4));
  // One bin: |accuracy - mean confidence|.
  CHECK(score_binary_classification(p, labels, 1).ece == Approx(0.0).margin(1e-12));
}

TEST_CASE("score_classification: K-way accuracy, NLL and ECE by hand",
          "[components][uncertainty]") {
  // Three points of three classes: correct (0.7), wrong (0.5 on class 0
  // for label 2), correct by the first of two equal maxima (0.4, 0.4).
  const std::vector<double> p{0.7, 0.2, 0.1, 0.5, 0.2, 0.3, 0.4, 0.4, 0.2}, labels{0, 2, 0};
  const auto s = score_classification(p, labels, 3, 10);
  CHECK(s.accuracy == Approx(2.0 / 3));
  CHECK(s.nll == Approx(-(std::log(0.7) + std::log(0.3) + std::log(0.4)) / 3));
  // Confidences 0.7, 0.5, 0.4 in bins 7, 5, 4: |1 - 0.7| + |0 - 0.5| + |1 - 0.4|, over 3.
  CHECK(s.ece == Approx((0.3 + 0.5 + 0.6) / 3));
  // Binary scores are the K = 2 case.
  const std::vector<double> q{0.9, 0.2}, binary_labels{1, 1};
  const auto b = score_binary_classification(q, binary_labels);
  const auto k = score_classification(std::vector<double>{0.1, 0.9, 0.8, 0.2}, binary_labels, 2);
  CHECK((b.accuracy == k.accuracy && b.nll == k.nll && b.ece == k.ece));
  CHECK_THROWS_WITH(score_classification(p, labels, 2), Contains("9 probabilities for 3 labels"));
  CHECK_THROWS_WITH(score_classification(p, std::vector<double>{0, 3, 1}, 3),
                    Contains("label 3 is not a class in [0, 3)"));
}

TEST_CASE("add_softmax: weighted softmax rows by hand, stable for large logits",
          "[components][uncertainty]") {
  // Rows (0, log 3) and (1000, 1000): softmax (1/4, 3/4) and (1/2, 1/2); exp
  // of 1000 overflows, so the row's largest logit must come off first.
  const std::vector<float> logits{0, static_cast<float>(std::log(3.0)), 1000, 1000};
  std::vector<double> into{1, 0, 0, 0};
  add_softmax(std::span<const float>(logits), 2, 0.5, std::span(into));
  CHECK(into[0] == Approx(1 + 0.125));
  CHECK(into[1] == Approx(0.375));
  CHECK(into[2] == Approx(0.25));
  CHECK(into[3] == Approx(0.25));
  std::vector<double> three(3);
  CHECK_THROWS_WITH(add_softmax(std::span<const float>(logits), 2, 1.0, std::span(three)),
                    Contains("4 logits of 2 classes do not match 3 outputs"));
}

TEST_CASE("add_binary: weighted rows (1 - p, p) of the sigmoid, both tails to the last digit",
          "[components][uncertainty]") {
  // Logits 0, log 3 and -40: p = 1/2, 3/4 and e^-40 / (1 + e^-40); 1 - p of
  // a logit of 40 is e^-40, which 1 - sigmoid(40) would round to 0.
  const std::vector<float> logits{0, static_cast<float>(std::log(3.0)), 40};
  std::vector<double> into(6);
  into[0] = 1;
  add_binary(std::span<const float>(logits), 0.5, std::span(into));
  CHECK(into[0] == Approx(1 + 0.25));
  CHECK(into[1] == Approx(0.25));
  CHECK(into[2] == Approx(0.125));
  CHECK(into[3] == Approx(0.375));
  CHECK(into[4] == Approx(0.5 * std::exp(-40.0)));
  CHECK(into[5] == Approx(0.5));
  std::vector<double> five(5);
  CHECK_THROWS_WITH(add_binary(std::span<const float>(logits), 1.0, std::span(five)),
                    Contains("3 logits do not match 5 outputs"));
}

TEST_CASE("score_regression's per-sample MSE averages each model's own error",
          "[components][uncertainty]") {
  // Models -3 and 3 at targets 0 and 3: errors 9, 36 (model 0) and 9, 0 (model 1).
  const std::vector<double> predictions{-3, -3, 3, 3}, target{0, 3};
  const auto s = score_regression(predictions, target, 1.0);
  CHECK(s.mse_per_sample == Approx((9 + 36 + 9 + 0) / 4.0));
  CHECK(s.mse == Approx((0 + 9) / 2.0));
}

TEST_CASE("the scores refuse input that makes no sense, naming it", "[components][uncertainty]") {
  const std::vector<double> three{1, 2, 3}, two{1, 2};
  CHECK_THROWS_WITH(score_regression(three, two, 1.0), Contains("score_regression"));
  CHECK_THROWS_WITH(score_regression(two, two, 0.0), Contains("noise_std"));
  CHECK_THROWS_WITH(score_regression(two, two, 1.0, 1.5), Contains("interval"));
  CHECK_THROWS_WITH(score_binary_classification(two, three), Contains("3 labels"));
  CHECK_THROWS_WITH(score_binary_classification(std::vector<double>{1.5}, std::vector<double>{1}),
                    Contains("probability 1.5"));
}

TEST_CASE(
    "score_ambiguity: assignment by likelihood, coverage, accuracy and the mixture's NLL, "
    "by hand",
    "[components][uncertainty]") {
  // Two candidates of two binary points each, labels (1, 1) and (0, 1); two
  // samples. Sample 0 favours class 1 everywhere (fits candidate 0), sample
  // 1 class 0 at each candidate's first point (fits candidate 1).
  const std::vector<double> labels{1, 1, 0, 1};
  const std::vector<double> p{
      0.2, 0.8, 0.3, 0.7, 0.2, 0.8, 0.3, 0.7,   // sample 0: candidate 0, candidate 1
      0.6, 0.4, 0.4, 0.6, 0.9, 0.1, 0.4, 0.6};  // sample 1
  const auto s = score_ambiguity(p, labels, 2, 2, 2);
  // Sample 0: log 0.8 + log 0.7 on candidate 0 > log 0.2 + log 0.7 on 1.
  // Sample 1: log 0.4 + log 0.6 on 0 < log 0.9 + log 0.6 on 1.
  CHECK(s.coverage == 2);
  // Sample 0 is right on both points of candidate 0, sample 1 on both of candidate 1.
  CHECK(s.accuracy == Approx(1.0));
  const double nll = -(std::log(0.6) + std::log(0.65) + std::log(0.55) + std::log(0.65)) / 4;
  CHECK(s.nll == Approx(nll));
  // Samples that agree cover one candidate, whatever they are.
  const std::vector<double> same{0.2, 0.8, 0.3, 0.7, 0.2, 0.8, 0.3, 0.7,
                                 0.2, 0.8, 0.3, 0.7, 0.2, 0.8, 0.3, 0.7};
  const auto agreeing = score_ambiguity(same, labels, 2, 2, 2);
  CHECK(agreeing.coverage == 1);
  CHECK(agreeing.accuracy == Approx(1.0));
  // Equal likelihoods (0.5 x 0.8 and 0.8 x 0.5) go to the first candidate,
  // where the model is right on both points; on the second it is wrong on
  // one (a tie of 0.5 and 0.5 predicts the first class, 0, for label 1).
  const std::vector<double> tie{0.5, 0.3, 0.2, 0.1, 0.8, 0.1,   // candidate 0, labels 0, 1
                                0.1, 0.8, 0.1, 0.5, 0.5, 0.0};  // candidate 1, labels 1, 1
  const auto tied = score_ambiguity(tie, std::vector<double>{0, 1, 1, 1}, 1, 2, 3);
  CHECK(tied.accuracy == 1.0);
  CHECK(tied.coverage == 1);
  CHECK_THROWS_WITH(score_ambiguity(p, labels, 3, 2, 2), Contains("16 probabilities for 3"));
  CHECK_THROWS_WITH(score_ambiguity(p, std::vector<double>{1, 2, 0, 1}, 2, 2, 2),
                    Contains("not a class in [0, 2)"));
}

namespace {

// A learner whose n-th sampled model of every task is parameters[n % 3]:
// samples that differ, in a known order.
struct CyclingLearner {
  nn::Sequential network = nn::mlp({.inputs = 2, .hidden = {4}, .outputs = 2});
  std::vector<Tensor<double>> parameters;
  mutable std::int64_t drawn = 0;

  const nn::Sequential& model() const { return network; }
  Tensor<double> sample(const Tensor<double>& support_x, const Tensor<double>&, std::int64_t n,
                        Generator&) const {
    const std::int64_t p = network.layout().size();
    std::vector<double> values;
    for (std::int64_t t = 0; t < support_x.dim(0); ++t)
      for (std::int64_t m = 0; m < n; ++m) {
        const auto v = parameters[static_cast<std::size_t>((drawn + m) % 3)].to_vector();
        values.insert(values.end(), v.begin(), v.end());
      }
    drawn += n;
    return Tensor<double>::from_host({support_x.dim(0), n, p}, values);
  }
  Tensor<double> predict(const Tensor<double>& params, const Tensor<double>& x) const {
    return platipus::predict(network, params, x);
  }
};

}  // namespace

TEST_CASE(
    "evaluate_ambiguity: models drawn in groups, the first `assignment` assigned and the "
    "first `likelihood` in the NLL",
    "[components][uncertainty]") {
  Generator gen(33);
  CyclingLearner learner;
  for (int k = 0; k < 3; ++k)
    learner.parameters.push_back(raw::normal<double>({learner.network.layout().size()}, gen));
  AmbiguousTasks<double> tasks;
  tasks.support_x = raw::normal<double>({1, 2, 2}, gen);
  tasks.support_y = Tensor<double>::from_host({1, 2, 1}, {0, 1});
  for (int c = 0; c < 3; ++c) {
    tasks.candidate_x.push_back(raw::normal<double>({1, 4, 2}, gen));
    tasks.candidate_y.push_back(Tensor<double>::from_host({1, 4, 1}, {0, 1, 1, 0}));
  }
  // Models 0..4 are parameters 0, 1, 2, 0, 1: assignment uses 0, 1; the NLL all five.
  const auto scores =
      evaluate_ambiguity(learner, tasks, {.assignment = 2, .likelihood = 5, .at_once = 2}, gen);
  CHECK(learner.drawn == 5);  // groups of 2, 2 and 1
  // By hand: each parameter vector's softmax probabilities on each candidate's points.
  std::vector<double> probabilities, labels;
  for (const int k : {0, 1, 2, 0, 1})
    for (std::size_t c = 0; c < 3; ++c) {
      const auto logits =
          platipus::predict(learner.network, learner.parameters[static_cast<std::size_t>(k)],
                            tasks.candidate_x[c])
              .to_vector();
      for (std::size_t n = 0; n < 4; ++n) {
        const double z = std::exp(logits[2 * n]) + std::exp(logits[2 * n + 1]);
        probabilities.insert(probabilities.end(),
                             {std::exp(logits[2 * n]) / z, std::exp(logits[2 * n + 1]) / z});
      }
    }
  for (int c = 0; c < 3; ++c) labels.insert(labels.end(), {0, 1, 1, 0});
  const std::span<const double> all(probabilities);
  const auto assigned = score_ambiguity(all.first(2 * 24), labels, 2, 3, 2);
  const auto marginal = score_ambiguity(all, labels, 5, 3, 2);
  REQUIRE(scores.size() == 1);
  CHECK(scores[0].coverage == assigned.coverage);
  CHECK(scores[0].accuracy == Approx(assigned.accuracy));
  CHECK(scores[0].nll == Approx(marginal.nll));
  // The NLL of five models differs from that of the first two.
  CHECK(marginal.nll != Approx(assigned.nll));
}

TEST_CASE(
    "evaluate_ambiguity: MAML's copies of one solution cover one candidate, scored as "
    "its own predictions are",
    "[components][uncertainty]") {
  Generator init(31), gen(32);
  const Maml<nn::Sequential, SoftmaxCrossEntropyLoss, double> maml(
      nn::mlp({.inputs = 2, .hidden = {6}, .outputs = 2}), SoftmaxCrossEntropyLoss{},
      {.inner_loop = {.steps = 2, .learning_rate = 0.5}, .driver = {.threads = 1}}, init);
  AmbiguousTasks<double> tasks;
  const auto points = [&](std::int64_t n) {
    return raw::normal<double>({3, n, 2}, gen);
  };
  const auto labels = [&](std::int64_t n) {
    std::vector<double> y;
    for (std::int64_t i = 0; i < 3 * n; ++i) y.push_back(static_cast<double>(gen.index(2)));
    return Tensor<double>::from_host({3, n, 1}, y);
  };
  tasks.support_x = points(4);
  tasks.support_y = labels(4);
  for (int c = 0; c < 3; ++c) {
    tasks.candidate_x.push_back(points(5));
    tasks.candidate_y.push_back(labels(5));
  }
  const auto scores = evaluate_ambiguity(maml, tasks, {.assignment = 4, .likelihood = 6}, gen);
  REQUIRE(scores.size() == 3);
  // By hand from MAML's one adapted model per task.
  const auto adapted = maml.adapt_to(tasks.support_x, tasks.support_y, gen);
  for (std::int64_t t = 0; t < 3; ++t) {
    double best = -INFINITY, accuracy = 0, nll = 0;
    for (int c = 0; c < 3; ++c) {
      const auto logits = maml.predict(adapted, tasks.candidate_x[c]).to_vector();
      const auto y = tasks.candidate_y[c].to_vector();
      double log_likelihood = 0, correct = 0;
      for (std::int64_t n = 0; n < 5; ++n) {
        const auto i = static_cast<std::size_t>(t * 5 + n);
        const double l0 = logits[2 * i], l1 = logits[2 * i + 1];
        const double p1 = 1 / (1 + std::exp(l0 - l1));
        const double p = y[i] == 1 ? p1 : 1 - p1;
        log_likelihood += std::log(p);
        nll -= std::log(p) / 15;
        correct += (l1 > l0) == (y[i] == 1);
      }
      if (log_likelihood > best) best = log_likelihood, accuracy = correct / 5;
    }
    const auto& s = scores[static_cast<std::size_t>(t)];
    CHECK(s.coverage == 1);
    CHECK(s.accuracy == Approx(accuracy));
    CHECK(s.nll == Approx(nll).epsilon(1e-9));
  }
  tasks.candidate_x.pop_back();
  CHECK_THROWS_WITH(evaluate_ambiguity(maml, tasks, {}, gen),
                    Contains("2 candidate inputs and 3 candidate label sets"));
}
