// The paper's three learners (MAML, MAML + noise, PLATIPUS) as the examples
// build, train, save and load them: the training flags, the memory checks
// before training, the spread over ranks and threads, and train-or-load.
#pragma once

#include <algorithm>
#include <csignal>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "common.hpp"
#include "platipus/core/stop_signals.hpp"
#include "platipus/io/checkpoint.hpp"
#include "platipus/io/metrics.hpp"
#include "platipus/io/settings_json.hpp"
#include "platipus/io/training_run.hpp"
#include "platipus/platipus.hpp"

namespace examples {

// The meta-training settings every example exposes as flags. The inner step
// size and the KL weight have no common default: the paper's differ between
// regression and classification, so each example sets them.
struct TrainingOptions {
  long steps = 20000;    // meta-training steps of each learner
  long meta_batch = 25;  // tasks per meta-step
  // The paper's 5 steps; gradient_noise is MAML + noise's alone (MAML and
  // PLATIPUS adapt without it). Each task's inner gradient is clipped to norm
  // 1e4, three times the largest seen in healthy training, so that a fixed
  // step cannot diverge on a high-amplitude task (docs/results.md, "Seed 3").
  platipus::InnerLoop inner_loop{.steps = 5, .learning_rate = 0, .max_gradient_norm = 1e4};
  double kl_weight = 0;
  long kl_anneal_steps = 0;  // the appendix anneals towards the KL weight; 0: constant
  // PLATIPUS's query likelihood: summed over the points (the ELBO) or averaged.
  platipus::Reduction query_reduction = platipus::Reduction::sum;
  // PLATIPUS's step 6 (PlatipusSettings::prior_likelihood_weight); 0: the paper's objective.
  double prior_likelihood_weight = 0;
  // The points of PLATIPUS's posterior step (PlatipusSettings::posterior_data).
  platipus::PosteriorData posterior_data = platipus::PosteriorData::query;
  double meta_learning_rate = 1e-3;
  // Cosine annealing of the meta learning rate to min(1e-5, meta_learning_rate)
  // over this many steps (AdamSettings::annealing_steps); 0: constant. Unset:
  // each learner's default, constant but for MAML++ (over all of `steps`).
  std::optional<long> meta_learning_rate_annealing_steps;
  double prior_variance = 0.001, posterior_variance = 0.001, gamma = 0;
  int threads = 0;
  int task_chunks = 0;  // as MamlSettings::task_chunks
  std::uint64_t seed = 1;
  bool force = false;  // train even when the memory check says the machine is too small
  // Steps between two saves of the run's training state; 0: at every
  // metrics record (200 per learner), so a kill loses at most 0.5% of a run.
  long checkpoint_every = 0;
  bool resume = false;  // go on from the run's checkpoint where it stopped

