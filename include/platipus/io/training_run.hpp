// A training run that leaves its traces on disk as it goes: meta_train
// (meta/driver/training.hpp) with every record appended to a metrics log (JSON lines
// and CSV, io/metrics.hpp) and the learner's checkpoint saved atomically at
// the first record at or after every `checkpoint_every` steps and after the
// last step. A run that stops early (a divergence, a kill) keeps its metrics
// and its latest checkpoint.
//
//   io::MetricsLog log("out", "train");
//   io::train_and_record(maml, sampler, gen, {.steps = 10000, .name = "maml"}, log,
//                        {.file = "out/maml.safetensors", .every = 1000});
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "platipus/io/checkpoint.hpp"
#include "platipus/io/metrics.hpp"
#include "platipus/meta/driver/training.hpp"

namespace platipus::io {

// Where and how often a training run saves its learner; an empty file saves nothing.
struct CheckpointSchedule {
  std::filesystem::path file;
  std::int64_t every = 0;  // steps between checkpoints; 0: only after the last step
  nlohmann::json metadata = nlohmann::json::object();  // stored with each (plus "step")
};

// Trains as meta_train does, appending a row {learner: loop.name, step,
// query_loss, kl, seconds} to `log` at every record and saving checkpoints
// on `schedule`; then calls on_record, if given.
template <class Learner, TaskSamplerFor<Learner> Sampler>
void train_and_record(Learner& learner, const Sampler& sampler, Generator& gen,
                      const TrainingLoop& loop, MetricsLog& log,
                      const CheckpointSchedule& schedule = {},
                      const std::function<void(const TrainingRecord&)>& on_record = {}) {
  check(schedule.every >= 0, "train_and_record", "checkpoint steps must be non-negative, got {}",
        schedule.every);
  std::int64_t saved = 0;
  meta_train(learner, sampler, gen, loop, [&](const TrainingRecord& r) {
    log.record({{"learner", loop.name},
                {"step", r.step},
                {"query_loss", r.query_loss},
                {"kl", r.kl},
                {"seconds", r.seconds}});
    const bool due = schedule.every > 0 && r.step / schedule.every > saved / schedule.every;
    if (!schedule.file.empty() && (due || r.step == loop.steps)) {
      auto metadata = schedule.metadata;
      metadata["step"] = r.step;
      save(schedule.file, learner, metadata);
      saved = r.step;
    }
    if (on_record) on_record(r);
  });
}

}  // namespace platipus::io
