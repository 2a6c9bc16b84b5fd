// Batched matrix product with transposes and broadcast batch axes.
#pragma once

#include <array>
#include <optional>

#include "platipus/autodiff/ops/broadcast.hpp"
#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/tensor/matmul.hpp"

namespace platipus {

template <class T, class B>
Var<T, B> matmul(const Var<T, B>& a, const Var<T, B>& b, bool trans_a = false,
                 bool trans_b = false);

namespace detail {

template <class T, class B>
Var<T, B> record_matmul(const Var<T, B>& a, const Var<T, B>& b, bool trans_a, bool trans_b,
                        Tensor<T, B> product);

// The factors of a product op(a) op(b), of values or of variables.
template <class V>
struct ProductOf {
  const V* a;
  const V* b;
  bool trans_a, trans_b;
};

// Gradients of C = op(A) op(B) for inputs 0 (A) and 1 (B) of a node, given
// C's gradient G (op(A) = A^T when trans_a, and so on):
//   dA = G op(B)^T, or op(B) G^T when trans_a
//   dB = op(A)^T G, or G^T op(A) when trans_b
// each summed over the batch axes that A or B were broadcast along. One
// shared matrix times a batch folds the batch into the rows of A and G, so
// that dB is one GEMM, not a batch of them and a sum.
template <class V>
ProductOf<V> grad_a_product(const V& g, const V& b, bool trans_a, bool trans_b) {
  return trans_a ? ProductOf<V>{&b, &g, trans_b, true} : ProductOf<V>{&g, &b, false, !trans_b};
}
template <class V>
ProductOf<V> grad_b_product(const V& a, const V& g, bool trans_a, bool trans_b) {
  return trans_b ? ProductOf<V>{&g, &a, true, trans_a} : ProductOf<V>{&a, &g, !trans_a, false};
}

// Where more than one gradient is needed (a product's two, or with
// `bias`, a linear layer's product and bias gradients: input 2, g's rows
// summed), they are one backend call (raw::matmul_gradients), then recorded
// as the ops the rule would have made, in the same order (issue 38).
template <class T, class B>
void matmul_backward(Backward<T, B>& c, const Var<T, B>& g, bool trans_a, bool trans_b,
                     bool bias = false) {
  const auto x = c.input(0), w = c.input(1);
  const bool fold = w.rank() == 2 && x.rank() > 2 && !trans_a;
  Shape row;  // the bias's shape with its rows' axis: [batch..., 1, n]
  if (bias && c.needs(2)) {
    const Shape& b = c.input(2).shape();
    row = b.take_front(b.rank() - 1);
    row.push_back(1);
    row.push_back(b.dim(-1));
  }
  const bool sums = bias && c.needs(2) && g.shape() != row;
  std::optional<raw::MatmulGradients<T, B>> computed;
  if (int(c.needs(0)) + int(c.needs(1)) + int(sums) >= 2) {
    const auto rows = [fold](const Tensor<T, B>& t) {
      return fold ? Tensor<T, B>::view(t, {t.shape().take_front(t.rank() - 1).numel(), t.dim(-1)})
                  : Tensor<T, B>::view(t, t.shape());
    };
    const Tensor<T, B> x2 = rows(x.value()), g2 = rows(g.value());
    const auto pa = grad_a_product(g.value(), w.value(), trans_a, trans_b),
               pb = grad_b_product(x2, g2, trans_a, trans_b);
    std::array<raw::Factors<T, B>, 2> factors{
        raw::Factors<T, B>{*pa.a, *pa.b, pa.trans_a, pa.trans_b},
        raw::Factors<T, B>{*pb.a, *pb.b, pb.trans_a, pb.trans_b}};
    const std::size_t first = c.needs(0) ? 0 : 1, count = int(c.needs(0)) + int(c.needs(1));
    computed = raw::matmul_gradients<T, B>(
        std::span<const raw::Factors<T, B>>(factors.data() + first, count),
        sums ? std::optional<raw::RowSums<T, B>>({g.value(), row}) : std::nullopt);
  }
  std::size_t next = 0;
  const auto product = [&](const ProductOf<Var<T, B>>& p) {
    return computed ? record_matmul(*p.a, *p.b, p.trans_a, p.trans_b,
                                    std::move(computed->products[next++]))
                    : matmul(*p.a, *p.b, p.trans_a, p.trans_b);
  };
  if (c.needs(0)) c.set(0, sum_to(product(grad_a_product(g, w, trans_a, trans_b)), x.shape()));
  if (c.needs(1)) {
    const auto x2 = fold ? reshape(x, {-1, x.dim(-1)}) : x,
               g2 = fold ? reshape(g, {-1, g.dim(-1)}) : g;
    c.set(1, sum_to(product(grad_b_product(x2, g2, trans_a, trans_b)), w.shape()));
  }
  if (bias && c.needs(2))
    c.set(2,
          reshape(computed && sums ? record_sum_to(g, std::move(computed->sums)) : sum_to(g, row),
                  c.input(2).shape()));
}

// The matmul op over its product op(a) op(b), computed by the caller.
template <class T, class B>
Var<T, B> record_matmul(const Var<T, B>& a, const Var<T, B>& b, bool trans_a, bool trans_b,
                        Tensor<T, B> product) {
  return record("matmul", {a, b}, std::move(product), [trans_a, trans_b](Backward<T, B>& c) {
    matmul_backward(c, c.grad(), trans_a, trans_b);
  });
}

}  // namespace detail

// C = op(A) op(B), op a transpose of the last two axes when asked.
template <class T, class B>
Var<T, B> matmul(const Var<T, B>& a, const Var<T, B>& b, bool trans_a, bool trans_b) {
  return detail::record_matmul(a, b, trans_a, trans_b,
                               raw::matmul(a.value(), b.value(), trans_a, trans_b));
}

}  // namespace platipus
