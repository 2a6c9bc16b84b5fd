// MetaLearner<Objective>: the one driver of every meta-learning algorithm.
// It owns what all of them share: the meta-parameters (named parts), Adam
// over them, the thread pool that cuts a meta-batch into chunks of tasks,
// one tape per chunk, the chunks' gradient sums, the step statistics, the
// state for checkpoints and the replay check of CUDA graphs. An Objective
// says only what differs: its parts and their initial values, what a chunk
// of tasks contributes to the meta-loss, and how it adapts at test time.
// MAML, MAML + noise and PLATIPUS are objectives (maml.hpp, platipus.hpp);
// `Maml` and `Platipus` are this driver over them.
//
// The design follows PyTorch's split of a model (what to compute) from the
// training machinery, and Stan Math's of a log density from the sampler.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "platipus/distributed/communicator.hpp"
#include "platipus/meta/driver/driver_settings.hpp"
#include "platipus/meta/driver/predict.hpp"
#include "platipus/meta/driver/step_statistics.hpp"
#include "platipus/meta/driver/task_noise.hpp"
#include "platipus/meta/driver/task_parallel.hpp"
#include "platipus/optim/optimizers.hpp"

namespace platipus {

// What one chunk of a meta-batch's tasks contributes to a meta-step, each a
// sum over the chunk's tasks. The driver differentiates objective / tasks
// (the meta-loss is the mean over the whole batch) and reports the others
// (step_statistics): the query and support losses every objective has, and
// its own statistics in the order of its statistic_names (PLATIPUS: the
// KL term); an undefined statistic counts 0.
template <class T, class B>
struct ChunkTerms {
  Var<T, B> objective;
  Var<T, B> query, support;
  std::vector<Var<T, B>> statistics = {};
};

// What a meta-step reads from the number of steps taken before it, fixed
// before its chunks run: the step for the objectives that anneal with it
// (MAML++). An objective that anneals something else declares its own
// Schedule (PLATIPUS: its KL weight); the meta learning rate anneals in the
// driver, by driver.meta_optimizer's annealing_steps.
struct StepSchedule {
  int step = 0;  // steps taken; 0 for objectives that do not anneal
};

// An Objective O, requirement by requirement (O::Scalar is T, O::Backend is B):
//   O::Model, O::Loss, O::Settings   the model and loss it is built from, and
//                                    its settings, which hold the driver's
//                                    as `driver` (DriverSettings);
//   O(model, loss, settings)         checks the settings (platipus::error
//                                    naming the bad one) and keeps them;
//   O::name                          for messages ("Maml", "Platipus");
//   O::Names                         a struct with its meta-parameters'
//                                    indices (enum Part), number
//                                    (part_count) and names (part_names), in
//                                    a fixed order (the checkpoint's names);
//                                    the driver derives from it;
//   initialize(gen)                  their initial values, part_count
//                                    tensors, drawn from gen;
//   O::statistic_names               the names of its own statistics
//                                    (ChunkTerms::statistics), an array of
//                                    string_view (ObjectiveBase: none);
//   O::Schedule                      what a meta-step reads from the step
//                                    count (ObjectiveBase: StepSchedule);
//   chunk_terms(parts, chunk, noise, schedule)
//                                    the chunk's ChunkTerms, recorded on the
//                                    tape of `parts` (leaves, one per part);
//                                    random draws come from `noise`, keyed by
//                                    task, so no result depends on the cut;
//   schedule(steps)                  the Schedule of the next meta-step
//                                    (ObjectiveBase: none); steps() reads the
//                                    optimiser's count and may wait for the
//                                    device, so call it only while something
//                                    changes with the step;
//   replay_obstacle(steps)           why a recording of the step could not be
//                                    replayed, beyond the driver's own
//                                    reasons; empty when it can (ObjectiveBase:
//                                    always empty);
//   sample(parts, x, y, n, gen)      n adapted models per task, [tasks, n, P],
//   or adapt_to(parts, x, y, gen)    or one adapted model per task, [tasks, P]
//                                    (the driver then samples by adapting n
//                                    copies of each task; at least one of
//                                    the two is required);
//   model(), settings()              what it was built from.
template <class O>
concept Objective = requires(
    const O& o, std::span<const Var<typename O::Scalar, typename O::Backend>> vars,
    const std::array<Tensor<typename O::Scalar, typename O::Backend>, O::part_count>& parts,
    const TaskBatch<typename O::Scalar, typename O::Backend>& batch, TaskNoise& noise,
    const std::function<int()>& steps, Generator& gen) {
  typename O::Part;
  typename O::Names;  // a base of the driver: Part, part_count, part_names
  typename O::Schedule;
  { O::name } -> std::convertible_to<std::string_view>;
  { O::part_names[0] } -> std::convertible_to<std::string_view>;
  {std::span<const std::string_view>(O::statistic_names)};
  { o.initialize(gen) } -> std::same_as<std::remove_cvref_t<decltype(parts)>>;
  {
    o.chunk_terms(vars, batch, noise, typename O::Schedule{})
    } -> std::same_as<ChunkTerms<typename O::Scalar, typename O::Backend>>;
  { o.schedule(steps) } -> std::same_as<typename O::Schedule>;
  { o.replay_obstacle(steps) } -> std::convertible_to<std::string>;
  requires(
      requires { o.sample(parts, batch.support_x, batch.support_y, std::int64_t{1}, gen); } ||
      requires { o.adapt_to(parts, batch.support_x, batch.support_y, gen); });
  { o.settings().driver } -> std::convertible_to<DriverSettings>;
  o.model();
};

// What every objective keeps: the model, the loss and the settings it was
// built from, the Objective concept's type names, and the defaults of an
// objective that anneals nothing and can always be replayed. Derive as
// `class MyObjective : public ObjectiveBase<M, L, T, B, MySettings, MyNames>`.
template <class M, class L, class T, class B, class S, class N>
class ObjectiveBase : public N {
 public:
  using Model = M;
  using Loss = L;
  using Scalar = T;
  using Backend = B;
  using Settings = S;
  using Names = N;
  using Parts = std::array<Tensor<T, B>, N::part_count>;
  using Schedule = StepSchedule;
  static constexpr std::array<std::string_view, 0> statistic_names{};

