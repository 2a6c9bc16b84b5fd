// Every meta-learner of the library on the PLATIPUS paper's 5-shot
// sinusoid-or-line regression (sine_line's tasks, network, likelihood and
// inner loop): MAML, first-order MAML, Reptile, Meta-SGD, ANIL, MAML++ and
// PLATIPUS, each trained on the same task stream from the same initial
// weights, then scored on the same 600 held-out tasks (query MSE with 95%
// intervals) with its mean meta-step time.
//
//   algorithms [--algorithm maml,reptile,...] [--quick] [--out DIR] ...
//   algorithms --eval-only --checkpoint DIR/checkpoint.safetensors
#include <deque>
#include <map>

#include <CLI/CLI.hpp>

#include "regression.hpp"

using namespace platipus;
using namespace examples;

namespace {

using Network = nn::Sequential;
using Loss = GaussianNllLoss;
using T = float;
using B = ExampleBackend;

const std::vector<std::string> all_algorithms{"maml", "fomaml", "reptile", "metasgd",
                                              "anil", "mamlpp", "platipus"};

// What a run does with each algorithm's learner: train it or load it, then
// score it; the tensors to save are collected on the way.
struct Run {
  const RegressionOptions& options;
  bool eval_only;
  std::string checkpoint;  // the file --eval-only reads
  long eval_tasks, samples;
  io::MetricsLog* log;  // null with --eval-only
  std::optional<io::Checkpoint<T, B>> loaded = {};
  std::deque<Tensor<T, B>> saved = {};  // stable addresses for save_checkpoint
  std::vector<std::pair<std::string, const Tensor<T, B>*>> named = {};
  nlohmann::json results = nlohmann::json::object();

  template <class Learner>
  void operator()(const std::string& name, Learner learner) {
    double step_ms = 0;
    if (eval_only) {
      if (!loaded) loaded = io::load_checkpoint<T, B>(checkpoint);
      for (const auto& [part, tensor] : learner.state())
        learner.set_state(part, io::take(*loaded, checkpoint, learner.model().layout(),
                                         name + "/" + part, tensor->shape()));
    } else {
      // Every algorithm sees the same task stream: MAML's in sine_line.
      learner.distribute(shared_world());
      try {
        step_ms = 1000 * train_learner(*log, name, learner, sampler(), options, 1) /
                  static_cast<double>(options.steps);
      } catch (const divergence& e) {  // a diverged algorithm is a result, not the end of the run
        fmt::print(stderr, "{}\n", e.what());
        results[name] = {{"diverged", e.what()}};
        return;
      }
      if (!is_root()) return;  // rank 0 scores and saves
      for (const auto& [part, tensor] : learner.state())
        named.emplace_back(name + "/" + part, &saved.emplace_back(tensor->clone()));
    }
    results[name] = score(learner);
    if (!eval_only) results[name]["meta_step_ms"] = step_ms;
  }

  Sampler sampler() const { return Sampler({.support = options.support, .query = options.query}); }

