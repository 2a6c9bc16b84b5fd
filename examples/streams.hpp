// The generator streams of the examples' draws, Generator(seed, stream): one
// definition each, so that a learner's numbers do not depend on which other
// learners a run chose.
#pragma once

#include <cstdint>
#include <string_view>

namespace examples::stream {

inline constexpr std::uint64_t maml_tasks = 1, platipus_tasks = 2, maml_noise_tasks = 3;
// The held-out tasks of the synthetic examples (sine_line, circles,
// algorithms): a stream no learner trains on.
inline constexpr std::uint64_t held_out_tasks = 20;
// The image examples' held-out episodes, from their test split. The same
// number as MAML + noise's training tasks, which there draw from another
// split (no task is shared), kept so that the image results of
// docs/results.md hold.
inline constexpr std::uint64_t held_out_episodes = 3;
inline constexpr std::uint64_t figures = 4, active_learning = 5;
// The models each learner samples on held-out tasks: each learner's own
// (a learner whose models are not random draws nothing from it). The k-th
// PLATIPUS of a run (CelebA's KL weights) draws from 8 + k.
inline constexpr std::uint64_t maml_models = 6, maml_noise_models = 7, platipus_models = 8;
// Figure 8's samples (docs/results/celeba_figure8.png): the number of the
// second PLATIPUS's models, a harmless overlap kept so that the figure holds.
inline constexpr std::uint64_t celeba_figure = 9;
inline constexpr std::uint64_t memory_probe = 99;  // check_task_memory's trial task

// The models that the learner `name` samples on held-out tasks: MAML's,
// MAML + noise's, or the k-th PLATIPUS's of a run (and any other learner's).
inline std::uint64_t models(std::string_view name, std::uint64_t k = 0) {
  if (name == "maml") return maml_models;
  return name == "maml_noise" ? maml_noise_models : platipus_models + k;
}

// The training tasks of the paper's learner `name` (MAML, MAML + noise,
// PLATIPUS; CelebA's "platipus_kl0.15" is a PLATIPUS).
inline std::uint64_t training_tasks(std::string_view name) {
  if (name == "maml_noise") return maml_noise_tasks;
  return name.starts_with("platipus") ? platipus_tasks : maml_tasks;
}
}  // namespace examples::stream
