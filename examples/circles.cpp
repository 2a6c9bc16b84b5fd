// The PLATIPUS paper's 1-shot 2-D classification (Section 5, Figure 7): from
// a single positive example, classify points of [0, 5]^2 as inside or outside
// an unseen circle. Meta-trains MAML and PLATIPUS (KL weight 0.01, alpha
// 0.01), reports query accuracy and negative log-likelihood on held-out tasks,
// and draws PLATIPUS's sampled decision boundaries against MAML's single one.
//
//   circles [--quick] [--out DIR] [--steps N] ...
//   circles --eval-only --checkpoint DIR/checkpoint.safetensors
#include <map>

#include <CLI/CLI.hpp>

#include "platipus/platipus.hpp"
#include "training.hpp"

using namespace platipus;
using namespace examples;

namespace {

using CircleLearners = Learners<BceWithLogitsLoss>;
using Sampler = data::CirclesSampler<float, ExampleBackend>;
constexpr long grid_side = 60;

struct Options : TrainingOptions {
  long query = 20;  // training query points per task

  Options() {
    inner_loop.learning_rate = 1e-2;  // paper: alpha = 0.01 for classification
    kl_weight = 0.01;                 // paper: 0.01 for 2-D classification
    gamma = 1e-2;
    // The query likelihood averaged over the 20 points, the scale on which
    // the paper's KL weight of 0.01 was chosen for these runs
    // (docs/algorithms.md, "The objective, term by term").
    query_reduction = Reduction::mean;
    // MAML + noise: over 5 inner steps of 0.01, noise of std 1.5 moves the
    // weights by about sqrt(5) * 0.015 = 0.03, PLATIPUS's initial prior std.
    inner_loop.gradient_noise = 1.5;
  }

  nlohmann::json json() const {
    auto j = TrainingOptions::json();
    j["query"] = query;
    return j;
  }

  // The Bernoulli NLL (sigmoid cross-entropy), averaged over a task's points.
  static BceWithLogitsLoss loss() { return {.reduction = Reduction::mean}; }
};

nn::Sequential paper_network() {
  return nn::mlp({.inputs = 2, .hidden = {100, 100, 100}, .outputs = 1, .bias_transform = 20});
}

// Accuracy, NLL and expected calibration error of the predictive probability
// (MAML + noise and PLATIPUS: the mean over samples), for each learner, on
// the same held-out tasks.
nlohmann::json evaluate(const CircleLearners& learners, long tasks, long samples,
                        std::uint64_t seed) {
  const Sampler held_out({.support = 1, .query = 100});
  nlohmann::json results{{"tasks", tasks}, {"query_points", 100}, {"samples", samples}};
  const auto scores = score_learners<ClassificationScores>(
      learners, seed, stream::held_out_tasks,
      [&](const auto& learner, Generator& task_draws, Generator& model_draws) {
        return held_out_classification(learner, held_out, {.tasks = tasks, .samples = samples},
                                       task_draws, model_draws);
      });
  for (const auto& [learner, s] : scores) results[learner] = as_json(s);
  return results;
}

// Figure 7: logits over a grid for MAML and each PLATIPUS sample, for a few tasks.
nlohmann::json figure7(const CircleLearners& learners, long samples, std::uint64_t seed) {
  const Sampler sampler({.support = 1, .query = 1});
  Generator gen(seed, stream::figures);
  std::vector<float> grid;
  for (long i = 0; i < grid_side; ++i)
    for (long j = 0; j < grid_side; ++j) {
      grid.push_back(static_cast<float>(5.0 * static_cast<double>(j) / (grid_side - 1)));
      grid.push_back(static_cast<float>(5.0 * static_cast<double>(i) / (grid_side - 1)));
    }
  nlohmann::json panels = nlohmann::json::array();
  for (int k = 0; k < 4; ++k) {
    const auto circle = sampler.draw_circle(gen);
    const auto batch = sampler.sample(std::span(&circle, 1), gen);
    const auto gx = Tensor<float, ExampleBackend>::from_host({1, grid_side * grid_side, 2}, grid);
    const auto& m = maml_of(learners);
    const auto& p = platipus_of(learners);
    const auto maml = m.predict(m.adapt_to(batch.support_x, batch.support_y, gen), gx).to_vector();
    const auto sampled =
        p.predict(p.sample(batch.support_x, batch.support_y, samples, gen), gx).to_vector();
    std::vector<std::vector<float>> fields;
    for (long s = 0; s < samples; ++s)
      fields.emplace_back(sampled.begin() + s * grid_side * grid_side,
                          sampled.begin() + (s + 1) * grid_side * grid_side);
    panels.push_back({{"circle", {circle.cx, circle.cy, circle.radius}},
                      {"support", batch.support_x.to_vector()},
                      {"maml", maml},
                      {"platipus", fields}});
  }
  return {{"side", grid_side}, {"extent", 5.0}, {"panels", panels}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "1-shot 2-D classification of circles: MAML vs PLATIPUS (Finn, Xu, Levine 2018, Figure 7)"};
  Options o;
  o.add_flags(app);
  RunFlags run("out/circles");
  run.add_flags(app);
  CLI11_PARSE(app, argc, argv);
  run.apply_quick(app, o);
  const auto& [out, checkpoint, quick, eval_only, eval_tasks, samples, no_plot] = run;
  try {
    world();  // the ranks first: under NCCL each picks its GPU before other CUDA work
    const fs::path dir(out);
    const auto [learners, trained] =
        prepare(paper_network(), Options::loss(), Sampler({.support = 1, .query = o.query}), o,
                eval_only, checkpoint, dir, o.json());
    if (!is_root()) return 0;  // the other ranks of a distributed run only train
    const auto results = evaluate(learners, eval_tasks, samples, o.seed);
    write_json(dir / "results.json", {{"results", results},
                                      {"options", with_learners(o.json(), learners)},
                                      {"checkpoint", trained}});
    write_json(dir / "figure7.json", figure7(learners, samples, o.seed));
    fmt::print("1-shot classification on {} held-out tasks (mean +- 95% interval; {} samples)\n",
               eval_tasks, samples);
    print_scores(results, {"accuracy", "nll", "ece"}, {"accuracy", "NLL per point", "ECE"});
    fmt::print("wrote {}/results.json, figure7.json{}\n", out,
               eval_only ? "" : ", train.jsonl, train.csv");
    run.plot("circles", dir);
  } catch (...) {
    return report_failure("circles");
  }
}
