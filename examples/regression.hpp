// The 1-D regression setting of the PLATIPUS paper (Section 5 and the
// appendix), shared by the sine_line and active_learning examples: the
// network, the task sampler and the paper's settings.
#pragma once

#include <map>

#include "training.hpp"

namespace examples {

using platipus::Generator;
using RegressionLearners = Learners<platipus::GaussianNllLoss>;
using Sampler = platipus::data::SinusoidLineSampler<float, ExampleBackend>;

struct RegressionOptions : TrainingOptions {
  long support = 5;  // K: 5-shot regression
  long query = 10;

  RegressionOptions() {
    // The paper's alpha = 0.001 for regression is a step on the mean squared
    // error (MAML's reference code reduces so); on the mean Gaussian NLL
    // (y - f)^2 / (2 0.3^2) + c that the learners adapt with it is
    // 0.001 * 2 * 0.3^2 = 1.8e-4: the same steps.
    inner_loop.learning_rate = 1.8e-4;
    gamma = 1.8e-4;   // gamma_p and gamma_q start as alpha
    kl_weight = 1.5;  // paper: 1.5 for 1-D regression, against the summed query NLL
    // MAML + noise: over 5 inner steps of 1.8e-4, noise of std 80 moves the
    // weights by about sqrt(5) * 0.0144 = 0.03, PLATIPUS's initial prior std.
    inner_loop.gradient_noise = 80;
    // PLATIPUS's posterior steps on all of a task's points (Section 4.2's
    // inference network): its mean prediction is 1.08 x MAML's over five
    // seeds, against 1.23 x on the query points alone on seed 4
    // (docs/results.md, "The posterior's data").
    posterior_data = platipus::PosteriorData::support_and_query;
  }

  void add_flags(CLI::App& app) {
    TrainingOptions::add_flags(app);
    app.add_option("--support", support, "K, support points per training task")
        ->check(CLI::Range(1L, 10'000L));
  }

  nlohmann::json json() const {
    auto j = TrainingOptions::json();
    j["support"] = support;
    j["query"] = query;
    j["noise_std"] = noise_std();
    return j;
  }

  // The tasks' label noise, the likelihood's known noise scale.
  static double noise_std() { return platipus::data::SinusoidLineSettings{}.noise_std; }
  // The likelihood every learner trains on: N(y; f(x), 0.3^2), averaged over
  // a task's points for the gradient steps, summed over the query points in
  // PLATIPUS's ELBO (docs/algorithms.md, "The objective, term by term").
  static platipus::GaussianNllLoss loss() { return {.noise_std = noise_std()}; }
};

// The paper's network: a 20-dim bias transformation on the input, then
// 3 x 100 ReLU layers.
inline platipus::nn::Sequential paper_network() {
  return platipus::nn::mlp(
      {.inputs = 1, .hidden = {100, 100, 100}, .outputs = 1, .bias_transform = 20});
}

// Each learner's scores of the same `tasks` held-out tasks (5 support and
// 100 query points), with `samples` models per task of the learners whose
// models are random.
template <class Set>
std::map<std::string, std::vector<platipus::RegressionScores>> regression_scores(
    const Set& learners, long tasks, long samples, std::uint64_t seed) {
  const Sampler held_out({.support = 5, .query = 100});
  return score_learners<platipus::RegressionScores>(
      learners, seed, stream::held_out_tasks,
      [&](const auto& learner, platipus::Generator& task_draws, platipus::Generator& model_draws) {
        return platipus::held_out_regression(
            learner, held_out, {.tasks = tasks, .samples = samples}, RegressionOptions::noise_std(),
            task_draws, model_draws);
      });
}

inline Prepared<platipus::GaussianNllLoss> prepare(const RegressionOptions& o, bool eval_only,
                                                   const std::string& checkpoint,
                                                   const fs::path& out) {
  return examples::prepare(paper_network(), RegressionOptions::loss(),
                           Sampler({.support = o.support, .query = o.query}), o, eval_only,
                           checkpoint, out, o.json());
}

}  // namespace examples
