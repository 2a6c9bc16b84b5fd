// Checkpoints: named tensors plus metadata in one safetensors file
// (io/safetensors.hpp), written atomically, readable by Python's safetensors
// and numpy.
//
// The "__metadata__" strings hold "platipus.layout" (the model's parameter
// layout as JSON, so that loading into another architecture fails with a
// message), "platipus.metadata" (free-form JSON: settings, step count) and
// "platipus.checksum", the 64-bit FNV-1a hash of the layout, a zero byte,
// the metadata, a zero byte and the data ("fnv1a64-all:" and 16 hex digits):
// safetensors has no checksum, and a flipped byte would otherwise load as a
// silently wrong number or, once training resumes from it, a silently other
// setting. A checkpoint written before the hash covered the header
// ("fnv1a64:") is checked over its data alone. Non-finite values are refused
// unless the caller allows them.
#pragma once

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "platipus/io/safetensors.hpp"
#include "platipus/meta/driver/learner_set.hpp"
#include "platipus/nn/parameters.hpp"

namespace platipus::io {

template <class T>
constexpr const char* dtype_name() {
  return std::is_same_v<T, float> ? "F32" : "F64";
}

inline nlohmann::json describe_layout(const nn::ParamLayout& layout) {
  nlohmann::json pieces = nlohmann::json::array();
  for (const auto& s : layout.specs())
    pieces.push_back(
        {{"name", s.name}, {"shape", std::vector<std::int64_t>(s.shape.begin(), s.shape.end())}});
  return pieces;
}

// "float32 (F32)" for the dtype name "F32".
inline std::string dtype_words(std::string_view dtype) {
  if (dtype == "F32") return "float32 (F32)";
  if (dtype == "F64") return "float64 (F64)";
  return std::string(dtype);
}

template <class T, class B = cpu>
struct Checkpoint {
  nlohmann::json layout;    // describe_layout of the model that wrote it
  nlohmann::json metadata;  // free-form: settings, step count, ...
  std::map<std::string, Tensor<T, B>> tensors;
};

struct CheckpointOptions {
  bool allow_non_finite = false;  // load NaN and Inf values instead of refusing them
};

// The checksum of a checkpoint: its hash (of the layout, a zero byte, the
// metadata, a zero byte and the data) prefixed by whole_checksum_kind.
inline constexpr std::string_view whole_checksum_kind = "fnv1a64-all:";
inline constexpr std::string_view zero_byte("\0", 1);
inline std::string whole_checksum(const DataChecksum& hash) {
  const std::string text = hash.text();  // "fnv1a64:" and the digits
  return std::string(whole_checksum_kind) + text.substr(text.find(':') + 1);
}

// The magic line of the format before safetensors, to refuse it by name.
inline constexpr std::string_view old_checkpoint_magic = "platipus-checkpoint 1\n";

template <class T, class B>
void save_checkpoint(const std::filesystem::path& path, const nn::ParamLayout& layout,
                     const std::vector<std::pair<std::string, const Tensor<T, B>*>>& tensors,
                     const nlohmann::json& metadata = nlohmann::json::object()) {
  std::vector<std::vector<T>> values;
  for (const auto& named : tensors) values.push_back(named.second->to_vector());
  std::vector<SafetensorsTensor> stored;
  const std::string layout_text = describe_layout(layout).dump(), metadata_text = metadata.dump();
  DataChecksum checksum;  // of the header's strings and the data as written
  checksum.add(layout_text).add(zero_byte).add(metadata_text).add(zero_byte);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string_view bytes(reinterpret_cast<const char*>(values[i].data()),
                                 values[i].size() * sizeof(T));
    stored.push_back({tensors[i].first, dtype_name<T>(), tensors[i].second->shape(), bytes});
    checksum.add(bytes);
  }
  write_safetensors(path, stored,
                    {{"platipus.layout", layout_text},
                     {"platipus.metadata", metadata_text},
                     {"platipus.checksum", whole_checksum(checksum)}});
}

