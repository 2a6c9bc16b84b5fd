// MAML (Finn, Abbeel, Levine, ICML 2017) and its "MAML + noise" baseline.
//
//   phi_i = theta - alpha grad L(theta, D_train_i)   (K steps)
//   theta <- Adam( mean_i L(phi_i, D_test_i) )      differentiated through
//                                                   the K steps (second order
//                                                   unless first_order)
//
// All tasks of a meta-batch run as one computation: theta is expanded to
// [tasks, P] and every layer is a batched op over the task axis. With
// inner_loop.gradient_noise > 0 the inner gradient gets N(0, s^2) noise during
// meta-training and adaptation: the "MAML + noise" baseline of the PLATIPUS
// paper, whose `sample` then returns distinct models.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "platipus/meta/algorithms/inner_loop.hpp"
#include "platipus/meta/algorithms/query_terms.hpp"
#include "platipus/meta/driver/meta_learner.hpp"

namespace platipus {

struct MamlSettings {
  // K steps of alpha; gradient_noise > 0 gives "MAML + noise".
  InnerLoop inner_loop{};
  bool first_order = false;  // drop the second-order terms (FOMAML)
  optim::AdamSettings meta_optimizer{};
  int threads = 0;  // threads over the tasks of a meta-batch; 0: B::default_threads()
  // Chunks a meta-batch is cut into (meta/driver/task_parallel.hpp, chunks_of): 0,
  // the backend's cut (CPU: one per task); N > 0, N chunks; both give the same
  // bits on any number of threads. one_chunk_per_thread (-1) is sometimes
  // faster and agrees across thread counts only to rounding.
  int task_chunks = 0;
};

// MAML as an Objective of the meta-learner driver (meta/driver/meta_learner.hpp).
template <class M, class L, class T = float, class B = cpu>
requires Model<M, T, B> && Loss<L, T, B>
class MamlObjective : public ObjectiveBase<M, L, T, B, MamlSettings, MamlNames> {
  using Base = ObjectiveBase<M, L, T, B, MamlSettings, MamlNames>;
  using Base::loss_, Base::model_, Base::settings_;

 public:
  using typename Base::Parts;
  using enum MamlNames::Part;
  static constexpr std::string_view name = "Maml";

  MamlObjective(M model, L loss, MamlSettings settings)
      : Base(std::move(model), std::move(loss), settings) {
    settings.inner_loop.validate(name);
  }

  Parts initialize(Generator& init) const { return {model_.template initialize<T, B>(init)}; }

  // The chunk's summed post-adaptation query loss, differentiated through
  // the inner loop (second order unless first_order).
  ChunkTerms<T, B> chunk_terms(std::span<const Var<T, B>> parts, const TaskBatch<T, B>& chunk,
                               TaskNoise& noise, const StepSchedule& /*schedule*/) const {
    Tape<T, B>& tape = parts[theta].tape();
    const auto adapted =
        adapt(model_, loss_, per_task(parts[theta], model_.layout(), chunk.tasks()),
              tape.constant(chunk.support_x), tape.constant(chunk.support_y), settings_.inner_loop,
              {.create_graph = !settings_.first_order, .noise = &noise});
    return adapted_query_terms(model_, loss_, adapted, chunk);
  }

  // Parameters adapted to each task's support set: [tasks, P].
  Tensor<T, B> adapt_to(const Parts& parts, const Tensor<T, B>& support_x,
                        const Tensor<T, B>& support_y, Generator& gen) const {
    check_support_set(model_, loss_, support_x, support_y, "Maml::adapt_to");
    Tape<T, B> tape;
    TaskNoise noise(gen);
    const auto adapted = adapt(
        model_, loss_, per_task(tape.constant(parts[theta]), model_.layout(), support_x.dim(0)),
        tape.constant(support_x), tape.constant(support_y), settings_.inner_loop.for_evaluation(),
        {.noise = &noise, .detached = true});
    return flat_values(adapted.params, model_.layout());
  }

  // Mean post-adaptation query loss of a batch (an evaluation, no update).
  double evaluate(const Parts& parts, const TaskBatch<T, B>& batch, Generator& gen) const {
    check_batch(loss_, model_, batch, "Maml::evaluate");
    const auto prediction = platipus::predict(
        model_, adapt_to(parts, batch.support_x, batch.support_y, gen), batch.query_x);
    Tape<T, B> tape;
    NoGradGuard no_grad;
    return mean(loss_(tape.constant(prediction), tape.constant(batch.query_y), 1)).item();
  }
};

template <class M, class L, class T = float, class B = cpu>
using Maml = MetaLearner<MamlObjective<M, L, T, B>>;

}  // namespace platipus