  ObjectiveBase(M model, L loss, S settings)
      : model_(std::move(model)), loss_(std::move(loss)), settings_(settings) {}

  const M& model() const { return model_; }
  const L& loss() const { return loss_; }
  const S& settings() const { return settings_; }

  StepSchedule schedule(const std::function<int()>& /*steps*/) const { return {}; }
  std::string replay_obstacle(const std::function<int()>& /*steps*/) const { return {}; }

 protected:
  M model_;
  L loss_;
  S settings_;
};

// The part names and indices are the objective's: Platipus<...>::mu_theta,
// Platipus<...>::part_names.
template <class O>
requires Objective<O>
class MetaLearner : public O::Names {
 public:
  using T = typename O::Scalar;
  using B = typename O::Backend;
  using Settings = typename O::Settings;
  using Part = typename O::Part;
  using Parts = std::array<Tensor<T, B>, O::part_count>;
  using Schedule = typename O::Schedule;
  // The names of MetaStepResult::statistics, the objective's own.
  static constexpr std::span<const std::string_view> statistic_names{O::statistic_names};

  MetaLearner(typename O::Model model, typename O::Loss loss, Settings settings, Generator& init)
      : objective_(std::move(model), std::move(loss), settings),
        parts_(objective_.initialize(init)),
        optimizer_(settings.driver.meta_optimizer),
        pool_(task_pool<B>(settings.driver.threads)) {
    settings.driver.validate(O::name);
  }

