// Losses (negative log-likelihoods). Each reduces every axis after the first
// `batch_dims` (the points of a task) by their mean or their sum, and returns
// one value per leading index: with batch_dims = 1 and a leading task axis,
// one loss per task.
//
//   mse_loss               (pred - target)^2                     regression
//   bce_with_logits_loss   softplus(z) - y z                     binary classification
//   softmax_cross_entropy  -log softmax(z)[label]                 K-way classification
//   gaussian_nll_loss      (log 2 pi var + (y - mean)^2 / var) / 2  regression with noise variance
//   var
//
// The sum over a task's points is the paper's L = -sum_j log p(y_j | x_j, phi)
// (Section 3); the mean is MAML's convention (and PyTorch's default).
#pragma once

#include <cmath>
#include <numeric>
#include <vector>

#include "platipus/autodiff.hpp"

namespace platipus {

// How a loss reduces the points of a task.
enum class Reduction { mean, sum };

namespace detail {

inline void check_reducible(const Shape& x, int batch_dims, std::string_view loss) {
  check(batch_dims >= 0 && batch_dims <= x.rank(), loss,
        "batch_dims {} is out of range for shape {}", batch_dims, x);
  check(x.numel() > 0, loss, "empty input of shape {}", x);
}

template <class T, class B>
Var<T, B> reduce_after(const Var<T, B>& x, int batch_dims, Reduction reduction,
                       std::string_view loss) {
  check_reducible(x.shape(), batch_dims, loss);
  std::vector<int> axes(static_cast<std::size_t>(x.rank() - batch_dims));
  std::iota(axes.begin(), axes.end(), batch_dims);
  if (axes.empty()) return x;
  return reduction == Reduction::sum ? sum(x, std::span<const int>(axes))
                                     : mean(x, std::span<const int>(axes));
}

// With NanCheck on, throws when the loss is NaN or infinite.
template <class T, class B>
Var<T, B> checked(Var<T, B> loss, std::string_view name, const Shape& input, const Shape& target) {
  if (NanCheck::enabled())
    for (T v : loss.to_vector())
      check(std::isfinite(v), name, "loss is {} (input {}, target {})", v, input, target);
  return loss;
}

template <class T, class B>
void check_same_shape(std::string_view loss, const Var<T, B>& input, const Var<T, B>& target) {
  check(input.shape() == target.shape(), loss, "input {} and target {} differ in shape",
        input.shape(), target.shape());
}

}  // namespace detail

template <class T, class B>
Var<T, B> mse_loss(const Var<T, B>& pred, const Var<T, B>& target, int batch_dims = 0,
                   Reduction reduction = Reduction::mean) {
  detail::check_same_shape("mse_loss", pred, target);
  detail::check_reducible(pred.shape(), batch_dims, "mse_loss");
  return detail::checked(squared_error(pred, target, batch_dims, reduction == Reduction::mean),
                         "mse_loss", pred.shape(), target.shape());
}

// Sigmoid cross-entropy on logits z with targets y in [0, 1]:
// -y log s(z) - (1 - y) log(1 - s(z)) = softplus(z) - y z, stable for any z.
template <class T, class B>
Var<T, B> bce_with_logits_loss(const Var<T, B>& logits, const Var<T, B>& target, int batch_dims = 0,
                               Reduction reduction = Reduction::mean) {
  detail::check_same_shape("bce_with_logits_loss", logits, target);
  return detail::checked(detail::reduce_after(sub(softplus(logits), mul(target, logits)),
                                              batch_dims, reduction, "bce_with_logits_loss"),
                         "bce_with_logits_loss", logits.shape(), target.shape());
}

namespace detail {
// A cross-entropy op's losses a row, reduced after batch_dims.
template <class T, class B>
Var<T, B> reduced_cross_entropy(const Var<T, B>& nll, int batch_dims, Reduction reduction,
                                const Shape& logits, const Shape& labels) {
  constexpr std::string_view name = "softmax_cross_entropy";
  return checked(reduce_after(nll, batch_dims, reduction, name), name, logits, labels);
}
}  // namespace detail

// Logits [..., K], integer labels [...] in [0, K), checked on the host.
template <class T, class B>
Var<T, B> softmax_cross_entropy(const Var<T, B>& logits, const Index<B>& labels, int batch_dims = 0,
                                Reduction reduction = Reduction::mean) {
  constexpr std::string_view name = "softmax_cross_entropy";
  check(logits.rank() >= 1 && labels.shape() == logits.shape().take_front(logits.rank() - 1), name,
        "labels {} must have the shape of logits {} without its last axis", labels.shape(),
        logits.shape());
  const std::int64_t classes = logits.dim(-1);
  std::vector<T> one_hot(static_cast<std::size_t>(logits.numel()), T(0));
  const auto label_values = labels.to_vector();
  for (std::size_t r = 0; r < label_values.size(); ++r) {
    const std::int64_t label = label_values[r];
    check(label >= 0 && label < classes, name, "label {} is outside [0, {})", label, classes);
    one_hot[r * static_cast<std::size_t>(classes) + static_cast<std::size_t>(label)] = T(1);
  }
  return detail::reduced_cross_entropy(
      cross_entropy_with_logits(logits, Tensor<T, B>::from_host(logits.shape(), one_hot)),
      batch_dims, reduction, logits.shape(), labels.shape());
}

// Negative log-likelihood of target under N(mean, variance), constant included.
template <class T, class B>
Var<T, B> gaussian_nll_loss(const Var<T, B>& mean_, const Var<T, B>& variance,
                            const Var<T, B>& target, int batch_dims = 0,
                            Reduction reduction = Reduction::mean) {
  constexpr std::string_view name = "gaussian_nll_loss";
  detail::check_same_shape(name, mean_, target);
  check(broadcast_shapes(variance.shape(), mean_.shape(), name) == mean_.shape(), name,
        "variance {} does not broadcast to mean {}", variance.shape(), mean_.shape());
  // (mean - target)^2 has the bits of (target - mean)^2, and its gradient
  // into mean needs no negation (its bits too, but where mean equals
  // target: +0 where it was -0).
  const auto per_point = scale(
      shift(add(log(variance), div(square(sub(mean_, target)), variance)), detail::log_two_pi<T>()),
      T(0.5));
  return detail::checked(detail::reduce_after(per_point, batch_dims, reduction, name), name,
                         mean_.shape(), target.shape());
}

// The same with one variance for every point, known on the host (a known
// noise scale): the bits of the form above at a tensor of `variance` on the
// CPU, without the tensor, its log and its broadcast add (log v is a shift),
// one op and one kernel forward (squared_error) and none for the gradient
// but one scale: dividing by a scalar keeps a loss's gradient one host value
// (Backward::uniform_grad) where dividing by a tensor made it a tensor
// (issue 38). The log is the host's, which on a device may differ from the
// device's by an ulp: the loss's value, not its gradient
// (docs/architecture.md).
template <class T, class B>
Var<T, B> gaussian_nll_loss(const Var<T, B>& mean_, T variance, const Var<T, B>& target,
                            int batch_dims = 0, Reduction reduction = Reduction::mean) {
  constexpr std::string_view name = "gaussian_nll_loss";
  detail::check_same_shape(name, mean_, target);
  check_finite(name, "variance", variance);
  check_positive(name, "variance", variance);
  detail::check_reducible(mean_.shape(), batch_dims, name);
  // One op (log v + q is q + log v to the bit).
  return detail::checked(
      squared_error(mean_, target, batch_dims, reduction == Reduction::mean, variance), name,
      mean_.shape(), target.shape());
}

}  // namespace platipus

