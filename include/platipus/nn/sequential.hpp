// Sequential: layers applied in order over one flat parameter vector, and
// the `mlp` builder for the paper's fully connected networks.
#pragma once

#include <variant>
#include <vector>

#include "platipus/nn/layers.hpp"

namespace platipus::nn {

class Sequential {
 public:
  using Layer = std::variant<Linear, BiasTransform, Activation>;

  explicit Sequential(std::int64_t inputs) : inputs_(inputs), features_(inputs) {}

  Sequential& linear(std::int64_t outputs, Init init = Init::uniform_fan_in) {
    Linear layer{features_, outputs, init};
    layer.declare(layout_, "layer" + std::to_string(layers_.size()));
    features_ = outputs;
    layers_.emplace_back(layer);
    return *this;
  }
  Sequential& bias_transform(std::int64_t dims) {
    BiasTransform layer{features_, dims};
    layer.declare(layout_, "layer" + std::to_string(layers_.size()));
    features_ += dims;
    layers_.emplace_back(layer);
    return *this;
  }
  Sequential& activation(Activation a) {
    layers_.emplace_back(a);
    return *this;
  }

  const ParamLayout& layout() const { return layout_; }
  std::int64_t inputs() const { return inputs_; }
  std::int64_t outputs() const { return features_; }

  // params [batch..., P], x [..., N, inputs] -> [..., N, outputs].
  template <class T, class B>
  Var<T, B> forward(const Var<T, B>& params, const Var<T, B>& x) const {
    check(params.rank() >= 1 && params.dim(-1) == layout_.size(), "Sequential::forward",
          "parameters {} do not match the model's {} values", params.shape(), layout_.size());
    const auto pieces = unflatten(params, layout_.shapes());
    return forward(std::span<const Var<T, B>>(pieces), x);
  }

  // The same from the named pieces (layout order), each [batch..., shape].
  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>> pieces, const Var<T, B>& x) const {
    check(pieces.size() == layout_.specs().size(), "Sequential::forward",
          "{} parameter pieces for a model of {}", pieces.size(), layout_.specs().size());
    Var<T, B> h = x;
    for (const auto& layer : layers_) {
      std::visit(
          [&](const auto& l) {
            if constexpr (std::is_same_v<std::decay_t<decltype(l)>, Activation>) {
              h = activate(l, h);
            } else {
              h = l.forward(pieces, h);
            }
          },
          layer);
    }
    return h;
  }

  template <class T, class B = cpu>
  Tensor<T, B> initialize(Generator& gen) const {
    return layout_.initialize<T, B>(gen);
  }

 private:
  std::int64_t inputs_, features_;
  ParamLayout layout_;
  std::vector<Layer> layers_;
};

struct MlpSettings {
  std::int64_t inputs = 1;
  std::vector<std::int64_t> hidden{40, 40};
  std::int64_t outputs = 1;
  Activation activation = Activation::relu;
  std::int64_t bias_transform = 0;  // dims of a bias transformation on the input; 0 for none
  // PyTorch's default. MAML's inner loop is sensitive to the initial output
  // scale: with He-normal weights, 5 inner steps of 0.01 on the sinusoid
  // tasks diverge (in PyTorch too); with this they learn.
  Init init = Init::uniform_fan_in;
};

// inputs [-> bias transform] -> hidden... (activation after each) -> outputs (linear).
inline Sequential mlp(const MlpSettings& s) {
  Sequential model(s.inputs);
  if (s.bias_transform > 0) model.bias_transform(s.bias_transform);
  for (auto width : s.hidden) model.linear(width, s.init).activation(s.activation);
  model.linear(s.outputs, s.init);
  return model;
}

}  // namespace platipus::nn
