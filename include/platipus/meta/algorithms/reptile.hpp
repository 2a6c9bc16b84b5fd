// Reptile (Nichol, Achiam, Schulman 2018, "On First-Order Meta-Learning
// Algorithms"): K steps of SGD on each task's points, then theta moves
// towards the adapted weights,
//
//   phi_i = SGD_K(theta, D_i)          no derivative through the steps
//   theta <- theta + epsilon mean_i (phi_i - theta).
//
// As an objective of the driver its meta-gradient is the pseudo-gradient
// mean_i (theta - phi_i): the objective recorded for a chunk is
// sum_i <theta, c_i> with c_i = theta - phi_i held constant. A plain SGD step
// of rate epsilon on it is the update above; the driver applies Adam, as
// Nichol et al. (Section 3) suggest for the pseudo-gradient.
//
// Reptile has no support/query split: the inner loop trains on all of a
// task's points (support and query together). The statistics report the loss
// on those points before adaptation (support) and on the query points after
// it (query; points the inner loop saw).
#pragma once

#include <array>
#include <string_view>
#include <utility>

#include "platipus/meta/algorithms/inner_loop.hpp"
#include "platipus/meta/algorithms/query_terms.hpp"
#include "platipus/meta/driver/meta_learner.hpp"

namespace platipus {

struct ReptileSettings {
  InnerLoop inner_loop{};   // K steps of alpha on each task's points; no gradient noise
  DriverSettings driver{};  // its meta_optimizer's learning rate is epsilon
};

// Reptile as an Objective of the meta-learner driver: theta is MAML's.
template <class M, class L, class T = float, class B = cpu>
requires Model<M, T, B> && Loss<L, T, B>
class ReptileObjective : public ObjectiveBase<M, L, T, B, ReptileSettings, MamlNames> {
  using Base = ObjectiveBase<M, L, T, B, ReptileSettings, MamlNames>;
  using Base::loss_, Base::model_, Base::settings_;

 public:
  using typename Base::Parts;
  using enum MamlNames::Part;
  static constexpr std::string_view name = "Reptile";

  ReptileObjective(M model, L loss, ReptileSettings settings)
      : Base(std::move(model), std::move(loss), settings) {
    settings.inner_loop.validate_without_noise(name);
  }

  Parts initialize(Generator& init) const { return {model_.template initialize<T, B>(init)}; }

  // sum_i <theta, theta - phi_i> with the differences held constant: its
  // gradient is the chunk's summed pseudo-gradient.
  ChunkTerms<T, B> chunk_terms(std::span<const Var<T, B>> parts, const TaskBatch<T, B>& chunk,
                               TaskNoise& /*noise*/, const StepSchedule& /*schedule*/) const {
    Tape<T, B>& tape = parts[theta].tape();
    const std::int64_t tasks = chunk.tasks(), size = model_.layout().size();
    const Shape rows{tasks, size};
    Tape<T, B> inner;  // the steps are not differentiated
    const std::array<const Tensor<T, B>*, 2> xs{&chunk.support_x, &chunk.query_x},
        ys{&chunk.support_y, &chunk.query_y};
    const auto adapted =
        adapt(model_, loss_, per_task(inner.variable(parts[theta].value()), model_.layout(), tasks),
              inner.constant(raw::concat(std::span<const Tensor<T, B>* const>(xs), 1)),
              inner.constant(raw::concat(std::span<const Tensor<T, B>* const>(ys), 1)),
              settings_.inner_loop);
    Tensor<T, B> difference, query, support;
    {
      NoGradGuard no_grad;
      const auto phi = inner.constant(flat_values(adapted.params, model_.layout()));
      difference = (expand(inner.constant(parts[theta].value()), rows) - phi).value().clone();
      query = task_loss(model_, loss_, adapted.params, inner.constant_view(chunk.query_x),
                        inner.constant_view(chunk.query_y))
                  .value()
                  .clone();
      if (adapted.initial_losses.defined()) support = sum(adapted.initial_losses).value().clone();
    }
    return {.objective = sum(expand(parts[theta], rows) * tape.constant(difference)),
            .query = tape.constant(query),
            .support = adapted.initial_losses.defined() ? tape.constant(support) : Var<T, B>{}};
  }

  // Parameters adapted to each task's support set: [tasks, P].
  Tensor<T, B> adapt_to(const Parts& parts, const Tensor<T, B>& support_x,
                        const Tensor<T, B>& support_y, Generator& /*gen*/) const {
    return adapted_parameters(model_, loss_, parts[theta], support_x, support_y,
                              settings_.inner_loop, "Reptile::adapt_to");
  }
};

template <class M, class L, class T = float, class B = cpu>
using Reptile = MetaLearner<ReptileObjective<M, L, T, B>>;

}  // namespace platipus
