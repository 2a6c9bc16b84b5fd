// Functional layers. A layer declares its pieces in a ParamLayout when it is
// added to a model, and its forward reads them from the unflattened
// parameters: [batch..., shape] pieces, where the optional batch axes (the
// task axis) make every task run with its own parameters in one batched op.
#pragma once

#include <string>
#include <vector>

#include "platipus/autodiff.hpp"
#include "platipus/autodiff/ops/convolution.hpp"
#include "platipus/autodiff/ops/pooling.hpp"
#include "platipus/nn/parameters.hpp"

namespace platipus::nn {

namespace detail {

// `shape` with the batch axes of a piece (its rank beyond `own_rank`) in front.
template <class T, class B>
Shape batched(const Var<T, B>& piece, int own_rank, std::initializer_list<std::int64_t> shape) {
  Shape out = piece.shape().take_front(piece.rank() - own_rank);
  for (auto d : shape) out.push_back(d);
  return out;
}

}  // namespace detail

// y = x W + b, W [in, out], b [out] (zeros).
struct Linear {
  std::int64_t inputs = 0, outputs = 0;
  Init init = Init::uniform_fan_in;
  std::size_t weight = 0, bias = 0;  // piece indices, set by `declare`

  void declare(ParamLayout& layout, const std::string& prefix) {
    weight = layout.add(prefix + ".weight", {inputs, outputs}, init);
    bias = layout.add(prefix + ".bias", {outputs}, Init::zeros);
  }

  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>> pieces, const Var<T, B>& x) const {
    check(x.dim(-1) == inputs, "Linear", "input {} has {} features, the layer expects {}",
          x.shape(), x.dim(-1), inputs);
    return platipus::linear(x, pieces[weight], pieces[bias]);
  }
};

// The bias transformation of Finn et al. (2017, "One-shot visual imitation
// learning via meta-learning"), used by the PLATIPUS paper's networks: a
// learned vector, initialised to zeros, concatenated to every input.
struct BiasTransform {
  std::int64_t inputs = 0, dims = 0;
  std::size_t vector = 0;

  void declare(ParamLayout& layout, const std::string& prefix) {
    vector = layout.add(prefix + ".vector", {dims}, Init::zeros);
  }

  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>> pieces, const Var<T, B>& x) const {
    check(x.dim(-1) == inputs, "BiasTransform", "input {} has {} features, expected {}", x.shape(),
          x.dim(-1), inputs);
    const auto& v = pieces[vector];
    const auto row = reshape(v, detail::batched(v, 1, {1, dims}));
    Shape lead = broadcast_shapes(x.shape().take_front(x.rank() - 1),
                                  row.shape().take_front(row.rank() - 1), "BiasTransform");
    Shape x_shape = lead, v_shape = lead;
    x_shape.push_back(inputs);
    v_shape.push_back(dims);
    return concat({expand(x, x_shape), expand(row, v_shape)}, -1);
  }
};

// y = w * x + b over images x [..., N, C_in, H, W] (autodiff/ops/convolution.hpp):
// w [C_out, C_in, k, k] initialised from its fan-in C_in k k, b [C_out] zeros.
struct Conv2d {
  std::int64_t inputs = 0, outputs = 0;  // channels
  Window window{};
  Init init = Init::uniform_fan_in;
  std::size_t weight = 0, bias = 0;

  void declare(ParamLayout& layout, const std::string& prefix) {
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
  Window window{.kernel = 2, .stride = 2};
};

// Images [..., N, C, H, W] -> feature vectors [..., N, C H W]; no parameters.
struct Flatten {};

enum class Activation { none, relu, tanh, sigmoid };

template <class T, class B>
Var<T, B> activate(Activation a, const Var<T, B>& x) {
  switch (a) {
    case Activation::relu:
      return relu(x);
    case Activation::tanh:
      return tanh(x);
    case Activation::sigmoid:
      return sigmoid(x);
    case Activation::none:
      break;
  }
  return x;
}

}  // namespace platipus::nn
