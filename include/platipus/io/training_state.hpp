// Training state as one unit (DESIGN.md): a checkpoint from which training
// resumes with the same bits as a run that never stopped. It holds the
// learner's training_state() (meta-parameters, the meta-optimiser's moments
// and its step number, from which every schedule derives: KL annealing, the
// cosine meta learning rate, MAML++'s) and, in the metadata under
// "training_state", the step count, the training generator's position and
// the library version that wrote it (a run resumes only under the same one),
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
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "platipus/core/error.hpp"
#include "platipus/core/philox.hpp"
#include "platipus/core/version.hpp"
#include "platipus/io/checkpoint.hpp"

namespace platipus::io {

// What load_training_state gives back besides the learner's state.
struct ResumedTraining {
  Generator generator;      // at the position the saved run had reached
  nlohmann::json metadata;  // the caller's, as saved
};

namespace detail {

// metadata["training_state"]: the step count(s) (one, or one per learner
// of a set), the generator's position and this library's version.
inline nlohmann::json state_json(nlohmann::json steps, const Generator& gen) {
  return {
      {"steps", std::move(steps)},
      {"generator", {{"seed", gen.seed()}, {"stream", gen.stream()}, {"counter", gen.counter()}}},
      {"library_version", std::string(library_version)}};
}

// metadata["training_state"] as save_training_state wrote it, checked, of
// this library's version.
inline nlohmann::json saved_state(const nlohmann::json& metadata,
                                  const std::filesystem::path& path) {
  nlohmann::json state =
      metadata.contains("training_state") ? metadata["training_state"] : nlohmann::json();
  check(state.is_object(), "load_training_state",
        "{} holds no training state (written by io::save, which keeps the meta-parameters "
        "only): it cannot resume training; io::load reads it",
        path.string());
  const auto& written =
      state.contains("library_version") ? state["library_version"] : nlohmann::json();
  check(written.is_string() && written.get<std::string>() == library_version, "load_training_state",
        "{} is a training state of {}, and this is platipus {}: a run resumes only under the "
        "version that wrote it, whose meta-steps compute the same bits (io::load reads its "
        "meta-parameters)",
        path.string(),
        written.is_string() ? "platipus " + written.get<std::string>()
                            : std::string("a platipus that did not record its version"),
        library_version);
  return state;
}

inline std::uint64_t saved_count(const nlohmann::json& j, const char* key,
                                 const std::filesystem::path& path) {
  check(j.is_object() && j.contains(key) && j[key].is_number_unsigned(), "load_training_state",
        "{}: training_state has no valid \"{}\"", path.string(), key);
  return j[key].get<std::uint64_t>();
}

inline Generator saved_generator(const nlohmann::json& state, const std::filesystem::path& path) {
  const auto& g = state.contains("generator") ? state["generator"] : nlohmann::json();
  const std::uint64_t seed = saved_count(g, "seed", path), stream = saved_count(g, "stream", path),
                      counter = saved_count(g, "counter", path);
  return Generator(seed, stream, counter);
}

// `algorithm`'s training state in `checkpoint`, its tensors named `prefix`
// + their name, with the optimiser's entries when it had taken steps.
template <class Algorithm, class T, class B>
std::vector<std::pair<std::string, Tensor<T, B>>> take_training_state(
    Checkpoint<T, B>& checkpoint, const std::filesystem::path& path, const Algorithm& algorithm,
    std::uint64_t steps, const std::string& prefix = "") {
  auto values = take_state(checkpoint, path, algorithm, prefix);
  if (steps == 0) return values;
  std::vector<Shape> shapes;
  for (const auto& [name, value] : values) shapes.push_back(value.shape());
  const auto names = Algorithm::optimizer_state_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Shape shape = i < 2 * shapes.size() ? shapes[i % shapes.size()] : Shape{1};
    values.emplace_back(
        names[i], take(checkpoint, path, algorithm.model().layout(), prefix + names[i], shape));
  }
  const auto saved_steps = static_cast<std::uint64_t>(values.back().second.item());
  check(saved_steps == steps, "load_training_state",
        "{}: training_state says {} steps but {}adam.step holds {}", path.string(), steps, prefix,
        saved_steps);
  return values;
}

}  // namespace detail