  // Data parallelism over processes: from now on each meta-step computes the
  // slice rank_tasks(...) of the meta-batch it is given (every rank is given
  // the same batch, by samplers drawing from the same seed) and sums the
  // ranks' meta-gradients and statistics before the optimiser's step, so all
  // ranks take the same step and N ranks compute one process's meta-gradient
  // up to the order of float sums. It starts by giving every rank rank 0's
  // meta-parameters and meta-optimiser state (moments and step number), so
  // a checkpoint, of meta-parameters or of a whole training state
  // (io/training_state.hpp), may be loaded on rank 0 alone or on every rank,
  // and a run distributed after some steps (a resumed one) goes on as one
  // process would. Null: one process again.
  void distribute(std::shared_ptr<Communicator> communicator) {
    if (communicator) {
      // Rank 0's step number first: the ranks that have taken none make
      // moments to receive its.
      auto count = Tensor<T, B>::from_host({1}, {static_cast<T>(steps())});
      Tensor<T, B>* count_buffer = &count;
      broadcast(*communicator, std::span<Tensor<T, B>* const>(&count_buffer, 1), 0);
      std::vector<Tensor<T, B>> optimizer;
      if (count.item() > 0) {
        const auto mine = optimizer_.state();
        for (std::size_t i = 0; i < 2 * O::part_count; ++i)
          optimizer.push_back(mine.empty() ? Tensor<T, B>::zeros(parts_[i % O::part_count].shape())
                                           : mine[i]->clone());
        optimizer.push_back(std::move(count));
      }
      std::vector<Tensor<T, B>*> buffers;
      for (auto& part : parts_) buffers.push_back(&part);
      for (auto& entry : optimizer) buffers.push_back(&entry);
      broadcast(*communicator, std::span<Tensor<T, B>* const>(buffers), 0);
      std::array<Shape, O::part_count> shapes;
      for (std::size_t i = 0; i < shapes.size(); ++i) shapes[i] = parts_[i].shape();
      optimizer_.set_state(std::move(optimizer), shapes);
    }
    communicator_ = std::move(communicator);
  }

  // One meta-update of the parts on a batch of tasks.
  MetaStepResult meta_train_step(const TaskBatch<T, B>& batch, Generator& gen) {
    check_batch(objective_.loss(), objective_.model(), batch, who(Method::meta_train_step));
    return MetaStepResult::read(meta_train_step_async(batch, gen), statistic_names);
  }

  // The same update with its statistics left on the backend, for
  // MetaStepResult::read(statistics, statistic_names). With one thread (and
  // a schedule that no longer changes) nothing here waits for the device, so a CUDA graph can
  // record it (meta/driver/graphed_step.hpp); so the targets are not checked
  // (check_batch), only the shapes.
  Tensor<T, B> meta_train_step_async(const TaskBatch<T, B>& batch, Generator& gen) {
    const Schedule schedule = objective_.schedule(steps_reader());
    auto [gradients, statistics] =
        gradient_and_statistics(batch, gen, schedule, Method::meta_train_step);
    std::array<Tensor<T, B>*, O::part_count> params;
    std::array<const Tensor<T, B>*, O::part_count> grads;
    for (std::size_t i = 0; i < params.size(); ++i) {
      params[i] = &parts_[i];
      grads[i] = &gradients[i];
    }
    const optim::AdamSettings& rate = settings().driver.meta_optimizer;
    if (rate.annealing_steps > 0)
      optimizer_.settings().learning_rate = rate.learning_rate_at(steps());
    optimizer_.step(params, grads);
    return std::move(statistics);
  }

  // The gradient of the meta-loss with respect to each part, differentiated
  // through the inner loop; no update. One part: its tensor; several: a
  // vector in part order.
  auto meta_gradient(const TaskBatch<T, B>& batch, Generator& gen,
                     MetaStepResult* stats = nullptr) const {
    check_batch(objective_.loss(), objective_.model(), batch, who(Method::meta_gradient));
    auto [gradients, statistics] = gradient_and_statistics(
        batch, gen, objective_.schedule(steps_reader()), Method::meta_gradient);
    if (stats) *stats = MetaStepResult::read(statistics, statistic_names);
    if constexpr (O::part_count == 1)
      return std::move(gradients[0]);
    else
      return std::move(gradients);
  }

