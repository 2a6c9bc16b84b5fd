// exp and log.
#pragma once

#include "platipus/autodiff/ops/arithmetic.hpp"

namespace platipus {

template <class T, class B>
Var<T, B> exp(const Var<T, B>& x) {
  return record("exp", {x}, raw::map(UnaryOp::exp, x.value()),
                [](Backward<T, B>& c) { c.set(0, mul(c.grad(), c.output())); });
}

template <class T, class B>
Var<T, B> log(const Var<T, B>& x) {
  return record("log", {x}, raw::map(UnaryOp::log, x.value()),
                [](Backward<T, B>& c) { c.set(0, div(c.grad(), c.input(0))); });
}

}  // namespace platipus