template <class T, class B = cpu>
Checkpoint<T, B> load_checkpoint(const std::filesystem::path& path,
                                 const CheckpointOptions& options = {}) {
  const std::string where = path.string();
  const RegularFile opened(path);
  check(opened.size() < old_checkpoint_magic.size() ||
            opened.read(0, old_checkpoint_magic.size()) != old_checkpoint_magic,
        "load_checkpoint",
        "{} is a checkpoint of the format before safetensors; convert it with "
        "`python3 scripts/convert_checkpoint.py {} NEW.safetensors`",
        where, where);
  const SafetensorsLimits limits;
  const auto file = read_safetensors(opened, limits);
  auto entry = [&](const char* key) -> const std::string& {
    const auto it = file.metadata.find(key);
    check(it != file.metadata.end(), "load_checkpoint",
          "{} is not a platipus checkpoint (its __metadata__ has no \"{}\")", where, key);
    return it->second;
  };
  const auto& checksum = entry("platipus.checksum");
  const auto& layout = entry("platipus.layout");
  const auto& metadata = entry("platipus.metadata");
  const bool whole = checksum.starts_with(whole_checksum_kind);
  const auto actual =
      whole ? whole_checksum(
                  DataChecksum().add(layout).add(zero_byte).add(metadata).add(zero_byte).add(
                      file.data))
            : DataChecksum().add(file.data).text();  // written before the header's hash
  check(checksum == actual, "load_checkpoint",
        "{} is corrupt: its {} not match its checksum {} (they hash to {})", where,
        whole ? "header and data do" : "data does", checksum, actual);
  Checkpoint<T, B> out;
  out.layout = parse_json_strictly(layout, limits.max_json_depth, where + " (platipus.layout)");
  out.metadata =
      parse_json_strictly(metadata, limits.max_json_depth, where + " (platipus.metadata)");
  for (const auto& t : file.tensors) {
    check(t.dtype == dtype_name<T>(), "load_checkpoint",
          "{}: tensor '{}' holds {} values, but this learner is {}; convert the checkpoint "
          "explicitly",
          where, t.name, dtype_words(t.dtype), dtype_words(dtype_name<T>()));
    std::vector<T> values(static_cast<std::size_t>(t.shape.numel()));
    std::memcpy(values.data(), file.data.data() + t.begin, t.end - t.begin);
    if (!options.allow_non_finite) {
      const auto bad = std::ranges::find_if(values, [](T v) { return !std::isfinite(v); });
      check(bad == values.end(), "load_checkpoint",
            "{}: tensor '{}' holds a non-finite value ({} at element {}); pass "
            "allow_non_finite to load it anyway",
            where, t.name, *bad, bad - values.begin());
    }
    out.tensors.emplace(t.name, Tensor<T, B>::from_host(t.shape, values));
  }
  return out;
}

// The tensor `name` of a checkpoint written for `layout`, with `shape`;
// throws naming the file when the architecture or the tensor differs.
template <class T, class B>
Tensor<T, B> take(Checkpoint<T, B>& checkpoint, const std::filesystem::path& path,
                  const nn::ParamLayout& layout, const std::string& name, const Shape& shape) {
  check(checkpoint.layout == describe_layout(layout), "load_checkpoint",
        "{} was written for a different architecture: {} (this model: {})", path.string(),
        checkpoint.layout.dump(), describe_layout(layout).dump());
  auto it = checkpoint.tensors.find(name);
  check(it != checkpoint.tensors.end(), "load_checkpoint", "{} has no tensor '{}'", path.string(),
        name);
  check(it->second.shape() == shape, "load_checkpoint", "{}: tensor '{}' is {}, expected {}",
        path.string(), name, it->second.shape(), shape);
  return std::move(it->second);
}

// The tensor type of a meta-learner's state (Tensor<float, cpu>, ...).
template <class Algorithm>
using StateTensor =
    std::remove_cvref_t<decltype(*std::declval<const Algorithm&>().state()[0].second)>;

// Saves a meta-learner's meta-parameters (its state(): MAML's theta, or
// PLATIPUS's five parts) with its model's layout and `metadata`.
template <class Algorithm>
void save(const std::filesystem::path& path, const Algorithm& algorithm,
          const nlohmann::json& metadata = nlohmann::json::object()) {
  save_checkpoint(path, algorithm.model().layout(), algorithm.state(), metadata);
}

