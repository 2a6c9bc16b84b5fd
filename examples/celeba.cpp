// Ambiguous 5-shot CelebA, the paper's Table 1 (Finn, Xu, Levine 2018,
// Section 5 and Appendix A): MAML, MAML + noise and PLATIPUS at two KL
// weights meta-train on two-attribute tasks with MAML's conv4 (32 filters,
// RGB, size x size), then meet ambiguous test tasks: five faces with three
// test attributes against five with none of them (of their converse), which
// the three two-attribute tasks of the pairs explain equally well. Each
// learner samples --samples models per task (Algorithm 2; MAML + noise's
// noisy adaptations; MAML's one solution) and each model goes to the
// candidate where its likelihood is highest (meta/scores/ambiguity.hpp):
// coverage, accuracy and the NLL of --likelihood-samples models, with 95%
// intervals over --eval-tasks tasks. Writes results.json, table1.md and
// figure.json (the paper's Figure 8: a task, its candidates and the labels
// of the sampled classifiers that fit each best; plots/celeba.py draws it).
//
//   celeba --data-dir DIR [--size 84] [--steps 20000] [--quick] [--out DIR] ...
//   celeba --data-dir DIR --eval-only --checkpoint DIR/checkpoint.safetensors
#include <cmath>
#include <set>

#include "few_shot_images.hpp"

namespace {

using namespace examples;
namespace data = platipus::data;
using Loss = platipus::SoftmaxCrossEntropyLoss;
using CelebaLearners = Learners<Loss>;

struct CelebaOptions : FewShotOptions {
  long size = 84;
  std::string kl_weights = "0.05,0.15";
  data::CelebaTaskRule rule = data::CelebaTaskRule::converse;
  long likelihood_samples = 100;

