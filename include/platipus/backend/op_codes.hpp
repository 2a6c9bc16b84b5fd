// The closed set of elementwise and reduction operations a backend provides,
// and their scalar definitions. Op code is chosen at run time (once per
// call, not per element); each backend turns it into a typed loop or kernel
// with `visit_unary` / `visit_binary`, so CPU and CUDA share one definition
// of every formula.
#pragma once

#include <cmath>
#include <cstdint>

#include "platipus/core/hd.hpp"

namespace platipus {

enum class UnaryOp : std::uint8_t {
  copy,
  neg,
  exp,
  exp_scaled,  // exp(x * s)
  log,
  sqrt,
  square,
  reciprocal,
  relu,
  step,  // 1 where x > 0, else 0: the derivative of relu, as a mask
  sigmoid,
  tanh,
  softplus,
  abs,
  scale,           // x * s
  add_scalar,      // x + s
  div_scalar,      // x / s: the bits of binary div by a tensor of s
  pow_scalar,      // x ^ s
  greater_scalar,  // 1 where x > s, else 0
};

enum class BinaryOp : std::uint8_t {
  add,
  sub,
  mul,
  div,
  max,
  greater,
  equal,
  relu_backward,  // a where b > 0, else 0: relu's gradient a routed by its input b
};

// mean: the sum times 1 / n, n the inputs per output, with the bits of a
// sum and then a scale (UnaryOp::scale) by 1 / n.
enum class ReduceOp : std::uint8_t { sum, max, mean };

namespace functors {

// Each functor is a small struct so that a loop or kernel instantiated with it
// inlines the formula. `s` is the op's scalar argument (unused by most).
#define PLATIPUS_UNARY(name, expr)                                                    \
  struct name {                                                                       \
    static constexpr const char* label = #name;                                       \
    template <class T>                                                                \
    PLATIPUS_HD T operator()(T x, [[maybe_unused]] T s) const {                       \
      using std::exp, std::log, std::sqrt, std::tanh, std::abs, std::pow, std::log1p; \
      return expr;                                                                    \
    }                                                                                 \
  };
PLATIPUS_UNARY(copy, x)
PLATIPUS_UNARY(neg, -x)
PLATIPUS_UNARY(exp, exp(x))
PLATIPUS_UNARY(exp_scaled, exp(x* s))
PLATIPUS_UNARY(log, log(x))
PLATIPUS_UNARY(sqrt, sqrt(x))
PLATIPUS_UNARY(square, x* x)
PLATIPUS_UNARY(reciprocal, T(1) / x)
PLATIPUS_UNARY(relu, x > T(0) ? x : T(0))
PLATIPUS_UNARY(step, x > T(0) ? T(1) : T(0))
// Both branches keep exp's argument non-positive, so neither overflows.
PLATIPUS_UNARY(sigmoid, x >= T(0) ? T(1) / (T(1) + exp(-x)) : exp(x) / (T(1) + exp(x)))
PLATIPUS_UNARY(tanh, tanh(x))
// softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|), stable for large |x|.
PLATIPUS_UNARY(softplus, (x > T(0) ? x : T(0)) + log1p(exp(-abs(x))))
PLATIPUS_UNARY(abs, abs(x))
PLATIPUS_UNARY(scale, x* s)
PLATIPUS_UNARY(add_scalar, x + s)
PLATIPUS_UNARY(div_scalar, x / s)
PLATIPUS_UNARY(pow_scalar, pow(x, s))
PLATIPUS_UNARY(greater_scalar, x > s ? T(1) : T(0))
#undef PLATIPUS_UNARY

#define PLATIPUS_BINARY(name, expr)             \
  struct name {                                 \
    static constexpr const char* label = #name; \
    template <class T>                          \
    PLATIPUS_HD T operator()(T a, T b) const {  \
      return expr;                              \
    }                                           \
  };
PLATIPUS_BINARY(add, a + b)
PLATIPUS_BINARY(sub, a - b)
PLATIPUS_BINARY(mul, a* b)
PLATIPUS_BINARY(div, a / b)
PLATIPUS_BINARY(max, a > b ? a : b)
PLATIPUS_BINARY(greater, a > b ? T(1) : T(0))
PLATIPUS_BINARY(equal, a == b ? T(1) : T(0))
PLATIPUS_BINARY(relu_backward, b > T(0) ? a : T(0))
#undef PLATIPUS_BINARY

}  // namespace functors

// Calls f(functor) with the functor of `op`.
template <class F>
PLATIPUS_HD decltype(auto) visit_unary(UnaryOp op, F&& f) {
  switch (op) {
#define PLATIPUS_CASE(name) \
  case UnaryOp::name:       \
    return f(functors::name{});
    PLATIPUS_CASE(copy)
    PLATIPUS_CASE(neg)
    PLATIPUS_CASE(exp)
    PLATIPUS_CASE(exp_scaled)
    PLATIPUS_CASE(log)
    PLATIPUS_CASE(sqrt)
    PLATIPUS_CASE(square)
    PLATIPUS_CASE(reciprocal)
    PLATIPUS_CASE(relu)
    PLATIPUS_CASE(step)
    PLATIPUS_CASE(sigmoid)
    PLATIPUS_CASE(tanh)
    PLATIPUS_CASE(softplus)
    PLATIPUS_CASE(abs)
    PLATIPUS_CASE(scale)
    PLATIPUS_CASE(add_scalar)
    PLATIPUS_CASE(div_scalar)
    PLATIPUS_CASE(pow_scalar)
    PLATIPUS_CASE(greater_scalar)
#undef PLATIPUS_CASE
  }
  return f(functors::copy{});
}

template <class F>
PLATIPUS_HD decltype(auto) visit_binary(BinaryOp op, F&& f) {
  switch (op) {
#define PLATIPUS_CASE(name) \
  case BinaryOp::name:      \
    return f(functors::name{});
    PLATIPUS_CASE(add)
    PLATIPUS_CASE(sub)
    PLATIPUS_CASE(mul)
    PLATIPUS_CASE(div)
    PLATIPUS_CASE(max)
    PLATIPUS_CASE(greater)
    PLATIPUS_CASE(equal)
    PLATIPUS_CASE(relu_backward)
#undef PLATIPUS_CASE
  }
  return f(functors::add{});
}

// The op codes' names, as the functors spell them (messages, counts).
inline const char* op_name(UnaryOp op) {
  return visit_unary(op, [](auto f) { return decltype(f)::label; });
}
inline const char* op_name(BinaryOp op) {
  return visit_binary(op, [](auto f) { return decltype(f)::label; });
}
inline const char* op_name(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : op == ReduceOp::max ? "max" : "mean";
}

}  // namespace platipus
