// Every meta-learner of the library on the PLATIPUS paper's 5-shot
// sinusoid-or-line regression (sine_line's tasks, network, likelihood and
// inner loop): MAML, first-order MAML, Reptile, Meta-SGD, ANIL, MAML++ and
// PLATIPUS, each trained on the same task stream from the same initial
// weights, then scored on the same 600 held-out tasks (query MSE with 95%
// intervals) with its mean meta-step time.
//
//   algorithms [--algorithm maml,reptile,...] [--quick] [--out DIR] ...
//   algorithms --eval-only --checkpoint DIR/checkpoint.safetensors
#include <algorithm>
#include <functional>

#include <CLI/CLI.hpp>

#include "regression.hpp"

using namespace platipus;
using namespace examples;

namespace {

using Network = nn::Sequential;
using Loss = GaussianNllLoss;
using T = float;
using B = ExampleBackend;

using Algorithms = LearnerSet<Maml<Network, Loss, T, B>, Reptile<Network, Loss, T, B>,
                              MetaSgd<Network, Loss, T, B>, Anil<Network, Loss, T, B>,
                              MamlPlusPlus<Network, Loss, T, B>, Platipus<Network, Loss, T, B>>;

// Adds a learner of the paper's network and likelihood, initialised from init.
using Builder = std::function<void(Algorithms&, const std::string&, Generator&)>;
template <template <class, class, class, class> class Learner, class Settings>
Builder build(const Settings& settings) {
  return [settings](Algorithms& set, const std::string& name, Generator& init) {
    set.add(name, Learner<Network, Loss, T, B>(paper_network(), RegressionOptions::loss(), settings,
                                               init));
  };
}

// Every algorithm by name, in the table's order, with the options' shared
// settings: the inner loop and the driver's. A new algorithm is one more row
// (and its learner type in Algorithms).
std::vector<std::pair<std::string, Builder>> algorithm_table(const RegressionOptions& o) {
  const InnerLoop loop = o.maml().inner_loop;  // without MAML + noise's noise
  // Any learner's settings with the shared ones filled in.
  auto shared = [&]<class Settings>(Settings s) {
    s.inner_loop = loop;
    s.driver = o.driver();
    return s;
  };
  auto fomaml = o.maml();
  fomaml.first_order = true;
  // Antoniou et al.'s proportions for MAML++: the multi-step loss over the
  // first tenth of training, first order for the first third, the cosine
  // over all of it (unless --meta-learning-rate-annealing-steps says otherwise).
  const int steps = static_cast<int>(std::min(o.steps, 100'000'000L));
  auto mamlpp = shared(
      MamlPlusPlusSettings{.multi_step_loss_steps = steps / 10, .first_order_steps = steps / 3});
  mamlpp.driver = o.driver(steps);
  return {{"maml", build<Maml>(o.maml())},
          {"fomaml", build<Maml>(fomaml)},
          {"reptile", build<Reptile>(shared(ReptileSettings{}))},
          {"metasgd", build<MetaSgd>(shared(MetaSgdSettings{}))},
          {"anil", build<Anil>(shared(AnilSettings{}))},
          {"mamlpp", build<MamlPlusPlus>(mamlpp)},
          {"platipus", build<Platipus>(o.platipus())}};
}

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names;
  for (const auto& [name, builder] : algorithm_table(RegressionOptions{})) names.push_back(name);
  return names;
}

// The chosen algorithms' learners, in the table's order, each from the same
// initial weights.
Algorithms make_algorithms(const std::vector<std::string>& chosen, const RegressionOptions& o) {
  Algorithms set;
  for (const auto& [name, add] : algorithm_table(o)) {
    if (std::ranges::count(chosen, name) == 0) continue;
    Generator init(o.seed);
    add(set, name, init);
  }
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Every meta-learner of the library on 5-shot sinusoid-or-line regression: MAML, FOMAML, "
      "Reptile, Meta-SGD, ANIL, MAML++ and PLATIPUS side by side"};
  RegressionOptions options;
  options.add_flags(app);
  const std::vector<std::string> all_algorithms = algorithm_names();
  std::vector<std::string> chosen = all_algorithms;
  app.add_option("--algorithm", chosen, "the algorithms to run, comma-separated (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(all_algorithms));
  RunFlags flags("out/algorithms");
  flags.add_flags(app);
  CLI11_PARSE(app, argc, argv);
  flags.apply_quick(app, options);
  const auto& [out, checkpoint, quick, eval_only, eval_tasks, samples, no_plot] = flags;
  try {
    world();  // the ranks first: under NCCL each picks its GPU before other CUDA work
    options.threads = per_rank(options).threads;
    const fs::path dir(out);
    auto algorithms = make_algorithms(chosen, options);
    const nlohmann::json record_of_options = with_learners(options.json(), algorithms);
    nlohmann::json results = nlohmann::json::object(), trained;
    if (eval_only) {
      trained = load_learners(algorithms, checkpoint);
    } else {
      // Every algorithm sees the same task stream: MAML's in sine_line. A
      // diverged algorithm is a result, not the end of the run; it is
      // neither scored nor saved.
      check_memory(options, paper_network().layout().size());
      const Sampler sampler({.support = options.support, .query = options.query});
      const fs::path path = checkpoint_file(checkpoint, dir);
      const auto outcome = train(
          algorithms, sampler, options, dir, path, record_of_options,
          [](const std::string&) { return stream::maml_tasks; }, true);
      if (!is_root()) return 0;  // the other ranks of a distributed run only train
      for (const auto& [name, why] : outcome.diverged) results[name] = {{"diverged", why}};
      for (const auto& [name, seconds] : outcome.seconds)
        if (algorithms.contains(name))
          results[name]["meta_step_ms"] = 1000 * seconds / static_cast<double>(options.steps);
      if (!algorithms.empty()) {
        trained = {{"file", path.string()}, {"run_id", run_id()}};
        fmt::print(stderr, "saved {}\n", path.string());
      }
    }
    // The same held-out tasks for every algorithm; PLATIPUS draws `samples`
    // models per task, the others adapt one.
    for (const auto& [name, scores] :
         regression_scores(algorithms, eval_tasks, samples, options.seed))
      results[name].update(as_json(scores));
    nlohmann::json record{
        {"results", results}, {"options", record_of_options}, {"checkpoint", trained}};
    write_json(dir / "results.json", record);
    fmt::print("{} held-out tasks, 5 support and 100 query points (mean +- 95% interval)\n",
               eval_tasks);
    fmt::print("  {:<9} {:>16} {:>16} {:>16} {:>13}\n", "", "query MSE", "NLL per point",
               "90% coverage", "ms/meta-step");
    for (const auto& name : chosen) {
      const auto& r = results[name];
      if (r.contains("diverged")) {
        fmt::print("  {:<9} diverged\n", name);
        continue;
      }
      auto cell = [&](const char* key) {
        return Estimate{r[key]["mean"], r[key]["ci95"]}.text();
      };
      fmt::print("  {:<9} {:>16} {:>16} {:>16} {:>13}\n", name, cell("mse"), cell("nll"),
                 cell("coverage90"),
                 r.contains("meta_step_ms") ? fmt::format("{:.2f}", r["meta_step_ms"].get<double>())
                                            : "-");
    }
    fmt::print("wrote {}/results.json{}\n", out, eval_only ? "" : ", train.jsonl, train.csv");
  } catch (...) {
    return report_failure("algorithms");
  }
}
