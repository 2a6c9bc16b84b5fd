// Raw (non-recording) elementwise kernels on tensors: unary maps, binary
// maps with NumPy broadcasting, masked select, and the foreach forms of
// axpy and unary maps over lists of tensors.
#pragma once

#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "platipus/tensor/tensor.hpp"

namespace platipus::raw {

namespace detail {

// Aligns both operand shapes to `out`, gives broadcast axes stride 0, drops
// size-1 axes and merges adjacent axes that are contiguous in both operands,
// so that most broadcasts become one or two flat loops.
inline BroadcastLayout broadcast_layout(const Shape& out, const Shape& a, const Shape& b) {
  const Strides ca = contiguous_strides(a), cb = contiguous_strides(b);
  BroadcastLayout l;
  for (int i = 0; i < out.rank(); ++i) {
    if (out[i] == 1) continue;
    const int ia = i - (out.rank() - a.rank()), ib = i - (out.rank() - b.rank());
    const std::int64_t sa = (ia >= 0 && a[ia] != 1) ? ca[static_cast<std::size_t>(ia)] : 0;
    const std::int64_t sb = (ib >= 0 && b[ib] != 1) ? cb[static_cast<std::size_t>(ib)] : 0;
    if (l.rank > 0) {
      const auto p = static_cast<std::size_t>(l.rank - 1);
      if (l.stride_a[p] == sa * out[i] && l.stride_b[p] == sb * out[i]) {
        l.dims[p] *= out[i];
        l.stride_a[p] = sa;
        l.stride_b[p] = sb;
        continue;
      }
    }
    const auto q = static_cast<std::size_t>(l.rank++);
    l.dims[q] = out[i];
    l.stride_a[q] = sa;
    l.stride_b[q] = sb;
  }
  return l;
}

}  // namespace detail

template <class T, class B>
Tensor<T, B> map(UnaryOp op, const Tensor<T, B>& x, T scalar = T(0)) {
  Tensor<T, B> y(x.shape());
  if (x.numel()) B::unary(op, x.data(), y.data(), x.numel(), scalar);
  return y;
}

template <class T, class B>
Tensor<T, B> map(BinaryOp op, const Tensor<T, B>& a, const Tensor<T, B>& b, std::string_view name) {
  Tensor<T, B> y(broadcast_shapes(a.shape(), b.shape(), name));
  if (y.numel())
    B::binary(op, a.data(), b.data(), y.data(),
              detail::broadcast_layout(y.shape(), a.shape(), b.shape()));
  return y;
}

// a + s * b for a and b of one shape.
template <class T, class B>
Tensor<T, B> axpy(const Tensor<T, B>& a, const Tensor<T, B>& b, T s) {
  check(a.shape() == b.shape(), "add_scaled", "shapes {} and {} differ", a.shape(), b.shape());
  Tensor<T, B> y(a.shape());
  if (y.numel()) B::axpy(a.data(), b.data(), y.data(), y.numel(), s);
  return y;
}

namespace detail {

// launch(l) on layouts l of up to Layout::capacity pieces (PiecesLayout,
// AdamLayout): fill(l, k, i) writes piece i of `pieces` into slot k, which
// is left out when it has no elements (l.n[k] == 0).
template <class Layout, class Fill, class Launch>
void launch_in_layouts(std::size_t pieces, Fill fill, Launch launch) {
  Layout l;
  for (std::size_t i = 0; i < pieces; ++i) {
    const auto k = static_cast<std::size_t>(l.count);
    fill(l, k, i);
    if (l.n[k] == 0) continue;
    if (++l.count == Layout::capacity) {
      launch(l);
      l.count = 0;
    }
  }
  if (l.count > 0) launch(l);
}

// launch(PiecesLayout) over pieces i of n[i] > 0 elements (a[i], b[i] when b
// is not empty, y[i]), in calls of up to PiecesLayout::capacity pieces.
template <class T, class Launch>
void launch_pieces(std::span<const T* const> a, std::span<const T* const> b, std::span<T* const> y,
                   std::span<const std::int64_t> n, Launch launch) {
  launch_in_layouts<PiecesLayout<T>>(
      a.size(),
      [&](PiecesLayout<T>& l, std::size_t k, std::size_t i) {
        l.a[k] = a[i];
        l.b[k] = b.empty() ? nullptr : b[i];
        l.y[k] = y[i];
        l.n[k] = n[i];
      },
      launch);
}

// A piece's output: its shape and the elements its PiecesLayout slot counts.
struct PieceOutput {
  Shape shape;
  std::int64_t n;
};

// New tensors y_i shaped by output(*x[i]), written by launch(PiecesLayout)
// over slots of output(*x[i]).n elements; b, when not empty, pairs with x.
template <class T, class B, class Output, class Launch>
std::vector<Tensor<T, B>> map_pieces(const std::vector<const Tensor<T, B>*>& x,
                                     const std::vector<const Tensor<T, B>*>& b, Output output,
                                     Launch launch) {
  std::vector<Tensor<T, B>> y;
  y.reserve(x.size());
  std::vector<const T*> xs, bs;
  std::vector<T*> ys;
  std::vector<std::int64_t> n;
  for (std::size_t i = 0; i < x.size(); ++i) {
    PieceOutput out = output(*x[i]);
    y.emplace_back(out.shape);
    xs.push_back(x[i]->data());
    if (!b.empty()) bs.push_back(b[i]->data());
    ys.push_back(y.back().data());
    n.push_back(out.n);
  }
  launch_pieces<T>(xs, bs, ys, n, launch);
  return y;
}

// The output of a piece mapped element by element: x's shape.
template <class T, class B>
PieceOutput same_shape(const Tensor<T, B>& x) {
  return {x.shape(), x.numel()};
}

}  // namespace detail

// a_i + s * b_i for every i (a_i and b_i of one shape), one backend call for
// up to PiecesLayout::capacity pieces: the bits of axpy on each pair.
template <class T, class B>
std::vector<Tensor<T, B>> foreach_axpy(const std::vector<const Tensor<T, B>*>& a,
                                       const std::vector<const Tensor<T, B>*>& b, T s) {
  check(a.size() == b.size(), "foreach_add_scaled", "{} and {} tensors given", a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    check(a[i]->shape() == b[i]->shape(), "foreach_add_scaled", "piece {}: shapes {} and {} differ",
          i, a[i]->shape(), b[i]->shape());
  return detail::map_pieces(a, b, detail::same_shape<T, B>,
                            [s](const PiecesLayout<T>& l) { B::foreach_axpy(l, s); });
}

// How x broadcast to `out` repeats (Repetition): the axes on which x has 1
// and out more (leading axes x lacks included) form at most two runs, axes
// of extent 1 in out joining either; all repeats 1 where x has out's shape;
// nullopt where x broadcasts to out otherwise, or not at all.
inline std::optional<Repetition> repetition_over(const Shape& x, const Shape& out) {
  if (x.rank() > out.rank()) return std::nullopt;
  const int lead = out.rank() - x.rank();
  std::array<std::int64_t, 2> repeat{1, 1};   // the runs' extents, outer first
  std::array<std::int64_t, 3> kept{1, 1, 1};  // out's extents before, between and after them
  int runs = 0;
  bool in_run = false;
  for (int a = 0; a < out.rank(); ++a) {
    const std::int64_t d = a < lead ? 1 : x[a - lead];
    if (out[a] == 1 && d == 1) continue;
    if (d == out[a]) {
      kept[runs] *= d;
      in_run = false;
    } else if (d != 1) {
      return std::nullopt;
    } else {
      if (!in_run && runs == 2) return std::nullopt;
      runs += in_run ? 0 : 1;
      in_run = true;
      repeat[runs - 1] *= out[a];
    }
  }
  if (runs == 2) return Repetition{repeat[0], kept[1], repeat[1], kept[2]};
  return Repetition{.inner_repeat = repeat[0], .inner = kept[1]};
}

// Whether r broadcast to a's shape is r's elements repeated along a's
// leading axes: r's shape, its leading 1s dropped, ends a's (a per-parameter
// rate shared by the tasks, or one rate for the piece); that is, r repeats
// over a (repetition_over) along one run with nothing outside it before it.
inline bool repeats_along_leading_axes(const Shape& r, const Shape& a) {
  const auto repetition = repetition_over(r, a);
  return repetition &&
         (repetition->none() || (repetition->outer_repeat == 1 &&
                                 repetition->inner_repeat * repetition->inner == a.numel()));
}

// a_i - r_i * g_i for every i, or a_i + r_i * g_i where `add` (a_i and g_i
// of one shape, r_i's elements repeated along a_i's leading axes), in calls
// of up to SubMulLayout::capacity pieces: the bits of mul then sub (add) on
// each.
template <class T, class B>
std::vector<Tensor<T, B>> foreach_sub_mul(const std::vector<const Tensor<T, B>*>& a,
                                          const std::vector<const Tensor<T, B>*>& r,
                                          const std::vector<const Tensor<T, B>*>& g,
                                          bool add = false) {
  const std::string_view who = add ? "foreach_add_mul" : "foreach_sub_mul";
  check(a.size() == r.size() && a.size() == g.size(), who, "{}, {} and {} tensors given", a.size(),
        r.size(), g.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Shape& shape = a[i]->shape();
    check(g[i]->shape() == shape && repeats_along_leading_axes(r[i]->shape(), shape), who,
          "piece {}: a {}, r {} and g {} (g as a, r ending a after any leading 1s)", i, shape,
          r[i]->shape(), g[i]->shape());
  }
  std::vector<Tensor<T, B>> y;
  y.reserve(a.size());
  for (const auto* ai : a) y.emplace_back(ai->shape());
  detail::launch_in_layouts<SubMulLayout<T>>(
      a.size(),
      [&](SubMulLayout<T>& l, std::size_t k, std::size_t i) {
        l.add = add;
        l.a[k] = a[i]->data();
        l.r[k] = r[i]->data();
        l.g[k] = g[i]->data();
        l.y[k] = y[i].data();
        l.n[k] = a[i]->numel();
        l.rn[k] = r[i]->numel();
      },
      [](const SubMulLayout<T>& l) { B::foreach_sub_mul(l); });
  return y;
}

// r_i * g_i for every i (r_i's elements repeated along g_i's leading axes),
// negated where negate[i], in calls of up to MulLayout::capacity pieces: the
// bits of mul (then neg) on each.
template <class T, class B>
std::vector<Tensor<T, B>> foreach_mul(const std::vector<const Tensor<T, B>*>& r,
                                      const std::vector<const Tensor<T, B>*>& g,
                                      const std::vector<bool>& negate) {
  constexpr std::string_view who = "foreach_mul";
  check(r.size() == g.size() && r.size() == negate.size(), who,
        "{} and {} tensors and {} negate flags given", r.size(), g.size(), negate.size());
  for (std::size_t i = 0; i < r.size(); ++i)
    check(repeats_along_leading_axes(r[i]->shape(), g[i]->shape()), who,
          "piece {}: r {} and g {} (r ending g after any leading 1s)", i, r[i]->shape(),
          g[i]->shape());
  std::vector<Tensor<T, B>> y;
  y.reserve(g.size());
  for (const auto* gi : g) y.emplace_back(gi->shape());
  detail::launch_in_layouts<MulLayout<T>>(
      g.size(),
      [&](MulLayout<T>& l, std::size_t k, std::size_t i) {
        l.r[k] = r[i]->data();
        l.g[k] = g[i]->data();
        l.y[k] = y[i].data();
        l.n[k] = g[i]->numel();
        l.rn[k] = r[i]->numel();
        l.negate[k] = negate[i];
      },
      [](const MulLayout<T>& l) { B::foreach_mul(l); });
  return y;
}

// f(x_i, s) for every i, as map does on each, in calls of up to
// PiecesLayout::capacity pieces.
template <class T, class B>
std::vector<Tensor<T, B>> foreach_map(UnaryOp op, const std::vector<const Tensor<T, B>*>& x,
                                      T scalar = T(0)) {
  return detail::map_pieces(x, {}, detail::same_shape<T, B>,
                            [&](const PiecesLayout<T>& l) { B::foreach_unary(op, l, scalar); });
}

// foreach_map into tensors y_i of x_i's shapes that exist (views into one
// buffer, say) instead of new ones.
template <class T, class B>
void foreach_map_into(UnaryOp op, const std::vector<const Tensor<T, B>*>& x,
                      const std::vector<Tensor<T, B>*>& y, T scalar = T(0)) {
  check(x.size() == y.size(), "foreach_map_into", "{} inputs and {} outputs given", x.size(),
        y.size());
  std::vector<const T*> xs;
  std::vector<T*> ys;
  std::vector<std::int64_t> n;
  for (std::size_t i = 0; i < x.size(); ++i) {
    check(x[i]->shape() == y[i]->shape(), "foreach_map_into", "piece {}: shapes {} and {} differ",
          i, x[i]->shape(), y[i]->shape());
    xs.push_back(x[i]->data());
    ys.push_back(y[i]->data());
    n.push_back(x[i]->numel());
  }
  detail::launch_pieces<T>(xs, {}, ys, n,
                           [&](const PiecesLayout<T>& l) { B::foreach_unary(op, l, scalar); });
}

// Each x_i [shape_i] as `copies` stacked copies [copies, shape_i], in calls
// of up to PiecesLayout::capacity pieces: expand to a new leading axis.
template <class T, class B>
std::vector<Tensor<T, B>> foreach_expand(const std::vector<const Tensor<T, B>*>& x,
                                         std::int64_t copies) {
  check(copies >= 1, "foreach_expand", "{} copies asked for", copies);
  const auto stacked = [copies](const Tensor<T, B>& xi) {
    Shape shape{copies};
    for (auto d : xi.shape().dims()) shape.push_back(d);
    return detail::PieceOutput{shape, xi.numel()};
  };
  return detail::map_pieces(x, {}, stacked,
                            [copies](const PiecesLayout<T>& l) { B::foreach_expand(l, copies); });
}

// Each x_i [copies, shape_i] summed over its leading axis to [shape_i], as
// sum_to does, in calls of up to PiecesLayout::capacity pieces: the adjoint
// of foreach_expand.
template <class T, class B>
std::vector<Tensor<T, B>> foreach_sum_to(const std::vector<const Tensor<T, B>*>& x) {
  for (std::size_t i = 0; i < x.size(); ++i)
    check(x[i]->rank() >= 1, "foreach_sum_to", "piece {} is a scalar, with no leading axis to sum",
          i);
  const std::int64_t copies = x.empty() ? 0 : x[0]->dim(0);
  for (std::size_t i = 0; i < x.size(); ++i)
    check(x[i]->dim(0) == copies, "foreach_sum_to",
          "piece {} is {}, but piece 0 has {} along its leading axis", i, x[i]->shape(), copies);
  const auto summed = [](const Tensor<T, B>& xi) {
    Shape shape = xi.shape().drop_front(1);
    const std::int64_t n = shape.numel();
    return detail::PieceOutput{std::move(shape), n};
  };
  return detail::map_pieces(x, {}, summed,
                            [copies](const PiecesLayout<T>& l) { B::foreach_sum_to(l, copies); });
}

// The shape of add_n's sum of x: their broadcast shape; `op` names the
// caller where there are none or they do not broadcast.
template <class T, class B>
Shape add_n_shape(std::span<const Tensor<T, B>* const> x, const char* op = "add_n") {
  check(!x.empty(), op, "no summands given");
  Shape out = x[0]->shape();
  for (std::size_t i = 1; i < x.size(); ++i) out = broadcast_shapes(out, x[i]->shape(), op);
  return out;
}

// The shape of add_n's sum where add_n takes these summands, whose shapes
// broadcast: each of their broadcast shape or repeating over it along at
// most two runs of axes (repetition_over); nothing where it does not.
template <class T, class B>
std::optional<Shape> add_n_takes(std::span<const Tensor<T, B>* const> x) {
  if (x.empty()) return std::nullopt;
  Shape out = add_n_shape(x);
  if (!std::ranges::all_of(
          x, [&](const auto* xi) { return repetition_over(xi->shape(), out).has_value(); }))
    return std::nullopt;
  return out;
}

namespace detail {

// add_n's sum of x (negated where negate says), made in y: its layout.
template <class T, class B>
SummandsLayout<T> summands_layout(std::span<const Tensor<T, B>* const> x,
                                  std::span<const bool> negate, Tensor<T, B>& y, const char* op) {
  constexpr auto capacity = static_cast<std::size_t>(SummandsLayout<T>::capacity);
  check(x.size() >= 2 && x.size() <= capacity, op, "{} summands given; it takes 2 to {}", x.size(),
        capacity);
  check(negate.empty() || negate.size() == x.size(), op, "{} negate flags given for {} summands",
        negate.size(), x.size());
  const Shape out = add_n_shape(x, op);
  y = Tensor<T, B>(out);
  SummandsLayout<T> l{.count = static_cast<int>(x.size()), .y = y.data(), .n = y.numel()};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto r = repetition_over(x[i]->shape(), out);
    check(r.has_value(), op,
          "summand {} is {}, which repeats over {} along more than two runs of axes", i,
          x[i]->shape(), out);
    l.x[i] = x[i]->data();
    l.negate[i] = !negate.empty() && negate[i];
    l.repetition[i] = *r;
  }
  return l;
}

}  // namespace detail

// ±x[0] ± x[1] ± ... in that order, in one backend call (2 to
// SummandsLayout's capacity of summands), of the summands' broadcast shape:
// x[k] enters negated where negate[k] (none when negate is empty), with the
// bits of negating it first, and repeated where it broadcasts along at most
// two runs of axes, with the bits of a broadcasting add. Given `route` (of
// the sum's shape), the sum where route > 0 and 0 elsewhere, with the bits
// of relu_backward(sum, route) in the same call.
template <class T, class B>
Tensor<T, B> add_n(std::span<const Tensor<T, B>* const> x, std::span<const bool> negate = {},
                   const Tensor<T, B>* route = nullptr) {
  Tensor<T, B> y;
  auto l = detail::summands_layout(x, negate, y, "add_n");
  if (route) {
    check(route->shape() == y.shape(), "add_n", "route {} for a sum {}", route->shape(), y.shape());
    l.route = route->data();
  }
  if (y.numel() > 0) B::add_n(l);
  return y;
}

// s (±x[0] ± x[1] ± ...): add_n's sum scaled in the same call, with the bits
// of add_n then scale (UnaryOp::scale); scale's rule on a gradient that is
// still parts (autodiff/ops/arithmetic.hpp).
template <class T, class B>
Tensor<T, B> scaled_add_n(std::span<const Tensor<T, B>* const> x, std::span<const bool> negate,
                          T s) {
  Tensor<T, B> y;
  auto l = detail::summands_layout(x, negate, y, "scaled_add_n");
  l.scale = s;
  if (y.numel() > 0) B::add_n(l);
  return y;
}

// add_n(x[i], negate[i]) for each i, with its bits, by one backend call per
// SumsLayout's capacity of sums (negate empty: nothing negated).
template <class T, class B>
std::vector<Tensor<T, B>> foreach_add_n(std::span<const std::span<const Tensor<T, B>* const>> x,
                                        std::span<const std::span<const bool>> negate = {}) {
  check(negate.empty() || negate.size() == x.size(), "foreach_add_n",
        "{} lists of negate flags given for {} sums", negate.size(), x.size());
  std::vector<Tensor<T, B>> y(x.size());
  SumsLayout<T> l;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto l_i = detail::summands_layout(
        x[i], negate.empty() ? std::span<const bool>() : negate[i], y[i], "foreach_add_n");
    if (l_i.n > 0) l.sum[static_cast<std::size_t>(l.count++)] = l_i;
    if (l.count == SumsLayout<T>::capacity || (i + 1 == x.size() && l.count > 0)) {
      B::foreach_add_n(l);
      l.count = 0;
    }
  }
  return y;
}

// mask ? a : b elementwise; all three of one shape.
template <class T, class B>
Tensor<T, B> select(const Tensor<T, B>& mask, const Tensor<T, B>& a, const Tensor<T, B>& b) {
  check(mask.shape() == a.shape() && a.shape() == b.shape(), "where",
        "mask {}, a {} and b {} must have one shape", mask.shape(), a.shape(), b.shape());
  Tensor<T, B> y(a.shape());
  if (y.numel()) B::select(mask.data(), a.data(), b.data(), y.data(), y.numel());
  return y;
}

}  // namespace platipus::raw