  void add_flags(CLI::App& app) {
    FewShotOptions::add_flags(app, "PLATIPUS_CELEBA_DIR");
    app.remove_option(app.get_option("--ways"));  // two classes: a setting and its converse
    app.remove_option(app.get_option("--strided"));
    app.remove_option(app.get_option("--kl-weight"));  // --kl-weights: one PLATIPUS per weight
    app.add_option("--size", size, "images are cropped and resized to size x size")
        ->check(CLI::Range(16L, 1'024L));
    app.add_option("--kl-weights", kl_weights,
                   "PLATIPUS's KL weights, one learner each (Table 1: 0.05 and 0.15)")
        ->check([](const std::string& text) -> std::string {
          const auto weights = split_list(text);
          if (weights.empty()) return "no KL weight given";
          std::set<double> seen;
          for (const auto& w : weights) {
            char* end = nullptr;
            const double value = std::strtod(w.c_str(), &end);
            if (*end != '\0' || !std::isfinite(value) || value < 0)
              return fmt::format("'{}' is not a finite KL weight >= 0", w);
            if (!seen.insert(value).second) return fmt::format("KL weight {} given twice", w);
          }
          return "";
        });
    app.add_option("--task-rule", rule,
                   "training tasks: converse (Appendix A: a setting of two attributes against "
                   "its converse) or both_or_neither (Section 5: both against neither)")
        ->transform(CLI::CheckedTransformer(std::map<std::string, data::CelebaTaskRule>{
            {"converse", data::CelebaTaskRule::converse},
            {"both_or_neither", data::CelebaTaskRule::both_or_neither}}));
    app.add_option("--likelihood-samples", likelihood_samples,
                   "models per task of the marginal likelihood (the NLL; the paper's 100)")
        ->check(CLI::Range(1L, 10'000L));
  }

  std::vector<double> weights() const {
    std::vector<double> out;
    for (const auto& w : split_list(kl_weights)) out.push_back(std::stod(w));
    return out;
  }

  nlohmann::json json() const {
    auto j = FewShotOptions::json();
    j.erase("ways");
    j.erase("strided");
    j["size"] = size;
    j["task_rule"] = rule == data::CelebaTaskRule::converse ? "converse" : "both_or_neither";
    j["likelihood_samples"] = likelihood_samples;
    return j;
  }
};

// Table 1's rows: MAML, MAML + noise and one PLATIPUS per KL weight
// ("platipus_kl0.05"), each from the same initial weights.
CelebaLearners make_rows(const platipus::nn::Sequential& network, const CelebaOptions& o) {
  auto chosen = FewShotOptions::split_list(o.learners);
  const bool platipus = std::erase(chosen, "platipus") > 0;
  auto rows = paper_learners(network, Loss{}, o, chosen);
  if (platipus)
    for (const double weight : o.weights()) {
      auto settings = o.platipus();
      settings.kl_weight = weight;
      platipus::Generator init(o.seed);
      rows.add(fmt::format("platipus_kl{}", weight),
               PlatipusLearner<Loss>(network, Loss{}, settings, init));
    }
  return rows;
}

// The paper's Table 1, for table1.md.
constexpr std::array<std::array<const char*, 4>, 4> paper{{
    {"maml", "89.00 +- 1.78 %", "1.00 +- 0.0", "0.73 +- 0.06"},
    {"maml_noise", "84.3 +- 1.60 %", "1.89 +- 0.04", "0.68 +- 0.05"},
    {"platipus_kl0.05", "88.34 +- 1.06 %", "1.59 +- 0.03", "0.67 +- 0.05"},
    {"platipus_kl0.15", "87.8 +- 1.03 %", "1.94 +- 0.04", "0.56 +- 0.04"},
}};

std::string table_markdown(const nlohmann::json& results, const CelebaLearners& rows, long shots,
                           long tasks) {
  std::string md = fmt::format(
      "Ambiguous CelebA ({}-shot), {} test tasks; mean +- 95% interval over tasks\n\n"
      "| learner | accuracy | coverage (max 3) | average NLL | paper: accuracy | coverage | NLL |\n"
      "|---|---|---|---|---|---|---|\n",
      shots, tasks);
  for (const auto& name : rows.names()) {
    const auto& r = results[name];
    const auto cell = [&](const char* key) {
      return Estimate{r[key]["mean"], r[key]["ci95"]}.text();
    };
    const auto* theirs = std::ranges::find_if(paper, [&](const auto& p) { return p[0] == name; });
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", name, cell("accuracy"),
                      cell("coverage"), cell("nll"), theirs != paper.end() ? (*theirs)[1] : "",
                      theirs != paper.end() ? (*theirs)[2] : "",
                      theirs != paper.end() ? (*theirs)[3] : "");
  }
  return md;
}

// Figure 8's data for the first ambiguous task: its support images and
// labels; for each candidate its name, query images and labels, and the
// labels that the sampled model which fits it best gives its queries.
template <class Learner>
nlohmann::json figure_data(const Learner& learner, const std::string& name,
                           const platipus::AmbiguousTasks<float, ExampleBackend>& tasks,
                           long samples, std::uint64_t seed) {
  using platipus::Shape;
  const auto first = [](const platipus::Tensor<float, ExampleBackend>& t) {
    return platipus::raw::slice(t, 0, 0, 1);
  };
  const auto pixels = [](const platipus::Tensor<float, ExampleBackend>& x) {
    std::vector<int> out;
    for (const float v : x.to_vector()) out.push_back(static_cast<int>(std::lround(v * 255)));
    return out;
  };
  const auto sx = first(tasks.support_x), sy = first(tasks.support_y);
  const Shape image = sx.shape().drop_front(2);
  platipus::Generator gen(seed, stream::celeba_figure);
  const auto params = learner.sample(sx, sy, samples, gen);  // [1, S, P]
  const auto size = learner.model().layout().size();
  nlohmann::json figure{
      {"learner", name},
      {"task", tasks.names[0]},
      {"image_shape", std::vector<std::int64_t>(image.dims().begin(), image.dims().end())},
      {"support", pixels(sx)},
      {"support_labels", sy.to_vector()},
      {"candidates", nlohmann::json::array()}};
  for (std::size_t c = 0; c < tasks.candidate_x.size(); ++c) {
    const auto qx = first(tasks.candidate_x[c]);
    const auto y = first(tasks.candidate_y[c]).to_vector();
    double best = -INFINITY;
    std::vector<int> best_labels;
    for (long s = 0; s < samples; ++s) {
      const auto logits =
          learner.predict(platipus::raw::slice(params, 1, s, 1).reshaped(Shape{1, size}), qx)
              .to_vector();
      double log_likelihood = 0;
      std::vector<int> labels;
      for (std::size_t n = 0; n < y.size(); ++n) {
        const double l0 = logits[2 * n], l1 = logits[2 * n + 1];
        log_likelihood -= std::log1p(std::exp(y[n] == 1 ? l0 - l1 : l1 - l0));
        labels.push_back(l1 > l0);
      }
      if (log_likelihood > best) best = log_likelihood, best_labels = labels;
    }
    figure["candidates"].push_back({{"task", tasks.candidate_names[0][c]},
                                    {"images", pixels(qx)},
                                    {"labels", y},
                                    {"predicted", best_labels}});
  }
  return figure;
}

}  // namespace

int main(int argc, char** argv) {
  CelebaOptions o;
  // MAML's MiniImagenet settings for the same network (Appendix B adapts
  // MAML's conv4): 5 inner steps of 0.01, meta-batch 4, Adam 1e-3; 5 shots
  // and 15 queries per class. PLATIPUS anneals its KL weight up over the
  // first 10,000 steps (Appendix B: "which we anneal towards during
  // training"), averages the query likelihood over a task's points, and
  // starts its gammas at alpha; MAML + noise moves the weights by about
  // 0.03 over 5 steps, as in the other image examples.
  o.ways = 2;
  o.shots = 5;
  o.queries = 15;
  o.eval_queries = 15;
  o.filters = 32;
  o.meta_batch = 4;
  o.inner_loop.steps = 5;
  o.inner_loop.learning_rate = 0.01;
  o.kl_anneal_steps = 10'000;
  o.gamma = 0.01;
  o.query_reduction = platipus::Reduction::mean;
  o.inner_loop.gradient_noise = 1.5;
  o.learners = "maml,maml_noise,platipus";
  CLI::App app{
      "Ambiguous CelebA: MAML, MAML + noise and PLATIPUS, coverage of the candidate "
      "tasks (Finn, Xu, Levine 2018, Table 1)"};
  o.add_flags(app);
  RunFlags run("out/celeba");
  run.eval_tasks = 200;
  run.samples = 15;
  run.add_flags(app);
  CLI11_PARSE(app, argc, argv);
  // --quick: each of the four learners' 20 steps takes seconds at 84 x 84, and
  // scoring a test task with 100 likelihood samples over two minutes.
  run.apply_quick(app, o, 20, 4);
  if (run.quick && app.count("--likelihood-samples") == 0) o.likelihood_samples = 10;
  const fs::path root = data_directory(o.data_dir, "PLATIPUS_CELEBA_DIR");
  if (root.empty() || !fs::is_directory(root)) {
    fmt::print(stderr,
               "celeba: no data: give --data-dir or set PLATIPUS_CELEBA_DIR to a folder with "
               "img_align_celeba/, list_attr_celeba.txt and list_eval_partition.txt{}\n",
               root.empty() ? "" : fmt::format(" ({} is not a directory)", root.string()));
    return missing_data;
  }
  try {
    world();  // the ranks first: under NCCL each picks its GPU before other CUDA work
    const fs::path dir(run.out);
    const auto cache = cache_options(o);
    const auto split = [&](const std::string& name) {
      data::CacheReport report;
      auto loaded = data::load_celeba(root, name, cache, &report, o.size);
      report_cache(fmt::format("celeba {}", name), report);
      return loaded;
    };
    const data::AmbiguousCelebaSampler<float, ExampleBackend> test(
        split("test"), {.shots = o.shots, .queries = o.eval_queries, .rule = o.rule});
    const auto network =
        platipus::nn::conv4({.channels = 3, .size = o.size, .filters = o.filters, .outputs = 2});
    const TrainingOptions rank_options = per_rank(o);
    CelebaOptions trained = o;
    static_cast<TrainingOptions&>(trained) = rank_options;
    auto rows = make_rows(network, trained);
    nlohmann::json checkpoint;
    if (run.eval_only) {
      checkpoint = load_learners(rows, run.checkpoint);
    } else {
      const data::CelebaTaskSampler<float, ExampleBackend> tasks(
          split("train"), {.shots = o.shots, .queries = o.training_queries(), .rule = o.rule});
      if (is_root())
        fmt::print(stderr, "celeba: {} training tasks, {} ambiguous test tasks\n",
                   tasks.tasks().size(), test.task_count());
      checkpoint = train_and_save(rows, tasks, rank_options, run.checkpoint, dir, o.json());
    }
    if (!is_root()) return 0;
    // Every learner meets the same ambiguous tasks (one stream), drawing its
    // models from a stream of its own.
    platipus::Generator tasks_gen(o.seed, stream::held_out_episodes);
    std::map<std::string, std::vector<platipus::AmbiguityScores>> scores;
    nlohmann::json figure;
    std::map<std::string, platipus::Generator> draws;
    std::uint64_t platipus_rows = 0;  // before this row
    for (const auto& name : rows.names()) {
      draws.emplace(name, platipus::Generator(o.seed, stream::models(name, platipus_rows)));
      if (name.starts_with("platipus")) ++platipus_rows;
    }
    // Four tasks at once at 32 x 32; one at MiniImagenet's size, where 15
    // models adapting to one task's 10 faces already take gigabytes.
    const long chunk = o.size > 48 ? 1 : 4;
    Progress progress("evaluating", run.eval_tasks);
    for (long done = 0; done < run.eval_tasks; done += chunk) {
      const auto sets = test.sample(std::min(chunk, run.eval_tasks - done), tasks_gen);
      rows.for_each([&](const std::string& name, const auto& learner) {
        // MAML's S copies of one solution score as that one model does.
        const bool one = !learner.adapts_randomly();
        const auto s = platipus::evaluate_ambiguity(
            learner, sets,
            {.assignment = one ? 1 : run.samples, .likelihood = one ? 1 : o.likelihood_samples},
            draws.at(name));
        auto& all = scores[name];
        all.insert(all.end(), s.begin(), s.end());
        if (done == 0 && name.starts_with("platipus") && figure.is_null())
          figure = figure_data(learner, name, sets, run.samples, o.seed);
      });
      progress.update(std::min(done + chunk, run.eval_tasks), "tasks");
    }
    nlohmann::json results{{"tasks", run.eval_tasks},
                           {"samples", run.samples},
                           {"likelihood_samples", o.likelihood_samples}};
    for (const auto& [name, s] : scores)
      results[name] = {{"accuracy", as_json(estimate(s, &platipus::AmbiguityScores::accuracy))},
                       {"coverage", as_json(estimate(s, &platipus::AmbiguityScores::coverage))},
                       {"nll", as_json(estimate(s, &platipus::AmbiguityScores::nll))}};
    write_json(dir / "results.json", {{"results", results},
                                      {"options", with_learners(o.json(), rows)},
                                      {"checkpoint", checkpoint}});
    const auto md = table_markdown(results, rows, o.shots, run.eval_tasks);
    platipus::write_file_atomically(dir / "table1.md", md);
    if (!figure.is_null()) write_json(dir / "figure.json", figure);
    fmt::print("{}", md);
    fmt::print("wrote {}/results.json, table1.md{}{}\n", run.out,
               figure.is_null() ? "" : ", figure.json",
               run.eval_only ? "" : ", train.jsonl, train.csv");
    if (!figure.is_null()) run.plot("celeba", dir);
    return 0;
  } catch (...) {
    return report_failure("celeba");
  }
}
