// ANIL (Raghu, Raghu, Bengio, Vinyals, ICLR 2020, "Rapid Learning or Feature
// Reuse?"): MAML whose inner loop adapts only the network's head; the body
// is meta-learned through the adapted head but shared by every task.
//
//   phi_i = (theta_body, theta_head - alpha grad_head L(theta, D_train_i))   (K steps)
//   theta <- Adam( mean_i L(phi_i, D_test_i) )                          (second order)
//
// The body's pieces get no task axis: one batched op runs them for all tasks,
// and the inner loop differentiates with respect to the head alone.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "platipus/meta/algorithms/inner_loop.hpp"
#include "platipus/meta/algorithms/query_terms.hpp"
#include "platipus/meta/driver/meta_learner.hpp"

namespace platipus {

struct AnilSettings {
  InnerLoop inner_loop{};  // K steps of alpha on the head; no gradient noise
  // The names of the pieces the inner loop adapts (the model's ParamLayout
  // names, e.g. "layer7.weight"); empty: the last layer's pieces (those that
  // share the last piece's prefix before its '.').
  std::vector<std::string> head{};
  bool first_order = false;  // drop the second-order terms
  DriverSettings driver{};
};

// The indices of the named pieces of `layout`, or with no names those of its
// last layer; throws platipus::error naming an unknown piece.
inline std::vector<std::size_t> head_pieces(const nn::ParamLayout& layout,
                                            const std::vector<std::string>& names) {
  const auto specs = layout.specs();
  check(!specs.empty(), "Anil", "the model has no parameters");
  for (const auto& name : names) layout.find(name);  // throws for an unknown name
  std::vector<std::size_t> indices;
  auto prefix = [](std::string_view name) {
    return name.substr(0, name.rfind('.'));
  };
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const bool chosen = names.empty()
                            ? prefix(specs[i].name) == prefix(specs.back().name)
                            : std::find(names.begin(), names.end(), specs[i].name) != names.end();
    if (chosen) indices.push_back(i);
  }
  return indices;
}

// ANIL as an Objective of the meta-learner driver: theta is MAML's.
template <class M, class L, class T = float, class B = cpu>
requires Model<M, T, B> && Loss<L, T, B>
class AnilObjective : public ObjectiveBase<M, L, T, B, AnilSettings, MamlNames> {
  using Base = ObjectiveBase<M, L, T, B, AnilSettings, MamlNames>;
  using Base::loss_, Base::model_, Base::settings_;

 public:
  using typename Base::Parts;
  using enum MamlNames::Part;
  static constexpr std::string_view name = "Anil";

  AnilObjective(M model, L loss, AnilSettings settings)
      : Base(std::move(model), std::move(loss), settings),
        head_(head_pieces(model_.layout(), settings.head)) {
    settings.inner_loop.validate_without_noise(name);
  }

  Parts initialize(Generator& init) const { return {model_.template initialize<T, B>(init)}; }

  // The chunk's summed query loss after K steps on the head, differentiated
  // through them (second order unless first_order).
  ChunkTerms<T, B> chunk_terms(std::span<const Var<T, B>> parts, const TaskBatch<T, B>& chunk,
                               TaskNoise& /*noise*/, const StepSchedule& /*schedule*/) const {
    const auto adapted = adapt_head(parts[theta], chunk.support_x, chunk.support_y, chunk.tasks(),
                                    settings_.inner_loop, {.create_graph = !settings_.first_order});
    return adapted_query_terms(model_, loss_, adapted, chunk);
  }

  // Parameters adapted to each task's support set: [tasks, P], the body's
  // values the same in every row.
  Tensor<T, B> adapt_to(const Parts& parts, const Tensor<T, B>& support_x,
                        const Tensor<T, B>& support_y, Generator& /*gen*/) const {
    check_support_set(model_, loss_, support_x, support_y, "Anil::adapt_to");
    Tape<T, B> tape;
    const std::int64_t tasks = support_x.dim(0);
    auto phi = adapt_head(tape.variable(parts[theta]), support_x, support_y, tasks,
                          settings_.inner_loop.for_evaluation(), {.detached = true})
                   .params;
    std::vector<std::size_t> body;
    for (std::size_t i = 0; i < phi.size(); ++i)
      if (std::find(head_.begin(), head_.end(), i) == head_.end()) body.push_back(i);
    return flat_values(with_task_axis(std::move(phi), body, tasks), model_.layout());
  }

  // The indices of the pieces the inner loop adapts.
  const std::vector<std::size_t>& head() const { return head_; }

 private:
  Adapted<T, B> adapt_head(const Var<T, B>& theta_var, const Tensor<T, B>& support_x,
                           const Tensor<T, B>& support_y, std::int64_t tasks, const InnerLoop& loop,
                           AdaptOptions<T, B> options) const {
    Tape<T, B>& tape = theta_var.tape();
    options.adapted = head_;
    return adapt(model_, loss_, per_task(theta_var, model_.layout(), tasks, head_),
                 tape.constant_view(support_x), tape.constant_view(support_y), loop, options);
  }

  std::vector<std::size_t> head_;
};

template <class M, class L, class T = float, class B = cpu>
using Anil = MetaLearner<AnilObjective<M, L, T, B>>;

}  // namespace platipus
