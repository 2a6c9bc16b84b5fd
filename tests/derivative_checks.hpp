// The test files' check of a function's derivatives: first order and second
// (through a vector-Jacobian product) against central finite differences, in
// double (autodiff/gradcheck.hpp), each failure with gradcheck's message.
#pragma once

#include <vector>

#include "catch.hpp"
#include "platipus/platipus.hpp"

namespace platipus::testing {

inline void check_derivatives(const DoubleFunction<>& f,
                              const std::vector<Tensor<double>>& inputs) {
  const auto first = gradcheck(f, inputs);
  INFO("first order: " << first.message);
  CHECK(first);
  const auto second = gradgradcheck(f, inputs);
  INFO("second order: " << second.message);
  CHECK(second);
}

}  // namespace platipus::testing
