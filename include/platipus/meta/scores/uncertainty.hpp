// How good a learner's uncertainty is, task by task: the scores the
// examples report for MAML, MAML + noise and PLATIPUS. Host-side, on
// predictions already copied from the backend.
//
// Regression: S sampled models predict f_s(x) for N query points; with the
// likelihood's noise scale sigma the predictive distribution of y at x is the
// mixture (1/S) sum_s N(f_s(x), sigma^2) (one Gaussian for S = 1, as for MAML).
//   mse         (mean_s f_s(x) - y)^2, averaged over points
//   mse_per_sample  (f_s(x) - y)^2, averaged over points and samples: the
//               error of one sampled model (for S = 1 the mse)
//   nll         -log (1/S) sum_s N(y; f_s(x), sigma^2), averaged over points
//   coverage    share of points whose y lies in the mixture's central
//               `interval` (by default 90%) predictive interval
// Classification: the predictive probabilities p(k | x) of K classes (the
// mean of the samples' probabilities: PLATIPUS's mean softmax); binary
// classification is K = 2 with p(1 | x) = p.
//   accuracy    share of points whose most probable class (the first of
//               equals) is the label
//   nll         -log p(label | x), averaged over points
//   ece         expected calibration error (Guo et al., ICML 2017): points
//               binned by confidence max_k p(k | x) into `bins` equal bins,
//               sum_b (n_b / N) |accuracy_b - confidence_b|
#pragma once

#include <algorithm>
#include <cmath>
#include <numbers>
#include <span>
#include <vector>

#include "platipus/core/error.hpp"

