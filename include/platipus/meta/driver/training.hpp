// Meta-training as library API: the loop every user of a meta-learner
// writes, once. Each step samples a meta-batch and takes a meta-step; a
// non-finite loss stops training with a platipus::error naming the run and
// the step (it has already reached the meta-parameters through Adam, so
// training on would only spread NaN); every `record_every` steps a record
// with the interval's mean query loss goes to the caller, who logs it,
// prints progress or saves a checkpoint.
//
//   meta_train(maml, sampler, gen, {.steps = 10000, .meta_batch = 25},
//              [&](const TrainingRecord& r) { log.record({{"step", r.step}, ...}); });
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "platipus/meta/driver/concepts.hpp"
#include "platipus/meta/driver/step_statistics.hpp"

namespace platipus {

struct TrainingLoop {
  std::int64_t steps = 1000;           // meta-steps
  std::int64_t meta_batch = 25;        // tasks per meta-step
  std::int64_t record_every = 0;       // steps per record; 0: steps / 200 (at least 1)
  std::string name = "meta-training";  // names the run in errors
};

// What a record reports: the step it was taken after, the mean query loss
// over the steps since the last record, the latest step's KL term and the
// seconds since training started.
struct TrainingRecord {
  std::int64_t step = 0;
  double query_loss = 0;
  double kl = 0;
  double seconds = 0;
};

// Meta-trains `learner` (a Maml, Platipus or any MetaLearner) on batches
// from `sampler`, drawing every batch and every meta-step's noise from gen;
// calls on_record after every record_every steps and after the last.
template <class Learner, TaskSamplerFor<Learner> Sampler>
void meta_train(Learner& learner, const Sampler& sampler, Generator& gen, const TrainingLoop& loop,
                const std::function<void(const TrainingRecord&)>& on_record = {}) {
  check_non_negative(loop.name, "steps", loop.steps);
  check_positive(loop.name, "meta_batch", loop.meta_batch);
  check_non_negative(loop.name, "record_every", loop.record_every);
  const std::int64_t every =
      loop.record_every > 0 ? loop.record_every : std::max<std::int64_t>(1, loop.steps / 200);
  const auto start = std::chrono::steady_clock::now();
  double recent = 0;  // the interval's losses, each divided by `every`
  std::int64_t since = 0;
  for (std::int64_t step = 1; step <= loop.steps; ++step) {
    const MetaStepResult result =
        learner.meta_train_step(sampler.sample(loop.meta_batch, gen), gen);
    if (!std::isfinite(result.query_loss) || !std::isfinite(result.kl))
      throw divergence(fmt::format(
          "{}: meta-training diverged at step {} (query loss {}, KL {}); try a smaller meta or "
          "inner learning rate",
          loop.name, step, result.query_loss, result.kl));
    recent += result.query_loss / static_cast<double>(every);
    ++since;
    if (step % every == 0 || step == loop.steps) {
      // A last interval shorter than `every` is rescaled to its own mean.
      const double mean = since == every
                              ? recent
                              : recent * static_cast<double>(every) / static_cast<double>(since);
      if (on_record)
        on_record(
            {.step = step,
             .query_loss = mean,
             .kl = result.kl,
             .seconds =
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
      recent = 0;
      since = 0;
    }
  }
}

}  // namespace platipus
