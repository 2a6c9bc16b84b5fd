// conv2d and its two adjoints, conv2d_input_grad and conv2d_weight_grad, on
// the backend's convolution (tensor/convolution.hpp). All three are the one
// trilinear form <dy, w * x> differentiated in one argument, so each one's
// backward rule is written with the other two and the set is closed under
// differentiation: MAML's meta-gradient through a conv net differentiates
// the inner loop's conv2d_input_grad and conv2d_weight_grad, and so on to
// any order.
#pragma once

#include "platipus/autodiff/ops/arithmetic.hpp"
#include "platipus/autodiff/ops/broadcast.hpp"
#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/convolution.hpp"

namespace platipus {

template <class T, class B>
Var<T, B> conv2d_input_grad(const Var<T, B>& dy, const Var<T, B>& w, const Shape& x_shape,
                            const Window& window);
template <class T, class B>
Var<T, B> conv2d_weight_grad(const Var<T, B>& x, const Var<T, B>& dy, const Shape& w_shape,
                             const Window& window);

namespace detail {

// w * x for filters shared by every image ([C_out, C, k, k]) or with x's
// leading axes (raw::conv_layout), no bias.
template <class T, class B>
Var<T, B> grouped_conv2d(const Var<T, B>& x, const Var<T, B>& w, const Window& window) {
  return record(
      "conv2d", {x, w}, raw::conv2d(x.value(), w.value(), window),
      [window](Backward<T, B>& c) {
        const auto g = c.grad(), x = c.input(0), w = c.input(1);
        if (c.needs(0)) c.set(0, conv2d_input_grad(g, w, x.shape(), window));
        if (c.needs(1)) c.set(1, conv2d_weight_grad(x, g, w.shape(), window));
      },
      saves_inputs);
}

// The same plus a bias b [..., C_out] with w's leading axes, added by the
// backend as it writes the outputs (one sweep of y fewer than an add op).
// b's gradient is the one an add would give: g summed to [..., 1, C_out, 1,
// 1], the same reduction in the same order, so the same bits.
template <class T, class B>
Var<T, B> grouped_conv2d(const Var<T, B>& x, const Var<T, B>& w, const Var<T, B>& b,
                         const Window& window) {
  return record(
      "conv2d", {x, w, b}, raw::conv2d(x.value(), w.value(), window, &b.value()),
      [window](Backward<T, B>& c) {
        const auto g = c.grad(), x = c.input(0), w = c.input(1), b = c.input(2);
        if (c.needs(0)) c.set(0, conv2d_input_grad(g, w, x.shape(), window));
        if (c.needs(1)) c.set(1, conv2d_weight_grad(x, g, w.shape(), window));
        if (c.needs(2)) {
          Shape per_channel = b.shape().take_front(b.rank() - 1);  // [..., 1, C_out, 1, 1]
          for (auto d : {std::int64_t{1}, b.dim(-1), std::int64_t{1}, std::int64_t{1}})
            per_channel.push_back(d);
          c.set(2, reshape(sum_to(g, per_channel), b.shape()));
        }
      },
      Saved{.inputs = 0b011, .outputs = false});
}

}  // namespace detail

// The gradient of <dy, w * x> in x, for x of shape x_shape (a transposed
// convolution); w shared or with x's leading axes, as in conv2d.
template <class T, class B>
Var<T, B> conv2d_input_grad(const Var<T, B>& dy, const Var<T, B>& w, const Shape& x_shape,
                            const Window& window) {
  return record(
      "conv2d_input_grad", {dy, w}, raw::conv2d_input_grad(dy.value(), w.value(), x_shape, window),
      [window](Backward<T, B>& c) {
        const auto g = c.grad(), dy = c.input(0), w = c.input(1);
        if (c.needs(0)) c.set(0, detail::grouped_conv2d(g, w, window));
        if (c.needs(1)) c.set(1, conv2d_weight_grad(g, dy, w.shape(), window));
      },
      saves_inputs);
}

// The gradient of <dy, w * x> in w, for w of shape w_shape (summed over
// every image when the filters are shared).
template <class T, class B>
Var<T, B> conv2d_weight_grad(const Var<T, B>& x, const Var<T, B>& dy, const Shape& w_shape,
                             const Window& window) {
  return record(
      "conv2d_weight_grad", {x, dy},
      raw::conv2d_weight_grad(x.value(), dy.value(), w_shape, window),
      [window](Backward<T, B>& c) {
        const auto g = c.grad(), x = c.input(0), dy = c.input(1);
        if (c.needs(0)) c.set(0, conv2d_input_grad(dy, g, x.shape(), window));
        if (c.needs(1)) c.set(1, detail::grouped_conv2d(x, g, window));
      },
      saves_inputs);
}

// y = w * x + b, the 2-D cross-correlation of deep learning: x [..., N, C,
// H, W], w [..., C_out, C, k, k] whose leading axes broadcast against x's
// before N (one filter bank per task: a grouped convolution, one backend
// call for every task), b [..., C_out] or undefined -> [..., N, C_out, Ho, Wo].
template <class T, class B>
Var<T, B> conv2d(const Var<T, B>& x, const Var<T, B>& w, const Var<T, B>& b, const Window& window) {
  constexpr std::string_view who = "conv2d";
  check(x.rank() >= 4 && w.rank() >= 4, who,
        "the input must be [..., N, C, H, W] and the weights [..., C_out, C, k, k], got {} and {}",
        x.shape(), w.shape());
  const Shape x_lead = x.shape().take_front(x.rank() - 4),
              w_lead = w.shape().take_front(w.rank() - 4);
  const Shape lead = broadcast_shapes(x_lead, w_lead, who);
  const auto with_lead = [&](const Shape& tail_of) {
    Shape s = lead;
    for (int a = tail_of.rank() - 4; a < tail_of.rank(); ++a) s.push_back(tail_of[a]);
    return s;
  };
  const std::int64_t c_out = w.dim(-4);
  if (b.defined())
    check(b.rank() >= 1 && b.dim(-1) == c_out, who, "the bias {} must end in C_out = {}", b.shape(),
          c_out);
  // A bias with the filter banks' leading axes goes into the convolution.
  const Shape b_lead = b.defined() ? b.shape().take_front(b.rank() - 1) : Shape{};
  Var<T, B> y;
  bool biased = false;
  if (w_lead.numel() == 1) {  // shared filters: the images of every task form one group
    const auto w4 = reshape(w, w.shape().drop_front(w.rank() - 4));
    biased = b.defined() && b_lead.numel() == 1;
    y = biased ? detail::grouped_conv2d(x, w4, b.rank() == 1 ? b : reshape(b, Shape{c_out}), window)
               : detail::grouped_conv2d(x, w4, window);
    Shape out = with_lead(y.shape());
    if (out != y.shape()) y = reshape(y, out);
  } else {
    const auto xe = x_lead == lead ? x : expand(x, with_lead(x.shape()));
    const auto we = w_lead == lead ? w : expand(w, with_lead(w.shape()));
    biased = b.defined() && b_lead == lead;
    y = biased ? detail::grouped_conv2d(xe, we, b, window) : detail::grouped_conv2d(xe, we, window);
  }
  if (!b.defined() || biased) return y;
  Shape bias = b.shape().take_front(b.rank() - 1);  // [..., 1, C_out, 1, 1]
  for (auto d : {std::int64_t{1}, c_out, std::int64_t{1}, std::int64_t{1}}) bias.push_back(d);
  return y + reshape(b, bias);
}

}  // namespace platipus
