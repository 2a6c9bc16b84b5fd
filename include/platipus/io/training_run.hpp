// A training run that leaves its traces on disk as it goes: meta_train
// (meta/driver/training.hpp) with every record appended to a metrics log (JSON lines
// and CSV, io/metrics.hpp) and the learner's training state saved atomically
// (io/training_state.hpp) every `every` steps, after the last step and when
// the caller stops the loop. A run that stops early (a divergence, a kill, a
// signal) keeps its metrics and its latest checkpoint, and resume_training
// takes it up there: the run then ends with the same bits as one that never
// stopped, its metrics holding each record once.
//
//   io::MetricsLog log("out", "train");
//   const io::CheckpointSchedule every_1000{.file = "out/maml.safetensors", .every = 1000};
//   io::train_and_record(maml, sampler, gen, {.steps = 10000, .name = "maml"}, log, every_1000);
//   ... killed; a new process builds the same learner, then ...
//   auto resumed = io::resume_training("out/maml.safetensors", maml, log);
//   io::train_and_record(maml, sampler, resumed.generator, {.steps = 10000, .name = "maml"}, log,
//                        every_1000, {}, {.from = resumed.position.loop});
//
// train_set_and_record does the same for a LearnerSet trained one learner
// after another (the learners a paper's table compares), as one run with one
// checkpoint: a resumed run skips the learners it had finished.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "platipus/io/metrics.hpp"
#include "platipus/io/training_state.hpp"
#include "platipus/meta/driver/training.hpp"

namespace platipus::io {

// Where a run stood when its checkpoint was written: the learner training,
// its loop's position and the rows its metrics log held. Saved in the
// checkpoint's metadata under "training_run".
struct RunPosition {
  std::string learner;
  LoopPosition loop = {};
  std::uint64_t metrics_rows = 0;

