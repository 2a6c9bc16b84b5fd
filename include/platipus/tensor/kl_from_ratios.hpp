// PLATIPUS's KL over a model's pieces from its ratios, and its gradients,
// by one backend call per KlLayout's capacity of pieces (the formulas in
// backend/layouts.hpp): the raw kernels of the kl_from_ratios op.
#pragma once

#include <span>
#include <vector>

#include "platipus/tensor/tensor.hpp"

namespace platipus::raw {

// Whether kl_from_ratios takes these pieces: as many r_i, s_i and w_i, at
// least one, r_i and w_i of one shape [n_i], s_i [rows..., n_i] with the same
// leading axes for all.
template <class T, class B>
bool kl_from_ratios_takes(std::span<const Tensor<T, B>* const> r,
                          std::span<const Tensor<T, B>* const> s,
                          std::span<const Tensor<T, B>* const> w) {
  if (r.empty() || s.size() != r.size() || w.size() != r.size() || s[0]->rank() < 1) return false;
  const Shape rows = s[0]->shape().take_front(s[0]->rank() - 1);
  for (std::size_t i = 0; i < r.size(); ++i) {
    const Shape& n = r[i]->shape();
    if (n.rank() != 1 || w[i]->shape() != n || s[i]->rank() != rows.rank() + 1 ||
        s[i]->shape().take_front(rows.rank()) != rows || s[i]->dim(-1) != n[0])
      return false;
  }
  return true;
}

namespace detail {

// The rows of the pieces (s_0's leading axes), after checking them.
template <class T, class B>
Shape kl_rows(std::span<const Tensor<T, B>* const> r, std::span<const Tensor<T, B>* const> s,
              std::span<const Tensor<T, B>* const> w) {
  check(kl_from_ratios_takes(r, s, w), "kl_from_ratios",
        "{}, {} and {} pieces given; it takes one or more, ratios and inverse variances of one "
        "shape [n_i] and squared differences [rows..., n_i] with the same rows",
        r.size(), s.size(), w.size());
  return s[0]->shape().take_front(s[0]->rank() - 1);
}

// launch(l) on the layouts of pieces i (r_i left null where r is empty),
// up to KlLayout's capacity each: set(l, k, i) fills slot k's gradients.
template <class T, class B, class Set, class Launch>
void launch_kl_layouts(std::span<const Tensor<T, B>* const> r,
                       std::span<const Tensor<T, B>* const> s,
                       std::span<const Tensor<T, B>* const> w, std::int64_t rows, Set set,
                       Launch launch) {
  KlLayout<T> l;
  l.rows = rows;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto k = static_cast<std::size_t>(l.count++);
    l.r[k] = r.empty() ? nullptr : r[i]->data();
    l.s[k] = s[i]->data();
    l.w[k] = w[i]->data();
    l.n[k] = w[i]->numel();
    set(l, k, i);
    if (l.count == KlLayout<T>::capacity || i + 1 == s.size()) {
      launch(l);
      l.count = 0;
      l.accumulate = true;
    }
  }
}

}  // namespace detail

// y[rows...] = the sum over pieces i, in order, of 1/2 sum_j ((r_i[j] +
// s_i[rows..., j] w_i[j]) - 1), with the bits of those ops on each piece
// (backend/layouts.hpp, KlLayout).
template <class T, class B>
Tensor<T, B> kl_from_ratios(std::span<const Tensor<T, B>* const> r,
                            std::span<const Tensor<T, B>* const> s,
                            std::span<const Tensor<T, B>* const> w) {
  Tensor<T, B> y(detail::kl_rows(r, s, w));
  if (y.numel() == 0) return y;
  detail::launch_kl_layouts(
      r, s, w, y.numel(), [](KlLayout<T>&, std::size_t, std::size_t) {},
      [&](const KlLayout<T>& l) { B::kl_from_ratios(l, y.data()); });
  return y;
}

// The gradients of <g, kl_from_ratios(r, s, w)> times `scale` (g null: a
// gradient of 1 in every element), in the order r_0..., s_0..., w_0... (r_i
// of w_i's shape, and not read); where `wanted` in that order is false, an
// empty Tensor.
template <class T, class B>
std::vector<Tensor<T, B>> kl_from_ratios_backward(std::span<const Tensor<T, B>* const> s,
                                                  std::span<const Tensor<T, B>* const> w,
                                                  const Tensor<T, B>* g, T scale,
                                                  const std::vector<bool>& wanted) {
  const Shape rows = detail::kl_rows(w, s, w);
  const std::size_t n = s.size();
  check(wanted.size() == 3 * n && (g == nullptr || g->shape() == rows), "kl_from_ratios_backward",
        "{} wanted flags for {} pieces, a gradient {} for rows {}", wanted.size(), n,
        g ? g->shape() : rows, rows);
  std::vector<Tensor<T, B>> d(3 * n);
  for (std::size_t i = 0; i < n; ++i) {
    if (wanted[i]) d[i] = Tensor<T, B>(w[i]->shape());
    if (wanted[n + i]) d[n + i] = Tensor<T, B>(s[i]->shape());
    if (wanted[2 * n + i]) d[2 * n + i] = Tensor<T, B>(w[i]->shape());
  }
  detail::launch_kl_layouts(
      {}, s, w, rows.numel(),
      [&](KlLayout<T>& l, std::size_t k, std::size_t i) {
        l.dr[k] = wanted[i] ? d[i].data() : nullptr;
        l.ds[k] = wanted[n + i] ? d[n + i].data() : nullptr;
        l.dw[k] = wanted[2 * n + i] ? d[2 * n + i].data() : nullptr;
      },
      [&](const KlLayout<T>& l) { B::kl_from_ratios_backward(l, g ? g->data() : nullptr, scale); });
  return d;
}

}  // namespace platipus::raw
