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
  // On CUDA, replay each learner's meta-step as a CUDA graph once it allows
  // it (TrainingLoop::cuda_graph); --no-cuda-graph keeps every step eager.
  bool cuda_graph = true;

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
#ifdef PLATIPUS_EXAMPLES_ON_CUDA
    app.add_flag("--cuda-graph,!--no-cuda-graph", cuda_graph,
                 "replay each learner's meta-step as one CUDA graph once it allows it "
                 "(default: one launch a step, but PLATIPUS and MAML + noise then draw other "
                 "noise after --resume than a run that never stopped); --no-cuda-graph: eager "
                 "steps, one launch per op");
#endif
  }

  // The run's record for results.json and the checkpoint: the loop and the
  // seed; the learners' own settings go beside it (with_learners).
  nlohmann::json json() const {
    nlohmann::json run{{"steps", steps},
                       {"meta_batch", meta_batch},
                       {"seed", seed},
                       {"ranks", world() ? world()->size() : 1}};
#ifdef PLATIPUS_EXAMPLES_ON_CUDA
    run["cuda_graph"] = cuda_graph;
#endif
    return run;
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
  auto* ranks = world();
  if (ranks == nullptr) return stop.requested();  // no tensor, no device sync per step
  auto flag =
      platipus::Tensor<float, ExampleBackend>::from_host({1}, {stop.requested() ? 1.f : 0.f});
  platipus::Tensor<float, ExampleBackend>* buffer = &flag;
  platipus::all_reduce_sum(*ranks,
                           std::span<platipus::Tensor<float, ExampleBackend>* const>(&buffer, 1));
  return flag.item() > 0;
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

// What training a set came to: the learners that diverged, with the reason
// (with keep_going_after_divergence; they are then out of the set), and on
// rank 0 the seconds each learner's training took, over every sitting of a
// resumed run.
struct TrainedSet {
  std::map<std::string, std::string> diverged;
  std::map<std::string, double> seconds;
};

// Meta-trains each learner of a set in turn (platipus::io::
// train_set_and_record), appending to <out>/train.{jsonl,csv} as training
// goes, with a progress display; each draws its tasks from the generator
// stream stream_of(name). The whole set's training state goes to
// `checkpoint` every --checkpoint-every steps, after each learner's last
// step and when SIGINT or SIGTERM stops the run (then Stopped is thrown,
// on every rank after the same step). With --resume the run goes on from
// `checkpoint`, whose recorded settings must be `options`. A learner that
// diverges ends the run, or with keep_going_after_divergence leaves the set.
template <class Set, class Sampler, class StreamOf>
TrainedSet train(Set& learners, const Sampler& sampler, const TrainingOptions& o,
                 const fs::path& out, const fs::path& checkpoint, const nlohmann::json& options,
                 StreamOf stream_of, bool keep_going_after_divergence = false) {
  platipus::io::MetricsLog log(out, "train");
  announce_ranks(o);
  const platipus::io::SetTrainingRun run{
      .loop = {.steps = o.steps, .meta_batch = o.meta_batch, .cuda_graph = o.cuda_graph},
      .seed = o.seed,
      .stream = stream_of,
      .file = checkpoint,
      .checkpoint_every = o.checkpoint_every,
      .options = options,
      .metadata = {{"run_id", run_id()}},
      .resume = o.resume,
      .keep_going_after_divergence = keep_going_after_divergence};
  const platipus::StopSignals stop;
  std::optional<Progress> progress;
  const auto outcome = platipus::io::train_set_and_record(
      learners, sampler, run, is_root() ? &log : nullptr,
      [&](const std::string& name, auto& learner, const platipus::LoopPosition& from) {
        if (from.step == 0) check_task_memory(name, learner, sampler, o);
        if (from.step > 0 && is_root())
          fmt::print(stderr, "resuming {}: {} at step {}\n", checkpoint.string(), name, from.step);
        learner.distribute(shared_world());
        progress.emplace(name, o.steps, from.step);
      },
      [&](const std::string&, const platipus::TrainingRecord& r) {
        progress->update(r.step, fmt::format("query loss {:.3f}", r.query_loss));
      },
      [&](const platipus::LoopPosition&) { return !stop_agreed(stop); });
  if (outcome.stopped) {
    stop_agreed(stop);  // the ranks wait for rank 0's checkpoint
    throw Stopped(
        fmt::format("stopped by {} after step {} of {}; saved {}: the same command "
                    "with --resume goes on from there",
                    stop.signal() == SIGINT ? "SIGINT" : "SIGTERM", outcome.stopped->loop.step,
                    outcome.stopped->learner, checkpoint.string()),
        stop.signal());
  }
  TrainedSet trained{.diverged = outcome.diverged, .seconds = {}};
  for (const auto& [name, why] : trained.diverged)
    if (is_root()) fmt::print(stderr, "{}\n", why);
  for (const auto& row : log.rows()) trained.seconds[row["learner"]] = row["seconds"];
  return trained;
}

// For a set of the paper's learners: each draws its tasks from the stream of its name.
template <class Set, class Sampler>
void train(Set& learners, const Sampler& sampler, const TrainingOptions& o, const fs::path& out,
           const fs::path& checkpoint, const nlohmann::json& options) {
  train(learners, sampler, o, out, checkpoint, options,
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
  train(learners, sampler, o, out, path, options);
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
