// What the image examples (omniglot, miniimagenet) share: the N-way K-shot
// flags, the data and cache directories, and the evaluation of Table 2
// (accuracy on held-out test episodes, with NLL and calibration, 95%
// intervals over episodes).
#pragma once

#include <cstdlib>
#include <functional>
#include <map>
#include <span>
#include <sstream>

#include "platipus/images.hpp"
#include "training.hpp"

namespace examples {

// Exit status of an example whose data is absent: ctest's "skipped" (and
// automake's), so that a test without the data skips rather than fails.
constexpr int missing_data = 77;

struct FewShotOptions : TrainingOptions {
  long ways = 5, shots = 1;
  long queries = 0;        // per class in training; 0: as many as shots (MAML's)
  long eval_queries = 15;  // per class in the held-out episodes
  long filters = 64;
  bool strided = false;  // MAML's Omniglot network: stride-2 convolutions, no pooling
  std::string learners = "maml,platipus";
  std::string data_dir, cache_dir;

  void add_flags(CLI::App& app, const std::string& data_variable) {
    TrainingOptions::add_flags(app);
    app.add_option("--ways", ways, "N: classes per task")->check(CLI::Range(2L, 1'000L));
    app.add_option("--shots", shots, "K: support images per class")->check(CLI::Range(1L, 1'000L));
    app.add_option("--queries", queries,
                   "query images per class in training (0: as many as --shots, as MAML)")
        ->check(CLI::Range(0L, 1'000L));
    app.add_option("--eval-queries", eval_queries, "query images per class in held-out episodes")
        ->check(CLI::Range(1L, 1'000L));
    app.add_option("--filters", filters, "filters of each convolution")
        ->check(CLI::Range(1L, 4'096L));
    app.add_flag("--strided", strided, "stride-2 convolutions instead of max pooling");
    app.add_option("--learners", learners,
                   "the learners to train and evaluate, from maml, maml_noise and platipus")
        ->check([](const std::string& text) -> std::string {
          for (const auto& name : split_list(text))
            if (name != "maml" && name != "maml_noise" && name != "platipus")
              return fmt::format("unknown learner '{}' (maml, maml_noise, platipus)", name);
          return split_list(text).empty() ? "no learner named" : "";
        });
    app.add_option("--data-dir", data_dir,
                   fmt::format("the data set's directory (default: ${})", data_variable));
    app.add_option("--cache-dir", cache_dir,
                   "where decoded images are cached (default: $PLATIPUS_CACHE_DIR, else "
                   "$XDG_CACHE_HOME/platipus or ~/.cache/platipus)");
  }

  // After parsing.
  long training_queries() const { return queries > 0 ? queries : shots; }

  static std::vector<std::string> split_list(const std::string& text) {
    std::vector<std::string> names;
    std::stringstream in(text);
    for (std::string name; std::getline(in, name, ',');)
      if (!name.empty()) names.push_back(name);
    return names;
  }

  platipus::nn::Sequential network(std::int64_t channels, std::int64_t size) const {
    return platipus::nn::conv4({.channels = channels,
                                .size = size,
                                .filters = filters,
                                .outputs = ways,
                                .strided = strided});
  }

  nlohmann::json json() const {
    auto j = TrainingOptions::json();
    j["ways"] = ways;
    j["shots"] = shots;
    j["queries"] = training_queries();
    j["eval_queries"] = eval_queries;
    j["filters"] = filters;
    j["strided"] = strided;
    return j;
  }
};

// --data-dir, else the environment variable, else empty (the caller exits
// with missing_data after saying what it looked for).
inline fs::path data_directory(const std::string& flag, const char* variable) {
  if (!flag.empty()) return flag;
  const char* value = std::getenv(variable);
  return value != nullptr ? fs::path(value) : fs::path();
}

// Decoding progress while a cache is built, on stderr.
inline platipus::data::CacheOptions cache_options(const FewShotOptions& o) {
  auto progress = std::make_shared<std::unique_ptr<Progress>>();
  return {.directory = o.cache_dir,
          .threads = o.threads,
          .progress = [progress](std::int64_t done, std::int64_t total) {
            if (!*progress) *progress = std::make_unique<Progress>("decoding", total);
            (*progress)->update(done, "images");
            if (done == total) progress->reset();  // the next split starts its own
          }};
}

// Says where a split came from and how long it took.
inline void report_cache(const std::string& what, const platipus::data::CacheReport& r) {
  fmt::print(stderr, "{}: {} {} in {:.2f} s{}\n", what, r.built ? "built" : "read", r.file.string(),
             r.seconds, r.built ? fmt::format(" ({})", r.reason) : "");
}

// Table 2's protocol: each chosen learner adapts to `episodes` held-out
// episodes (chunk at a time, so that memory stays small) and is scored on
// their query images; MAML with its one adapted model, MAML + noise and
// PLATIPUS with the mean softmax of `samples` sampled models. Returns
// {learner: {accuracy, nll, ece}} with means and 95% intervals over episodes.
template <class Loss, class Sampler>
nlohmann::json evaluate_episodes(const Learners<Loss>& learners, const Sampler& sampler,
                                 long episodes, long samples, long chunk, std::uint64_t seed) {
  // The episodes from one stream, each learner's models from a stream of its
  // own: every learner meets the same episodes whichever learners a run
  // chose, so runs of one learner each can be compared episode by episode.
  const auto scores = score_learners<platipus::ClassificationScores>(
      learners, seed, stream::held_out_episodes,
      [&](const auto& learner, platipus::Generator& task_draws, platipus::Generator& model_draws) {
        Progress progress("evaluating", episodes);
        return platipus::held_out_classification(learner, sampler,
                                                 {.tasks = episodes,
                                                  .samples = samples,
                                                  .batch = chunk,
                                                  .progress =
                                                      [&](std::int64_t done) {
                                                        progress.update(done, "episodes");
                                                      }},
                                                 task_draws, model_draws);
      });
  nlohmann::json results{{"episodes", episodes}, {"samples", samples}};
  for (const auto& [learner, s] : scores) results[learner] = as_json(s);
  return results;
}

// One row per evaluated learner: accuracy, NLL and ECE.
inline void print_episode_scores(const nlohmann::json& results) {
  fmt::print("  {:<11} {:>16} {:>16} {:>16}\n", "", "accuracy", "NLL per query", "ECE");
  for (const char* learner : {"maml", "maml_noise", "platipus"}) {
    if (!results.contains(learner)) continue;
    fmt::print("  {:<11}", learner);
    for (const char* key : {"accuracy", "nll", "ece"})
      fmt::print(" {:>16}",
                 Estimate{results[learner][key]["mean"], results[learner][key]["ci95"]}.text());
    fmt::print("\n");
  }
}

}  // namespace examples

namespace examples {

// An image example: its data set, its splits and MAML's settings for it.
struct FewShotProgram {
  std::string name, description, data_variable, layout;
  std::string train_split, test_split;
  std::int64_t channels = 1, size = 28;
  long evaluation_chunk = 20;  // held-out episodes adapted at once
  std::function<platipus::data::FewShotSplit(const fs::path&, std::string_view,
                                             const platipus::data::CacheOptions&,
                                             platipus::data::CacheReport*)>
      load;
};

// The whole program: flags, data, training or the checkpoint, evaluation,
// results.json.
inline int few_shot_main(const FewShotProgram& p, FewShotOptions o, int argc, char** argv) {
  namespace data = platipus::data;
  CLI::App app{p.description};
  o.add_flags(app, p.data_variable);
  RunFlags run("out/" + p.name);
  run.add_flags(app);
  CLI11_PARSE(app, argc, argv);
  run.apply_quick(app, o, 20, 20);
  const auto& [out, checkpoint, quick, eval_only, eval_tasks, samples, no_plot] = run;
  const fs::path root = data_directory(o.data_dir, p.data_variable.c_str());
  if (root.empty() || !fs::is_directory(root)) {
    fmt::print(stderr, "{}: no data: give --data-dir or set {} to a folder with {}{}\n", p.name,
               p.data_variable, p.layout,
               root.empty() ? "" : fmt::format(" ({} is not a directory)", root.string()));
    return missing_data;
  }
  try {
    world();  // the ranks first: under NCCL each picks its GPU before other CUDA work
    const fs::path dir(out);
    const auto cache = cache_options(o);
    const auto sampler = [&](const std::string& split, long queries) {
      data::CacheReport report;
      auto images = p.load(root, split, cache, &report);
      report_cache(fmt::format("{} {}", p.name, split), report);
      return data::FewShotSampler<float, ExampleBackend>(
          std::move(images), {.ways = o.ways, .shots = o.shots, .queries = queries});
    };
    const auto test = sampler(p.test_split, o.eval_queries);
    const auto network = o.network(p.channels, p.size);
    const auto chosen = FewShotOptions::split_list(o.learners);
    const auto [learners, trained] = eval_only
                                         ? prepare(network, platipus::SoftmaxCrossEntropyLoss{},
                                                   test, o, true, checkpoint, dir, o.json(), chosen)
                                         : prepare(network, platipus::SoftmaxCrossEntropyLoss{},
                                                   sampler(p.train_split, o.training_queries()), o,
                                                   false, checkpoint, dir, o.json(), chosen);
    if (!is_root()) return 0;  // the other ranks of a distributed run only train
    const auto results =
        evaluate_episodes(learners, test, eval_tasks, samples, p.evaluation_chunk, o.seed);
    write_json(dir / "results.json", {{"results", results},
                                      {"options", with_learners(o.json(), learners)},
                                      {"checkpoint", trained}});
    fmt::print(
        "{}-way {}-shot {}, {} {} episodes of {} queries per class ({} inner steps; mean +- 95% "
        "interval)\n",
        o.ways, o.shots, p.name, eval_tasks, p.test_split, o.eval_queries,
        o.inner_loop.evaluation_steps.value_or(o.inner_loop.steps));
    print_episode_scores(results);
    fmt::print("wrote {}/results.json{}\n", out, eval_only ? "" : ", train.jsonl, train.csv");
    if (!eval_only) run.plot("few_shot", dir);
    return 0;
  } catch (...) {
    return report_failure(p.name);
  }
}

}  // namespace examples
