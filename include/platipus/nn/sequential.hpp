// Sequential: layers applied in order over one flat parameter vector, and
// the builders of the papers' networks: `mlp` (fully connected) and `conv4`
// (MAML's convolutional network).
#pragma once

#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "platipus/nn/layer.hpp"
#include "platipus/nn/layers.hpp"

namespace platipus::nn {

// Layers applied in order over one flat parameter vector. Holds the
// library's layers and, as `Extra`, any user layer types (each a Layer,
// nn/layer.hpp): BasicSequential<MyLayer> takes add(MyLayer{...}) beside the
// built-in ones, with static dispatch as for those.
template <Layer... Extra>
class BasicSequential {
 public:
  using AnyLayer = std::variant<Linear, BiasTransform, ActivationLayer, Conv2d, MaxPool2d,
                                BatchNorm, Flatten, Extra...>;

  // A network of feature vectors [inputs], or of images [C, H, W].
  explicit BasicSequential(std::int64_t inputs) : BasicSequential(Shape{inputs}) {}
  explicit BasicSequential(const Shape& sample) : input_(sample), sample_(sample) {
    check((sample.rank() == 1 || sample.rank() == 3) && sample.numel() > 0, "Sequential",
          "a sample is a feature vector [n] or an image [C, H, W], got {}", sample);
  }

  // Appends a layer: checks that it takes the current samples, declares its
  // pieces (named "layer<i>.<piece>") and tracks the samples' shape.
  template <class L>
  requires(std::is_constructible_v<AnyLayer, L>&& Layer<L>) BasicSequential& add(L layer) {
    const Shape out = layer.output_shape(sample_);
    layer.declare(layout_, "layer" + std::to_string(layers_.size()), sample_);
    layers_.emplace_back(std::move(layer));
    sample_ = out;
    return *this;
  }

  BasicSequential& linear(std::int64_t outputs, Init init = Init::uniform_fan_in) {
    return add(Linear{.outputs = outputs, .init = init});
  }
  BasicSequential& bias_transform(std::int64_t dims) { return add(BiasTransform{.dims = dims}); }
  BasicSequential& activation(Activation a) { return add(ActivationLayer{.activation = a}); }
  BasicSequential& conv2d(std::int64_t outputs, Window window = {.kernel = 3, .padding = 1},
                          Init init = Init::uniform_fan_in) {
    return add(Conv2d{.outputs = outputs, .window = window, .init = init});
  }
  BasicSequential& max_pool2d(Window window = {.kernel = 2, .stride = 2}) {
    return add(MaxPool2d{.window = window});
  }
  BasicSequential& batch_norm(double epsilon = 1e-5) { return add(BatchNorm{.epsilon = epsilon}); }
  BasicSequential& flatten() { return add(Flatten{}); }

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
  // The activations between layers and each layer's temporaries are seen by
  // no one else: those that no backward rule reads are released as soon as
  // the next layer has run (all of them under NoGradGuard), so a forward
  // pass keeps what the gradient needs and no more. A linear layer or a
  // max pooling and the activation after it run as one op (their fused
  // forms, the same bits).
  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>> pieces, const Var<T, B>& x) const {
    check(pieces.size() == layout_.specs().size(), "Sequential::forward",
          "{} parameter pieces for a model of {}", pieces.size(), layout_.specs().size());
    Tape<T, B>& tape = x.tape();
    const std::size_t first = tape.values();
    Var<T, B> h = x;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const std::size_t made = tape.values();
      const auto* linear = std::get_if<Linear>(&layers_[i]);
      const auto* pool = std::get_if<MaxPool2d>(&layers_[i]);
      const auto* after =
          i + 1 < layers_.size() ? std::get_if<ActivationLayer>(&layers_[i + 1]) : nullptr;
      const bool fused = after && (linear || (pool && after->activation == Activation::relu));
      const Var<T, B> next =
          !fused   ? std::visit([&](const auto& l) { return l.forward(pieces, h); }, layers_[i])
          : linear ? linear->forward(pieces, h, after->activation)
                   : pool->forward(pieces, h, after->activation);
      if (fused) ++i;
      tape.release_since(made, std::span<const Var<T, B>>(&next, 1));
      if (h.record()->id >= first && !(h == next)) tape.release(h.record());
      h = next;
    }
    return h;
  }

  template <class T, class B = cpu>
  Tensor<T, B> initialize(Generator& gen) const {
    return layout_.initialize<T, B>(gen);
  }

 private:
  Shape input_, sample_;  // a sample's shape at the input and after the last layer
  ParamLayout layout_;
  std::vector<AnyLayer> layers_;
};

// The network of the library's layers alone.
using Sequential = BasicSequential<>;

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
  bool batch_norm = true;  // MAML's network normalises after every convolution
  Activation activation = Activation::relu;
};

// MAML's convolutional network (Finn et al. 2017, after Vinyals et al.):
// `blocks` blocks of [3x3 convolution with padding 1, batch norm, ReLU, 2x2
// max pooling] (or a stride-2 convolution, batch norm and ReLU), then
// flatten and a linear layer to the classes. With ReLU the pooling runs
// first: max(0, .) commutes with a window's maximum exactly (the same values,
// and the same gradients: the maximum is where it was, and a window with
// none above zero passes none back either way), and the activation and its
// backward then touch a quarter of the values. tanh and sigmoid in floating
// point can tie where their inputs do not, so they keep the order.
inline Sequential conv4(const ConvNetSettings& s) {
  Sequential model(Shape{s.channels, s.size, s.size});
  const bool pool_first = s.activation == Activation::relu;
  for (int b = 0; b < s.blocks; ++b) {
    model.conv2d(s.filters, s.strided ? Window{.kernel = 3, .stride = 2, .padding = 1}
                                      : Window{.kernel = 3, .padding = 1});
    if (s.batch_norm) model.batch_norm();
    if (!s.strided && pool_first) model.max_pool2d();
    model.activation(s.activation);
    if (!s.strided && !pool_first) model.max_pool2d();
  }
  return model.flatten().linear(s.outputs);
}

}  // namespace platipus::nn