// Writes one checkpoint of every learner of `set`, the tensors that
// tensors_of(learner) names (its state(), its training_state()) under the
// learner's name ("maml/theta"). A checkpoint records one layout, so the
// learners must share their model's architecture; `who` names the caller.
template <class... Learners, class TensorsOf>
void save_set(const std::filesystem::path& path, const LearnerSet<Learners...>& set,
              const char* who, TensorsOf tensors_of, const nlohmann::json& metadata) {
  using TensorType = StateTensor<std::tuple_element_t<0, std::tuple<Learners...>>>;
  check(!set.empty(), who, "{}: the set of learners to save is empty", path.string());
  const nn::ParamLayout* layout = nullptr;
  std::vector<std::pair<std::string, const TensorType*>> named;
  set.for_each([&](const std::string& learner, const auto& algorithm) {
    if (layout == nullptr) layout = &algorithm.model().layout();
    check(describe_layout(algorithm.model().layout()) == describe_layout(*layout), who,
          "{}: learner '{}' has another architecture than the set's first learner, and a "
          "checkpoint holds one",
          path.string(), learner);
    for (const auto& [name, tensor] : tensors_of(algorithm))
      named.emplace_back(learner + "/" + name, tensor);
  });
  save_checkpoint(path, *layout, named, metadata);
}

// Saves every learner of `set` in one checkpoint, each one's tensors under
// its name ("maml/theta"); the learners must share their architecture.
template <class... Learners>
void save(const std::filesystem::path& path, const LearnerSet<Learners...>& set,
          const nlohmann::json& metadata = nlohmann::json::object()) {
  save_set(
      path, set, "save", [](const auto& algorithm) { return algorithm.state(); }, metadata);
}

// The values in `checkpoint` of `algorithm`'s state, its tensors named
// `prefix` + their name; throws naming the file when one is missing or of
// another shape or architecture.
template <class Algorithm, class T, class B>
std::vector<std::pair<std::string, Tensor<T, B>>> take_state(Checkpoint<T, B>& checkpoint,
                                                             const std::filesystem::path& path,
                                                             const Algorithm& algorithm,
                                                             const std::string& prefix = "") {
  std::vector<std::pair<std::string, Tensor<T, B>>> values;
  for (const auto& [name, current] : algorithm.state())
    values.emplace_back(
        name, take(checkpoint, path, algorithm.model().layout(), prefix + name, current->shape()));
  return values;
}

// Loads a checkpoint written by `save` into a meta-learner of the same
// architecture; returns the checkpoint's metadata. Throws platipus::error
// naming the file for a missing or corrupt file or another architecture,
// leaving the learner as it was.
template <class Algorithm>
nlohmann::json load(const std::filesystem::path& path, Algorithm& algorithm) {
  using TensorType = StateTensor<Algorithm>;
  auto checkpoint =
      load_checkpoint<typename TensorType::value_type, typename TensorType::backend>(path);
  for (auto& [name, value] : take_state(checkpoint, path, algorithm))
    algorithm.set_state(name, std::move(value));
  return checkpoint.metadata;
}

// Loads every learner of `set` from a checkpoint written by `save` for a
// set (tensors the set has no learner for are left unread); all or none:
// a failure leaves every learner as it was.
template <class... Learners>
nlohmann::json load(const std::filesystem::path& path, LearnerSet<Learners...>& set) {
  using TensorType = StateTensor<std::tuple_element_t<0, std::tuple<Learners...>>>;
  using T = typename TensorType::value_type;
  using B = typename TensorType::backend;
  auto checkpoint = load_checkpoint<T, B>(path);
  std::vector<std::vector<std::pair<std::string, Tensor<T, B>>>> values;
  set.for_each([&](const std::string& learner, const auto& algorithm) {
    values.push_back(take_state(checkpoint, path, algorithm, learner + "/"));
  });
  auto next = values.begin();
  set.for_each([&](const std::string&, auto& algorithm) {
    for (auto& [name, value] : *next++) algorithm.set_state(name, std::move(value));
  });
  return checkpoint.metadata;
}

// The metadata of a checkpoint of `set`'s learners (of their scalar type
// and backend), checked as load reads it: what a caller looks at before
// loading (which learners it holds, the settings it was written with).
template <class... Learners>
nlohmann::json checkpoint_metadata(const std::filesystem::path& path,
                                   const LearnerSet<Learners...>&) {
  using TensorType = StateTensor<std::tuple_element_t<0, std::tuple<Learners...>>>;
  return load_checkpoint<typename TensorType::value_type, typename TensorType::backend>(path)
      .metadata;
}

}  // namespace platipus::io