// Saves `algorithm`'s training state and `gen`'s position with `metadata`
// (a JSON object, which must not use the key "training_state").
template <class Algorithm>
void save_training_state(const std::filesystem::path& path, const Algorithm& algorithm,
                         const Generator& gen, nlohmann::json metadata = nlohmann::json::object()) {
  check(metadata.is_object() && !metadata.contains("training_state"), "save_training_state",
        "{}: the metadata must be a JSON object without the key \"training_state\"", path.string());
  metadata["training_state"] =
      detail::state_json(static_cast<std::uint64_t>(algorithm.steps()), gen);
  save_checkpoint(path, algorithm.model().layout(), algorithm.training_state(), metadata);
}

// The same for every learner of `set`, each one's tensors under its name
// ("maml/theta", "maml/adam.first/theta"), as io::save writes a set: io::load
// reads the meta-parameters of such a checkpoint and leaves the rest.
template <class... Learners>
void save_training_state(const std::filesystem::path& path, const LearnerSet<Learners...>& set,
                         const Generator& gen, nlohmann::json metadata = nlohmann::json::object()) {
  check(metadata.is_object() && !metadata.contains("training_state"), "save_training_state",
        "{}: the metadata must be a JSON object without the key \"training_state\"", path.string());
  nlohmann::json steps = nlohmann::json::object();
  set.for_each([&](const std::string& learner, const auto& algorithm) {
    steps[learner] = static_cast<std::uint64_t>(algorithm.steps());
  });
  metadata["training_state"] = detail::state_json(std::move(steps), gen);
  save_set(
      path, set, "save_training_state",
      [](const auto& algorithm) { return algorithm.training_state(); }, metadata);
}

// Loads a checkpoint written by save_training_state into a learner of the
// same architecture and settings type: all or nothing, a failure naming the
// file and leaving the learner as it was. A checkpoint of meta-parameters
// alone (io::save) is refused: it cannot resume with the same bits.
template <class Algorithm>
ResumedTraining load_training_state(const std::filesystem::path& path, Algorithm& algorithm) {
  using TensorType = StateTensor<Algorithm>;
  auto checkpoint =
      load_checkpoint<typename TensorType::value_type, typename TensorType::backend>(path);
  const nlohmann::json state = detail::saved_state(checkpoint.metadata, path);
  check(!state.contains("steps") || !state["steps"].is_object(), "load_training_state",
        "{} holds the training state of a set of learners: load it into a LearnerSet",
        path.string());
  const Generator gen = detail::saved_generator(state, path);
  algorithm.set_training_state(detail::take_training_state(
      checkpoint, path, algorithm, detail::saved_count(state, "steps", path)));
  checkpoint.metadata.erase("training_state");
  return {gen, std::move(checkpoint.metadata)};
}

// Loads every learner of `set` from a checkpoint written by
// save_training_state for a set with the same names: all or nothing.
template <class... Learners>
ResumedTraining load_training_state(const std::filesystem::path& path,
                                    LearnerSet<Learners...>& set) {
  using TensorType = StateTensor<std::tuple_element_t<0, std::tuple<Learners...>>>;
  auto checkpoint =
      load_checkpoint<typename TensorType::value_type, typename TensorType::backend>(path);
  const nlohmann::json state = detail::saved_state(checkpoint.metadata, path);
  const auto& steps = state.contains("steps") ? state["steps"] : nlohmann::json();
  check(steps.is_object(), "load_training_state",
        "{} holds the training state of one learner, not of a set", path.string());
  const Generator gen = detail::saved_generator(state, path);
  std::vector<std::vector<std::pair<std::string, TensorType>>> values;
  set.for_each([&](const std::string& learner, const auto& algorithm) {
    check(steps.contains(learner), "load_training_state", "{} holds no learner '{}' (it holds: {})",
          path.string(), learner, [&] {
            std::string names;
            for (const auto& [name, count] : steps.items())
              names += (names.empty() ? "" : ", ") + name;
            return names;
          }());
    values.push_back(detail::take_training_state(checkpoint, path, algorithm,
                                                 detail::saved_count(steps, learner.c_str(), path),
                                                 learner + "/"));
  });
  auto next = values.begin();
  set.for_each([&](const std::string&, auto& algorithm) {
    algorithm.set_training_state(std::move(*next++));
  });
  checkpoint.metadata.erase("training_state");
  return {gen, std::move(checkpoint.metadata)};
}

}  // namespace platipus::io
