// concat / split along an axis, and slice / pad: each pair is the other's
// adjoint; expand_concat, concat of parts that broadcast, is sum_to's and
// slice's. split is one node with several outputs, so that unpacking a flat
// parameter vector into its layers costs one op forward and one backward.
#pragma once

#include <numeric>
#include <vector>

#include "platipus/autodiff/ops/broadcast.hpp"
#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/layout.hpp"
#include "platipus/tensor/reduce.hpp"

namespace platipus {

template <class T, class B>
std::vector<Var<T, B>> split(const Var<T, B>& x, int axis, std::span<const std::int64_t> sizes);
template <class T, class B>
Var<T, B> slice(const Var<T, B>& x, int axis, std::int64_t start, std::int64_t length);
template <class T, class B>
Var<T, B> sum_slice_to(const Var<T, B>& x, int axis, std::int64_t start, std::int64_t length,
                       const Shape& shape);

namespace detail {

// The rule of concat and expand_concat along axis `a`: each wanted part's
// slice of the gradient, summed down to the part's shape where it was
// expanded, the sum reading the slice in place (sum_slice_to: one
// reduction, no copy; the bias transformation's v). Where a sweep records,
// one sum_slice_to node where one part wants it (v, not the data x), so
// that the others cost no copy; else one split node, whose own rule is one
// concat (slices' pads would be added, and -0 + 0 is not -0).
template <class T, class B>
void concat_backward(Backward<T, B>& c, int a, std::span<const std::int64_t> sizes) {
  const Var<T, B> g = c.grad();
  std::size_t wanted = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) wanted += c.needs(i) ? 1 : 0;
  if (wanted == 1 || !GradMode::enabled()) {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < sizes.size(); offset += sizes[i++])
      if (c.needs(i)) c.set(i, sum_slice_to(g, a, offset, sizes[i], c.input(i).shape()));
    return;
  }
  const auto pieces = split(g, a, sizes);
  for (std::size_t i = 0; i < pieces.size(); ++i)
    if (c.needs(i)) c.set(i, sum_to(pieces[i], c.input(i).shape()));
}

template <class T, class B>
std::vector<const Tensor<T, B>*> values_of(std::span<const Var<T, B>> parts, std::string_view who) {
  check(!parts.empty(), who, "no tensors given");
  std::vector<const Tensor<T, B>*> values;
  for (const auto& p : parts) {
    check(p.defined(), who, "an input is an undefined Var");
    values.push_back(&p.value());
  }
  return values;
}

// concat's and expand_concat's one body: raw::detail::join's value,
// recorded with concat_backward.
template <class T, class B>
Var<T, B> join(std::span<const Var<T, B>> parts, int axis, bool broadcast, const char* name) {
  const auto values = values_of(parts, name);
  auto y = raw::detail::join(std::span<const Tensor<T, B>* const>(values), axis, broadcast, name);
  const int a = parts[0].shape().normalize_axis(axis, name);
  std::vector<std::int64_t> sizes;
  for (const auto& p : parts) sizes.push_back(p.shape()[a]);
  return record(
      name, parts, std::move(y),
      [a, sizes = std::move(sizes)](Backward<T, B>& c) { concat_backward(c, a, sizes); },
      saves_nothing);
}

}  // namespace detail

template <class T, class B>
Var<T, B> concat(std::span<const Var<T, B>> parts, int axis) {
  return detail::join(parts, axis, false, "concat");
}

template <class T, class B>
Var<T, B> concat(std::initializer_list<Var<T, B>> parts, int axis) {
  return concat(std::span<const Var<T, B>>(parts.begin(), parts.size()), axis);
}

// concat of the parts each expanded to the others' extents outside `axis`
// (one rank, NumPy's rules; raw::expand_concat): the bits of expand, then
// concat, without the expanded copies; the bias transformation's [x, v]
// with v broadcast over the points.
template <class T, class B>
Var<T, B> expand_concat(std::span<const Var<T, B>> parts, int axis) {
  return detail::join(parts, axis, true, "expand_concat");
}

template <class T, class B>
Var<T, B> expand_concat(std::initializer_list<Var<T, B>> parts, int axis) {
  return expand_concat(std::span<const Var<T, B>>(parts.begin(), parts.size()), axis);
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
  return record("slice", {x}, raw::slice(x.value(), a, start, length),
                [a, start](Backward<T, B>& c) {
                  const Shape& in = c.input(0).shape();
                  // A gradient that arrived unexpanded along other axes (the
                  // bias transformation's v, summed over the points) is
                  // expanded by the pad's own copy where nothing records. A
                  // one-value gradient is filled at the output's shape (at
                  // one value it would want an expand along the axis too).
                  if (!GradMode::enabled() && !c.uniform_grad()) {
                    const Var<T, B> g = c.broadcast_grad();
                    if (g.shape()[a] == c.output().shape()[a]) {
                      c.set(0, c.tape().constant(raw::expand_pad(g.value(), a, start, in)));
                      return;
                    }
                  }
                  c.set(0, pad(c.grad(), a, start, in[a]));
                });
}

// Zeros of extent `total` along `axis` with x placed at `start`.
template <class T, class B>
Var<T, B> pad(const Var<T, B>& x, int axis, std::int64_t start, std::int64_t total) {
  const int a = x.shape().normalize_axis(axis, "pad");
  return record("pad", {x}, raw::pad(x.value(), a, start, total), [a, start](Backward<T, B>& c) {
    c.set(0, slice(c.grad(), a, start, c.input(0).shape()[a]));
  });
}

// sum_to(slice(x, axis, start, length), shape), `shape` at x's rank, as one
// node: one reduction reading the slice in place (raw::sum_slice_to) where
// the two nodes copied the slice first. Its rule is theirs, the graph it
// records and so the bits of its derivatives included: the gradient
// expanded to the slice and padded, in one call where nothing records
// (raw::expand_pad).
template <class T, class B>
Var<T, B> sum_slice_to(const Var<T, B>& x, int axis, std::int64_t start, std::int64_t length,
                       const Shape& shape) {
  const int a = x.shape().normalize_axis(axis, "sum_slice_to");
  check(shape.rank() == x.rank(), "sum_slice_to", "shape {} is not at the rank of {}", shape,
        x.shape());
  Shape sliced = x.shape();
  sliced[a] = length;
  if (sliced == shape) return slice(x, a, start, length);
  return record(
      "sum_slice_to", {x}, raw::sum_slice_to(x.value(), a, start, length, shape),
      [a, start, sliced](Backward<T, B>& c) {
        const Shape& in = c.input(0).shape();
        if (const auto u = c.uniform_grad()) {
          c.set(0, pad(c.tape().filled(sliced, *u), a, start, in[a]));
          return;
        }
        if (!GradMode::enabled()) {
          const Var<T, B> g = c.broadcast_grad();
          c.set(0, g.shape()[a] == sliced[a]
                       ? c.tape().constant(raw::expand_pad(g.value(), a, start, in, "sum_slice_to"))
                       : pad(expand(g, sliced), a, start, in[a]));
          return;
        }
        const auto [g, negated] = c.signed_grad();
        c.set(0, pad(expand(negated ? neg(g) : g, sliced), a, start, in[a]));
      },
      saves_nothing);
}

}  // namespace platipus
