// Every settings struct of the library as JSON, both ways, in one place: the
// keys are the C++ field names, enums their C++ spellings ("sum",
// "support_and_query"), an unset optional null. Reading is strict, as a
// record of how a run was trained must be: a key the struct does not have,
// a value of the wrong type or an unknown enum spelling throws a
// platipus::error naming it; a key that is absent keeps the struct's default.
//
//   nlohmann::json j = PlatipusSettings{.kl_weight = 0.5};   // to JSON
//   auto settings = j.get<PlatipusSettings>();                // and back
//
// Each struct lists its fields once (fields(settings, visit)); the
// adl_serializer at the end turns that list into both directions.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "platipus/data/circles.hpp"
#include "platipus/data/sinusoid_line.hpp"
#include "platipus/meta/algorithms/anil.hpp"
#include "platipus/meta/algorithms/maml.hpp"
#include "platipus/meta/algorithms/maml_plus_plus.hpp"
#include "platipus/meta/algorithms/meta_sgd.hpp"
#include "platipus/meta/algorithms/platipus.hpp"
#include "platipus/meta/algorithms/reptile.hpp"
#include "platipus/nn/losses.hpp"
#include "platipus/nn/sequential.hpp"
#include "platipus/optim/optimizers.hpp"

namespace platipus::io {

// The spellings of an enum's values, in the order of the values.
template <class E>
struct EnumNames;
template <>
struct EnumNames<Reduction> {
  static constexpr std::array<std::pair<Reduction, std::string_view>, 2> names{
      {{Reduction::mean, "mean"}, {Reduction::sum, "sum"}}};
};
template <>
struct EnumNames<PosteriorData> {
  static constexpr std::array<std::pair<PosteriorData, std::string_view>, 2> names{
      {{PosteriorData::query, "query"}, {PosteriorData::support_and_query, "support_and_query"}}};
};

template <>
struct EnumNames<nn::Activation> {
  static constexpr std::array<std::pair<nn::Activation, std::string_view>, 4> names{
      {{nn::Activation::none, "none"},
       {nn::Activation::relu, "relu"},
       {nn::Activation::tanh, "tanh"},
       {nn::Activation::sigmoid, "sigmoid"}}};
};
template <>
struct EnumNames<nn::Init> {
  static constexpr std::array<std::pair<nn::Init, std::string_view>, 5> names{
      {{nn::Init::zeros, "zeros"},
       {nn::Init::ones, "ones"},
       {nn::Init::uniform_fan_in, "uniform_fan_in"},
       {nn::Init::glorot_uniform, "glorot_uniform"},
       {nn::Init::he_normal, "he_normal"}}};
};

// The field lists: visit(name, field) for each field, in declaration order.
template <class S, class V>
requires std::same_as<std::remove_const_t<S>, optim::AdamSettings>
void fields(S& s, V&& visit) {
  visit("learning_rate", s.learning_rate);
  visit("beta1", s.beta1);
  visit("beta2", s.beta2);
  visit("epsilon", s.epsilon);
  visit("annealing_steps", s.annealing_steps);
  visit("final_learning_rate", s.final_learning_rate);
}

template <class T>
inline constexpr bool is_inner_loop = false;
template <class Defaults>
inline constexpr bool is_inner_loop<BasicInnerLoop<Defaults>> = true;

template <class S, class V>
requires is_inner_loop<std::remove_const_t<S>>
void fields(S& s, V&& visit) {
  visit("steps", s.steps);
  visit("learning_rate", s.learning_rate);
  visit("gradient_noise", s.gradient_noise);
  visit("max_gradient_norm", s.max_gradient_norm);
  visit("evaluation_steps", s.evaluation_steps);
}

// The driver's settings that every learner's hold, after its own. They are
// written flat, beside the learner's own keys, as they were before they were
// gathered into DriverSettings: a settings record is read back by older
// checkpoints' keys.
template <class S, class V>
void driver_fields(S& s, V&& visit) {
  visit("meta_optimizer", s.driver.meta_optimizer);
  visit("threads", s.driver.threads);
  visit("task_chunks", s.driver.task_chunks);
}

template <class S, class V>
requires std::same_as<std::remove_const_t<S>, MamlSettings>
void fields(S& s, V&& visit) {
  visit("inner_loop", s.inner_loop);
  visit("first_order", s.first_order);
  driver_fields(s, visit);
}

template <class S, class V>
requires std::same_as<std::remove_const_t<S>, PlatipusSettings>
void fields(S& s, V&& visit) {
  visit("inner_loop", s.inner_loop);
  visit("mean_steps", s.mean_steps);
  visit("kl_weight", s.kl_weight);
  visit("query_reduction", s.query_reduction);
  visit("kl_anneal_steps", s.kl_anneal_steps);
  visit("prior_likelihood_weight", s.prior_likelihood_weight);
  visit("posterior_data", s.posterior_data);
  visit("initial_prior_variance", s.initial_prior_variance);
  visit("initial_posterior_variance", s.initial_posterior_variance);
  visit("initial_gamma_p", s.initial_gamma_p);
  visit("initial_gamma_q", s.initial_gamma_q);
  driver_fields(s, visit);
}

template <class S, class V>
requires std::same_as<std::remove_const_t<S>, MetaSgdSettings> ||
    std::same_as<std::remove_const_t<S>, ReptileSettings>
void fields(S& s, V&& visit) {
  visit("inner_loop", s.inner_loop);
  driver_fields(s, visit);
}

template <class S, class V>
requires std::same_as<std::remove_const_t<S>, AnilSettings>
void fields(S& s, V&& visit) {
  visit("inner_loop", s.inner_loop);
  visit("head", s.head);
  visit("first_order", s.first_order);
  driver_fields(s, visit);
}

template <class S, class V>
requires std::same_as<std::remove_const_t<S>, MamlPlusPlusSettings>
void fields(S& s, V&& visit) {
  visit("inner_loop", s.inner_loop);
  visit("multi_step_loss_steps", s.multi_step_loss_steps);
  visit("first_order_steps", s.first_order_steps);
  driver_fields(s, visit);
}

// The losses', the networks' and the task samplers' settings.
template <class S, class V>
requires std::same_as<std::remove_const_t<S>, MseLoss> ||
    std::same_as<std::remove_const_t<S>, BceWithLogitsLoss> ||
    std::same_as<std::remove_const_t<S>, SoftmaxCrossEntropyLoss>
void fields(S& s, V&& visit) {
  visit("reduction", s.reduction);
}

template <class S, class V>
requires std::same_as<std::remove_const_t<S>, GaussianNllLoss>
void fields(S& s, V&& visit) {
  visit("noise_std", s.noise_std);
  visit("reduction", s.reduction);
}

template <class S, class V>
requires std::same_as<std::remove_const_t<S>, nn::MlpSettings>
void fields(S& s, V&& visit) {
  visit("inputs", s.inputs);
  visit("hidden", s.hidden);
  visit("outputs", s.outputs);
  visit("activation", s.activation);
  visit("bias_transform", s.bias_transform);
  visit("init", s.init);
}

template <class S, class V>
requires std::same_as<std::remove_const_t<S>, nn::ConvNetSettings>
void fields(S& s, V&& visit) {
  visit("channels", s.channels);
  visit("size", s.size);
  visit("filters", s.filters);
  visit("blocks", s.blocks);
  visit("outputs", s.outputs);
  visit("strided", s.strided);
  visit("batch_norm", s.batch_norm);
  visit("activation", s.activation);
}

template <class S, class V>
requires std::same_as<std::remove_const_t<S>, data::SinusoidLineSettings>
void fields(S& s, V&& visit) {
  visit("support", s.support);
  visit("query", s.query);
  visit("noise_std", s.noise_std);
  visit("x_min", s.x_min);
  visit("x_max", s.x_max);
  visit("amplitude_min", s.amplitude_min);
  visit("amplitude_max", s.amplitude_max);
  visit("phase_min", s.phase_min);
  visit("phase_max", s.phase_max);
  visit("line_min", s.line_min);
  visit("line_max", s.line_max);
  visit("sinusoid_fraction", s.sinusoid_fraction);
}

template <class S, class V>
requires std::same_as<std::remove_const_t<S>, data::CirclesSettings>
void fields(S& s, V&& visit) {
  visit("support", s.support);
  visit("query", s.query);
  visit("positive_fraction", s.positive_fraction);
  visit("domain", s.domain);
  visit("centre_min", s.centre_min);
  visit("centre_max", s.centre_max);
  visit("radius_min", s.radius_min);
  visit("radius_max", s.radius_max);
}

// Whether S lists its fields (a named visitor: Clang 14 takes a lambda in a
// requires-expression as always valid).
struct IgnoreField {
  template <class F>
  void operator()(const char*, F&) const {}
};
template <class S>
concept SettingsStruct = requires(S& s, IgnoreField visit) {
  fields(s, visit);
};

template <class T>
inline constexpr bool is_optional = false;
template <class T>
inline constexpr bool is_optional<std::optional<T>> = true;

// One field as JSON: an unset optional is null.
template <class F>
nlohmann::json field_json(const F& field) {
  if constexpr (is_optional<F>)
    return field ? field_json(*field) : nlohmann::json(nullptr);
  else
    return field;
}

// One field from JSON, of its own type only: a 1.5 for an int or a number
// for a bool is refused rather than converted.
template <class F>
void read_field(const nlohmann::json& j, F& field) {
  if constexpr (is_optional<F>) {
    if (j.is_null()) {
      field.reset();
    } else {
      typename F::value_type value{};
      read_field(j, value);
      field = value;
    }
  } else if constexpr (std::is_same_v<F, bool>) {
    if (!j.is_boolean()) throw error(fmt::format("expected true or false, got {}", j.dump()));
    field = j.get<bool>();
  } else if constexpr (std::is_integral_v<F>) {
    if (!j.is_number_integer()) throw error(fmt::format("expected an integer, got {}", j.dump()));
    const auto value = j.get<std::int64_t>();
    if (j.is_number_unsigned() ? j.get<std::uint64_t>() > std::numeric_limits<F>::max()
                               : !std::in_range<F>(value))
      throw error(fmt::format("{} is out of range", j.dump()));
    field = static_cast<F>(value);
  } else if constexpr (std::is_floating_point_v<F>) {
    if (!j.is_number()) throw error(fmt::format("expected a number, got {}", j.dump()));
    field = j.get<F>();
  } else {
    j.get_to(field);  // a settings struct, an enum, a list of names
  }
}

}  // namespace platipus::io