namespace platipus {

struct RegressionScores {
  double mse = 0, nll = 0, coverage = 0, mse_per_sample = 0;
};

// samples [S, N] (row s: model s's predictions), targets [N].
inline RegressionScores score_regression(std::span<const double> samples,
                                         std::span<const double> targets, double noise_std,
                                         double interval = 0.9) {
  constexpr std::string_view name = "score_regression";
  const std::size_t n = targets.size();
  check(n > 0 && samples.size() >= n && samples.size() % n == 0, name,
        "{} predictions do not form [samples, {}] rows", samples.size(), n);
  check_finite(name, "noise_std", noise_std);
  check_positive(name, "noise_std", noise_std);
  check(interval > 0 && interval < 1, name, "interval must lie in (0, 1), got {}", interval);
  const std::size_t s_count = samples.size() / n;
  const double s = static_cast<double>(s_count);
  auto prediction = [&](std::size_t k, std::size_t i) {
    return samples[k * n + i];
  };
  // The mixture's CDF at y, and the point where it reaches `level` (bisection
  // between the outermost components' +-10 sigma, where it is 0 and 1).
  auto cdf = [&](std::size_t i, double y) {
    double c = 0;
    for (std::size_t k = 0; k < s_count; ++k)
      c += 0.5 * std::erfc(-(y - prediction(k, i)) / (noise_std * std::numbers::sqrt2)) / s;
    return c;
  };
  auto quantile = [&](std::size_t i, double level) {
    double low = prediction(0, i), high = low;
    for (std::size_t k = 1; k < s_count; ++k)
      low = std::min(low, prediction(k, i)), high = std::max(high, prediction(k, i));
    low -= 10 * noise_std, high += 10 * noise_std;
    for (int iteration = 0; iteration < 60; ++iteration) {
      const double middle = 0.5 * (low + high);
      (cdf(i, middle) < level ? low : high) = middle;
    }
    return 0.5 * (low + high);
  };
  RegressionScores scores;
  const double log_norm = std::log(noise_std) + 0.5 * std::log(2 * std::numbers::pi);
  for (std::size_t i = 0; i < n; ++i) {
    const double y = targets[i];
    double mean = 0, largest = -INFINITY;
    std::vector<double> log_densities(s_count);
    for (std::size_t k = 0; k < s_count; ++k) {
      const double z = (y - prediction(k, i)) / noise_std;
      mean += prediction(k, i) / s;
      log_densities[k] = -0.5 * z * z - log_norm;
      largest = std::max(largest, log_densities[k]);
    }
    double total = 0;  // log-sum-exp, so that far-off targets do not underflow to log 0
    for (double l : log_densities) total += std::exp(l - largest);
    scores.mse += (mean - y) * (mean - y) / static_cast<double>(n);
    scores.nll -= (largest + std::log(total / s)) / static_cast<double>(n);
    const double tail = 0.5 * (1 - interval);
    const bool inside = y >= quantile(i, tail) && y <= quantile(i, 1 - tail);
    scores.coverage += inside / static_cast<double>(n);
  }
  for (std::size_t k = 0; k < samples.size(); ++k)
    scores.mse_per_sample += (samples[k] - targets[k % n]) * (samples[k] - targets[k % n]) /
                             static_cast<double>(samples.size());
  return scores;
}

struct ClassificationScores {
  double accuracy = 0, nll = 0, ece = 0;
};

// probabilities [N, classes] (each row sums to 1), labels [N] in [0, classes).
inline ClassificationScores score_classification(std::span<const double> probabilities,
                                                 std::span<const double> labels,
                                                 std::size_t classes, int bins = 10) {
  constexpr std::string_view name = "score_classification";
  const std::size_t n = labels.size();
  check_at_least(name, "classes", classes, std::size_t{2});
  check(n > 0 && probabilities.size() == n * classes, name,
        "{} probabilities for {} labels of {} classes", probabilities.size(), n, classes);
  check_positive(name, "bins", bins);
  std::vector<double> bin_count(static_cast<std::size_t>(bins)), bin_correct(bin_count.size()),
      bin_confidence(bin_count.size());
  ClassificationScores scores;
  for (std::size_t i = 0; i < n; ++i) {
    const auto row = probabilities.subspan(i * classes, classes);
    const double label = labels[i];
    check(label >= 0 && label < static_cast<double>(classes) && label == std::floor(label), name,
          "point {}: label {} is not a class in [0, {})", i, label, classes);
    for (const double p : row)
      check(p >= 0 && p <= 1, name, "point {}: probability {} is outside [0, 1]", i, p);
    const auto predicted = static_cast<std::size_t>(std::ranges::max_element(row) - row.begin());
    const auto truth = static_cast<std::size_t>(label);
    const bool correct = predicted == truth;
    const double confidence = row[predicted];
    scores.accuracy += correct / static_cast<double>(n);
    scores.nll -= std::log(std::max(row[truth], 1e-12)) / static_cast<double>(n);
    const auto b = std::min(static_cast<std::size_t>(confidence * bins), bin_count.size() - 1);
    bin_count[b] += 1;
    bin_correct[b] += correct;
    bin_confidence[b] += confidence;
  }
  for (std::size_t b = 0; b < bin_count.size(); ++b)
    if (bin_count[b] > 0)
      scores.ece += std::abs(bin_correct[b] - bin_confidence[b]) / static_cast<double>(n);
  return scores;
}

// Adds `weight` times the softmax of each row of `logits` [rows, classes]
// into `into` [rows, classes], in double and shifted by the row's largest
// logit (exp of a large logit would overflow): the mean predictive
// probabilities of S sampled classifiers are S calls with weight 1 / S.
template <class T>
void add_softmax(std::span<const T> logits, std::size_t classes, double weight,
                 std::span<double> into) {
  check(classes > 0 && logits.size() % classes == 0 && into.size() == logits.size(), "add_softmax",
        "{} logits of {} classes do not match {} outputs", logits.size(), classes, into.size());
  for (std::size_t r = 0; r < logits.size(); r += classes) {
    const auto row = logits.subspan(r, classes);
    const double largest = *std::ranges::max_element(row);
    double total = 0;
    for (const T logit : row) total += std::exp(logit - largest);
    for (std::size_t k = 0; k < classes; ++k)
      into[r + k] += weight * std::exp(row[k] - largest) / total;
  }
}

// Adds `weight` times the rows (1 - p, p) of each logit's sigmoid p =
// 1 / (1 + exp(-logit)) into `into` [N, 2]: add_softmax for a binary
// classifier with one logit. Both columns from the sigmoid of their own sign,
// so that neither loses its digits to 1 - p.
template <class T>
void add_binary(std::span<const T> logits, double weight, std::span<double> into) {
  check(into.size() == 2 * logits.size(), "add_binary", "{} logits do not match {} outputs",
        logits.size(), into.size());
  const auto sigmoid = [](double z) {
    return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z));
  };
  for (std::size_t i = 0; i < logits.size(); ++i) {
    into[2 * i] += weight * sigmoid(-static_cast<double>(logits[i]));
    into[2 * i + 1] += weight * sigmoid(static_cast<double>(logits[i]));
  }
}

// probabilities [N] of class 1, labels [N] in {0, 1}: score_classification
// of the rows (1 - p, p).
inline ClassificationScores score_binary_classification(std::span<const double> probabilities,
                                                        std::span<const double> labels,
                                                        int bins = 10) {
  check(probabilities.size() == labels.size(), "score_binary_classification",
        "{} probabilities for {} labels", probabilities.size(), labels.size());
  std::vector<double> rows;
  rows.reserve(2 * probabilities.size());
  for (std::size_t i = 0; i < probabilities.size(); ++i) {
    const double p = probabilities[i];
    check(p >= 0 && p <= 1, "score_binary_classification",
          "point {}: probability {} is outside [0, 1]", i, p);
    rows.insert(rows.end(), {1 - p, p});
  }
  return score_classification(rows, labels, 2, bins);
}

}  // namespace platipus