  // Why a recorded meta-step could not be replayed as it is; empty when it can.
  std::string replay_obstacle() const {
    if (communicator_)
      return fmt::format("distributed over {} ranks ({}): a graph does not record the all-reduce",
                         communicator_->size(), communicator_->name());
    if (auto obstacle = recording_obstacle<B>(*pool_, settings().driver.task_chunks);
        !obstacle.empty())
      return obstacle;
    if (const int annealing = settings().driver.meta_optimizer.annealing_steps;
        annealing > 0 && steps() < annealing)
      return fmt::format(
          "the meta learning rate still anneals (step {} of {}) and a recording fixes it", steps(),
          annealing);
    return objective_.replay_obstacle(steps_reader());
  }

  // n adapted models per task, [tasks, n, P] (Algorithm 2 for PLATIPUS). An
  // objective without its own sampler adapts n copies of each task's
  // support set (MAML: n equal models; MAML + noise: n noisy ones).
  Tensor<T, B> sample(const Tensor<T, B>& support_x, const Tensor<T, B>& support_y, std::int64_t n,
                      Generator& gen) const {
    if constexpr (requires { objective_.sample(parts_, support_x, support_y, n, gen); }) {
      return objective_.sample(parts_, support_x, support_y, n, gen);
    } else {
      check_positive(fmt::format("{}::sample", O::name), "the number of samples", n);
      const std::int64_t tasks = support_x.dim(0), size = objective_.model().layout().size();
      return adapt_to(repeat_tasks(support_x, n), repeat_tasks(support_y, n), gen)
          .reshaped(Shape{tasks, n, size});
    }
  }

  // Whether two models sampled for one task differ: an objective with its
  // own sampler (PLATIPUS's posterior, Algorithm 2) or an inner loop with
  // gradient noise (MAML + noise). Otherwise sample's n models are equal
  // and one scores as all of them do (meta/scores/evaluation.hpp).
  bool adapts_randomly() const {
    if constexpr (requires(const Tensor<T, B>& x, Generator& gen) {
                    objective_.sample(parts_, x, x, std::int64_t{1}, gen);
                  })
      return true;
    else if constexpr (requires { settings().inner_loop.gradient_noise; })
      return settings().inner_loop.gradient_noise > 0;
    else
      return false;
  }

  // Parameters adapted to each task's support set, [tasks, P], for an
  // objective with one deterministic adaptation (MAML).
  Tensor<T, B> adapt_to(const Tensor<T, B>& support_x, const Tensor<T, B>& support_y,
                        Generator& gen) const requires requires(const O& o, const Parts& p) {
    o.adapt_to(p, support_x, support_y, gen);
  }
  { return objective_.adapt_to(parts_, support_x, support_y, gen); }

  // Each task's mean query loss after adapting to its support set, [tasks]:
  // one model per task, sample's first (MAML: the adapted weights; PLATIPUS:
  // one draw of Algorithm 2). An evaluation, no update.
  Tensor<T, B> query_losses(const TaskBatch<T, B>& batch, Generator& gen) const {
    check_batch(objective_.loss(), objective_.model(), batch, who(Method::evaluate));
    const std::int64_t tasks = batch.tasks(), size = objective_.model().layout().size();
    const auto prediction =
        predict(sample(batch.support_x, batch.support_y, 1, gen).reshaped(Shape{tasks, size}),
                batch.query_x);
    Tape<T, B> tape;
    NoGradGuard no_grad;
    return objective_.loss()(tape.constant(prediction), tape.constant(batch.query_y), 1)
        .value()
        .clone();
  }

  // Their mean over the batch's tasks.
  double evaluate(const TaskBatch<T, B>& batch, Generator& gen) const {
    const auto losses = query_losses(batch, gen);
    Tape<T, B> tape;
    NoGradGuard no_grad;
    return mean(tape.constant(losses)).item();
  }

  // Predictions of parameters [P], [T, P] or [T, S, P] on x (meta/driver/predict.hpp).
  Tensor<T, B> predict(const Tensor<T, B>& params, const Tensor<T, B>& x) const {
    return platipus::predict(objective_.model(), params, x);
  }

