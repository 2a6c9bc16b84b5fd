// MAML++ (Antoniou, Edwards, Storkey, ICLR 2019, "How to train your MAML"):
// MAML with the paper's fixes that apply to any network,
//
// - multi-step loss (MSL): for the first multi_step_loss_steps meta-steps the
//   objective is sum_k w_k L(phi_k, D_test) over the K inner steps, the
//   weights moving linearly from 1/K each to the last step (the others end at
//   0.03 / K, the paper's floor); after that the last step's loss alone;
// - learned per-layer per-step inner learning rates (LSLR): alpha_{k,i} for
//   step k and parameter piece i, stored as their logarithms, a [K, pieces]
//   meta-parameter that starts at log(inner_loop.learning_rate). Antoniou et
//   al. store the rates as they are; with Adam's 1e-3 steps on a rate of
//   0.01 that moved each rate by a tenth per meta-step and diverged (a NaN
//   within 1,500 steps on sinusoids), while logarithms move them by a
//   thousandth and keep them positive, as PLATIPUS's gamma;
// - derivative-order annealing (DA): first order for the first
//   first_order_steps meta-steps, second order after;
// - cosine annealing of the meta learning rate: meta_optimizer's
//   annealing_steps and final_learning_rate, which every learner has.
//
// Its batch-norm fixes are not here: per-step running statistics (BNRS) do
// not apply to the library's batch norm, which normalises by each task's
// batch statistics and keeps no running ones (nn/layers.hpp, BatchNorm), and
// per-step scales and shifts (BNWB) are not implemented: the inner loop
// adapts the scale and shift as it adapts every other parameter.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "platipus/meta/algorithms/inner_loop.hpp"
#include "platipus/meta/driver/meta_learner.hpp"

