// Optimisers for meta-parameters: plain tensors updated in place from
// gradients, outside any tape (meta-parameters are leaves of each step's tape,
// not values on it).
#pragma once

#include <cmath>
#include <vector>

#include "platipus/tensor/elementwise.hpp"

namespace platipus::optim {

struct SgdSettings {
  double learning_rate = 1e-2;
};

template <class T, class B = cpu>
class Sgd {
 public:
  explicit Sgd(SgdSettings s = {}) : settings_(s) {}

  void step(std::span<Tensor<T, B>* const> params, std::span<const Tensor<T, B>* const> grads) {
    check(params.size() == grads.size(), "Sgd::step", "{} parameters but {} gradients", params.size(), grads.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      check(params[i]->shape() == grads[i]->shape(), "Sgd::step", "parameter {} is {} but its gradient is {}", i,
            params[i]->shape(), grads[i]->shape());
      *params[i] = raw::map(BinaryOp::sub, *params[i],
                            raw::map(UnaryOp::scale, *grads[i], static_cast<T>(settings_.learning_rate)), "Sgd::step");
    }
  }

 private:
  SgdSettings settings_;
};

struct AdamSettings {
  double learning_rate = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
};

// Adam (Kingma & Ba, 2015) with bias correction:
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
template <class T, class B = cpu>
class Adam {
 public:
  explicit Adam(AdamSettings s = {}) : settings_(s) {}

  void step(std::span<Tensor<T, B>* const> params, std::span<const Tensor<T, B>* const> grads) {
    check(params.size() == grads.size(), "Adam::step", "{} parameters but {} gradients", params.size(), grads.size());
    if (first_.empty()) {
      for (auto* p : params) {
        first_.push_back(Tensor<T, B>::zeros(p->shape()));
        second_.push_back(Tensor<T, B>::zeros(p->shape()));
      }
    }
    check(first_.size() == params.size(), "Adam::step", "called with {} parameters after {}", params.size(), first_.size());
    ++steps_;
    const auto& s = settings_;
    const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2);
    const T correction1 = static_cast<T>(1 - std::pow(s.beta1, steps_));
    const T correction2 = static_cast<T>(1 - std::pow(s.beta2, steps_));
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Tensor<T, B>& g = *grads[i];
      check(params[i]->shape() == g.shape() && first_[i].shape() == g.shape(), "Adam::step",
            "parameter {} is {} but its gradient is {}", i, params[i]->shape(), g.shape());
      first_[i] = raw::map(BinaryOp::add, raw::map(UnaryOp::scale, first_[i], b1),
                           raw::map(UnaryOp::scale, g, T(1) - b1), "Adam");
      second_[i] = raw::map(BinaryOp::add, raw::map(UnaryOp::scale, second_[i], b2),
                            raw::map(UnaryOp::scale, raw::map(UnaryOp::square, g), T(1) - b2), "Adam");
      const auto denominator = raw::map(
          UnaryOp::add_scalar, raw::map(UnaryOp::sqrt, raw::map(UnaryOp::scale, second_[i], T(1) / correction2)),
          static_cast<T>(s.epsilon));
      const auto update = raw::map(UnaryOp::scale, raw::map(BinaryOp::div, first_[i], denominator, "Adam"),
                                   static_cast<T>(s.learning_rate) / correction1);
      *params[i] = raw::map(BinaryOp::sub, *params[i], update, "Adam");
    }
  }

  int steps() const { return steps_; }
  const AdamSettings& settings() const { return settings_; }
  AdamSettings& settings() { return settings_; }  // e.g. to decay the learning rate

 private:
  AdamSettings settings_;
  std::vector<Tensor<T, B>> first_, second_;
  int steps_ = 0;
};

}  // namespace platipus::optim