  // The meta-parameters by name, for checkpoints (part_names order).
  std::vector<std::pair<std::string, const Tensor<T, B>*>> state() const {
    std::vector<std::pair<std::string, const Tensor<T, B>*>> out;
    for (std::size_t i = 0; i < parts_.size(); ++i)
      out.emplace_back(std::string(O::part_names[i]), &parts_[i]);
    return out;
  }
  void set_state(const std::string& name, Tensor<T, B> value) {
    for (std::size_t i = 0; i < parts_.size(); ++i)
      if (name == O::part_names[i]) return set_part(static_cast<Part>(i), std::move(value));
    fail(fmt::format("{}::set_state", O::name), "unknown meta-parameter '{}'", name);
  }

  // Everything the next meta-step depends on besides its batch and generator,
  // for a checkpoint that resumes training (io/training_state.hpp): state(),
  // then the meta-optimiser's moments ("adam.first/theta", ...,
  // "adam.second/theta", ...) and step number ("adam.step"), which every
  // schedule derives from; no optimiser entries before the first step.
  std::vector<std::pair<std::string, const Tensor<T, B>*>> training_state() const {
    auto out = state();
    const auto optimizer = optimizer_.state();
    for (std::size_t i = 0; i < optimizer.size(); ++i)
      out.emplace_back(optimizer_entry(i), optimizer[i]);
    return out;
  }
  // Restores what training_state() gave, by name; without the optimiser's
  // entries, the optimiser starts again as before the first step.
  void set_training_state(std::vector<std::pair<std::string, Tensor<T, B>>> values) {
    const std::string who = fmt::format("{}::set_training_state", O::name);
    std::array<Shape, O::part_count> shapes;
    for (std::size_t i = 0; i < shapes.size(); ++i) shapes[i] = parts_[i].shape();
    std::vector<Tensor<T, B>> optimizer;
    Parts parts;
    std::array<bool, O::part_count> given{};
    for (auto& [name, value] : values) {
      const auto part = std::ranges::find(O::part_names, name);
      if (part != O::part_names.end()) {
        const auto i = static_cast<std::size_t>(part - O::part_names.begin());
        check(value.shape() == shapes[i], who, "{} must be {}, got {}", name, shapes[i],
              value.shape());
        parts[i] = std::move(value);
        given[i] = true;
      } else {
        check(name == optimizer_entry(optimizer.size()), who,
              "unexpected '{}' (expected '{}' next)", name, optimizer_entry(optimizer.size()));
        optimizer.push_back(std::move(value));
      }
    }
    for (std::size_t i = 0; i < given.size(); ++i)
      check(given[i], who, "no value for {}", O::part_names[i]);
    optimizer_.set_state(std::move(optimizer), shapes);
    parts_ = std::move(parts);
  }

  // The names of the meta-optimiser's entries in training_state(), in order.
  static std::vector<std::string> optimizer_state_names() {
    std::vector<std::string> names;
    for (std::size_t i = 0; i <= 2 * O::part_count; ++i) names.push_back(optimizer_entry(i));
    return names;
  }

  const Tensor<T, B>& part(Part p) const { return parts_[static_cast<std::size_t>(p)]; }
  void set_part(Part p, Tensor<T, B> value) {
    auto& current = parts_[static_cast<std::size_t>(p)];
    check(value.shape() == current.shape(), fmt::format("{}::set_part", O::name),
          "{} must be {}, got {}", O::part_names[static_cast<std::size_t>(p)], current.shape(),
          value.shape());
    current = std::move(value);
  }
  // The one part of a single-part objective (MAML's theta).
  const Tensor<T, B>& parameters() const requires(O::part_count == 1) { return parts_[0]; }
  void set_parameters(Tensor<T, B> value) requires(O::part_count == 1) {
    set_part(static_cast<Part>(0), std::move(value));
  }