namespace platipus {

struct MamlPlusPlusSettings {
  InnerLoop inner_loop{};            // K steps; learning_rate starts every learned rate; no noise
  int multi_step_loss_steps = 1000;  // MSL's length in meta-steps (0: the last step's loss only)
  int first_order_steps = 1000;      // DA: first order for this many meta-steps
  DriverSettings driver{};  // its meta_optimizer.annealing_steps: the cosine's (0: constant)
};

// MAML++'s meta-parameters (the checkpoint's names).
struct MamlPlusPlusNames {
  enum Part : int { theta = 0, log_learning_rates, part_count };
  static constexpr std::array<std::string_view, part_count> part_names{"theta",
                                                                       "log_learning_rates"};
};

template <class M, class L, class T = float, class B = cpu>
requires Model<M, T, B> && Loss<L, T, B>
class MamlPlusPlusObjective
    : public ObjectiveBase<M, L, T, B, MamlPlusPlusSettings, MamlPlusPlusNames> {
  using Base = ObjectiveBase<M, L, T, B, MamlPlusPlusSettings, MamlPlusPlusNames>;
  using Base::loss_, Base::model_, Base::settings_;

 public:
  using typename Base::Parts;
  using enum MamlPlusPlusNames::Part;
  static constexpr std::string_view name = "MamlPlusPlus";

  MamlPlusPlusObjective(M model, L loss, MamlPlusPlusSettings settings)
      : Base(std::move(model), std::move(loss), settings) {
    settings.inner_loop.validate_without_noise(name);
    check_positive(name, "inner_loop.learning_rate", settings.inner_loop.learning_rate,
                   "the rates are learned as logarithms");
    check(settings.inner_loop.evaluation_steps.value_or(settings.inner_loop.steps) ==
              settings.inner_loop.steps,
          name,
          "inner_loop.evaluation_steps must equal inner_loop.steps ({}): MAML++ learns a rate for "
          "each step, got {}",
          settings.inner_loop.steps, settings.inner_loop.evaluation_steps.value_or(0));
    check_non_negative(name, "multi_step_loss_steps", settings.multi_step_loss_steps);
    check_non_negative(name, "first_order_steps", settings.first_order_steps);
  }

  Parts initialize(Generator& init) const {
    const auto pieces = static_cast<std::int64_t>(model_.layout().specs().size());
    return {model_.template initialize<T, B>(init),
            Tensor<T, B>::full(Shape{settings_.inner_loop.steps, pieces},
                               static_cast<T>(std::log(settings_.inner_loop.learning_rate)))};
  }

  // The weights w_1..w_K of the query losses after each inner step at
  // meta-step `step` (Antoniou et al.'s per-step loss importance).
  std::vector<double> multi_step_weights(int step) const {
    const int k = settings_.inner_loop.steps;
    std::vector<double> w(static_cast<std::size_t>(std::max(k, 1)), 0.0);
    const double a = settings_.multi_step_loss_steps;
    if (k <= 1 || step >= a) {
      w.back() = 1;
      return w;
    }
    const double floor = 0.03 / k, progress = step / a;
    for (int i = 0; i + 1 < k; ++i)
      w[static_cast<std::size_t>(i)] = std::max(1.0 / k - progress / k, floor);
    w.back() = std::min(1.0 / k + progress * (k - 1) / k, 1 - (k - 1) * floor);
    return w;
  }

  // sum_k w_k L(phi_k, D_test) for the chunk, through the K steps with the
  // learned rates (first order while DA says so).
  ChunkTerms<T, B> chunk_terms(std::span<const Var<T, B>> parts, const TaskBatch<T, B>& chunk,
                               TaskNoise& /*noise*/, const StepSchedule& schedule) const {
    Tape<T, B>& tape = parts[theta].tape();
    const auto weights = multi_step_weights(schedule.step);
    const auto xq = tape.constant_view(chunk.query_x), yq = tape.constant_view(chunk.query_y);
    Var<T, B> objective, query, support;
    auto query_loss = [&](const Pieces<T, B>& phi, double weight) {
      query = task_loss(model_, loss_, phi, xq, yq);
      const auto term = weight == 1 ? query : query * weight;
      objective = objective.defined() ? objective + term : term;
    };
    descend(
        parts[theta], parts[log_learning_rates], chunk.support_x, chunk.support_y, chunk.tasks(),
        schedule.step >= settings_.first_order_steps,
        [&](int k, const Pieces<T, B>& phi, const Var<T, B>& support_losses) {
          if (k == 0) support = sum(support_losses);
          if (const double w = weights[static_cast<std::size_t>(k)]; w > 0) query_loss(phi, w);
        },
        [&](const Pieces<T, B>& theta_pieces) { query_loss(theta_pieces, 1); });
    return {.objective = objective, .query = query, .support = support};
  }

  // The step count while the multi-step loss or the derivative order anneal.
  StepSchedule schedule(const std::function<int()>& steps) const {
    if (annealing_steps() == 0) return {};
    return {.step = steps()};
  }

  std::string replay_obstacle(const std::function<int()>& steps) const {
    if (const int annealing = annealing_steps(); annealing > 0 && steps() < annealing)
      return fmt::format(
          "the multi-step loss or the derivative order still anneal (step {} of {}) and a "
          "recording fixes them",
          steps(), annealing);
    return {};
  }

  // Parameters adapted to each task's support set with the learned rates: [tasks, P].
  Tensor<T, B> adapt_to(const Parts& parts, const Tensor<T, B>& support_x,
                        const Tensor<T, B>& support_y, Generator& /*gen*/) const {
    check_support_set(model_, loss_, support_x, support_y, "MamlPlusPlus::adapt_to");
    Tape<T, B> tape;
    Pieces<T, B> adapted;
    descend(
        tape.variable(parts[theta]), tape.constant(parts[log_learning_rates]), support_x, support_y,
        support_x.dim(0), false,
        [&](int, const Pieces<T, B>& phi, const Var<T, B>&) { adapted = phi; },
        [&](const Pieces<T, B>& theta_pieces) { adapted = theta_pieces; });
    return flat_values(adapted, model_.layout());
  }

 private:
  // The last meta-step at which the multi-step loss or the derivative order anneal.
  int annealing_steps() const {
    return std::max(settings_.multi_step_loss_steps, settings_.first_order_steps);
  }

  // The K steps from theta with the rates exp(log_rates) [K, pieces]; after step
  // k, after_step(k, phi_k, each task's support loss at phi_{k-1}); with no steps,
  // no_steps(theta's pieces per task).
  template <class AfterStep, class NoSteps>
  void descend(const Var<T, B>& theta_var, const Var<T, B>& log_rates,
               const Tensor<T, B>& support_x, const Tensor<T, B>& support_y, std::int64_t tasks,
               bool second_order, AfterStep&& after_step, NoSteps&& no_steps) const {
    Tape<T, B>& tape = theta_var.tape();
    const auto& shapes = model_.layout().shapes();
    Pieces<T, B> phi = per_task(theta_var, model_.layout(), tasks);
    if (settings_.inner_loop.steps == 0) return no_steps(phi);
    const auto x = tape.constant_view(support_x), y = tape.constant_view(support_y);
    for (int k = 0; k < settings_.inner_loop.steps; ++k) {
      // alpha_{k,i} as a [1, 1, ...] piece that broadcasts over [tasks, shape_i].
      Pieces<T, B> step_rates;
      const auto row = exp(slice(log_rates, 0, k, 1));
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        Shape ones{1};
        for (int d = 0; d < shapes[i].rank(); ++d) ones.push_back(1);
        step_rates.push_back(reshape(slice(row, 1, static_cast<std::int64_t>(i), 1), ones));
      }
      auto next = inner_step(model_, loss_, std::move(phi), x, y, settings_.inner_loop,
                             {.create_graph = second_order, .rates = &step_rates});
      phi = std::move(next.params);
      after_step(k, phi, next.initial_losses);
    }
  }
};

template <class M, class L, class T = float, class B = cpu>
using MamlPlusPlus = MetaLearner<MamlPlusPlusObjective<M, L, T, B>>;

}  // namespace platipus