// The serializers, in nlohmann's namespace as its documentation asks.
NLOHMANN_JSON_NAMESPACE_BEGIN

template <class E>
requires requires {
  platipus::io::EnumNames<E>::names;
}
struct adl_serializer<E> {
  static void to_json(json& j, E value) {
    for (const auto& [v, name] : platipus::io::EnumNames<E>::names)
      if (v == value) j = std::string(name);
  }
  static void from_json(const json& j, E& value) {
    std::string spellings;
    for (const auto& [v, name] : platipus::io::EnumNames<E>::names) {
      if (j.is_string() && j.get_ref<const std::string&>() == name) {
        value = v;
        return;
      }
      spellings += (spellings.empty() ? "" : ", ") + std::string(name);
    }
    throw platipus::error(fmt::format("{} is none of {}", j.dump(), spellings));
  }
};

template <class S>
requires platipus::io::SettingsStruct<S>
struct adl_serializer<S> {
  static void to_json(json& j, const S& s) {
    j = json::object();
    platipus::io::fields(
        s, [&](const char* key, const auto& field) { j[key] = platipus::io::field_json(field); });
  }
  static void from_json(const json& j, S& s) {
    platipus::check(j.is_object(), "settings", "expected an object of settings, got {}", j.dump());
    for (const auto& item : j.items()) {
      const std::string& key = item.key();
      bool known = false;
      platipus::io::fields(s, [&](const char* name, auto&) { known = known || key == name; });
      platipus::check(known, "settings", "unknown setting \"{}\"", key);
    }
    platipus::io::fields(s, [&](const char* key, auto& field) {
      const auto it = j.find(key);
      if (it == j.end()) return;
      try {
        platipus::io::read_field(*it, field);
      } catch (const std::exception& e) {  // the value's own error, or a nested setting's
        throw platipus::error(fmt::format("setting \"{}\": {}", key, e.what()));
      }
    });
  }
};

NLOHMANN_JSON_NAMESPACE_END