  const O& objective() const { return objective_; }
  const auto& model() const { return objective_.model(); }
  const auto& loss() const { return objective_.loss(); }
  const Settings& settings() const { return objective_.settings(); }
  // Meta-steps taken (kept by the optimiser in backend memory: on CUDA,
  // reading it waits for the device).
  int steps() const { return optimizer_.steps(); }
  // What the next meta-step anneals (PLATIPUS: current_schedule().kl_weight);
  // its meta learning rate is driver.meta_optimizer's learning_rate_at(steps()).
  Schedule current_schedule() const { return objective_.schedule(steps_reader()); }

 private:
  // The name of the optimiser's i-th state tensor (optim::Adam::state's order).
  static std::string optimizer_entry(std::size_t i) {
    const std::size_t n = O::part_count;
    if (i >= 2 * n) return "adam.step";
    return fmt::format("adam.{}/{}", i < n ? "first" : "second", O::part_names[i % n]);
  }

  // "<objective>::<method>" for the messages of the method a user called.
  enum class Method { meta_train_step, meta_gradient, evaluate };
  static const std::string& who(Method method) {
    static const std::array<std::string, 3> names{fmt::format("{}::meta_train_step", O::name),
                                                  fmt::format("{}::meta_gradient", O::name),
                                                  fmt::format("{}::evaluate", O::name)};
    return names[static_cast<std::size_t>(method)];
  }

  std::function<int()> steps_reader() const {
    return [this] {
      return steps();
    };
  }

  // Chunks of tasks run in parallel on the pool, each on its own tape; when
  // distributed, chunks of this rank's slice, then the sum over the ranks.
  typename ChunkResults<T, B>::Total gradient_and_statistics(const TaskBatch<T, B>& full_batch,
                                                             Generator& gen,
                                                             const Schedule& schedule,
                                                             Method method) const {
    full_batch.validate(who(method));
    const TaskRange mine =
        communicator_ ? rank_tasks(full_batch.tasks(), communicator_->rank(), communicator_->size())
                      : TaskRange{0, full_batch.tasks()};
    const auto batch = slice_tasks(full_batch, mine);
    const auto ranges = chunks_of<B>(batch.tasks(), settings().driver.task_chunks, *pool_);
    std::array<Shape, O::part_count> shapes;
    for (std::size_t i = 0; i < shapes.size(); ++i) shapes[i] = parts_[i].shape();
    ChunkResults<T, B> results(ranges.size(), shapes, 2 + O::statistic_names.size());
    const TaskNoise noise(gen);
    const std::int64_t tasks = full_batch.tasks();
    if (ranges.size() > 1) B::synchronize();  // the workers' streams read this thread's work
    pool_->run(static_cast<int>(ranges.size()), [&](int c) {
      const auto chunk = slice_tasks(batch, ranges[c]);
      Tape<T, B> tape;
      std::array<Var<T, B>, O::part_count> v;
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = tape.variable_view(parts_[i]);
      TaskNoise chunk_noise = noise.from_task(mine.start + ranges[c].start);
      const auto terms =
          objective_.chunk_terms(std::span<const Var<T, B>>(v), chunk, chunk_noise, schedule);
      // The mean over all the batch's tasks, not the chunk's.
      const auto grads =
          grad(terms.objective / static_cast<double>(tasks), std::span<const Var<T, B>>(v));
      check(terms.statistics.size() == O::statistic_names.size(), who(method),
            "the objective gave {} statistics for its {} names", terms.statistics.size(),
            O::statistic_names.size());
      results.store(c, tape, grads,
                    step_statistics(terms.query, terms.support,
                                    std::span<const Var<T, B>>(terms.statistics), tasks));
    });
    auto total = results.sum();
    if (communicator_) {
      std::vector<Tensor<T, B>*> sums;
      for (auto& g : total.gradients) sums.push_back(&g);
      sums.push_back(&total.statistics);
      all_reduce_sum(*communicator_, std::span<Tensor<T, B>* const>(sums));
    }
    return total;
  }

  O objective_;
  Parts parts_;
  optim::Adam<T, B> optimizer_;
  std::unique_ptr<ThreadPool> pool_;
  std::shared_ptr<Communicator> communicator_;
};

}  // namespace platipus
