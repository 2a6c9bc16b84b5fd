// Raw batched matrix product with transposes and broadcast batch axes:
// [..., m, k] x [..., k, n] -> [..., m, n], where the batch axes follow
// NumPy broadcasting and `trans_a` / `trans_b` transpose the last two axes.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <utility>

#include "platipus/tensor/elementwise.hpp"
#include "platipus/tensor/layout.hpp"
#include "platipus/tensor/reduce.hpp"
#include "platipus/tensor/tensor.hpp"

namespace platipus::raw {

// The shape of matmul(a, b, trans_a, trans_b); throws naming both shapes.
inline Shape matmul_shape(const Shape& a, const Shape& b, bool trans_a, bool trans_b) {
  check(a.rank() >= 2 && b.rank() >= 2, "matmul", "operands must be at least 2-D, got {} and {}", a,
        b);
  const std::int64_t m = trans_a ? a.dim(-1) : a.dim(-2), ka = trans_a ? a.dim(-2) : a.dim(-1);
  const std::int64_t kb = trans_b ? b.dim(-1) : b.dim(-2), n = trans_b ? b.dim(-2) : b.dim(-1);
  check(ka == kb, "matmul", "inner dimensions differ: a is {}{}, b is {}{}", a,
        trans_a ? " (transposed)" : "", b, trans_b ? " (transposed)" : "");
  Shape out = broadcast_shapes(a.take_front(a.rank() - 2), b.take_front(b.rank() - 2), "matmul");
  out.push_back(m);
  out.push_back(n);
  return out;
}

namespace detail {

// The operand's shape with its batch axes replaced by `batch`.
inline Shape with_batch(const Shape& batch, const Shape& shape, int matrix_axes) {
  Shape s = batch;
  for (int i = shape.rank() - matrix_axes; i < shape.rank(); ++i) s.push_back(shape[i]);
  return s;
}

// The GemmLayout of op(a) op(b) into a product of shape `out` (beta 0), or
// none where an operand's batch axes are neither the output's nor one
// matrix (a mixed broadcast, which the caller materialises).
template <class T, class B>
std::optional<GemmLayout<T>> gemm_layout(const Tensor<T, B>& a, const Tensor<T, B>& b,
                                         const Shape& out, bool trans_a, bool trans_b) {
  const int rank = out.rank();
  const std::int64_t batch = out.take_front(rank - 2).numel();
  const std::int64_t batch_a = a.shape().take_front(a.rank() - 2).numel();
  const std::int64_t batch_b = b.shape().take_front(b.rank() - 2).numel();
  if ((batch_a != batch && batch_a != 1) || (batch_b != batch && batch_b != 1)) return {};
  GemmLayout<T> g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = out[rank - 2];
  g.n = out[rank - 1];
  g.k = trans_a ? a.dim(-2) : a.dim(-1);
  g.stride_c = g.m * g.n;
  g.stride_a = batch_a == 1 ? 0 : a.dim(-2) * a.dim(-1);
  g.stride_b = batch_b == 1 ? 0 : b.dim(-2) * b.dim(-1);
  g.batch = batch;
  return g;
}

// A batch of row blocks times one shared matrix is a single taller GEMM.
template <class T>
void merge_row_blocks(GemmLayout<T>& g) {
  if (g.stride_b == 0 && g.stride_a != 0 && !g.trans_a) {
    g.m *= g.batch;
    g.batch = 1;
  }
}

// c = op(a) op(b) + beta * c, where c already has the product's shape.
template <class T, class B>
void matmul_into(const Tensor<T, B>& a, const Tensor<T, B>& b, Tensor<T, B>& c, bool trans_a,
                 bool trans_b, T beta) {
  if (c.numel() == 0) return;
  std::optional<GemmLayout<T>> g = gemm_layout(a, b, c.shape(), trans_a, trans_b);
  if (!g) {
    const Shape batch = c.shape().take_front(c.rank() - 2);
    matmul_into(expand(a, with_batch(batch, a.shape(), 2)),
                expand(b, with_batch(batch, b.shape(), 2)), c, trans_a, trans_b, beta);
    return;
  }
  g->beta = beta;
  merge_row_blocks(*g);
  B::gemm(*g, a.data(), b.data(), c.data());
}

}  // namespace detail

template <class T, class B>
Tensor<T, B> matmul(const Tensor<T, B>& a, const Tensor<T, B>& b, bool trans_a = false,
                    bool trans_b = false) {
  Tensor<T, B> c(matmul_shape(a.shape(), b.shape(), trans_a, trans_b));
  detail::matmul_into(a, b, c, trans_a, trans_b, T(0));
  return c;
}

// The factors of a product op(a) op(b), for matmul_gradients.
template <class T, class B>
struct Factors {
  const Tensor<T, B>& a;
  const Tensor<T, B>& b;
  bool trans_a = false, trans_b = false;
};

// g's rows summed down to `to` = [batch..., 1, n], a linear layer's bias
// gradient (sum_to(g, to)), for matmul_gradients.
template <class T, class B>
struct RowSums {
  const Tensor<T, B>& g;
  const Shape& to;
};

// What matmul_gradients computes: the products, in the order given, and the
// row sums where asked for.
template <class T, class B>
struct MatmulGradients {
  std::array<Tensor<T, B>, 2> products;
  Tensor<T, B> sums;
};

namespace detail {
// The bias gradient [batch..., n] as g's [batch, rows, n] rows summed:
// nothing where g's rows are not grouped by the batch axes (a bias [n] sums
// all rows, one [batch..., n] needs g [batch..., N, n]).
inline std::optional<BiasLayout> bias_layout(const Shape& g, const Shape& batch, std::int64_t n) {
  if (g.numel() == 0 || batch.numel() == 0 || g.dim(-1) != n ||
      (batch.numel() > 1 && (g.rank() != batch.rank() + 2 || g.take_front(batch.rank()) != batch)))
    return std::nullopt;
  return BiasLayout{.batch = batch.numel(), .rows = g.numel() / (batch.numel() * n), .n = n};
}
}  // namespace detail

// Up to two products and the row sums asked for, in one backend call
// (GemmsLayout): a product's two gradients, or a linear layer's product and
// bias gradients, those needed (issue 38). On the CPU, the bits of matmul
// and sum_to calls (the same GEMMs, reduce's order); on CUDA, small products
// sum in the tile kernel's order (cuda::gemms). Products whose batch axes
// are mixed broadcasts take a matmul call each, row sums not grouped by the
// bias's batch axes a sum_to call.
template <class T, class B>
MatmulGradients<T, B> matmul_gradients(std::span<const Factors<T, B>> products,
                                       std::optional<RowSums<T, B>> sums = std::nullopt) {
  check(products.size() <= GemmsLayout<T>::capacity, "matmul_gradients",
        "{} products, at most {} in a call", products.size(), GemmsLayout<T>::capacity);
  std::array<Shape, 2> shapes;
  std::array<std::optional<GemmLayout<T>>, 2> layouts;
  bool one_call = true;
  for (std::size_t i = 0; i < products.size(); ++i) {
    const Factors<T, B>& f = products[i];
    shapes[i] = matmul_shape(f.a.shape(), f.b.shape(), f.trans_a, f.trans_b);
    layouts[i] = detail::gemm_layout(f.a, f.b, shapes[i], f.trans_a, f.trans_b);
    one_call = one_call && layouts[i].has_value();
  }
  MatmulGradients<T, B> out;
  GemmsLayout<T> l;
  for (std::size_t i = 0; i < products.size(); ++i) {
    const Factors<T, B>& f = products[i];
    if (!one_call) {
      out.products[i] = matmul(f.a, f.b, f.trans_a, f.trans_b);
      continue;
    }
    out.products[i] = Tensor<T, B>(shapes[i]);
    if (out.products[i].numel() == 0) continue;
    detail::merge_row_blocks(*layouts[i]);
    l.gemm[l.count] = *layouts[i];
    l.a[l.count] = f.a.data();
    l.b[l.count] = f.b.data();
    l.c[l.count++] = out.products[i].data();
  }
  if (sums) {
    const Shape& to = sums->to;
    std::optional<BiasLayout> bias;
    if (to.rank() >= 2 && to.dim(-2) == 1 && sums->g.rank() >= to.rank())
      bias = detail::bias_layout(sums->g.shape(), to.take_front(to.rank() - 2), to.dim(-1));
    if (bias) {
      out.sums = Tensor<T, B>(to);
      l.bias = *bias;
      l.rows = sums->g.data();
      l.sums = out.sums.data();
    } else {
      out.sums = sum_to(sums->g, to);
    }
  }
  if (l.count > 0 || l.sums) B::gemms(l);
  return out;
}

// activation(x W + b) as one backend call (LinearLayout): x [..., N, in],
// w [..., in, out], b [..., out] with the batch axes of w (or none); b is
// added to every row, and `activation` (copy: none) applies to the sum.
template <class T, class B>
Tensor<T, B> linear(const Tensor<T, B>& x, const Tensor<T, B>& w, const Tensor<T, B>& b,
                    UnaryOp activation = UnaryOp::copy) {
  check(w.rank() >= 2 && b.dim(-1) == w.dim(-1) && b.rank() == w.rank() - 1, "linear",
        "bias {} does not match weight {}", b.shape(), w.shape());
  Tensor<T, B> y(matmul_shape(x.shape(), w.shape(), false, false));
  if (y.numel() == 0) return y;
  const Shape batch = y.shape().take_front(y.rank() - 2);
  const Shape bias_batch = b.shape().take_front(b.rank() - 1);
  std::optional<GemmLayout<T>> g = detail::gemm_layout(x, w, y.shape(), false, false);
  if (!g || (bias_batch.numel() != 1 && bias_batch != batch))
    return linear(expand(x, detail::with_batch(batch, x.shape(), 2)),
                  expand(w, detail::with_batch(batch, w.shape(), 2)),
                  expand(b, detail::with_batch(batch, b.shape(), 1)), activation);
  LinearLayout<T> l{
      .gemm = *g, .stride_bias = bias_batch.numel() == 1 ? 0 : g->n, .activation = activation};
  if (l.stride_bias == 0) detail::merge_row_blocks(l.gemm);
  B::linear(l, x.data(), w.data(), b.data(), y.data());
  return y;
}

// The gradients that relu(x w + b) passes on before its product, from its
// output y and their gradient g [..., N, out]: g routed by y
// (relu_backward) and the bias's gradient (its sums over the rows, at the
// bias's shape), in one backend call (BiasLayout). Nothing where g's rows
// are not grouped by the bias's batch axes (a bias [out] sums all rows, one
// [batch..., out] needs g [batch..., N, out]).
template <class T, class B>
std::optional<std::pair<Tensor<T, B>, Tensor<T, B>>> relu_bias_backward(const Tensor<T, B>& g,
                                                                        const Tensor<T, B>& y,
                                                                        const Shape& bias) {
  check(g.shape() == y.shape(), "relu_bias_backward", "gradient {} for an output {}", g.shape(),
        y.shape());
  const std::optional<BiasLayout> l =
      detail::bias_layout(g.shape(), bias.take_front(bias.rank() - 1), bias.dim(-1));
  if (!l) return std::nullopt;
  std::pair<Tensor<T, B>, Tensor<T, B>> d{Tensor<T, B>(g.shape()), Tensor<T, B>(bias)};
  B::relu_bias_backward(*l, g.data(), y.data(), d.first.data(), d.second.data());
  return d;
}

// relu_bias_backward of a gradient that is still parts: ±g[0] ± g[1] ...
// added as add_n adds them (negated where negate says), routed by y, and
// the bias's gradient, in one backend call (add_n's, with BiasLayout's row
// sums): the bits of add_n then relu_bias_backward. Nothing where that
// gives nothing.
template <class T, class B>
std::optional<std::pair<Tensor<T, B>, Tensor<T, B>>> relu_bias_backward(
    std::span<const Tensor<T, B>* const> g, std::span<const bool> negate, const Tensor<T, B>& y,
    const Shape& bias) {
  const char* who = "relu_bias_backward";
  const Shape sum = add_n_shape(g, who);
  check(sum == y.shape(), who, "gradient {} for an output {}", sum, y.shape());
  const std::optional<BiasLayout> l =
      detail::bias_layout(sum, bias.take_front(bias.rank() - 1), bias.dim(-1));
  if (!l) return std::nullopt;
  std::pair<Tensor<T, B>, Tensor<T, B>> d{Tensor<T, B>(), Tensor<T, B>(bias)};
  SummandsLayout<T> parts = detail::summands_layout(g, negate, d.first, who);
  parts.route = y.data();
  B::add_n(parts, *l, d.second.data());
  return d;
}

}  // namespace platipus::raw
