// Checkpoints: named tensors plus metadata in one file, written atomically.
//
// Layout: the line "platipus-checkpoint 1\n", a line holding the byte length
// of a JSON header, the header, then the tensors' raw little-endian values
// back to back. The header names the dtype, each tensor's name, shape and
// byte offset, the model's parameter layout (so that loading into another
// architecture fails with a message) and free-form metadata.
#pragma once

#include <bit>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "platipus/io/atomic_file.hpp"
#include "platipus/nn/parameters.hpp"

namespace platipus::io {

inline constexpr std::string_view checkpoint_magic = "platipus-checkpoint 1\n";

template <class T>
constexpr const char* dtype_name() {
  return std::is_same_v<T, float> ? "float32" : "float64";
}

inline nlohmann::json describe_layout(const nn::ParamLayout& layout) {
  nlohmann::json pieces = nlohmann::json::array();
  for (const auto& s : layout.specs())
    pieces.push_back(
        {{"name", s.name}, {"shape", std::vector<std::int64_t>(s.shape.begin(), s.shape.end())}});
  return pieces;
}

template <class T, class B = cpu>
struct Checkpoint {
  nlohmann::json layout;    // describe_layout of the model that wrote it
  nlohmann::json metadata;  // free-form: settings, step count, ...
  std::map<std::string, Tensor<T, B>> tensors;
};

template <class T, class B>
void save_checkpoint(const std::filesystem::path& path, const nn::ParamLayout& layout,
                     const std::vector<std::pair<std::string, const Tensor<T, B>*>>& tensors,
                     const nlohmann::json& metadata = nlohmann::json::object()) {
  static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");
  nlohmann::json header{
      {"dtype", dtype_name<T>()}, {"layout", describe_layout(layout)}, {"metadata", metadata}};
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    header["tensors"].push_back(
        {{"name", name},
         {"shape", std::vector<std::int64_t>(tensor->shape().begin(), tensor->shape().end())},
         {"offset", data.size()}});
    const auto values = tensor->to_vector();
    data.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }
  const std::string json = header.dump();
  std::string file(checkpoint_magic);
  file += std::to_string(json.size()) + "\n" + json + data;
  write_file_atomically(path, file);
}

template <class T, class B = cpu>
Checkpoint<T, B> load_checkpoint(const std::filesystem::path& path) {
  const std::string file = read_file(path);
  const std::string where = path.string();
  check(file.starts_with(checkpoint_magic), "load_checkpoint", "{} is not a platipus checkpoint",
        where);
  const std::size_t line_end = file.find('\n', checkpoint_magic.size());
  check(line_end != std::string::npos, "load_checkpoint", "{}: truncated header", where);
  std::size_t header_size = 0;
  try {
    header_size =
        std::stoull(file.substr(checkpoint_magic.size(), line_end - checkpoint_magic.size()));
  } catch (const std::exception&) {
    fail("load_checkpoint", "{}: corrupt header length", where);
  }
  const std::size_t data_start = line_end + 1 + header_size;
  check(data_start <= file.size(), "load_checkpoint", "{}: truncated (header of {} bytes)", where,
        header_size);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file.substr(line_end + 1, header_size));
  } catch (const std::exception& e) {
    fail("load_checkpoint", "{}: corrupt header: {}", where, e.what());
  }
  Checkpoint<T, B> out;
  try {
    check(header.at("dtype") == dtype_name<T>(), "load_checkpoint",
          "{} holds {} values, expected {}", where, header.at("dtype").dump(), dtype_name<T>());
    out.layout = header.at("layout");
    out.metadata = header.value("metadata", nlohmann::json::object());
    const std::size_t available = file.size() - data_start;
    for (const auto& t : header.at("tensors")) {
      const auto name = t.at("name").get<std::string>();
      Shape shape;
      try {
        shape = Shape(t.at("shape").get<std::vector<std::int64_t>>());
      } catch (const error& e) {
        fail("load_checkpoint", "{}: tensor '{}' has a bad shape: {}", where, name, e.what());
      }
      const std::size_t offset = t.at("offset").get<std::size_t>();
      const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * sizeof(T);
      // Written so that no sum can wrap around for hostile offsets.
      check(offset <= available && bytes <= available - offset, "load_checkpoint",
            "{}: tensor '{}' runs past the end of the file", where, name);
      std::vector<T> values(static_cast<std::size_t>(shape.numel()));
      std::memcpy(values.data(), file.data() + data_start + offset, bytes);
      out.tensors.emplace(name, Tensor<T, B>::from_host(shape, values));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("load_checkpoint", "{}: malformed header: {}", where, e.what());
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

// Saves a meta-learner's meta-parameters (its state(): MAML's theta, or
// PLATIPUS's five parts) with its model's layout and `metadata`.
template <class Algorithm>
void save(const std::filesystem::path& path, const Algorithm& algorithm,
          const nlohmann::json& metadata = nlohmann::json::object()) {
  save_checkpoint(path, algorithm.model().layout(), algorithm.state(), metadata);
}

// Loads a checkpoint written by `save` into a meta-learner of the same
// architecture; returns the checkpoint's metadata. Throws platipus::error
// naming the file for a missing or corrupt file or another architecture.
template <class Algorithm>
nlohmann::json load(const std::filesystem::path& path, Algorithm& algorithm) {
  using TensorType = std::remove_cvref_t<decltype(*algorithm.state()[0].second)>;
  auto checkpoint =
      load_checkpoint<typename TensorType::value_type, typename TensorType::backend>(path);
  std::vector<std::pair<std::string, TensorType>> values;
  for (const auto& [name, current] : algorithm.state())
    values.emplace_back(name,
                        take(checkpoint, path, algorithm.model().layout(), name, current->shape()));
  for (auto& [name, value] : values) algorithm.set_state(name, std::move(value));
  return checkpoint.metadata;
}

}  // namespace platipus::io
