// Optimisers for meta-parameters: plain tensors updated in place from
// gradients, outside any tape (meta-parameters are leaves of each step's tape,
// not values on it).
#pragma once

#include <algorithm>
#include <cmath>
#include <numbers>
#include <span>
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
    check(params.size() == grads.size(), "Sgd::step", "{} parameters but {} gradients",
          params.size(), grads.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      check(params[i]->shape() == grads[i]->shape(), "Sgd::step",
            "parameter {} is {} but its gradient is {}", i, params[i]->shape(), grads[i]->shape());
      *params[i] =
          raw::map(BinaryOp::sub, *params[i],
                   raw::map(UnaryOp::scale, *grads[i], static_cast<T>(settings_.learning_rate)),
                   "Sgd::step");
    }
  }

 private:
  SgdSettings settings_;
};

struct AdamSettings {
  double learning_rate = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  // Cosine annealing of the rate (Loshchilov & Hutter, ICLR 2017, without
  // restarts) from learning_rate to final_learning_rate over annealing_steps
  // steps, constant after them; 0: a constant rate, as optax.cosine_decay_schedule
  // or PyTorch's CosineAnnealingLR beside the optimiser. Adam::step uses
  // learning_rate as it is: a driver that counts steps (MetaLearner) sets it
  // to learning_rate_at(step) before each.
  int annealing_steps = 0;
  double final_learning_rate = 1e-5;

  // The rate of the step after `step` steps.
  double learning_rate_at(long step) const {
    if (annealing_steps <= 0) return learning_rate;
    const double progress =
        std::min(step, static_cast<long>(annealing_steps)) / static_cast<double>(annealing_steps);
    return final_learning_rate +
           (learning_rate - final_learning_rate) * (1 + std::cos(std::numbers::pi * progress)) / 2;
  }
};

// Adam (Kingma & Ba, 2015) with bias correction (backend/layouts.hpp's
// AdamStep), one fused in-place pass per parameter tensor: parameters keep
// their buffers from step to step. The step number lives beside the moments
// in backend memory and is advanced there, so a step never waits for the
// device and a recorded step counts on when replayed (meta/driver/graphed_step.hpp).
template <class T, class B = cpu>
class Adam {
 public:
  explicit Adam(AdamSettings s = {}) : settings_(s) {}

  void step(std::span<Tensor<T, B>* const> params, std::span<const Tensor<T, B>* const> grads) {
    check(params.size() == grads.size(), "Adam::step", "{} parameters but {} gradients",
          params.size(), grads.size());
    if (first_.empty()) {
      for (auto* p : params) {
        first_.push_back(Tensor<T, B>::zeros(p->shape()));
        second_.push_back(Tensor<T, B>::zeros(p->shape()));
      }
      count_ = Tensor<T, B>::zeros(Shape{1});
    }
    check(first_.size() == params.size(), "Adam::step", "called with {} parameters after {}",
          params.size(), first_.size());
    for (std::size_t i = 0; i < params.size(); ++i)
      check(params[i]->shape() == grads[i]->shape() && first_[i].shape() == grads[i]->shape(),
            "Adam::step", "parameter {} is {} but its gradient is {}", i, params[i]->shape(),
            grads[i]->shape());
    B::unary(UnaryOp::add_scalar, count_.data(), count_.data(), 1, T(1));
    const auto& s = settings_;
    const AdamStep<T> step{static_cast<T>(s.beta1), static_cast<T>(s.beta2),
                           static_cast<T>(s.epsilon), static_cast<T>(s.learning_rate)};
    // All parameter tensors in one call per AdamLayout capacity (one kernel
    // on a device: PLATIPUS's five parts, MetaSgd's two).
    raw::detail::launch_in_layouts<AdamLayout<T>>(
        params.size(),
        [&](AdamLayout<T>& l, std::size_t k, std::size_t i) {
          l.p[k] = params[i]->data();
          l.m[k] = first_[i].data();
          l.v[k] = second_[i].data();
          l.g[k] = grads[i]->data();
          l.n[k] = params[i]->numel();
        },
        [&](const AdamLayout<T>& l) { B::adam(l, step, count_.data()); });
  }

  // Steps taken so far (reads backend memory: on CUDA, waits for the device).
  int steps() const { return first_.empty() ? 0 : static_cast<int>(count_.item()); }

  // What the next step depends on besides the settings, for a checkpoint
  // that resumes training (io/training_state.hpp): each parameter's first
  // moment, then each one's second, then the step number ([1]); empty
  // before the first step.
  std::vector<const Tensor<T, B>*> state() const {
    std::vector<const Tensor<T, B>*> out;
    for (const auto* moments : {&first_, &second_})
      for (const auto& m : *moments) out.push_back(&m);
    if (!first_.empty()) out.push_back(&count_);
    return out;
  }
  // Restores what state() gave for parameters of `shapes` (nothing: as
  // before the first step). Existing buffers are written in place, so that a
  // recorded CUDA graph that reads them stays valid.
  void set_state(std::vector<Tensor<T, B>> values, std::span<const Shape> shapes) {
    const std::size_t n = shapes.size();
    check(values.empty() || values.size() == 2 * n + 1, "Adam::set_state",
          "{} tensors for {} parameters (2 x {} moments and the step number, or none)",
          values.size(), n, n);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const Shape expected = i < 2 * n ? shapes[i % n] : Shape{1};
      check(values[i].shape() == expected, "Adam::set_state", "tensor {} is {}, expected {}", i,
            values[i].shape(), expected);
    }
    if (values.empty()) {
      first_.clear();
      second_.clear();
      count_ = {};
      return;
    }
    const bool in_place = first_.size() == n;
    if (!in_place) {
      first_.clear();
      second_.clear();
    }
    for (std::size_t i = 0; i < n; ++i) {
      restore(first_, i, std::move(values[i]), in_place);
      restore(second_, i, std::move(values[n + i]), in_place);
    }
    if (in_place)
      B::copy(count_.data(), values[2 * n].data(), count_.bytes());
    else
      count_ = std::move(values[2 * n]);
  }
  const AdamSettings& settings() const { return settings_; }
  AdamSettings& settings() { return settings_; }  // e.g. to decay the learning rate

 private:
  static void restore(std::vector<Tensor<T, B>>& moments, std::size_t i, Tensor<T, B> value,
                      bool in_place) {
    if (in_place)
      B::copy(moments[i].data(), value.data(), value.bytes());
    else
      moments.push_back(std::move(value));
  }

  AdamSettings settings_;
  std::vector<Tensor<T, B>> first_, second_;
  Tensor<T, B> count_;  // [1], the step number t
};

}  // namespace platipus::optim
