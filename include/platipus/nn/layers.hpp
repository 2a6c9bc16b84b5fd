// The library's layers, each a Layer (nn/layer.hpp): it gives a sample's
// shape after it, declares its pieces in a ParamLayout when it is added to a
// network, and its forward reads them from the unflattened parameters:
// [batch..., shape] pieces, where the optional batch axes (the task axis)
// make every task run with its own parameters in one batched op.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "platipus/autodiff.hpp"
#include "platipus/autodiff/ops/batch_norm.hpp"
#include "platipus/autodiff/ops/convolution.hpp"
#include "platipus/autodiff/ops/pooling.hpp"
#include "platipus/nn/layer.hpp"
#include "platipus/nn/parameters.hpp"

namespace platipus::nn {

using platipus::Activation;  // nn::Activation, as the settings name it

namespace detail {

// `shape` with the batch axes of a piece (its rank beyond `own_rank`) in front.
template <class T, class B>
Shape batched(const Var<T, B>& piece, int own_rank, std::initializer_list<std::int64_t> shape) {
  Shape out = piece.shape().take_front(piece.rank() - own_rank);
  for (auto d : shape) out.push_back(d);
  return out;
}

// The features of a vector sample, for a layer that takes vectors.
inline std::int64_t vector_features(const Shape& sample, std::string_view layer) {
  check(sample.rank() == 1, "Sequential",
        "{} takes feature vectors, and the samples are {} (add flatten() first)", layer, sample);
  return sample[0];
}

// An image sample [C, H, W], for a layer that takes images.
inline const Shape& image(const Shape& sample, std::string_view layer) {
  check(sample.rank() == 3, "Sequential", "{} takes images [C, H, W], and the samples are {}",
        layer, sample);
  return sample;
}

}  // namespace detail

// y = x W + b, W [in, out], b [out] (zeros).
struct Linear {
  static constexpr std::string_view name = "linear";
  std::int64_t outputs = 0;
  Init init = Init::uniform_fan_in;
  std::int64_t inputs = 0;           // set by `declare`
  std::size_t weight = 0, bias = 0;  // piece indices, set by `declare`

  Shape output_shape(const Shape& sample) const {
    detail::vector_features(sample, name);
    check_positive("Sequential", fmt::format("{}'s outputs", name), outputs);
    return Shape{outputs};
  }
  void declare(ParamLayout& layout, const std::string& prefix, const Shape& sample) {
    inputs = sample[0];
    weight = layout.add(prefix + ".weight", {inputs, outputs}, init);
    bias = layout.add(prefix + ".bias", {outputs}, Init::zeros);
  }

  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>> pieces, const Var<T, B>& x) const {
    return forward(pieces, x, Activation::none);
  }
  // With the activation of the layer after it, as one op (Sequential's
  // forward fuses the two).
  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>> pieces, const Var<T, B>& x,
                    Activation activation) const {
    check(x.dim(-1) == inputs, "Linear", "input {} has {} features, the layer expects {}",
          x.shape(), x.dim(-1), inputs);
    return platipus::linear(x, pieces[weight], pieces[bias], activation);
  }
};

// The bias transformation of Finn et al. (2017, "One-shot visual imitation
// learning via meta-learning"), used by the PLATIPUS paper's networks: a
// learned vector, initialised to zeros, concatenated to every input.
struct BiasTransform {
  static constexpr std::string_view name = "bias_transform";
  std::int64_t dims = 0;
  std::int64_t inputs = 0;  // set by `declare`
  std::size_t vector = 0;

  Shape output_shape(const Shape& sample) const {
    const auto n = detail::vector_features(sample, name);
    check_positive("Sequential", fmt::format("{}'s dims", name), dims);
    return Shape{n + dims};
  }
  void declare(ParamLayout& layout, const std::string& prefix, const Shape& sample) {
    inputs = sample[0];
    vector = layout.add(prefix + ".vector", {dims}, Init::zeros);
  }

  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>> pieces, const Var<T, B>& x) const {
    check(x.dim(-1) == inputs, "BiasTransform", "input {} has {} features, expected {}", x.shape(),
          x.dim(-1), inputs);
    const auto& v = pieces[vector];
    const auto row = reshape(v, detail::batched(v, 1, {1, dims}));
    broadcast_shapes(x.shape().take_front(x.rank() - 1), row.shape().take_front(row.rank() - 1),
                     "BiasTransform");  // tasks that do not match, named here
    // [x, v] with v broadcast over the points (and x over the tasks where
    // it has no task axis) by the concat itself: parts of one rank.
    const int rank = std::max(x.rank(), row.rank());
    const auto at_rank = [rank](const Var<T, B>& a) {
      Shape shape;
      for (int i = a.rank(); i < rank; ++i) shape.push_back(1);
      for (const auto d : a.shape().dims()) shape.push_back(d);
      return reshape(a, shape);
    };
    return expand_concat({at_rank(x), at_rank(row)}, -1);
  }
};