  nlohmann::json json() const {
    return {{"learner", learner},
            {"step", loop.step},
            {"interval_loss", loop.interval_loss},
            {"interval_steps", loop.interval_steps},
            {"seconds", loop.seconds},
            {"metrics_rows", metrics_rows}};
  }
  // The position in a checkpoint's metadata; throws naming `file` when it has none.
  static RunPosition read(const nlohmann::json& metadata, const std::filesystem::path& file) {
    const auto& run =
        metadata.contains("training_run") ? metadata["training_run"] : nlohmann::json();
    const auto field = [&](const char* key, auto valid) -> const nlohmann::json& {
      check(run.is_object() && run.contains(key) && valid(run[key]), "resume",
            "{}: the checkpoint has no valid training_run.{}: it was not written by a training "
            "run (io::train_and_record)",
            file.string(), key);
      return run[key];
    };
    const auto count = [](const nlohmann::json& j) {
      return j.is_number_unsigned();
    };
    const auto number = [](const nlohmann::json& j) {
      return j.is_number();
    };
    const auto text = [](const nlohmann::json& j) {
      return j.is_string();
    };
    return {.learner = field("learner", text).get<std::string>(),
            .loop = {.step = field("step", count).get<std::int64_t>(),
                     .interval_loss = field("interval_loss", number).get<double>(),
                     .interval_steps = field("interval_steps", count).get<std::int64_t>(),
                     .seconds = field("seconds", number).get<double>()},
            .metrics_rows = field("metrics_rows", count).get<std::uint64_t>()};
  }
};

// Where and how often a training run saves its learner; an empty file saves nothing.
struct CheckpointSchedule {
  std::filesystem::path file;
  std::int64_t every = 0;  // steps between checkpoints; 0: only after the last step (or a stop)
  nlohmann::json metadata = nlohmann::json::object();  // stored with each, with "training_run"
  // Writes one checkpoint of the run's generator and metadata; by default the
  // learner's training state (save_training_state). A run of several
  // learners writes them all (save_training_state of a LearnerSet).
  std::function<void(const std::filesystem::path&, const Generator&, const nlohmann::json&)> write =
      {};
};

// Trains as meta_train does, appending a row {learner: loop.name, step,
// query_loss, the objective's statistics by name (PLATIPUS: kl), seconds}
// to `log` at every record (then calling
// on_record, if given) and saving checkpoints on `schedule`, and one more
// when control.after_step stops the loop. Returns where it stopped.
template <class Learner, TaskSamplerFor<Learner> Sampler>
LoopPosition train_and_record(Learner& learner, const Sampler& sampler, Generator& gen,
                              const TrainingLoop& loop, MetricsLog& log,
                              const CheckpointSchedule& schedule = {},
                              const std::function<void(const TrainingRecord&)>& on_record = {},
                              const TrainingControl& control = {}) {
  check(schedule.every >= 0, "train_and_record", "checkpoint steps must be non-negative, got {}",
        schedule.every);
  const auto save = [&](const LoopPosition& at) {
    if (schedule.file.empty()) return;
    auto metadata = schedule.metadata;
    metadata["training_run"] =
        RunPosition{.learner = loop.name, .loop = at, .metrics_rows = log.rows().size()}.json();
    if (schedule.write)
      schedule.write(schedule.file, gen, metadata);
    else
      save_training_state(schedule.file, learner, gen, metadata);
  };
  const auto record = [&](const TrainingRecord& r) {
    nlohmann::json row{{"learner", loop.name}, {"step", r.step}, {"query_loss", r.query_loss}};
    for (const auto& s : r.statistics) {
      check(!row.contains(s.name) && s.name != "seconds", "train_and_record",
            "the objective's statistic '{}' has the name of a metrics column", s.name);
      row[std::string(s.name)] = s.value;
    }
    row["seconds"] = r.seconds;
    log.record(row);
    if (on_record) on_record(r);
  };
  const auto after_step = [&](const LoopPosition& at) {
    const bool go_on = !control.after_step || control.after_step(at);
    if (!go_on || at.step == loop.steps || (schedule.every > 0 && at.step % schedule.every == 0))
      save(at);
    return go_on;
  };
  return meta_train(learner, sampler, gen, loop, record,
                    {.from = control.from, .after_step = after_step});
}

// What resume_training reads back: the generator, where the run stood and
// the caller's metadata.
struct ResumedRun {
  Generator generator;
  RunPosition position;
  nlohmann::json metadata;
};

// Takes up the run whose checkpoint train_and_record wrote at `path`:
// restores `learner`'s training state and cuts `log` back to the rows the
// checkpoint counted. Pass the generator and the position's loop to
// train_and_record (control.from) to go on.
template <class Learner>
ResumedRun resume_training(const std::filesystem::path& path, Learner& learner, MetricsLog& log) {
  auto [generator, metadata] = load_training_state(path, learner);
  auto position = RunPosition::read(metadata, path);
  log.resume(position.metrics_rows);
  metadata.erase("training_run");
  return {generator, std::move(position), std::move(metadata)};
}

// The settings of a run that differ from those its checkpoint recorded, as
// "key: A in the checkpoint, B now" (nested keys joined by '.'), but for the
// keys in `ignored` (thread counts, which change no bit).
inline std::vector<std::string> differing_settings(
    const nlohmann::json& recorded, const nlohmann::json& current,
    const std::set<std::string>& ignored = {"threads"}, const std::string& prefix = "") {
  std::vector<std::string> differences;
  if (recorded.is_object() && current.is_object()) {
    std::set<std::string> keys;
    for (const auto& [key, value] : recorded.items()) keys.insert(key);
    for (const auto& [key, value] : current.items()) keys.insert(key);
    const nlohmann::json none = "(none)";
    for (const auto& key : keys) {
      if (ignored.contains(key)) continue;
      for (auto& d : differing_settings(recorded.contains(key) ? recorded[key] : none,
                                        current.contains(key) ? current[key] : none, ignored,
                                        prefix + key + "."))
        differences.push_back(std::move(d));
    }
  } else if (recorded != current) {
    differences.push_back(fmt::format("{}: {} in the checkpoint, {} now",
                                      prefix.substr(0, prefix.size() - 1), recorded.dump(),
                                      current.dump()));
  }
  return differences;
}

// A set's run: every learner trains for loop.steps steps (loop.name is each
// one's name) on tasks of its own generator stream, Generator(seed,
// stream(name)); the set's training state goes to `file` every
// `checkpoint_every` steps (0: at every record), after each learner's last
// step and on a stop. `options` (the run's settings as the caller records
// them) is saved with it, under "options" beside `metadata`, and a resume
// whose options differ is refused naming each difference.
struct SetTrainingRun {
  TrainingLoop loop;
  std::uint64_t seed = 0;
  std::function<std::uint64_t(const std::string&)> stream = {};
  std::filesystem::path file;
  std::int64_t checkpoint_every = 0;
  nlohmann::json options = nlohmann::json::object();
  nlohmann::json metadata = nlohmann::json::object();
  bool resume = false;                       // go on from `file`
  bool keep_going_after_divergence = false;  // a diverged learner leaves the set; the run goes on
};

// What a set's run came to: the learners that diverged (this sitting or
// an earlier one), with the reason, and where a stop request ended it.
struct SetTrainingOutcome {
  std::map<std::string, std::string> diverged;
  std::optional<RunPosition> stopped;
};

// Takes up a set's run from run.file: refuses it, naming each difference,
// when run.options differ from those it recorded; drops the learners it had
// seen diverge from `set` (into `diverged`); loads the others' training
// states; cuts `log`, if given, back to the rows the checkpoint counted.
template <class... Learners>
ResumedRun resume_set(const SetTrainingRun& run, LearnerSet<Learners...>& set, MetricsLog* log,
                      std::map<std::string, std::string>& diverged) {
  check(std::filesystem::exists(run.file), "resume", "{} does not exist: there is no run to resume",
        run.file.string());
  const auto recorded = checkpoint_metadata(run.file, set);
  const auto differences =
      differing_settings(recorded.value("options", nlohmann::json()), run.options);
  check(differences.empty(), "resume",
        "{} was written by a run with other settings, and resuming it would not give its bits: {}",
        run.file.string(), fmt::join(differences, "; "));
  const auto seen_diverge = recorded.value("diverged", nlohmann::json::object());
  for (const auto& [name, why] : seen_diverge.items()) {
    diverged[name] = why.template get<std::string>();
    set.erase(name);
  }
  auto [generator, metadata] = load_training_state(run.file, set);
  auto position = RunPosition::read(metadata, run.file);
  if (log != nullptr) log->resume(position.metrics_rows);
  return {generator, std::move(position), std::move(metadata)};
}

// Trains the learners of `set` in turn as one resumable run (SetTrainingRun),
// each through train_and_record with `log` (null: train without writing,
// as an MPI rank other than 0 does); calls before_training(name, learner,
// from) before each learner trains (from: the position it goes on from, step
// 0 when fresh; memory checks, MetaLearner::distribute), on_record(name,
// record) at its records and after_step after each of its steps, which
// stops the run by returning false. A learner that diverges ends the run
// with the divergence, or with keep_going_after_divergence leaves the set
// and its checkpoint.
template <class... Learners, class Sampler, class BeforeTraining>
SetTrainingOutcome train_set_and_record(
    LearnerSet<Learners...>& set, const Sampler& sampler, const SetTrainingRun& run,
    MetricsLog* log, BeforeTraining&& before_training,
    const std::function<void(const std::string&, const TrainingRecord&)>& on_record = {},
    const std::function<bool(const LoopPosition&)>& after_step = {}) {
  check(static_cast<bool>(run.stream), "train_set_and_record", "the run has no task streams");
  const std::vector<std::string> names = set.names();  // those resume_set drops included
  SetTrainingOutcome outcome;
  std::optional<ResumedRun> resumed;
  if (run.resume) resumed = resume_set(run, set, log, outcome.diverged);
  const auto metadata = [&] {
    nlohmann::json m = run.metadata;
    m["options"] = run.options;
    for (const auto& [name, why] : outcome.diverged) m["diverged"][name] = why;
    return m;
  };
  const auto write = [&](const std::filesystem::path& file, const Generator& g,
                         const nlohmann::json& m) {
    save_training_state(file, set, g, m);
  };
  bool reached = !resumed;  // whether the learner the checkpoint was training has come
  for (const auto& name : names) {
    if (!reached && name != resumed->position.learner) continue;  // finished before it
    const bool current = !reached;
    reached = true;
    if (!set.contains(name)) continue;  // it diverged before the checkpoint
    set.visit(name, [&](auto& learner) {
      Generator gen = current ? resumed->generator : Generator(run.seed, run.stream(name));
      const LoopPosition from = current ? resumed->position.loop : LoopPosition{};
      before_training(name, learner, from);
      TrainingLoop loop = run.loop;
      loop.name = name;
      const TrainingControl control{.from = from, .after_step = after_step};
      try {
        const LoopPosition at =
            log == nullptr ? meta_train(learner, sampler, gen, loop, {}, control)
                           : train_and_record(
                                 learner, sampler, gen, loop, *log,
                                 {.file = run.file,
                                  .every = run.checkpoint_every > 0 ? run.checkpoint_every
                                                                    : loop.record_interval(),
                                  .metadata = metadata(),
                                  .write = write},
                                 [&](const TrainingRecord& r) {
                                   if (on_record) on_record(name, r);
                                 },
                                 control);
        if (at.step < loop.steps)
          outcome.stopped = RunPosition{
              .learner = name, .loop = at, .metrics_rows = log ? log->rows().size() : 0};
      } catch (const divergence& e) {
        if (!run.keep_going_after_divergence) throw;
        outcome.diverged[name] = e.what();
      }
    });
    if (outcome.stopped) return outcome;
    if (!outcome.diverged.contains(name)) continue;
    // Out of the set, and out of its checkpoint, which says so.
    set.erase(name);
    if (log != nullptr && !set.empty()) {
      auto m = metadata();
      m["training_run"] =
          RunPosition{.learner = name, .loop = {}, .metrics_rows = log->rows().size()}.json();
      save_training_state(run.file, set, Generator(run.seed, run.stream(name)), m);
    }
  }
  return outcome;
}

}  // namespace platipus::io
