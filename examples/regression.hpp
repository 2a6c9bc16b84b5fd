// The 1-D regression setting of the PLATIPUS paper (Section 5 and the
// appendix), shared by the sine_line and active_learning examples: the
// network, both meta-learners with the paper's settings, their training and
// their checkpoint.
#pragma once

#include <CLI/CLI.hpp>

#include "common.hpp"
#include "platipus/platipus.hpp"

namespace examples {

using platipus::Generator;
using MamlLearner = platipus::Maml<platipus::nn::Sequential, platipus::MseLoss>;
using PlatipusLearner = platipus::Platipus<platipus::nn::Sequential, platipus::MseLoss>;
using Sampler = platipus::data::SinusoidLineSampler<float>;

struct RegressionOptions {
  long steps = 20000;    // meta-training steps of each learner
  long meta_batch = 25;  // tasks per meta-step
  long support = 5;      // K: 5-shot regression
  long query = 10;
  int inner_steps = 5;       // paper: 5
  double inner_rate = 1e-3;  // paper: alpha = 0.001 for regression
  double kl_weight = 1.5;    // paper: 1.5 for 1-D regression
  double meta_rate = 1e-3;
  // Tuned on 3000-step runs (MSE of the mean of 10 samples on 300 held-out
  // tasks): variances 0.001 -> 2.69, 0.01 -> 3.85 (gamma 0.01 and 0.05).
  double prior_variance = 0.001, posterior_variance = 0.001, gamma = 0.01;
  int threads = 0;
  std::uint64_t seed = 1;

  void add_flags(CLI::App& app) {
    app.add_option("--steps", steps, "meta-training steps of each learner")
        ->check(CLI::PositiveNumber);
    app.add_option("--meta-batch", meta_batch, "tasks per meta-step")->check(CLI::PositiveNumber);
    app.add_option("--support", support, "K, support points per training task")
        ->check(CLI::PositiveNumber);
    app.add_option("--inner-steps", inner_steps, "SGD steps of the inner loop")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--inner-rate", inner_rate, "alpha, the inner-loop step size")
        ->check(CLI::PositiveNumber);
    app.add_option("--kl-weight", kl_weight, "beta, PLATIPUS's KL weight")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--meta-rate", meta_rate, "Adam's learning rate on the meta-parameters")
        ->check(CLI::PositiveNumber);
    app.add_option("--prior-variance", prior_variance, "initial sigma2_theta")
        ->check(CLI::PositiveNumber);
    app.add_option("--posterior-variance", posterior_variance, "initial v_q")
        ->check(CLI::PositiveNumber);
    app.add_option("--gamma", gamma, "initial gamma_p and gamma_q")->check(CLI::PositiveNumber);
    app.add_option("--threads", threads, "threads over a meta-batch's tasks (0: all cores)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--seed", seed, "seed of every random draw");
  }

  nlohmann::json json() const {
    return {{"steps", steps},
            {"meta_batch", meta_batch},
            {"support", support},
            {"query", query},
            {"inner_steps", inner_steps},
            {"inner_rate", inner_rate},
            {"kl_weight", kl_weight},
            {"meta_rate", meta_rate},
            {"prior_variance", prior_variance},
            {"posterior_variance", posterior_variance},
            {"gamma", gamma},
            {"seed", seed}};
  }
};

// The paper's network: a 20-dim bias transformation on the input, then
// 3 x 100 ReLU layers.
inline platipus::nn::Sequential paper_network() {
  return platipus::nn::mlp(
      {.inputs = 1, .hidden = {100, 100, 100}, .outputs = 1, .bias_transform = 20});
}

struct Learners {
  MamlLearner maml;
  PlatipusLearner platipus;
};

inline Learners make_learners(const RegressionOptions& o) {
  Generator init_maml(o.seed), init_platipus(o.seed);  // the same initial network for both
  const platipus::optim::AdamSettings adam{.learning_rate = o.meta_rate};
  return {MamlLearner(paper_network(), platipus::MseLoss{},
                      {.inner_steps = o.inner_steps,
                       .inner_learning_rate = o.inner_rate,
                       .meta_optimizer = adam,
                       .threads = o.threads},
                      init_maml),
          PlatipusLearner(paper_network(), platipus::MseLoss{},
                          {.inner_steps = o.inner_steps,
                           .inner_learning_rate = o.inner_rate,
                           .kl_weight = o.kl_weight,
                           .initial_prior_variance = o.prior_variance,
                           .initial_posterior_variance = o.posterior_variance,
                           .initial_gamma_p = o.gamma,
                           .initial_gamma_q = o.gamma,
                           .meta_optimizer = adam,
                           .threads = o.threads},
                          init_platipus)};
}

// Meta-trains both learners on fresh sinusoid-or-line tasks, logging to
// <out>/train.{jsonl,csv}.
inline void train(Learners& learners, const RegressionOptions& o, const fs::path& out) {
  const Sampler sampler({.support = o.support, .query = o.query});
  platipus::io::MetricsLog log(out, "train");
  const long every = std::max(1L, o.steps / 200);
  auto run = [&](const std::string& name, auto& learner, std::uint64_t stream) {
    Generator gen(o.seed, stream);
    Progress progress(name, o.steps);
    double recent = 0;
    for (long step = 1; step <= o.steps; ++step) {
      const auto result = learner.meta_train_step(sampler.sample(o.meta_batch, gen), gen);
      recent += result.query_loss / static_cast<double>(every);
      if (step % every == 0 || step == o.steps) {
        log.record({{"learner", name},
                    {"step", step},
                    {"query_loss", recent},
                    {"kl", result.kl},
                    {"seconds", progress.seconds()}});
        progress.update(step, fmt::format("query loss {:.3f}", recent));
        recent = 0;
      }
    }
    log.flush();
  };
  run("maml", learners.maml, 1);
  run("platipus", learners.platipus, 2);
}

// Trains, or with --eval-only loads the checkpoint; saves the checkpoint after training.
inline Learners prepare(const RegressionOptions& o, bool eval_only, const std::string& checkpoint,
                        const fs::path& out) {
  Learners learners = make_learners(o);
  if (eval_only) {
    load_learners(checkpoint, learners.maml, learners.platipus);
    fmt::print(stderr, "loaded {}\n", checkpoint);
  } else {
    train(learners, o, out);
    const fs::path path = checkpoint.empty() ? out / "checkpoint.bin" : fs::path(checkpoint);
    save_learners(path, {{"options", o.json()}}, learners.maml, learners.platipus);
    fmt::print(stderr, "saved {}\n", path.string());
  }
  return learners;
}

}  // namespace examples