  // Query MSE, NLL and 90% coverage on the held-out tasks (the same tasks for
  // every algorithm); PLATIPUS draws `samples` models per task, the others adapt one.
  template <class Learner>
  nlohmann::json score(const Learner& learner) const {
    const Sampler held_out({.support = 5, .query = 100});
    Generator gen(options.seed, 3);
    std::vector<RegressionScores> scores;
    for (long done = 0; done < eval_tasks; done += 100) {
      const auto batch = held_out.sample(std::min(100L, eval_tasks - done), gen);
      constexpr bool sampled = std::is_same_v<Learner, Platipus<Network, Loss, T, B>>;
      const long models = sampled ? samples : 1;
      Tensor<T, B> params;
      if constexpr (sampled)
        params = learner.sample(batch.support_x, batch.support_y, models, gen);
      else
        params = learner.adapt_to(batch.support_x, batch.support_y, gen);
      const auto p = learner.predict(params, batch.query_x).to_vector();
      const auto q = batch.query_y.to_vector();
      const std::vector<double> predictions(p.begin(), p.end()), y(q.begin(), q.end());
      const long n = batch.query_x.dim(1);
      for (long t = 0; t < batch.tasks(); ++t)
        scores.push_back(score_regression(
            std::span(predictions)
                .subspan(static_cast<std::size_t>(t * models * n),
                         static_cast<std::size_t>(models * n)),
            std::span(y).subspan(static_cast<std::size_t>(t * n), static_cast<std::size_t>(n)),
            RegressionOptions::noise_std()));
    }
    return {{"mse", as_json(estimate_of(scores, &RegressionScores::mse))},
            {"nll", as_json(estimate_of(scores, &RegressionScores::nll))},
            {"coverage90", as_json(estimate_of(scores, &RegressionScores::coverage))}};
  }
};

// Trains (or loads) and scores each chosen algorithm with the options'
// shared settings: the inner loop, the meta optimiser, threads and chunks.
void run_algorithms(const std::vector<std::string>& chosen, const RegressionOptions& o, Run& run) {
  const Network network = paper_network();
  const Loss loss = RegressionOptions::loss();
  const InnerLoop loop = o.maml().inner_loop;  // without MAML + noise's noise
  const optim::AdamSettings adam = o.meta_optimizer();
  auto has = [&](const std::string& name) {
    return std::find(chosen.begin(), chosen.end(), name) != chosen.end();
  };
  auto init = [&] {
    return Generator(o.seed);
  };  // the same initial weights for all
  if (has("maml")) {
    Generator g = init();
    run("maml", Maml<Network, Loss, T, B>(network, loss, o.maml(), g));
  }
  if (has("fomaml")) {
    Generator g = init();
    auto settings = o.maml();
    settings.first_order = true;
    run("fomaml", Maml<Network, Loss, T, B>(network, loss, settings, g));
  }
  // Any learner's settings with the shared four filled in.
  auto shared = [&]<class Settings>(Settings s) {
    s.inner_loop = loop;
    s.meta_optimizer = adam;
    s.threads = o.threads;
    s.task_chunks = o.task_chunks;
    return s;
  };
  if (has("reptile")) {
    Generator g = init();
    run("reptile", Reptile<Network, Loss, T, B>(network, loss, shared(ReptileSettings{}), g));
  }
  if (has("metasgd")) {
    Generator g = init();
    run("metasgd", MetaSgd<Network, Loss, T, B>(network, loss, shared(MetaSgdSettings{}), g));
  }
  if (has("anil")) {
    Generator g = init();
    run("anil", Anil<Network, Loss, T, B>(network, loss, shared(AnilSettings{}), g));
  }
  if (has("mamlpp")) {
    // Antoniou et al.'s proportions: the multi-step loss over the first tenth
    // of training, first order for the first third, the cosine over all of
    // it (unless --meta-learning-rate-annealing-steps says otherwise).
    Generator g = init();
    const int steps = static_cast<int>(std::min(o.steps, 100'000'000L));
    auto settings = shared(
        MamlPlusPlusSettings{.multi_step_loss_steps = steps / 10, .first_order_steps = steps / 3});
    settings.meta_optimizer = o.meta_optimizer(steps);
    run("mamlpp", MamlPlusPlus<Network, Loss, T, B>(network, loss, settings, g));
  }
  if (has("platipus")) {
    Generator g = init();
    run("platipus", Platipus<Network, Loss, T, B>(network, loss, o.platipus(), g));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Every meta-learner of the library on 5-shot sinusoid-or-line regression: MAML, FOMAML, "
      "Reptile, Meta-SGD, ANIL, MAML++ and PLATIPUS side by side"};
  RegressionOptions options;
  options.add_flags(app);
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
    if (!eval_only) announce_ranks(options);
    const fs::path dir(out);
    if (!eval_only) check_memory(options, paper_network().layout().size());
    std::optional<io::MetricsLog> log;
    if (!eval_only) log.emplace(dir, "train");
    Run run{.options = options,
            .eval_only = eval_only,
            .checkpoint = checkpoint,
            .eval_tasks = eval_tasks,
            .samples = samples,
            .log = log ? &*log : nullptr};
    run_algorithms(chosen, options, run);
    if (!is_root()) return 0;  // the other ranks of a distributed run only train
    nlohmann::json record{{"results", run.results}, {"options", options.json()}};
    if (!eval_only) {
      const fs::path path = checkpoint_file(checkpoint, dir);
      io::save_checkpoint(path, paper_network().layout(), run.named,
                          {{"options", options.json()}, {"run_id", run_id()}});
      record["checkpoint"] = {{"file", path.string()}, {"run_id", run_id()}};
      fmt::print(stderr, "saved {}\n", path.string());
    } else {
      record["checkpoint"] = {{"file", checkpoint},
                              {"run_id", run.loaded->metadata.value("run_id", "")}};
    }
    write_json(dir / "results.json", record);
    fmt::print("{} held-out tasks, 5 support and 100 query points (mean +- 95% interval)\n",
               eval_tasks);
    fmt::print("  {:<9} {:>16} {:>16} {:>16} {:>13}\n", "", "query MSE", "NLL per point",
               "90% coverage", "ms/meta-step");
    for (const auto& name : chosen) {
      const auto& r = run.results[name];
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
