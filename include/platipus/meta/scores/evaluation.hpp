// Held-out evaluation as library API: each held-out task's loss or scores
// after adaptation, and a mean with its 95% interval over tasks (the form of
// every score in the paper's tables and in docs/results.md).
//
//   const auto losses = held_out_losses(maml, sampler, 600, gen);
//   const Estimate e = estimate(losses);   // e.text(): "1.023 +- 0.081"
//
//   Generator tasks(seed, 10), models(seed, 11);  // see held_out_predictions
//   const auto scores = held_out_regression(platipus, sampler, {.tasks = 600}, 0.3, tasks, models);
//   estimate(scores, &RegressionScores::mse);
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "platipus/meta/driver/concepts.hpp"
#include "platipus/meta/scores/uncertainty.hpp"
#include "platipus/tensor/layout.hpp"

namespace platipus {

// A mean and the half-width of its normal-approximation 95% interval.
struct Estimate {
  double mean = 0, interval = 0;
  std::string text() const { return fmt::format("{:.3f} +- {:.3f}", mean, interval); }
};

// The mean of `values` with 1.96 standard errors (the sample standard
// deviation over sqrt(n)); an empty span is refused.
inline Estimate estimate(std::span<const double> values) {
  check(!values.empty(), "estimate", "no values to estimate from");
  const double n = static_cast<double>(values.size());
  double mean = 0, variance = 0;
  for (double v : values) mean += v / n;
  for (double v : values) variance += (v - mean) * (v - mean) / std::max(1.0, n - 1);
  return {mean, 1.96 * std::sqrt(variance / n)};
}

// The estimate over tasks of one of their scores: estimate(scores,
// &RegressionScores::mse).
template <class Scores>
Estimate estimate(std::span<const Scores> tasks, double Scores::*score) {
  std::vector<double> values;
  values.reserve(tasks.size());
  for (const auto& task : tasks) values.push_back(task.*score);
  return estimate(values);
}
template <class Scores>
Estimate estimate(const std::vector<Scores>& tasks, double Scores::*score) {
  return estimate(std::span<const Scores>(tasks), score);
}

// Each of `tasks` fresh tasks' mean query loss (the learner's loss) after
// adapting to its support set: learner.query_losses (one model per task:
// MAML's adapted weights; one PLATIPUS sample). Tasks are drawn `batch` at
// a time from `sampler` with gen, so memory stays small.
template <class Learner, TaskSamplerFor<Learner> Sampler>
std::vector<double> held_out_losses(const Learner& learner, const Sampler& sampler,
                                    std::int64_t tasks, Generator& gen, std::int64_t batch = 100) {
  check(tasks > 0 && batch > 0, "held_out_losses",
        "tasks and batch must be positive, got {} and {}", tasks, batch);
  std::vector<double> losses;
  for (std::int64_t done = 0; done < tasks; done += batch) {
    const auto per_task =
        learner.query_losses(sampler.sample(std::min(batch, tasks - done), gen), gen).to_vector();
    losses.insert(losses.end(), per_task.begin(), per_task.end());
  }
  return losses;
}

// What a held-out evaluation draws: `tasks` fresh tasks, adapted `batch` at
// a time (so that memory stays small), with `samples` models per task of a
// learner whose models are random (adapts_randomly: PLATIPUS, MAML + noise)
// and one of the others. `progress`, where given, hears the tasks done
// after each batch.
struct HeldOut {
  std::int64_t tasks = 600, samples = 10, batch = 100;
  std::function<void(std::int64_t)> progress{};
};

// The learner's models' query predictions on held-out tasks, batch by batch:
// draws the tasks from `sampler` with `tasks`, adapts the models to their
// support sets with draws from `models`, and calls on_batch(batch,
// predictions, count) with count models per task and host copies of their
// predictions, [tasks, count, N, out]. Tasks and models come from separate
// generators so that every learner can meet the same tasks whatever it
// draws: give each learner a generator of the same stream for tasks and one
// of its own for models. One model of each task predicts at a time, since
// predict holds every activation of its inputs (about 2 GB for 75
// MiniImagenet-sized queries).
template <class Learner, TaskSamplerFor<Learner> Sampler, class OnBatch>
void held_out_predictions(const Learner& learner, const Sampler& sampler, const HeldOut& held_out,
                          Generator& tasks, Generator& models, OnBatch&& on_batch) {
  check(held_out.tasks > 0 && held_out.samples > 0 && held_out.batch > 0, "held_out_predictions",
        "tasks, samples and batch must be positive, got {}, {} and {}", held_out.tasks,
        held_out.samples, held_out.batch);
  const std::int64_t count = learner.adapts_randomly() ? held_out.samples : 1;
  const std::int64_t size = learner.model().layout().size();
  for (std::int64_t done = 0; done < held_out.tasks; done += held_out.batch) {
    const auto batch = sampler.sample(std::min(held_out.batch, held_out.tasks - done), tasks);
    const std::int64_t n = batch.tasks();
    const auto params = [&] {  // [tasks, count, P]
      if constexpr (requires { learner.adapt_to(batch.support_x, batch.support_y, models); })
        if (count == 1)
          return learner.adapt_to(batch.support_x, batch.support_y, models)
              .reshaped(Shape{n, 1, size});
      return learner.sample(batch.support_x, batch.support_y, count, models);
    }();
    std::vector<double> predictions;
    for (std::int64_t m = 0; m < count; ++m) {
      const auto model_m =
          learner.predict(raw::slice(params, 1, m, 1).reshaped(Shape{n, size}), batch.query_x)
              .to_vector();
      const auto per_task = static_cast<std::ptrdiff_t>(model_m.size()) / n;
      if (predictions.empty()) predictions.resize(model_m.size() * static_cast<std::size_t>(count));
      for (std::int64_t t = 0; t < n; ++t)
        std::copy_n(model_m.begin() + t * per_task, per_task,
                    predictions.begin() + (t * count + m) * per_task);
    }
    on_batch(batch, std::span<const double>(predictions), count);
    if (held_out.progress) held_out.progress(done + n);
  }
}

// Each held-out task's score_regression of its models' predictions, for a
// likelihood of noise scale noise_std (held_out_predictions says how tasks
// and models are drawn).
template <class Learner, TaskSamplerFor<Learner> Sampler>
std::vector<RegressionScores> held_out_regression(const Learner& learner, const Sampler& sampler,
                                                  const HeldOut& held_out, double noise_std,
                                                  Generator& tasks, Generator& models) {
  std::vector<RegressionScores> scores;
  held_out_predictions(
      learner, sampler, held_out, tasks, models,
      [&](const auto& batch, std::span<const double> predictions, std::int64_t count) {
        const auto y = batch.query_y.to_vector();
        const auto n = y.size() / static_cast<std::size_t>(batch.tasks());
        const auto per_task = n * static_cast<std::size_t>(count);
        for (std::size_t t = 0; t * n < y.size(); ++t)
          scores.push_back(score_regression(
              predictions.subspan(t * per_task, per_task),
              std::vector<double>(y.begin() + t * n, y.begin() + (t + 1) * n), noise_std));
      });
  return scores;
}

// Each held-out task's score_classification of its models' mean predictive
// probabilities: the mean softmax of K logits, or for one logit the mean
// sigmoid of binary classification (held_out_predictions says how tasks and
// models are drawn).
template <class Learner, TaskSamplerFor<Learner> Sampler>
std::vector<ClassificationScores> held_out_classification(const Learner& learner,
                                                          const Sampler& sampler,
                                                          const HeldOut& held_out, Generator& tasks,
                                                          Generator& models) {
  std::vector<ClassificationScores> scores;
  held_out_predictions(
      learner, sampler, held_out, tasks, models,
      [&](const auto& batch, std::span<const double> logits, std::int64_t count) {
        const auto labels = batch.query_y.to_vector();
        const auto points = labels.size() / static_cast<std::size_t>(batch.tasks());
        const std::size_t outputs = logits.size() / labels.size() / static_cast<std::size_t>(count);
        const std::size_t classes = std::max<std::size_t>(outputs, 2);
        const double weight = 1.0 / static_cast<double>(count);
        for (std::size_t t = 0; t * points < labels.size(); ++t) {
          std::vector<double> probabilities(points * classes);
          for (std::size_t m = 0; m < static_cast<std::size_t>(count); ++m) {
            const auto model = logits.subspan(
                (t * static_cast<std::size_t>(count) + m) * points * outputs, points * outputs);
            if (outputs == 1)
              add_binary(model, weight, probabilities);
            else
              add_softmax(model, classes, weight, std::span(probabilities));
          }
          scores.push_back(score_classification(
              probabilities,
              std::vector<double>(labels.begin() + t * points, labels.begin() + (t + 1) * points),
              classes));
        }
      });
  return scores;
}

}  // namespace platipus
