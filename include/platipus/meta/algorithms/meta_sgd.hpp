// Meta-SGD (Li, Zhou, Chen, Li 2017, "Meta-SGD: Learning to Learn Quickly
// for Few-Shot Learning"): MAML whose inner step size is a vector alpha, one
// rate per parameter, meta-learned with theta.
//
//   phi_i = theta - alpha * grad L(theta, D_train_i)   (K steps, elementwise)
//   (theta, alpha) <- Adam( mean_i L(phi_i, D_test_i) )
//
// Li et al. take one inner step and let alpha's signs be free (a coordinate
// may learn to ascend); so does this objective. It stores alpha in units of
// inner_loop.learning_rate, alpha = learning_rate * s, s starting at 1 (Li et
// al. draw alpha uniformly from [0.005, 0.1]; a constant start makes step 0
// exactly MAML's): Adam moves a meta-parameter by about its learning rate per
// step, and alpha stored as it is moved by 1e-3 per step from 1.8e-4 (the
// regression examples' rate) diverged within 20 steps; s moves by a thousandth.
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

struct MetaSgdSettings {
  // K steps (Li et al.: 1); learning_rate is alpha's unit and initial value;
  // max_gradient_norm clips as for MAML. No gradient noise.
  struct InnerLoopDefaults {
    static constexpr int steps = 1;
    static constexpr double learning_rate = 0.01;
  };
  BasicInnerLoop<InnerLoopDefaults> inner_loop{};
  DriverSettings driver{};
};

// Meta-SGD's meta-parameters (the checkpoint's names).
struct MetaSgdNames {
  enum Part : int { theta = 0, learning_rate_scales, part_count };
  static constexpr std::array<std::string_view, part_count> part_names{"theta",
                                                                       "learning_rate_scales"};
};

template <class M, class L, class T = float, class B = cpu>
requires Model<M, T, B> && Loss<L, T, B>
class MetaSgdObjective : public ObjectiveBase<M, L, T, B, MetaSgdSettings, MetaSgdNames> {
  using Base = ObjectiveBase<M, L, T, B, MetaSgdSettings, MetaSgdNames>;
  using Base::loss_, Base::model_, Base::settings_;

 public:
  using typename Base::Parts;
  using enum MetaSgdNames::Part;
  static constexpr std::string_view name = "MetaSgd";

  MetaSgdObjective(M model, L loss, MetaSgdSettings settings)
      : Base(std::move(model), std::move(loss), settings) {
    settings.inner_loop.validate_without_noise(name);
  }

  Parts initialize(Generator& init) const {
    Tensor<T, B> theta_values = model_.template initialize<T, B>(init);
    const Shape shape = theta_values.shape();
    return {std::move(theta_values), Tensor<T, B>::ones(shape)};
  }

  // The chunk's summed query loss after K elementwise-rate steps,
  // differentiated through them (second order) with respect to theta and alpha.
  ChunkTerms<T, B> chunk_terms(std::span<const Var<T, B>> parts, const TaskBatch<T, B>& chunk,
                               TaskNoise& /*noise*/, const StepSchedule& /*schedule*/) const {
    Tape<T, B>& tape = parts[theta].tape();
    const auto& layout = model_.layout();
    const Pieces<T, B> alpha =
        unflatten(parts[learning_rate_scales] * static_cast<T>(settings_.inner_loop.learning_rate),
                  layout.shapes());
    const auto adapted =
        adapt(model_, loss_, per_task(parts[theta], layout, chunk.tasks()),
              tape.constant_view(chunk.support_x), tape.constant_view(chunk.support_y),
              settings_.inner_loop, {.create_graph = true, .rates = &alpha});
    return adapted_query_terms(model_, loss_, adapted, chunk);
  }

  // Parameters adapted to each task's support set: [tasks, P].
  Tensor<T, B> adapt_to(const Parts& parts, const Tensor<T, B>& support_x,
                        const Tensor<T, B>& support_y, Generator& /*gen*/) const {
    const auto rates = raw::map(UnaryOp::scale, parts[learning_rate_scales],
                                static_cast<T>(settings_.inner_loop.learning_rate));
    return adapted_parameters(model_, loss_, parts[theta], support_x, support_y,
                              settings_.inner_loop, "MetaSgd::adapt_to", nullptr, &rates);
  }
};

template <class M, class L, class T = float, class B = cpu>
using MetaSgd = MetaLearner<MetaSgdObjective<M, L, T, B>>;

}  // namespace platipus
