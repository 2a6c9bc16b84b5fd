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
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

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
// query_loss, kl, seconds} to `log` at every record (then calling
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
    log.record({{"learner", loop.name},
                {"step", r.step},
                {"query_loss", r.query_loss},
                {"kl", r.kl},
                {"seconds", r.seconds}});
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

}  // namespace platipus::io
