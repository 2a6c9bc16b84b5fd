// Ambiguous few-shot tasks and how well a learner covers their explanations
// (PLATIPUS, Finn, Xu, Levine 2018, Section 5, "Ambiguous image
// classification", and Appendix B). An ambiguous task is one support set
// that several candidate tasks explain equally well (ambiguous CelebA: five
// faces with three attributes against five with none, and the three
// two-attribute tasks); each candidate has query points of its own.
//
// For each ambiguous task, S models are sampled from the learner given the
// support set (PLATIPUS: Algorithm 2; MAML + noise: S noisy adaptations;
// MAML: S copies of its one solution) and each model is assigned to the
// candidate on whose query points it has the highest log-likelihood:
//   coverage   how many candidates receive at least one model (1 to C)
//   accuracy   each model's accuracy on its candidate's query points,
//              averaged over the S models
//   nll        the marginal negative log-likelihood of every candidate's
//              query labels under the mixture of the sampled models,
//              -log (1/S') sum_s p_s(y | x), averaged over the points of all
//              candidates (the paper averages over 100 samples: S' = 100)
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "platipus/meta/driver/concepts.hpp"
#include "platipus/meta/scores/uncertainty.hpp"
#include "platipus/tensor/layout.hpp"

namespace platipus {

struct AmbiguityScores {
  double coverage = 0, accuracy = 0, nll = 0;
};

// One ambiguous task's scores from the samples' predictive probabilities:
// probabilities [S, C, N, K] (sample s's probabilities of K classes at
// candidate c's N query points, each row summing to 1) and labels [C, N].
// A model goes to the first candidate of the highest log-likelihood; a
// probability below 1e-12 counts as 1e-12, as score_classification does.
inline AmbiguityScores score_ambiguity(std::span<const double> probabilities,
                                       std::span<const double> labels, std::size_t samples,
                                       std::size_t candidates, std::size_t classes) {
  constexpr std::string_view name = "score_ambiguity";
  check(samples > 0 && candidates > 0 && classes >= 2 && !labels.empty() &&
            labels.size() % candidates == 0,
        name, "{} labels do not form [{} candidates, points] ({} samples, {} classes)",
        labels.size(), candidates, samples, classes);
  const std::size_t points = labels.size() / candidates;
  check(probabilities.size() == samples * labels.size() * classes, name,
        "{} probabilities for {} samples x {} labels x {} classes", probabilities.size(), samples,
        labels.size(), classes);
  for (std::size_t i = 0; i < labels.size(); ++i)
    check(labels[i] >= 0 && labels[i] < static_cast<double>(classes) &&
              labels[i] == std::floor(labels[i]),
          name, "label {} of candidate {} is {}: not a class in [0, {})", i % points, i / points,
          labels[i], classes);
  const auto row = [&](std::size_t s, std::size_t c, std::size_t n) {
    return probabilities.subspan(((s * candidates + c) * points + n) * classes, classes);
  };
  const auto label = [&](std::size_t c, std::size_t n) {
    return static_cast<std::size_t>(labels[c * points + n]);
  };
  std::vector<bool> covered(candidates);
  AmbiguityScores scores;
  for (std::size_t s = 0; s < samples; ++s) {
    std::size_t best = 0;
    double best_log_likelihood = -INFINITY;
    for (std::size_t c = 0; c < candidates; ++c) {
      double log_likelihood = 0;
      for (std::size_t n = 0; n < points; ++n)
        log_likelihood += std::log(std::max(row(s, c, n)[label(c, n)], 1e-12));
      if (log_likelihood > best_log_likelihood) best = c, best_log_likelihood = log_likelihood;
    }
    covered[best] = true;
    double correct = 0;
    for (std::size_t n = 0; n < points; ++n) {
      const auto r = row(s, best, n);
      correct +=
          static_cast<std::size_t>(std::ranges::max_element(r) - r.begin()) == label(best, n);
    }
    scores.accuracy += correct / static_cast<double>(points * samples);
  }
  scores.coverage = static_cast<double>(std::ranges::count(covered, true));
  for (std::size_t c = 0; c < candidates; ++c)
    for (std::size_t n = 0; n < points; ++n) {
      double mixture = 0;
      for (std::size_t s = 0; s < samples; ++s)
        mixture += row(s, c, n)[label(c, n)] / static_cast<double>(samples);
      scores.nll -= std::log(std::max(mixture, 1e-12)) / static_cast<double>(labels.size());
    }
  return scores;
}

struct AmbiguitySamples {
  std::int64_t assignment = 15;   // models assigned to candidates (coverage, accuracy)
  std::int64_t likelihood = 100;  // models of the marginal likelihood (nll)
  std::int64_t at_once = 15;      // models adapted at once per task (memory: their activations)
};

// Every ambiguous task's scores for a learner that samples models
// (sample(support_x, support_y, n, gen) -> [tasks, n, P]) and predicts
// logits (predict(params [tasks, P], x) -> [tasks, N, K]) of a classifier
// with softmax outputs. Draws max(assignment, likelihood) models per task,
// `at_once` at a time; coverage and accuracy use the first `assignment` of
// them, nll the first `likelihood`.
template <class Learner, class T, class B>
std::vector<AmbiguityScores> evaluate_ambiguity(const Learner& learner,
                                                const AmbiguousTasks<T, B>& tasks,
                                                AmbiguitySamples samples, Generator& gen) {
  constexpr std::string_view who = "evaluate_ambiguity";
  tasks.validate(who);
  check(samples.assignment > 0 && samples.likelihood > 0 && samples.at_once > 0, who,
        "sample counts must be positive (assignment {}, likelihood {}, at once {})",
        samples.assignment, samples.likelihood, samples.at_once);
  const std::int64_t drawn = std::max(samples.assignment, samples.likelihood);
  const std::int64_t count = tasks.tasks(), size = learner.model().layout().size();
  const auto candidates = static_cast<std::size_t>(tasks.candidates());
  const auto points = static_cast<std::size_t>(tasks.candidate_x[0].dim(1));
  for (const auto& x : tasks.candidate_x)
    check(static_cast<std::size_t>(x.dim(1)) == points, who,
          "candidates have {} and {} query points; score_ambiguity needs as many for each", points,
          x.dim(1));
  // probabilities[t]: [drawn, C, N, K] of task t, filled model by model.
  std::vector<std::vector<double>> probabilities(static_cast<std::size_t>(count));
  std::size_t classes = 0;
  Tensor<T, B> params;  // [tasks, at_once, P]: models first .. first + at_once - 1
  for (std::int64_t m = 0; m < drawn; ++m) {
    const std::int64_t in_group = m % samples.at_once;
    if (in_group == 0)
      params = learner.sample(tasks.support_x, tasks.support_y,
                              std::min(samples.at_once, drawn - m), gen);
    const auto model = raw::slice(params, 1, in_group, 1).reshaped(Shape{count, size});
    for (std::size_t c = 0; c < candidates; ++c) {
      const auto logits = learner.predict(model, tasks.candidate_x[c]);
      classes = static_cast<std::size_t>(logits.dim(-1));
      const auto values = logits.to_vector();
      for (std::size_t t = 0; t < probabilities.size(); ++t) {
        auto& into = probabilities[t];
        if (into.empty())
          into.resize(static_cast<std::size_t>(drawn) * candidates * points * classes);
        const std::size_t block = points * classes;
        add_softmax(
            std::span<const T>(values).subspan(t * block, block), classes, 1.0,
            std::span(into).subspan((static_cast<std::size_t>(m) * candidates + c) * block, block));
      }
    }
  }
  std::vector<std::vector<double>> labels(static_cast<std::size_t>(count));
  for (std::size_t c = 0; c < candidates; ++c) {
    const auto y = tasks.candidate_y[c].to_vector();
    for (std::size_t t = 0; t < labels.size(); ++t)
      labels[t].insert(labels[t].end(), y.begin() + static_cast<std::ptrdiff_t>(t * points),
                       y.begin() + static_cast<std::ptrdiff_t>((t + 1) * points));
  }
  std::vector<AmbiguityScores> scores;
  const std::size_t per_model = candidates * points * classes;
  for (std::size_t t = 0; t < probabilities.size(); ++t) {
    const std::span<const double> all(probabilities[t]);
    auto s = score_ambiguity(all.first(static_cast<std::size_t>(samples.assignment) * per_model),
                             labels[t], static_cast<std::size_t>(samples.assignment), candidates,
                             classes);
    s.nll = score_ambiguity(all.first(static_cast<std::size_t>(samples.likelihood) * per_model),
                            labels[t], static_cast<std::size_t>(samples.likelihood), candidates,
                            classes)
                .nll;
    scores.push_back(s);
  }
  return scores;
}

}  // namespace platipus
