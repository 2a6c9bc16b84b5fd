// Sequential: layers applied in order over one flat parameter vector, and
// the builders of the papers' networks: `mlp` (fully connected) and `conv4`
// (MAML's convolutional network).
#pragma once

#include <variant>
#include <vector>

#include "platipus/nn/layers.hpp"

namespace platipus::nn {

class Sequential {
 public:
  using Layer = std::variant<Linear, BiasTransform, Activation, Conv2d, MaxPool2d, Flatten>;

  // A network of feature vectors [inputs], or of images [C, H, W].
  explicit Sequential(std::int64_t inputs) : Sequential(Shape{inputs}) {}
  explicit Sequential(const Shape& sample) : input_(sample), sample_(sample) {
    check((sample.rank() == 1 || sample.rank() == 3) && sample.numel() > 0, "Sequential",
          "a sample is a feature vector [n] or an image [C, H, W], got {}", sample);
  }

  Sequential& linear(std::int64_t outputs, Init init = Init::uniform_fan_in) {
    Linear layer{vector_features("linear"), outputs, init};
    layer.declare(layout_, "layer" + std::to_string(layers_.size()));
    sample_ = Shape{outputs};
    layers_.emplace_back(layer);
    return *this;
  }
  Sequential& bias_transform(std::int64_t dims) {
    BiasTransform layer{vector_features("bias_transform"), dims};
    layer.declare(layout_, "layer" + std::to_string(layers_.size()));
    sample_ = Shape{sample_[0] + dims};
    layers_.emplace_back(layer);
    return *this;
  }
  Sequential& activation(Activation a) {
    layers_.emplace_back(a);
    return *this;
  }
  Sequential& conv2d(std::int64_t outputs, Window window = {.kernel = 3, .padding = 1},
                     Init init = Init::uniform_fan_in) {
    Conv2d layer{image("conv2d")[0], outputs, window, init};
    layer.declare(layout_, "layer" + std::to_string(layers_.size()));
    sample_ =
        Shape{outputs, window.output(sample_[1], "conv2d"), window.output(sample_[2], "conv2d")};
    layers_.emplace_back(layer);
    return *this;
  }
  Sequential& max_pool2d(Window window = {.kernel = 2, .stride = 2}) {
    const Shape& in = image("max_pool2d");
    sample_ = Shape{in[0], window.output(in[1], "max_pool2d"), window.output(in[2], "max_pool2d")};
    layers_.emplace_back(MaxPool2d{window});
    return *this;
  }
  Sequential& flatten() {
    sample_ = Shape{image("flatten").numel()};
    layers_.emplace_back(Flatten{});
    return *this;
  }

  const ParamLayout& layout() const { return layout_; }
  const Shape& input_shape() const { return input_; }
  std::int64_t inputs() const { return input_.numel(); }
  std::int64_t outputs() const { return sample_.numel(); }

  // params [batch..., P], x [..., N, inputs] (or [..., N, C, H, W]) -> [..., N, outputs].
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
            using L = std::decay_t<decltype(l)>;
            if constexpr (std::is_same_v<L, Activation>) {
              h = activate(l, h);
            } else if constexpr (std::is_same_v<L, MaxPool2d>) {
              h = platipus::max_pool2d(h, l.window);
            } else if constexpr (std::is_same_v<L, Flatten>) {
              check(h.rank() >= 3, "Flatten", "images must be [..., C, H, W], got {}", h.shape());
              Shape flat = h.shape().take_front(h.rank() - 3);
              flat.push_back(h.dim(-3) * h.dim(-2) * h.dim(-1));
              h = reshape(h, flat);
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
  // The features of a vector sample, for a layer that takes vectors.
  std::int64_t vector_features(std::string_view layer) const {
    check(sample_.rank() == 1, "Sequential",
          "{} takes feature vectors, and the samples are {} "
          "(add flatten() first)",
          layer, sample_);
    return sample_[0];
  }
  const Shape& image(std::string_view layer) const {
    check(sample_.rank() == 3, "Sequential", "{} takes images [C, H, W], and the samples are {}",
          layer, sample_);
    return sample_;
  }

  Shape input_, sample_;  // a sample's shape at the input and after the last layer
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

struct ConvNetSettings {
  std::int64_t channels = 1, size = 28;  // input images [channels, size, size]
  std::int64_t filters = 64;             // per convolution (MAML: 64 Omniglot, 32 MiniImagenet)
  int blocks = 4;
  std::int64_t outputs = 5;  // classes
  // MAML's Omniglot variant: 3x3 convolutions of stride 2 instead of max pooling.
  bool strided = false;
  Activation activation = Activation::relu;
};

// MAML's convolutional network (Finn et al. 2017, after Vinyals et al.) without
// its batch norm, which the library does not have yet: `blocks` blocks of
// [3x3 convolution with padding 1, ReLU, 2x2 max pooling] (or a stride-2
// convolution and ReLU), then flatten and a linear layer to the classes.
inline Sequential conv4(const ConvNetSettings& s) {
  Sequential model(Shape{s.channels, s.size, s.size});
  for (int b = 0; b < s.blocks; ++b) {
    if (s.strided) {
      model.conv2d(s.filters, {.kernel = 3, .stride = 2, .padding = 1}).activation(s.activation);
    } else {
      model.conv2d(s.filters).activation(s.activation).max_pool2d();
    }
  }
  return model.flatten().linear(s.outputs);
}

}  // namespace platipus::nn
