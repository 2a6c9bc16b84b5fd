// The Layer concept: what a network (nn::BasicSequential) asks of each of its
// layers, requirement by requirement, in the manner of dlib's
// layers_abstract.h. The library's layers (nn/layers.hpp) meet it, and so
// can a user's own type, added with BasicSequential<MyLayer>::add without
// editing the library.
#pragma once

#include <concepts>
#include <span>
#include <string>
#include <string_view>

#include "platipus/autodiff.hpp"
#include "platipus/nn/parameters.hpp"

namespace platipus::nn {

template <class L>
concept Layer = std::copyable<L> &&
    requires(L& layer, const L& cl, ParamLayout& layout, const std::string& prefix,
             const Shape& sample, std::span<const Var<float, cpu>> pieces,
             const Var<float, cpu>& x) {
  // A short name for messages ("linear", "conv2d").
  { L::name } -> std::convertible_to<std::string_view>;

  // The shape of one sample after the layer, given its shape before: [n]
  // for a feature vector, [C, H, W] for an image. Throws platipus::error,
  // naming the layer and the shape, when the layer cannot take such samples.
  // Called once, when the layer is added, before `declare`.
  { cl.output_shape(sample) } -> std::same_as<Shape>;

  // Adds the layer's parameter pieces to the network's layout, each named
  // `prefix` + "." + its own name, with its initialiser and, for a weight
  // that is not [fan_in, fan_out], its fans (ParamLayout::add); keeps the
  // indices `add` returns and whatever it needs of the input `sample`. A
  // layer without parameters adds nothing.
  {layer.declare(layout, prefix, sample)};

  // Applies the layer. `pieces` are all of the network's pieces in layout
  // order, each [batch..., piece shape]: the optional leading batch axes
  // (tasks, samples) give every task its own parameters. `x` is [...,
  // N, sample...]; its leading axes broadcast against the pieces'. Returns
  // [..., N, output sample...]. Written with differentiable ops and for any
  // scalar type and backend (checked here for float on the CPU), so that a
  // meta-learner can differentiate it to any order.
  { cl.forward(pieces, x) } -> std::same_as<Var<float, cpu>>;
};

}  // namespace platipus::nn
