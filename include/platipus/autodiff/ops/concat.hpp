// concat / split along an axis, and slice / pad: each pair is the other's
// adjoint. split is one node with several outputs, so that unpacking a flat
// parameter vector into its layers costs one op forward and one backward.
#pragma once

#include <numeric>
#include <vector>

#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/layout.hpp"

namespace platipus {

template <class T, class B>
std::vector<Var<T, B>> split(const Var<T, B>& x, int axis, std::span<const std::int64_t> sizes);

template <class T, class B>
Var<T, B> concat(std::span<const Var<T, B>> parts, int axis) {
  check(!parts.empty(), "concat", "no tensors given");
  const int a = parts[0].shape().normalize_axis(axis, "concat");
  std::vector<const Tensor<T, B>*> values;
  std::vector<std::int64_t> sizes;
  for (const auto& p : parts) {
    check(p.defined(), "concat", "an input is an undefined Var");
    values.push_back(&p.value());
    sizes.push_back(p.rank() > a ? p.shape()[a] : 0);
  }
  return record("concat", parts, raw::concat(std::span<const Tensor<T, B>* const>(values), a),
                [a, sizes = std::move(sizes)](Backward<T, B>& c) {
                  auto pieces = split(c.grad(), a, sizes);
                  for (std::size_t i = 0; i < pieces.size(); ++i)
                    if (c.needs(i)) c.set(i, pieces[i]);
                });
}

template <class T, class B>
Var<T, B> concat(std::initializer_list<Var<T, B>> parts, int axis) {
  return concat(std::span<const Var<T, B>>(parts.begin(), parts.size()), axis);
}

// Splits x along `axis` into consecutive pieces of the given extents, which
// must add up to the axis. Pieces that receive no gradient count as zeros.
template <class T, class B>
std::vector<Var<T, B>> split(const Var<T, B>& x, int axis, std::span<const std::int64_t> sizes) {
  const int a = x.shape().normalize_axis(axis, "split");
  const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  check(total == x.shape()[a], "split", "sizes add up to {} but axis {} of {} has {}", total, a,
        x.shape(), x.shape()[a]);
  std::vector<Tensor<T, B>> pieces;
  std::int64_t offset = 0;
  for (auto size : sizes) {
    pieces.push_back(raw::slice(x.value(), a, offset, size));
    offset += size;
  }
  return record_many(
      "split", std::span<const Var<T, B>>(&x, 1), std::move(pieces), [a](Backward<T, B>& c) {
        std::vector<Var<T, B>> grads;
        for (std::size_t k = 0; k < c.output_count(); ++k) {
          const Var<T, B> g = c.grad(k);
          grads.push_back(
              g.defined() ? g : c.tape().constant(Tensor<T, B>::zeros(c.output(k).shape())));
        }
        c.set(0, concat(std::span<const Var<T, B>>(grads), a));
      });
}

template <class T, class B>
Var<T, B> pad(const Var<T, B>& x, int axis, std::int64_t start, std::int64_t total);

// x[..., start:start+length, ...] along `axis`.
template <class T, class B>
Var<T, B> slice(const Var<T, B>& x, int axis, std::int64_t start, std::int64_t length) {
  const int a = x.shape().normalize_axis(axis, "slice");
  return record(
      "slice", {x}, raw::slice(x.value(), a, start, length),
      [a, start](Backward<T, B>& c) { c.set(0, pad(c.grad(), a, start, c.input(0).shape()[a])); });
}

// Zeros of extent `total` along `axis` with x placed at `start`.
template <class T, class B>
Var<T, B> pad(const Var<T, B>& x, int axis, std::int64_t start, std::int64_t total) {
  const int a = x.shape().normalize_axis(axis, "pad");
  return record("pad", {x}, raw::pad(x.value(), a, start, total), [a, start](Backward<T, B>& c) {
    c.set(0, slice(c.grad(), a, start, c.input(0).shape()[a]));
  });
}

}  // namespace platipus
