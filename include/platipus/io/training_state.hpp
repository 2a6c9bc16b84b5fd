// Training state as one unit (DESIGN.md): a checkpoint from which training
// resumes with the same bits as a run that never stopped. It holds the
// learner's training_state() (meta-parameters, the meta-optimiser's moments
// and its step number, from which every schedule derives: KL annealing, the
// cosine meta learning rate, MAML++'s) and, in the metadata under
// "training_state", the step count and the training generator's position,
// beside the caller's metadata. One atomic write (io/checkpoint.hpp).
//
//   io::save_training_state("run.safetensors", maml, gen, {{"options", ...}});
//   ... the process stops; a new one makes the same learner and sampler ...
//   Generator gen = io::load_training_state("run.safetensors", maml).generator;
//   // meta_train_step(sampler.sample(25, gen), gen) goes on where it stopped
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "platipus/core/error.hpp"
#include "platipus/core/philox.hpp"
#include "platipus/io/checkpoint.hpp"

namespace platipus::io {

// What load_training_state gives back besides the learner's state.
struct ResumedTraining {
  Generator generator;      // at the position the saved run had reached
  nlohmann::json metadata;  // the caller's, as saved
};

// Saves `algorithm`'s training state and `gen`'s position with `metadata`
// (a JSON object, which must not use the key "training_state").
template <class Algorithm>
void save_training_state(const std::filesystem::path& path, const Algorithm& algorithm,
                         const Generator& gen, nlohmann::json metadata = nlohmann::json::object()) {
  check(metadata.is_object() && !metadata.contains("training_state"), "save_training_state",
        "{}: the metadata must be a JSON object without the key \"training_state\"", path.string());
  metadata["training_state"] = {
      {"steps", static_cast<std::uint64_t>(algorithm.steps())},
      {"generator", {{"seed", gen.seed()}, {"stream", gen.stream()}, {"counter", gen.counter()}}}};
  save_checkpoint(path, algorithm.model().layout(), algorithm.training_state(), metadata);
}

// Loads a checkpoint written by save_training_state into a learner of the
// same architecture and settings type: all or nothing, a failure naming the
// file and leaving the learner as it was. A checkpoint of meta-parameters
// alone (io::save) is refused: it cannot resume with the same bits.
template <class Algorithm>
ResumedTraining load_training_state(const std::filesystem::path& path, Algorithm& algorithm) {
  using TensorType = StateTensor<Algorithm>;
  using T = typename TensorType::value_type;
  auto checkpoint = load_checkpoint<T, typename TensorType::backend>(path);
  const auto& state = checkpoint.metadata.contains("training_state")
                          ? checkpoint.metadata["training_state"]
                          : nlohmann::json();
  check(state.is_object(), "load_training_state",
        "{} holds no training state (written by io::save, which keeps the meta-parameters "
        "only): it cannot resume training; io::load reads it",
        path.string());
  const auto read = [&](const nlohmann::json& j, const char* key) {
    check(j.is_object() && j.contains(key) && j[key].is_number_unsigned(), "load_training_state",
          "{}: training_state has no valid \"{}\"", path.string(), key);
    return j[key].template get<std::uint64_t>();
  };
  const std::uint64_t steps = read(state, "steps");
  const auto& generator = state.contains("generator") ? state["generator"] : nlohmann::json();
  const std::uint64_t seed = read(generator, "seed"), stream = read(generator, "stream"),
                      counter = read(generator, "counter");

  auto values = take_state(checkpoint, path, algorithm);
  if (steps > 0) {
    std::vector<Shape> shapes;
    for (const auto& [name, value] : values) shapes.push_back(value.shape());
    const auto names = Algorithm::optimizer_state_names();
    for (std::size_t i = 0; i < names.size(); ++i) {
      const Shape shape = i < 2 * shapes.size() ? shapes[i % shapes.size()] : Shape{1};
      values.emplace_back(names[i],
                          take(checkpoint, path, algorithm.model().layout(), names[i], shape));
    }
    const auto saved_steps = static_cast<std::uint64_t>(values.back().second.item());
    check(saved_steps == steps, "load_training_state",
          "{}: training_state says {} steps but adam.step holds {}", path.string(), steps,
          saved_steps);
  }
  algorithm.set_training_state(std::move(values));
  checkpoint.metadata.erase("training_state");
  return {Generator(seed, stream, counter), std::move(checkpoint.metadata)};
}

}  // namespace platipus::io