// y = w * x + b over images x [..., N, C_in, H, W] (autodiff/ops/convolution.hpp):
// w [C_out, C_in, k, k] initialised from its fan-in C_in k k, b [C_out] zeros.
struct Conv2d {
  static constexpr std::string_view name = "conv2d";
  std::int64_t outputs = 0;  // channels
  Window window{.kernel = 3, .padding = 1};
  Init init = Init::uniform_fan_in;
  std::int64_t inputs = 0;  // channels, set by `declare`
  std::size_t weight = 0, bias = 0;

  Shape output_shape(const Shape& sample) const {
    const Shape& in = detail::image(sample, name);
    check_positive("Sequential", fmt::format("{}'s output channels", name), outputs);
    return Shape{outputs, window.output(in[1], name), window.output(in[2], name)};
  }
  void declare(ParamLayout& layout, const std::string& prefix, const Shape& sample) {
    inputs = sample[0];
    const std::int64_t k = window.kernel;
    weight = layout.add(prefix + ".weight", {outputs, inputs, k, k}, init,
                        {.in = inputs * k * k, .out = outputs * k * k});
    bias = layout.add(prefix + ".bias", {outputs}, Init::zeros);
  }

  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>> pieces, const Var<T, B>& x) const {
    return conv2d(x, pieces[weight], pieces[bias], window);
  }
};

// The maximum over each window of images [..., C, H, W]; no parameters.
struct MaxPool2d {
  static constexpr std::string_view name = "max_pool2d";
  Window window{.kernel = 2, .stride = 2};

  Shape output_shape(const Shape& sample) const {
    const Shape& in = detail::image(sample, name);
    return Shape{in[0], window.output(in[1], name), window.output(in[2], name)};
  }
  void declare(ParamLayout&, const std::string&, const Shape&) {}

  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>>, const Var<T, B>& x) const {
    return platipus::max_pool2d(x, window);
  }
  // The pooling and the activation after it (one op for a ReLU).
  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>>, const Var<T, B>& x, Activation activation) const {
    return platipus::max_pool2d(x, window, activation);
  }
};

// Batch normalisation with the statistics of the batch at hand, as in MAML's
// reference implementation (Finn et al. 2017): no running averages, so
// training and adaptation normalise alike. Per task (the leading axes) and
// per channel, over the N samples (and the H W positions of images) of the
// call: y = (x - mean) / sqrt(var + epsilon) * scale + shift, var the biased
// variance, scale [F] (ones) and shift [F] (zeros) learned, F the features
// of vectors [..., N, F] or the channels of images [..., N, C, H, W]. It is
// one op with a closed-form backward (autodiff/ops/batch_norm.hpp).
struct BatchNorm {
  static constexpr std::string_view name = "batch_norm";
  double epsilon = 1e-5;      // PyTorch's default
  std::int64_t features = 0;  // set by `declare`
  bool images = false;        // set by `declare`
  std::size_t scale = 0, shift = 0;

  Shape output_shape(const Shape& sample) const {
    check(sample.rank() == 1 || sample.rank() == 3, "Sequential",
          "{} takes feature vectors or images [C, H, W], and the samples are {}", name, sample);
    check(epsilon > 0, "Sequential", "{} needs a positive epsilon, got {}", name, epsilon);
    return sample;
  }
  void declare(ParamLayout& layout, const std::string& prefix, const Shape& sample) {
    features = sample[0];
    images = sample.rank() == 3;
    scale = layout.add(prefix + ".scale", {features}, Init::ones);
    shift = layout.add(prefix + ".shift", {features}, Init::zeros);
  }

  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>> pieces, const Var<T, B>& x) const {
    const int sample_rank = images ? 3 : 1;
    check(x.rank() >= sample_rank + 1 && x.dim(-sample_rank) == features, "BatchNorm",
          "input {} does not hold samples of {} {}", x.shape(), features,
          images ? "channels" : "features");
    // scale and shift [batch..., F] -> [batch..., 1, F(, 1, 1)] against x.
    auto per_feature = [&](const Var<T, B>& piece) {
      return reshape(piece, images ? detail::batched(piece, 1, {1, features, 1, 1})
                                   : detail::batched(piece, 1, {1, features}));
    };
    return batch_norm(x, per_feature(pieces[scale]), per_feature(pieces[shift]), images ? 2 : 0,
                      static_cast<T>(epsilon));
  }
};

// Images [..., N, C, H, W] -> feature vectors [..., N, C H W]; no parameters.
struct Flatten {
  static constexpr std::string_view name = "flatten";

  Shape output_shape(const Shape& sample) const {
    return Shape{detail::image(sample, name).numel()};
  }
  void declare(ParamLayout&, const std::string&, const Shape&) {}

  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>>, const Var<T, B>& x) const {
    check(x.rank() >= 3, "Flatten", "images must be [..., C, H, W], got {}", x.shape());
    Shape flat = x.shape().take_front(x.rank() - 3);
    flat.push_back(x.dim(-3) * x.dim(-2) * x.dim(-1));
    return reshape(x, flat);
  }
};

// An elementwise nonlinearity; no parameters.
struct ActivationLayer {
  static constexpr std::string_view name = "activation";
  Activation activation = Activation::relu;

  Shape output_shape(const Shape& sample) const { return sample; }
  void declare(ParamLayout&, const std::string&, const Shape&) {}

  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>>, const Var<T, B>& x) const {
    return activate(activation, x);
  }
};

}  // namespace platipus::nn
