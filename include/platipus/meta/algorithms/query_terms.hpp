// What the objectives of one meta-parameter theta, scored by the query loss
// after adaptation, share (MAML, Meta-SGD's adapted query, ANIL, Reptile's
// names): the part's name and the chunk's terms, so that none of them
// includes another's header.
#pragma once

#include <array>
#include <string_view>

#include "platipus/meta/algorithms/inner_loop.hpp"
#include "platipus/meta/driver/meta_learner.hpp"

namespace platipus {

// MAML's one meta-parameter, theta (the checkpoint's name).
struct MamlNames {
  enum Part : int { theta = 0, part_count };
  static constexpr std::array<std::string_view, part_count> part_names{"theta"};
};

// The terms of an objective that is the chunk's summed query loss at the
// adapted parameters (MAML and its kin), with the support loss before
// adaptation as a statistic.
template <class M, class L, class T, class B>
ChunkTerms<T, B> adapted_query_terms(const M& model, const L& loss, const Adapted<T, B>& adapted,
                                     const TaskBatch<T, B>& chunk) {
  Tape<T, B>& tape = adapted.params.front().tape();
  const auto query = task_loss(model, loss, adapted.params, tape.constant_view(chunk.query_x),
                               tape.constant_view(chunk.query_y));
  return {.objective = query,
          .query = query,
          .support = adapted.initial_losses.defined() ? sum(adapted.initial_losses) : Var<T, B>{}};
}

}  // namespace platipus