namespace platipus {

// The losses as function objects, in the form the meta-learners take
// (`loss(prediction, target, batch_dims)`; see meta/driver/concepts.hpp).
struct MseLoss {
  Reduction reduction = Reduction::mean;
  template <class T, class B>
  Var<T, B> operator()(const Var<T, B>& pred, const Var<T, B>& target, int batch_dims) const {
    return mse_loss(pred, target, batch_dims, reduction);
  }
};

// The negative log-likelihood of regression targets under N(prediction,
// noise_std^2), noise_std known (the sinusoid-or-line tasks' 0.3): up to a
// constant, the squared error over 2 noise_std^2. Averaged over a task's
// points by default, so that a gradient step's size does not grow with the
// number of points; PLATIPUS sums it over the query points for its ELBO
// (PlatipusSettings::query_reduction).
struct GaussianNllLoss {
  double noise_std = 0.3;
  Reduction reduction = Reduction::mean;

  template <class T, class B>
  Var<T, B> operator()(const Var<T, B>& pred, const Var<T, B>& target, int batch_dims) const {
    check_finite("GaussianNllLoss", "noise_std", noise_std);
    check_positive("GaussianNllLoss", "noise_std", noise_std);
    return gaussian_nll_loss(pred, static_cast<T>(noise_std * noise_std), target, batch_dims,
                             reduction);
  }
};

struct BceWithLogitsLoss {
  Reduction reduction = Reduction::mean;
  template <class T, class B>
  Var<T, B> operator()(const Var<T, B>& logits, const Var<T, B>& target, int batch_dims) const {
    return bce_with_logits_loss(logits, target, batch_dims, reduction);
  }
};

// Targets are class indices stored as values, [..., 1] beside logits
// [..., K] (a TaskBatch's y). The one-hot rows are made on the backend
// (target == [0, ..., K - 1]), so a loss evaluation never waits for the
// device; the learners check the labels once per batch (check_targets): a
// label outside [0, K) would otherwise give a zero row, and a wrong loss.
struct SoftmaxCrossEntropyLoss {
  Reduction reduction = Reduction::mean;
  template <class T, class B>
  Var<T, B> operator()(const Var<T, B>& logits, const Var<T, B>& target, int batch_dims) const {
    check(target.rank() == logits.rank() && target.dim(-1) == 1 &&
              target.shape().take_front(target.rank() - 1) ==
                  logits.shape().take_front(logits.rank() - 1),
          "softmax_cross_entropy", "class-index targets must be [..., 1] beside logits {}, got {}",
          logits.shape(), target.shape());
    return detail::reduced_cross_entropy(sparse_cross_entropy_with_logits(logits, target.value()),
                                         batch_dims, reduction, logits.shape(), target.shape());
  }

  // Throws naming `who` unless every target is a class index in [0,
  // classes) (classes 0: any non-negative whole number). Reads y to the host.
  template <class T, class B>
  void check_targets(const Tensor<T, B>& y, std::int64_t classes, std::string_view who) const {
    for (const T v : y.to_vector())
      check(v >= 0 && v == std::floor(v) && (classes == 0 || v < static_cast<T>(classes)), who,
            "class label {} is not in [0, {}) (targets {})", v, classes, y.shape());
  }
};

}  // namespace platipus
