// Meta-SGD (Li, Zhou, Chen, Li 2017, "Meta-SGD: Learning to Learn Quickly
// for Few-Shot Learning"): MAML whose inner step size is a vector alpha, one
// rate per parameter, meta-learned with theta.
//
//   phi_i = theta - alpha * grad L(theta, D_train_i)   (K steps, elementwise)
//   (theta, alpha) <- Adam( mean_i L(phi_i, D_test_i) )
//
// Li et al. take one inner step and let alpha's signs be free (a coordinate
// may learn to ascend); so does this objective: alpha is stored as it is,
// initialised to inner_loop.learning_rate everywhere (Li et al. draw it
// uniformly from [0.005, 0.1]; a constant start makes step 0 exactly MAML's).
#pragma once

#include <array>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "platipus/meta/inner_loop.hpp"
#include "platipus/meta/meta_learner.hpp"

namespace platipus {

struct MetaSgdSettings {
  // K steps (Li et al.: 1); learning_rate is alpha's initial value;
  // max_gradient_norm clips as for MAML. No gradient noise.
  InnerLoop inner_loop{.steps = 1};
  optim::AdamSettings meta_optimizer{};
  int threads = 0;      // threads over the tasks of a meta-batch; 0: B::default_threads()
  int task_chunks = 0;  // as MamlSettings::task_chunks
};

// Meta-SGD's meta-parameters (the checkpoint's names).
struct MetaSgdNames {
  enum Part : int { theta = 0, learning_rates, part_count };
  static constexpr std::array<std::string_view, part_count> part_names{"theta", "learning_rates"};
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
    settings.inner_loop.validate(name);
    check(settings.inner_loop.gradient_noise == 0, name,
          "inner_loop.gradient_noise must be 0 (got {})", settings.inner_loop.gradient_noise);
  }

  Parts initialize(Generator& init) const {
    Tensor<T, B> theta_values = model_.template initialize<T, B>(init);
    const Shape shape = theta_values.shape();
    return {std::move(theta_values),
            Tensor<T, B>::full(shape, static_cast<T>(settings_.inner_loop.learning_rate))};
  }

  // The chunk's summed query loss after K elementwise-rate steps,
  // differentiated through them (second order) with respect to theta and alpha.
  ChunkTerms<T, B> chunk_terms(std::span<const Var<T, B>> parts, const TaskBatch<T, B>& chunk,
                               TaskNoise& /*noise*/, double /*kl_weight*/) const {
    Tape<T, B>& tape = parts[theta].tape();
    const auto adapted = adapt_with(parts[theta], parts[learning_rates], chunk.support_x,
                                    chunk.support_y, chunk.tasks(), true);
    const auto query = sum(loss_(
        model_.forward(std::span<const Var<T, B>>(adapted.params), tape.constant(chunk.query_x)),
        tape.constant(chunk.query_y), 1));
    return {.objective = query, .query = query, .support = adapted.initial_loss, .kl = {}};
  }

  double kl_weight(const std::function<int()>& /*steps*/) const { return 0; }
  std::string replay_obstacle(const std::function<int()>& /*steps*/) const { return {}; }

  // Parameters adapted to each task's support set: [tasks, P].
  Tensor<T, B> adapt_to(const Parts& parts, const Tensor<T, B>& support_x,
                        const Tensor<T, B>& support_y, Generator& /*gen*/) const {
    check(support_x.rank() == 3 && support_x.dim(1) > 0, "MetaSgd::adapt",
          "empty or malformed support set {}", support_x.shape());
    Tape<T, B> tape;
    const auto adapted =
        adapt_with(tape.variable(parts[theta]), tape.constant(parts[learning_rates]), support_x,
                   support_y, support_x.dim(0), false);
    return flat_values(adapted.params, model_.layout());
  }

 private:
  Adapted<T, B> adapt_with(const Var<T, B>& theta_var, const Var<T, B>& rates,
                           const Tensor<T, B>& support_x, const Tensor<T, B>& support_y,
                           std::int64_t tasks, bool create_graph) const {
    Tape<T, B>& tape = theta_var.tape();
    const auto& layout = model_.layout();
    const Pieces<T, B> alpha = unflatten(rates, layout.shapes());
    return adapt(model_, loss_, per_task(theta_var, layout, tasks), tape.constant(support_x),
                 tape.constant(support_y), settings_.inner_loop, create_graph, nullptr, &alpha);
  }
};

template <class M, class L, class T = float, class B = cpu>
using MetaSgd = MetaLearner<MetaSgdObjective<M, L, T, B>>;

}  // namespace platipus