  void add_flags(CLI::App& app) {
    // Every number has a range: outside it a run would abort on memory, run
    // for ever or silently narrow a value (README.md, "The examples").
    app.add_option("--steps", steps, "meta-training steps of each learner")
        ->check(CLI::Range(1L, 100'000'000L));
    app.add_option("--meta-batch", meta_batch, "tasks per meta-step")
        ->check(CLI::Range(1L, 10'000L));
    app.add_option("--inner-steps", inner_loop.steps, "SGD steps of the inner loop")
        ->check(CLI::Range(0, 1'000));
    app.add_option("--inner-evaluation-steps", inner_loop.evaluation_steps,
                   "inner steps when adapting to a held-out task (default: --inner-steps)")
        ->check(CLI::Range(0, 1'000));
    app.add_option("--inner-learning-rate", inner_loop.learning_rate,
                   "alpha, the inner loop's step size")
        ->check(CLI::Range(1e-12, 1e3));
    app.add_option("--kl-weight", kl_weight, "beta, PLATIPUS's KL weight")
        ->check(CLI::Range(0.0, 1e6));
    app.add_option("--inner-gradient-noise", inner_loop.gradient_noise,
                   "MAML + noise: std of the Gaussian noise added to each inner gradient")
        ->check(CLI::Range(1e-12, 1e9));
    app.add_option("--inner-max-gradient-norm", inner_loop.max_gradient_norm,
                   "clip each task's inner-loop gradient to this Euclidean norm (0: no clip)")
        ->check(CLI::Range(0.0, 1e12));
    app.add_option("--kl-anneal-steps", kl_anneal_steps,
                   "ramp beta up from 0 over this many steps (0: constant)")
        ->check(CLI::Range(0L, 100'000'000L));
    app.add_option("--query-reduction", query_reduction,
                   "PLATIPUS's query likelihood over a task's points: sum (the ELBO) or mean")
        ->transform(CLI::CheckedTransformer(std::map<std::string, platipus::Reduction>{
            {"sum", platipus::Reduction::sum}, {"mean", platipus::Reduction::mean}}));
    app.add_option("--prior-likelihood-weight", prior_likelihood_weight,
                   "PLATIPUS: weight of the query likelihood of a model drawn from the prior, "
                   "as at test time, beside the ELBO (0: the paper's objective)")
        ->check(CLI::Range(0.0, 1e6));
    app.add_option("--posterior-data", posterior_data,
                   "PLATIPUS: the points of the posterior mean's gradient step: query (Algorithm "
                   "1) or support-and-query (the inference network of Section 4.2; "
                   "support_and_query, as results.json spells it, too)")
        ->default_str(posterior_data_name())
        ->transform(CLI::CheckedTransformer(std::map<std::string, platipus::PosteriorData>{
            {"query", platipus::PosteriorData::query},
            {"support-and-query", platipus::PosteriorData::support_and_query},
            {"support_and_query", platipus::PosteriorData::support_and_query}}));
    app.add_option("--meta-learning-rate", meta_learning_rate,
                   "Adam's learning rate on the meta-parameters")
        ->check(CLI::Range(1e-12, 1e3));
    app.add_option("--meta-learning-rate-annealing-steps", meta_learning_rate_annealing_steps,
                   "anneal the meta learning rate along a cosine to 1e-5 over this many steps "
                   "(0: constant; default: constant, MAML++ over all of --steps)")
        ->check(CLI::Range(0L, 100'000'000L));
    app.add_option("--prior-variance", prior_variance, "initial sigma2_theta")
        ->check(CLI::Range(1e-12, 1e3));
    app.add_option("--posterior-variance", posterior_variance, "initial v_q")
        ->check(CLI::Range(1e-12, 1e3));
    app.add_option("--gamma", gamma, "initial gamma_p and gamma_q")->check(CLI::Range(1e-12, 1e3));
    app.add_option("--threads", threads,
                   "threads over a meta-batch's tasks (0: the backend's default: all cores on the "
                   "CPU, one on CUDA)")
        ->check(CLI::Range(0, 1'024));
    app.add_option("--task-chunks", task_chunks,
                   "cut each meta-batch into this many chunks of tasks (0: the backend's cut, on "
                   "the CPU one per task; -1: one per thread, faster for some learners); every "
                   "cut but -1 gives the same bits on any number of threads")
        ->check(CLI::Range(-1, 10'000));
    app.add_flag("--force", force,
                 "train even when a meta-step needs more memory than is available");
    app.add_option("--seed", seed, "seed of every random draw (0 to 2^64 - 1)")
        ->check(unsigned_64_bits);
    app.add_option("--checkpoint-every", checkpoint_every,
                   "save the run's training state every N steps (0: at every metrics record, "
                   "200 per learner); also after each learner and on SIGINT or SIGTERM")
        ->check(CLI::Range(0L, 100'000'000L));
    app.add_flag(
        "--resume", resume,
        "go on from the run's checkpoint (--checkpoint, default DIR/checkpoint.safetensors) "
        "where it stopped, with the same bits as a run that never stopped; the settings "
        "must be the checkpoint's");
  }

  // The run's record for results.json and the checkpoint: the loop and the
  // seed; the learners' own settings go beside it (with_learners).
  nlohmann::json json() const {
    return {{"steps", steps},
            {"meta_batch", meta_batch},
            {"seed", seed},
            {"ranks", world() ? world()->size() : 1}};
  }

  // Adam on the meta-parameters, its rate annealed over the flag's steps or,
  // when it is unset, over `default_annealing_steps`.
  platipus::optim::AdamSettings meta_optimizer(long default_annealing_steps = 0) const {
    return {.learning_rate = meta_learning_rate,
            .annealing_steps = static_cast<int>(
                meta_learning_rate_annealing_steps.value_or(default_annealing_steps)),
            .final_learning_rate = std::min(1e-5, meta_learning_rate)};
  }

  // What every learner's driver reads: the meta optimiser, threads and chunks.
  platipus::DriverSettings driver(long default_annealing_steps = 0) const {
    return {.meta_optimizer = meta_optimizer(default_annealing_steps),
            .threads = threads,
            .task_chunks = task_chunks};
  }

  // MAML, or with `noisy` MAML + noise.
  platipus::MamlSettings maml(bool noisy = false) const {
    return {.inner_loop = inner_loop_with_noise(noisy ? inner_loop.gradient_noise : 0),
            .driver = driver()};
  }
  platipus::PlatipusSettings platipus() const {
    return {.inner_loop = inner_loop_with_noise(0),
            .kl_weight = kl_weight,
            .query_reduction = query_reduction,
            .kl_anneal_steps = static_cast<int>(kl_anneal_steps),
            .prior_likelihood_weight = prior_likelihood_weight,
            .posterior_data = posterior_data,
            .initial_prior_variance = prior_variance,
            .initial_posterior_variance = posterior_variance,
            .initial_gamma_p = gamma,
            .initial_gamma_q = gamma,
            .driver = driver()};
  }

 private:
  // --posterior-data's spelling of the setting.
  const char* posterior_data_name() const {
    return posterior_data == platipus::PosteriorData::query ? "query" : "support-and-query";
  }
  platipus::InnerLoop inner_loop_with_noise(double noise) const {
    auto loop = inner_loop;
    loop.gradient_noise = noise;
    return loop;
  }
};

// The checkpoint a training run writes: --checkpoint, or DIR/checkpoint.safetensors.
inline fs::path checkpoint_file(const std::string& checkpoint, const fs::path& out) {
  return checkpoint.empty() ? out / "checkpoint.safetensors" : fs::path(checkpoint);
}

template <class Loss>
using MamlLearner = platipus::Maml<platipus::nn::Sequential, Loss, float, ExampleBackend>;
template <class Loss>
using PlatipusLearner = platipus::Platipus<platipus::nn::Sequential, Loss, float, ExampleBackend>;
// The learners of an example, by name: the names prefix the checkpoint's
// tensors, label the metrics and key results.json.
template <class Loss>
using Learners = platipus::LearnerSet<MamlLearner<Loss>, PlatipusLearner<Loss>>;

// The MAML and the PLATIPUS of a set of the paper's learners, which the
// figures compare.
template <class Loss>
const MamlLearner<Loss>& maml_of(const Learners<Loss>& learners) {
  return learners.template get<MamlLearner<Loss>>("maml");
}
template <class Loss>
const PlatipusLearner<Loss>& platipus_of(const Learners<Loss>& learners) {
  return learners.template get<PlatipusLearner<Loss>>("platipus");
}

// The paper's three learners of one network and one loss, those of `chosen`
// in this order: MAML, MAML + noise, PLATIPUS, each from the same initial
// weights.
template <class Loss>
Learners<Loss> paper_learners(const platipus::nn::Sequential& network, const Loss& loss,
                              const TrainingOptions& o,
                              const std::vector<std::string>& chosen = {"maml", "maml_noise",
                                                                        "platipus"}) {
  const auto has = [&](std::string_view name) {
    return std::ranges::count(chosen, name) > 0;
  };
  Learners<Loss> learners;
  platipus::Generator maml_init(o.seed), noise_init(o.seed), platipus_init(o.seed);
  if (has("maml")) learners.add("maml", MamlLearner<Loss>(network, loss, o.maml(), maml_init));
  if (has("maml_noise"))
    learners.add("maml_noise", MamlLearner<Loss>(network, loss, o.maml(true), noise_init));
  if (has("platipus"))
    learners.add("platipus", PlatipusLearner<Loss>(network, loss, o.platipus(), platipus_init));
  return learners;
}

// Whether every rank has been asked to stop (SIGINT, SIGTERM): the ranks
// agree after each step, so that all stop after the same one.
inline bool stop_agreed(const platipus::StopSignals& stop) {
  auto flag =
      platipus::Tensor<float, ExampleBackend>::from_host({1}, {stop.requested() ? 1.f : 0.f});
  if (auto* ranks = world(); ranks != nullptr) {
    platipus::Tensor<float, ExampleBackend>* buffer = &flag;
    platipus::all_reduce_sum(*ranks,
                             std::span<platipus::Tensor<float, ExampleBackend>* const>(&buffer, 1));
  }
  return flag.item() > 0;
}

// Meta-trains one learner from `from` (a fresh learner: step 0) on tasks
// from `sampler` drawn from `gen`, with a progress display, appending a row
// to `log` at every record and saving checkpoints on `schedule`; stops after
// the step at which every rank has a stop request. Distributed, every rank
// draws the same batches and computes its slice of each; rank 0 alone shows
// progress and writes. Returns where it stopped.
template <class Learner, class Sampler>
platipus::LoopPosition train_learner(platipus::io::MetricsLog& log, const std::string& name,
                                     Learner& learner, const Sampler& sampler,
                                     const TrainingOptions& o, platipus::Generator& gen,
                                     const platipus::LoopPosition& from,
                                     const platipus::io::CheckpointSchedule& schedule,
                                     const platipus::StopSignals& stop) {
  const platipus::TrainingLoop loop{.steps = o.steps, .meta_batch = o.meta_batch, .name = name};
  const platipus::TrainingControl control{.from = from,
                                          .after_step = [&](const platipus::LoopPosition&) {
                                            return !stop_agreed(stop);
                                          }};
  if (!is_root()) return platipus::meta_train(learner, sampler, gen, loop, {}, control);
  Progress progress(name, o.steps, from.step);
  return platipus::io::train_and_record(
      learner, sampler, gen, loop, log, schedule,
      [&](const platipus::TrainingRecord& r) {
        progress.update(r.step, fmt::format("query loss {:.3f}", r.query_loss));
      },
      control);
}

// Under MPI, rank 0 says how a meta-step is spread: the ranks and each
// one's share of the meta-batch (throwing when it cannot be cut).
inline void announce_ranks(const TrainingOptions& o) {
  const auto* ranks = world();
  if (ranks == nullptr) return;
  std::vector<std::string> slices;
  for (int r = 0; r < ranks->size(); ++r)
    slices.push_back(std::to_string(platipus::rank_tasks(o.meta_batch, r, ranks->size()).count));
  if (is_root())
    fmt::print(
        stderr,
        "distributed over {} ranks ({}), {} thread(s) each: the {} tasks of a meta-step as {}\n",
        ranks->size(), ranks->name(), o.threads, o.meta_batch, fmt::join(slices, " + "));
}

// The settings of a run that differ from those its checkpoint recorded,
// as "key: checkpoint's value, this run's value" (nested keys joined by
// '.'); the thread counts, which do not change a bit, are left out.
inline std::vector<std::string> differing_settings(const nlohmann::json& recorded,
                                                   const nlohmann::json& current,
                                                   const std::string& prefix = "") {
  std::vector<std::string> differences;
  if (recorded.is_object() && current.is_object()) {
    std::set<std::string> keys;
    for (const auto& [key, value] : recorded.items()) keys.insert(key);
    for (const auto& [key, value] : current.items()) keys.insert(key);
    for (const auto& key : keys) {
      if (key == "threads") continue;
      const auto missing = nlohmann::json("(none)");
      const auto& a = recorded.contains(key) ? recorded[key] : missing;
      const auto& b = current.contains(key) ? current[key] : missing;
      for (auto& d : differing_settings(a, b, prefix + key + "."))
        differences.push_back(std::move(d));
    }
  } else if (recorded != current) {
    differences.push_back(fmt::format("{}: {} in the checkpoint, {} now",
                                      prefix.substr(0, prefix.size() - 1), recorded.dump(),
                                      current.dump()));
  }
  return differences;
}

// Where a run of several learners saves its training state, and the record
// of its settings that a resumed run must match.
struct RunCheckpoint {
  fs::path file;
  nlohmann::json options;
};

// What training a set came to: the learners that diverged, with the reason
// (with keep_going_after_divergence; they are then out of the set).
// and on rank 0 the seconds each learner's training took, over every
// sitting of a resumed run.
struct TrainedSet {
  std::map<std::string, std::string> diverged;
  std::map<std::string, double> seconds;
};

// Takes up the run whose training state is in run.file: refuses it, naming
// each, when the settings differ from the checkpoint's; drops the learners
// it had seen diverge from the set; loads the others' training states; cuts
// `log` (rank 0's) back to the rows the checkpoint counted.
template <class Set>
platipus::io::ResumedRun resume(Set& learners, const RunCheckpoint& run,
                                platipus::io::MetricsLog* log, TrainedSet& trained) {
  platipus::check(fs::exists(run.file), "--resume",
                  "{} does not exist: there is no run to resume (give --checkpoint, or leave "
                  "--resume out to start afresh)",
                  run.file.string());
  const auto metadata = platipus::io::checkpoint_metadata(run.file, learners);
  const auto differences =
      differing_settings(metadata.value("options", nlohmann::json()), run.options);
  platipus::check(differences.empty(), "--resume",
                  "{} was written by a run with other settings, and resuming it would not give "
                  "its bits: {}",
                  run.file.string(), fmt::join(differences, "; "));
  for (const auto& [name, why] : metadata.value("diverged", nlohmann::json::object()).items()) {
    trained.diverged[name] = why.template get<std::string>();
    learners.erase(name);
  }
  auto [generator, rest] = platipus::io::load_training_state(run.file, learners);
  auto position = platipus::io::RunPosition::read(rest, run.file);
  if (log != nullptr) log->resume(position.metrics_rows);
  if (is_root())
    fmt::print(stderr, "resuming {}: {} at step {}\n", run.file.string(), position.learner,
               position.loop.step);
  return {generator, std::move(position), std::move(rest)};
}

// Meta-trains each learner of a set in turn, appending to
// <out>/train.{jsonl,csv} as training goes; each draws its tasks from the
// generator stream stream_of(name). The whole set's training state goes to
// run.file every --checkpoint-every steps, after each learner's last step
// and when SIGINT or SIGTERM stops the run (then Stopped is thrown). With
// --resume the run goes on from run.file: the learners it had finished are
// not trained again, the one it was training goes on from its step, and the
// metrics are cut back to the rows the checkpoint counted. A learner that
// diverges ends the run, or with keep_going_after_divergence leaves the set.
template <class Set, class Sampler, class StreamOf>
TrainedSet train(Set& learners, const Sampler& sampler, const TrainingOptions& o,
                 const fs::path& out, const RunCheckpoint& run, StreamOf stream_of,
                 bool keep_going_after_divergence = false) {
  platipus::io::MetricsLog log(out, "train");
  announce_ranks(o);
  TrainedSet trained;
  const std::vector<std::string> names = learners.names();  // those resume drops included
  std::optional<platipus::io::ResumedRun> resumed;
  if (o.resume) resumed = resume(learners, run, is_root() ? &log : nullptr, trained);
  const auto metadata = [&] {
    nlohmann::json m{{"options", run.options}, {"run_id", run_id()}};
    for (const auto& [name, why] : trained.diverged) m["diverged"][name] = why;
    return m;
  };
  const platipus::StopSignals stop;
  bool reached = !resumed;  // whether the learner the checkpoint was training has come
  for (const auto& name : names) {
    if (!reached && name != resumed->position.learner) continue;  // finished before it
    const bool current = !reached;
    reached = true;
    if (!learners.contains(name)) continue;  // it diverged before the checkpoint
    learners.visit(name, [&](auto& learner) {
      platipus::Generator gen =
          current ? resumed->generator : platipus::Generator(o.seed, stream_of(name));
      if (!current) check_task_memory(name, learner, sampler, o);
      learner.distribute(shared_world());
      const platipus::io::CheckpointSchedule schedule{
          .file = run.file,
          .every = o.checkpoint_every > 0 ? o.checkpoint_every : std::max(1L, o.steps / 200),
          .metadata = metadata(),
          .write = [&](const fs::path& file, const platipus::Generator& g,
                       const nlohmann::json& m) {
            platipus::io::save_training_state(file, learners, g, m);
          }};
      try {
        const auto at = train_learner(log, name, learner, sampler, o, gen,
                                      current ? resumed->position.loop : platipus::LoopPosition{},
                                      schedule, stop);
        if (at.step < o.steps) {
          stop_agreed(stop);  // the ranks wait for rank 0's checkpoint
          throw Stopped(fmt::format("stopped by {} after step {} of {}; saved {}: the same "
                                    "command with --resume goes on from there",
                                    stop.signal() == SIGINT ? "SIGINT" : "SIGTERM", at.step, name,
                                    run.file.string()),
                        stop.signal());
        }
      } catch (const platipus::divergence& e) {
        if (!keep_going_after_divergence) throw;
        fmt::print(stderr, "{}\n", e.what());
        trained.diverged[name] = e.what();
      }
    });
    if (!trained.diverged.contains(name)) continue;
    // Out of the set, and out of its checkpoint, which says so.
    learners.erase(name);
    if (is_root() && !learners.empty()) {
      auto m = metadata();
      m["training_run"] =
          platipus::io::RunPosition{.learner = name, .loop = {}, .metrics_rows = log.rows().size()}
              .json();
      platipus::io::save_training_state(run.file, learners,
                                        platipus::Generator(o.seed, stream_of(name)), m);
    }
  }
  for (const auto& row : log.rows()) trained.seconds[row["learner"]] = row["seconds"];
  return trained;
}

// For a set of the paper's learners: each draws its tasks from the stream of its name.
template <class Set, class Sampler>
void train(Set& learners, const Sampler& sampler, const TrainingOptions& o, const fs::path& out,
           const RunCheckpoint& run) {
  train(learners, sampler, o, out, run,
        [](const std::string& name) { return stream::training_tasks(name); });
}

// Refuses, before training starts, a run whose meta-step needs more memory
// than the machine has, by a lower bound (platipus::meta_step_bytes_bound).
inline void check_memory(const TrainingOptions& o, std::int64_t parameters) {
  const double bytes =
      platipus::meta_step_bytes_bound(o.meta_batch, parameters, o.inner_loop.steps, sizeof(float));
  const auto available = platipus::memory::available_bytes();
  platipus::check(o.force || available == 0 || bytes <= static_cast<double>(available), "memory",
                  "a meta-step of {} tasks and {} inner steps needs at least {:.1f} GB, and {:.1f} "
                  "GB are available; use a smaller --meta-batch or --inner-steps, or --force",
                  o.meta_batch, o.inner_loop.steps, bytes / 1e9,
                  static_cast<double>(available) / 1e9);
}

// Refuses, before `learner` trains, a run whose tasks in flight need more
// memory than is available, measured rather than bounded (platipus::
// measure_task_bytes on a task of a stream of its own, so training draws
// the same numbers).
template <class Learner, class Sampler>
void check_task_memory(const std::string& name, const Learner& learner, const Sampler& sampler,
                       const TrainingOptions& o) {
  if (o.force) return;
  // Available before the task: after it, this process's heap keeps much of
  // what the task freed.
  const std::uint64_t available = platipus::memory::available_bytes();
  platipus::Generator gen(o.seed, stream::memory_probe);
  const auto task = platipus::measure_task_bytes(learner, sampler, gen);
  if (!task) return;
  const platipus::TaskMemory need{
      .task_bytes = *task,
      .tasks_at_once = platipus::tasks_at_once(
          o.meta_batch, o.threads > 0 ? o.threads : ExampleBackend::default_threads(),
          world() ? world()->size() : 1, world() ? world()->local_size() : 1),
      .available = available};
  platipus::check(
      need.fits(), "memory",
      "{}: a task's meta-step takes {:.2f} GB and {} run at once, {:.1f} GB in all, "
      "but {:.1f} GB are available; {}, or --force",
      name, static_cast<double>(need.task_bytes) / 1e9, need.tasks_at_once,
      static_cast<double>(need.bytes()) / 1e9, static_cast<double>(available) / 1e9,
      need.tasks_that_fit() > 0
          ? fmt::format("use --threads {} (the same numbers, more slowly)", need.tasks_that_fit())
          : std::string("use a smaller network or fewer points per task"));
}

// The options of one rank: with `--threads 0` the ranks of a machine share
// its cores rather than each taking all of them.
inline TrainingOptions per_rank(TrainingOptions o) {
  if (world() != nullptr)
    o.threads = platipus::threads_per_rank(o.threads, ExampleBackend::default_threads(),
                                           world()->local_size());
  return o;
}

// An example's record of its flags with each learner's settings under
// "learners", as the library writes them (io/settings_json.hpp): how every
// learner was built, to the last field.
template <class Set>
nlohmann::json with_learners(nlohmann::json options, const Set& learners) {
  auto& settings = options["learners"] = nlohmann::json::object();
  learners.for_each(
      [&](const std::string& name, const auto& learner) { settings[name] = learner.settings(); });
  return options;
}

// Trains a set of learners (after the memory checks) with their training
// state saved in one checkpoint, DIR/checkpoint.safetensors unless
// `checkpoint` names another file, as it goes and at the end (train); with
// --resume goes on from it. Returns the checkpoint's record for
// results.json: its file, run id and training settings. Rank 0 alone saves;
// the others return null.
template <class Set, class Sampler>
nlohmann::json train_and_save(Set& learners, const Sampler& sampler, const TrainingOptions& o,
                              const std::string& checkpoint, const fs::path& out,
                              const nlohmann::json& settings) {
  learners.for_each([&](const std::string&, const auto& learner) {
    check_memory(o, learner.model().layout().size());
  });
  const fs::path path = checkpoint_file(checkpoint, out);
  const nlohmann::json options = with_learners(settings, learners);
  train(learners, sampler, o, out, RunCheckpoint{path, options});
  if (!is_root()) return nullptr;
  fmt::print(stderr, "saved {}\n", path.string());
  return {{"file", path.string()}, {"run_id", run_id()}, {"options", options}};
}

// Loads a set of learners from the checkpoint train_and_save wrote. Returns
// its record, whose settings (not the command line's) say how they were
// trained.
template <class Set>
nlohmann::json load_learners(Set& learners, const std::string& checkpoint) {
  const auto metadata = platipus::io::load(checkpoint, learners);
  fmt::print(stderr, "loaded {}\n", checkpoint);
  return {{"file", checkpoint},
          {"run_id", metadata.value("run_id", "")},
          {"options", metadata.value("options", nlohmann::json::object())}};
}

// The paper's learners of an example and their checkpoint's record.
template <class Loss>
struct Prepared {
  Learners<Loss> learners;
  nlohmann::json checkpoint;
};

// The paper's learners of `chosen`: trained and saved, or with eval_only
// loaded from `checkpoint`.
template <class Loss, class Sampler>
Prepared<Loss> prepare(const platipus::nn::Sequential& network, const Loss& loss,
                       const Sampler& sampler, const TrainingOptions& o, bool eval_only,
                       const std::string& checkpoint, const fs::path& out,
                       const nlohmann::json& settings,
                       const std::vector<std::string>& chosen = {"maml", "maml_noise",
                                                                 "platipus"}) {
  const TrainingOptions rank_options = per_rank(o);
  Prepared<Loss> prepared{paper_learners(network, loss, rank_options, chosen), nullptr};
  prepared.checkpoint = eval_only ? load_learners(prepared.learners, checkpoint)
                                  : train_and_save(prepared.learners, sampler, rank_options,
                                                   checkpoint, out, settings);
  return prepared;
}

}  // namespace examples
