// Raw random fills from a Generator (Philox 4x32-10; see core/philox.hpp).
#pragma once

#include "platipus/core/philox.hpp"
#include "platipus/tensor/tensor.hpp"

namespace platipus::raw {

// Uniform on (0, 1), or on (low, high).
template <class T, class B = cpu>
Tensor<T, B> uniform(const Shape& shape, Generator& gen) {
  Tensor<T, B> y(shape);
  const std::uint64_t block = gen.reserve<T>(y.numel());
  if (y.numel()) B::fill_uniform(y.data(), y.numel(), gen.seed(), gen.stream(), block);
  return y;
}

template <class T, class B = cpu>
Tensor<T, B> normal(const Shape& shape, Generator& gen) {
  Tensor<T, B> y(shape);
  const std::uint64_t block = gen.reserve<T>(y.numel());
  if (y.numel()) B::fill_normal(y.data(), y.numel(), gen.seed(), gen.stream(), block);
  return y;
}

}  // namespace platipus::raw
