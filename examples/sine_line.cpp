// The PLATIPUS paper's 5-shot sinusoid-or-line regression (Section 5,
// Figure 3): meta-trains MAML and PLATIPUS with the paper's network and
// settings, reports query MSE on held-out tasks with 95% intervals, and draws
// Figure 3 (MAML's fit and 10 PLATIPUS samples on a sinusoid and a line task,
// and one task with 1, 2, 5 and 10 support points).
//
//   sine_line [--quick] [--out DIR] [--steps N] ...        train, evaluate, plot
//   sine_line --eval-only --checkpoint DIR/checkpoint.safetensors  evaluate and plot only
#include <CLI/CLI.hpp>

#include "regression.hpp"

using namespace platipus;
using namespace examples;

namespace {

constexpr long grid_points = 200;

std::vector<float> linspace(double low, double high, long n) {
  std::vector<float> v;
  for (long i = 0; i < n; ++i)
    v.push_back(static_cast<float>(low + (high - low) * static_cast<double>(i) /
                                             static_cast<double>(n - 1)));
  return v;
}

// Query MSE, predictive NLL and 90% coverage over held-out tasks, for each
// learner (MAML: one model; MAML + noise and PLATIPUS: `samples` models).
nlohmann::json evaluate(const RegressionLearners& learners, long tasks, long samples,
                        std::uint64_t seed) {
  const auto scores = regression_scores(learners, tasks, samples, seed);
  nlohmann::json results{{"tasks", tasks},
                         {"query_points", 100},
                         {"support_points", 5},
                         {"samples", samples},
                         {"noise_std", RegressionOptions::noise_std()}};
  for (const auto& [learner, s] : scores) results[learner] = as_json(s);
  const auto& platipus = scores.at("platipus");
  results["platipus"]["mse_per_sample"] =
      as_json(estimate(platipus, &RegressionScores::mse_per_sample));
  // PLATIPUS's MSE minus MAML's, paired by task (negative: PLATIPUS is better).
  std::vector<double> difference;
  for (std::size_t t = 0; t < platipus.size(); ++t)
    difference.push_back(platipus[t].mse - scores.at("maml")[t].mse);
  results["platipus_minus_maml_mse"] = as_json(estimate(difference));
  return results;
}

// One panel of Figure 3: ground truth, support points, MAML's fit and PLATIPUS samples.
nlohmann::json panel(const RegressionLearners& learners, const data::SineLineFunction& f,
                     const std::vector<float>& xs, const std::vector<float>& ys, long samples,
                     Generator& gen) {
  const auto k = static_cast<std::int64_t>(xs.size());
  const auto sx = Tensor<float, ExampleBackend>::from_host({1, k, 1}, xs),
             sy = Tensor<float, ExampleBackend>::from_host({1, k, 1}, ys);
  const auto grid = linspace(-5, 5, grid_points);
  const auto gx = Tensor<float, ExampleBackend>::from_host({1, grid_points, 1}, grid);
  std::vector<double> truth;
  for (float x : grid) truth.push_back(f(x));
  const auto& m = maml_of(learners);
  const auto& p = platipus_of(learners);
  const auto maml = m.predict(m.adapt_to(sx, sy, gen), gx).to_vector();
  const auto sampled = p.predict(p.sample(sx, sy, samples, gen), gx).to_vector();
  std::vector<std::vector<float>> curves;
  for (long s = 0; s < samples; ++s)
    curves.emplace_back(sampled.begin() + s * grid_points, sampled.begin() + (s + 1) * grid_points);
  return {{"kind", f.sinusoid ? "sinusoid" : "line"},
          {"truth", truth},
          {"support_x", xs},
          {"support_y", ys},
          {"maml", maml},
          {"platipus", curves}};
}

nlohmann::json figure3(const RegressionLearners& learners, long samples, std::uint64_t seed) {
  const Sampler sampler;
  Generator gen(seed, stream::figures);
  auto draw = [&](bool sinusoid) {
    for (;;) {
      const auto f = sampler.draw_function(gen);
      if (f.sinusoid == sinusoid) return f;
    }
  };
  auto points = [&](const data::SineLineFunction& f, long n) {
    const auto [x, y] = sampler.points(std::span(&f, 1), n, gen);
    return std::pair{x.to_vector(), y.to_vector()};
  };
  nlohmann::json panels = nlohmann::json::array();
  for (bool sinusoid : {true, false}) {
    const auto f = draw(sinusoid);
    const auto [x, y] = points(f, 5);
    panels.push_back(panel(learners, f, x, y, samples, gen));
  }
  // The bottom row: one task, the first 1, 2, 5 and 10 of the same points.
  const auto f = draw(true);
  const auto [x, y] = points(f, 10);
  for (long k : {1, 2, 5, 10}) {
    auto p =
        panel(learners, f, {x.begin(), x.begin() + k}, {y.begin(), y.begin() + k}, samples, gen);
    p["row"] = "support";
    panels.push_back(p);
  }
  return {{"grid", linspace(-5, 5, grid_points)}, {"panels", panels}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "5-shot sinusoid-or-line regression: MAML vs PLATIPUS (Finn, Xu, Levine 2018, Figure 3)"};
  RegressionOptions options;
  options.add_flags(app);
  RunFlags run("out/sine_line");
  run.add_flags(app);
  CLI11_PARSE(app, argc, argv);
  run.apply_quick(app, options);
  const auto& [out, checkpoint, quick, eval_only, eval_tasks, samples, no_plot] = run;
  try {
    world();  // the ranks first: under NCCL each picks its GPU before other CUDA work
    const fs::path dir(out);
    const auto [learners, trained] = prepare(options, eval_only, checkpoint, dir);
    if (!is_root()) return 0;  // the other ranks of a distributed run only train
    const auto results = evaluate(learners, eval_tasks, samples, options.seed);
    write_json(dir / "results.json", {{"results", results},
                                      {"options", with_learners(options.json(), learners)},
                                      {"checkpoint", trained}});
    write_json(dir / "figure3.json", figure3(learners, samples, options.seed));
    fmt::print(
        "{} held-out tasks, 5 support and 100 query points (mean +- 95% interval; {} samples)\n",
        eval_tasks, samples);
    print_scores(results, {"mse", "nll", "coverage90"},
                 {"query MSE", "NLL per point", "90% coverage"});
    fmt::print("  PLATIPUS's MSE minus MAML's, paired by task: {}\n",
               Estimate{results["platipus_minus_maml_mse"]["mean"],
                        results["platipus_minus_maml_mse"]["ci95"]}
                   .text());
    fmt::print("  PLATIPUS's MSE per single sample: {}\n",
               Estimate{results["platipus"]["mse_per_sample"]["mean"],
                        results["platipus"]["mse_per_sample"]["ci95"]}
                   .text());
    fmt::print("wrote {}/results.json, figure3.json{}\n", out,
               eval_only ? "" : ", train.jsonl, train.csv");
    run.plot("sine_line", dir);
  } catch (...) {
    return report_failure("sine_line");
  }
}
