// Raw batched matrix product with transposes and broadcast batch axes:
// [..., m, k] x [..., k, n] -> [..., m, n], where the batch axes follow
// NumPy broadcasting and `trans_a` / `trans_b` transpose the last two axes.
#pragma once

#include "platipus/tensor/layout.hpp"
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

// c = op(a) op(b) + beta * c, where c already has the product's shape.
template <class T, class B>
void matmul_into(const Tensor<T, B>& a, const Tensor<T, B>& b, Tensor<T, B>& c, bool trans_a,
                 bool trans_b, T beta) {
  if (c.numel() == 0) return;
  const Shape& out_shape = c.shape();
  const int rank = out_shape.rank();
  const Shape batch_shape = out_shape.take_front(rank - 2);
  const std::int64_t batch = batch_shape.numel();
  const std::int64_t batch_a = a.shape().take_front(a.rank() - 2).numel();
  const std::int64_t batch_b = b.shape().take_front(b.rank() - 2).numel();

  // Each operand is either batched like the output or a single matrix
  // (stride 0); a mixed broadcast is materialised first.
  auto fits = [&](std::int64_t count) {
    return count == batch || count == 1;
  };
  if (!fits(batch_a) || !fits(batch_b)) {
    Shape ea = batch_shape, eb = batch_shape;
    ea.push_back(a.dim(-2));
    ea.push_back(a.dim(-1));
    eb.push_back(b.dim(-2));
    eb.push_back(b.dim(-1));
    matmul_into(expand(a, ea), expand(b, eb), c, trans_a, trans_b, beta);
    return;
  }
  GemmLayout<T> g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = out_shape[rank - 2];
  g.n = out_shape[rank - 1];
  g.k = trans_a ? a.dim(-2) : a.dim(-1);
  g.beta = beta;
  g.stride_c = g.m * g.n;
  g.stride_a = batch_a == 1 ? 0 : a.dim(-2) * a.dim(-1);
  g.stride_b = batch_b == 1 ? 0 : b.dim(-2) * b.dim(-1);
  g.batch = batch;
  // A batch of row blocks times one shared matrix is a single taller GEMM.
  if (g.stride_b == 0 && g.stride_a != 0 && !trans_a) {
    g.m *= batch;
    g.batch = 1;
  }
  B::gemm(g, a.data(), b.data(), c.data());
}

}  // namespace detail

template <class T, class B>
Tensor<T, B> matmul(const Tensor<T, B>& a, const Tensor<T, B>& b, bool trans_a = false,
                    bool trans_b = false) {
  Tensor<T, B> c(matmul_shape(a.shape(), b.shape(), trans_a, trans_b));
  detail::matmul_into(a, b, c, trans_a, trans_b, T(0));
  return c;
}

// x W + b in one GEMM: x [..., N, in], w [..., in, out], b [..., out] with the
// batch axes of w; b is broadcast along N and written first (beta = 1).
template <class T, class B>
Tensor<T, B> linear(const Tensor<T, B>& x, const Tensor<T, B>& w, const Tensor<T, B>& b) {
  Shape row = b.shape().take_front(b.rank() - 1);
  row.push_back(1);
  row.push_back(b.dim(-1));
  check(w.rank() >= 2 && b.dim(-1) == w.dim(-1) && b.rank() == w.rank() - 1, "linear",
        "bias {} does not match weight {}", b.shape(), w.shape());
  Tensor<T, B> c =
      expand(Tensor<T, B>::view(b, row), matmul_shape(x.shape(), w.shape(), false, false));
  detail::matmul_into(x, w, c, false, false, T(1));
  return c;
}

}  // namespace platipus::raw
