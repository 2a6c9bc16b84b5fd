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
  DriverSettings driver{};
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
              tape.constant_view(chunk.support_x), tape.constant_view(chunk.support_y),
              settings_.inner_loop, {.create_graph = !settings_.first_order, .noise = &noise});
    return adapted_query_terms(model_, loss_, adapted, chunk);
  }

  // Parameters adapted to each task's support set: [tasks, P].
  Tensor<T, B> adapt_to(const Parts& parts, const Tensor<T, B>& support_x,
                        const Tensor<T, B>& support_y, Generator& gen) const {
    TaskNoise noise(gen);
    return adapted_parameters(model_, loss_, parts[theta], support_x, support_y,
                              settings_.inner_loop, "Maml::adapt_to", &noise);
  }
};

template <class M, class L, class T = float, class B = cpu>
using Maml = MetaLearner<MamlObjective<M, L, T, B>>;

}  // namespace platipus
