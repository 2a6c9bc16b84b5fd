// Raw batch normalisation (with its scale and shift) and its backward, with
// shapes checked and the backend's NormLayout computed here. x is [..., N,
// C, positions...]: the leading axes are tasks, each normalised on its own;
// a task's channel C is normalised over its N samples and their positions
// (none for feature vectors [..., N, F], H W for images [..., N, C, H, W]).
#pragma once

#include <string_view>
#include <type_traits>
#include <utility>

#include "platipus/tensor/tensor.hpp"

namespace platipus::raw {

// The groups of x with `positions` trailing position axes, checked; `who`
// names the op in messages.
inline NormLayout norm_layout(const Shape& x, int positions, std::string_view who) {
  check(positions >= 0 && x.rank() >= positions + 2, who,
        "the input must be [..., N, C] followed by {} position axes, got {}", positions, x);
  const int channel = x.rank() - positions - 1;
  NormLayout l{.outer = x.take_front(channel - 1).numel(),
               .n = x[channel - 1],
               .c = x[channel],
               .inner = x.drop_front(channel + 1).numel()};
  check(l.count() > 1, who,
        "the input {} has {} sample(s) of {} position(s) per channel: the batch statistics of a "
        "single value have no variance",
        x, l.n, l.inner);
  return l;
}

// The per-group statistics' shape: x's with N and the positions set to 1,
// so that it broadcasts against x.
inline Shape norm_statistics_shape(const Shape& x, int positions) {
  Shape s = x;
  const int channel = x.rank() - positions - 1;
  s[channel - 1] = 1;
  for (int a = channel + 1; a < x.rank(); ++a) s[a] = 1;
  return s;
}

// Batch normalisation's results: y = x_hat * scale + shift, x normalised
// per group (x_hat), and 1 / sqrt(variance + epsilon) per group (inv_std).
template <class T, class B>
struct Normalized {
  Tensor<T, B> y, x_hat, inv_std;
};

namespace detail {
inline void check_statistics(const Shape& expected, const Shape& scale, const Shape& shift,
                             std::string_view who) {
  check(scale == expected && shift == expected, who,
        "scale {} and shift {} must have the statistics' shape {}", scale, shift, expected);
}
}  // namespace detail

// Normalises x [..., N, C, positions...] per group and scales and shifts it;
// scale and shift have the statistics' shape (norm_statistics_shape).
template <class T, class B>
Normalized<T, B> batch_norm(const Tensor<T, B>& x, const Tensor<T, B>& scale,
                            const Tensor<T, B>& shift, int positions, T epsilon) {
  constexpr std::string_view who = "batch_norm";
  check_positive(who, "epsilon", epsilon);
  const NormLayout l = norm_layout(x.shape(), positions, who);
  const Shape statistics = norm_statistics_shape(x.shape(), positions);
  detail::check_statistics(statistics, scale.shape(), shift.shape(), who);
  Normalized<T, B> out{Tensor<T, B>(x.shape()), Tensor<T, B>(x.shape()), Tensor<T, B>(statistics)};
  if (x.numel())
    B::batch_norm(l, x.data(), epsilon, scale.data(), shift.data(), out.x_hat.data(),
                  out.inv_std.data(), out.y.data());
  return out;
}

// The gradients of <g, y> for y = batch_norm(x) * scale + shift: in x,
// inv_std scale (g - mean(g) - x_hat mean(x_hat g)); in scale, sum(x_hat g);
// in shift, sum(g) (per group). With g_x_hat and g_inv_std (or null), the
// gradients flowing into batch_norm's x_hat and inv_std results, dx is
// batch_norm's whole gradient in x: plus inv_std (g_x_hat - mean(g_x_hat) -
// x_hat mean(x_hat g_x_hat)) - x_hat g_inv_std inv_std^2 / count.
template <class T, class B>
struct NormalizedGradients {
  Tensor<T, B> dx, d_scale, d_shift;
};

template <class T, class B>
NormalizedGradients<T, B> batch_norm_backward(
    const Tensor<T, B>& x_hat, const Tensor<T, B>& inv_std, const Tensor<T, B>& scale,
    const Tensor<T, B>& g, int positions,
    const std::type_identity_t<Tensor<T, B>>* g_x_hat = nullptr,
    const std::type_identity_t<Tensor<T, B>>* g_inv_std = nullptr) {
  constexpr std::string_view who = "batch_norm_backward";
  const NormLayout l = norm_layout(x_hat.shape(), positions, who);
  const Shape statistics = norm_statistics_shape(x_hat.shape(), positions);
  check(g.shape() == x_hat.shape() && inv_std.shape() == statistics, who,
        "x_hat {}, inv_std {} and the gradient {} do not match", x_hat.shape(), inv_std.shape(),
        g.shape());
  detail::check_statistics(statistics, scale.shape(), scale.shape(), who);
  if (g_x_hat)
    check(g_x_hat->shape() == x_hat.shape(), who, "x_hat {} and its gradient {} do not match",
          x_hat.shape(), g_x_hat->shape());
  if (g_inv_std)
    check(g_inv_std->shape() == statistics, who, "inv_std {} and its gradient {} do not match",
          statistics, g_inv_std->shape());
  NormalizedGradients<T, B> out{Tensor<T, B>(g.shape()), Tensor<T, B>(statistics),
                                Tensor<T, B>(statistics)};
  if (g.numel())
    B::batch_norm_backward(l, x_hat.data(), inv_std.data(), scale.data(), g.data(),
                           g_x_hat ? g_x_hat->data() : nullptr,
                           g_inv_std ? g_inv_std->data() : nullptr, out.dx.data(),
                           out.d_scale.data(), out.d_shift.data());
  return out;
}

// batch_norm_backward's own gradients: with dx, d_scale and d_shift its
// results (d_scale and d_shift passed here) and h, k, u the gradients
// flowing into them, the gradients of <h, dx> + <k, d_scale> + <u, d_shift>
// in x_hat, inv_std, scale and g, in two sweeps (the closed form is in
// backend/cpu/normalization.hpp). A null k or u is zeros, read as such
// rather than filled (the same arithmetic, one kernel fewer each).
template <class T, class B>
struct NormalizedSecondGradients {
  Tensor<T, B> d_x_hat, d_inv_std, d_scale, d_g;
};

template <class T, class B>
NormalizedSecondGradients<T, B> batch_norm_double_backward(
    const Tensor<T, B>& x_hat, const Tensor<T, B>& inv_std, const Tensor<T, B>& scale,
    const Tensor<T, B>& g, const Tensor<T, B>& d_scale, const Tensor<T, B>& d_shift,
    const Tensor<T, B>& h, const std::type_identity_t<Tensor<T, B>>* k,
    const std::type_identity_t<Tensor<T, B>>* u, int positions) {
  constexpr std::string_view who = "batch_norm_double_backward";
  const NormLayout l = norm_layout(x_hat.shape(), positions, who);
  const Shape statistics = norm_statistics_shape(x_hat.shape(), positions);
  check(g.shape() == x_hat.shape() && h.shape() == x_hat.shape(), who,
        "x_hat {}, g {} and h {} must have one shape", x_hat.shape(), g.shape(), h.shape());
  for (const Tensor<T, B>* t : {&inv_std, &scale, &d_scale, &d_shift, k, u})
    if (t)
      check(t->shape() == statistics, who, "a per-group input is {}, not the statistics' shape {}",
            t->shape(), statistics);
  NormalizedSecondGradients<T, B> out{Tensor<T, B>(x_hat.shape()), Tensor<T, B>(statistics),
                                      Tensor<T, B>(statistics), Tensor<T, B>(x_hat.shape())};
  if (g.numel())
    B::batch_norm_double_backward(l, x_hat.data(), inv_std.data(), scale.data(), g.data(),
                                  d_scale.data(), d_shift.data(), h.data(), k ? k->data() : nullptr,
                                  u ? u->data() : nullptr, out.d_x_hat.data(), out.d_inv_std.data(),
                                  out.d_scale.data(), out.d_g.data());
  return out;
}

}  // namespace platipus::raw
