// Meta-training as library API: the loop every user of a meta-learner
// writes, once. Each step samples a meta-batch and takes a meta-step; a
// non-finite loss stops training with a platipus::error naming the run and
// the step (it has already reached the meta-parameters through Adam, so
// training on would only spread NaN); every `record_every` steps a record
// with the interval's mean query loss goes to the caller, who logs it,
// prints progress or saves a checkpoint. A loop stopped between two steps
// (TrainingControl::after_step) goes on from its LoopPosition, saved with the
// learner's training state (io/training_run.hpp), with the same bits.
//
// On the CUDA backend the loop records the first meta-step that the learner
// allows (replay_obstacle() empty: one thread, no ramp still running) as a
// CUDA graph and replays it for every later step (GraphedMetaStep), as
// PyTorch users wrap a training step in torch.cuda.graphs: the same
// arithmetic with one launch a step instead of one per op (issue 38).
// MAML's replays are its eager steps; noisy learners (PLATIPUS, MAML +
// noise) draw their noise from the graph's salt, so a run resumed from a
// checkpoint draws other noise than one that never stopped. A batch of other
// shapes than the recording's takes an eager step; cuda_graph = false keeps
// every step eager.
//
//   meta_train(maml, sampler, gen, {.steps = 10000, .meta_batch = 25},
//              [&](const TrainingRecord& r) { log.record({{"step", r.step}, ...}); });
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "platipus/meta/driver/concepts.hpp"
#include "platipus/meta/driver/graphed_step.hpp"
#include "platipus/meta/driver/step_statistics.hpp"

namespace platipus {

struct TrainingLoop {
  std::int64_t steps = 1000;           // meta-steps
  std::int64_t meta_batch = 25;        // tasks per meta-step
  std::int64_t record_every = 0;       // steps per record; 0: steps / 200 (at least 1)
  std::string name = "meta-training";  // names the run in errors
  bool cuda_graph = true;              // on CUDA, replay the step as a CUDA graph where allowed

  // Steps between two records. It derives from `steps` alone, so a resumed
  // loop records at the same steps as one that never stopped.
  std::int64_t record_interval() const {
    return record_every > 0 ? record_every : std::max<std::int64_t>(1, steps / 200);
  }
};

// What a record reports: the step it was taken after, the mean query loss
// over the steps since the last record, the latest step's own statistics of
// the objective (PLATIPUS's "kl") and the seconds since training started.
struct TrainingRecord {
  std::int64_t step = 0;
  double query_loss = 0;
  std::vector<Statistic> statistics = {};
  double seconds = 0;
};

// Where a training loop stands between two steps: what it needs, besides
// the learner and the generator, to go on as if it had never stopped.
struct LoopPosition {
  std::int64_t step = 0;            // steps taken
  double interval_loss = 0;         // the record interval's losses so far, each over its length
  std::int64_t interval_steps = 0;  // steps in the record interval so far
  double seconds = 0;               // training time before the loop (re)started
};

// How a caller steers a loop: the position it starts from (a resumed run)
// and a check after every step, which stops the loop by returning false
// (a signal, a time budget).
struct TrainingControl {
  LoopPosition from = {};
  std::function<bool(const LoopPosition&)> after_step = {};
};

namespace detail {

// A training loop's meta-steps, taken eagerly (a learner on another backend
// than CUDA is never a ReplayableLearner).
template <class Learner, bool = ReplayableLearner<Learner, typename Learner::T>>
class MetaSteps {
 public:
  MetaSteps(Learner& learner, bool /*cuda_graph*/) : learner_(learner) {}
  MetaStepResult take(const TaskBatch<typename Learner::T, typename Learner::B>& batch,
                      Generator& gen) {
    return learner_.meta_train_step(batch, gen);
  }

 private:
  Learner& learner_;
};

// On CUDA: replays of one recorded step from the first that the learner
// allows (which is that step: GraphedMetaStep runs it, then records the next
// without running it); eager steps before it and for batches of other shapes.
template <class Learner>
class MetaSteps<Learner, true> {
  using T = typename Learner::T;

 public:
  MetaSteps(Learner& learner, bool cuda_graph) : learner_(learner), cuda_graph_(cuda_graph) {}
  MetaStepResult take(const TaskBatch<T, cuda>& batch, Generator& gen) {
    if (graph_ && graph_->fits(batch)) {
      graph_->step(batch);
      return graph_->statistics();
    }
    if (graph_ || !cuda_graph_ || !learner_.replay_obstacle().empty())
      return learner_.meta_train_step(batch, gen);
    graph_ = std::make_unique<GraphedMetaStep<Learner, T>>(learner_, batch, gen);
    return graph_->statistics();
  }

 private:
  Learner& learner_;
  bool cuda_graph_;
  std::unique_ptr<GraphedMetaStep<Learner, T>> graph_;
};

}  // namespace detail

// Meta-trains `learner` (a Maml, Platipus or any MetaLearner) on batches
// from `sampler`, drawing every batch and every meta-step's noise from gen;
// calls on_record after every record_every steps and after the last.
// Returns where it stopped: step == loop.steps unless control stopped it.
template <class Learner, TaskSamplerFor<Learner> Sampler>
LoopPosition meta_train(Learner& learner, const Sampler& sampler, Generator& gen,
                        const TrainingLoop& loop,
                        const std::function<void(const TrainingRecord&)>& on_record = {},
                        const TrainingControl& control = {}) {
  check_non_negative(loop.name, "steps", loop.steps);
  check_positive(loop.name, "meta_batch", loop.meta_batch);
  check_non_negative(loop.name, "record_every", loop.record_every);
  const std::int64_t every = loop.record_interval();
  LoopPosition at = control.from;
  check(at.step >= 0 && at.step <= loop.steps && at.interval_steps >= 0 &&
            at.interval_steps < every && at.interval_steps <= at.step,
        loop.name,
        "cannot go on from step {} with {} steps into a record interval of {}: the "
        "loop has {} steps",
        at.step, at.interval_steps, every, loop.steps);
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return at.seconds +
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  detail::MetaSteps<Learner> steps(learner, loop.cuda_graph);
  while (at.step < loop.steps) {
    const std::int64_t step = at.step + 1;
    const MetaStepResult result = steps.take(sampler.sample(loop.meta_batch, gen), gen);
    const bool finite = std::isfinite(result.query_loss) &&
                        std::ranges::all_of(result.statistics, [](const Statistic& s) {
                          return std::isfinite(s.value);
                        });
    if (!finite) {
      std::string values = fmt::format("query loss {}", result.query_loss);
      for (const auto& s : result.statistics) values += fmt::format(", {} {}", s.name, s.value);
      throw divergence(fmt::format(
          "{}: meta-training diverged at step {} ({}); try a smaller meta or inner learning rate",
          loop.name, step, values));
    }
    at.step = step;
    at.interval_loss += result.query_loss / static_cast<double>(every);
    ++at.interval_steps;
    if (step % every == 0 || step == loop.steps) {
      // A last interval shorter than `every` is rescaled to its own mean.
      const double mean = at.interval_steps == every
                              ? at.interval_loss
                              : at.interval_loss * static_cast<double>(every) /
                                    static_cast<double>(at.interval_steps);
      at.interval_loss = 0;
      at.interval_steps = 0;
      if (on_record)
        on_record({.step = step,
                   .query_loss = mean,
                   .statistics = result.statistics,
                   .seconds = seconds()});
    }
    if (control.after_step) {
      LoopPosition now = at;
      now.seconds = seconds();
      if (!control.after_step(now)) break;
    }
  }
  at.seconds = seconds();
  return at;
}

}  // namespace platipus
