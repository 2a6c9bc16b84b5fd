// unflatten / flatten: a flat parameter vector [batch..., P] to and from its
// named pieces [batch..., shape_k]. Each is the other's adjoint, and each is
// one op however many pieces there are, so that a model reads all its
// parameters with one node and its gradient is gathered with one node.
// Without batch axes the pieces are views of the flat buffer (no copy).
#pragma once

#include <algorithm>
#include <vector>

#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/elementwise.hpp"
#include "platipus/tensor/layout.hpp"

namespace platipus {

namespace detail {

inline Shape with_batch(const Shape& batch, const Shape& shape) {
  Shape out = batch;
  for (auto d : shape.dims()) out.push_back(d);
  return out;
}

}  // namespace detail

template <class T, class B>
Var<T, B> flatten(std::span<const Var<T, B>> pieces, const Shape& batch,
                  std::span<const Shape> shapes);

template <class T, class B>
std::vector<Var<T, B>> unflatten(const Var<T, B>& flat, std::span<const Shape> shapes) {
  check(flat.rank() >= 1, "unflatten", "expected a flat vector [batch..., P], got {}",
        flat.shape());
  const Shape batch = flat.shape().take_front(flat.rank() - 1);
  const std::int64_t outer = batch.numel(), total = flat.dim(-1);
  std::int64_t expected = 0;
  for (const auto& s : shapes) expected += s.numel();
  check(expected == total, "unflatten", "pieces hold {} values but the flat vector {} has {}",
        expected, flat.shape(), total);
  const Tensor<T, B> rows = Tensor<T, B>::view(flat.value(), Shape{outer, total});
  if (outer == 1) flat.record()->viewed = true;  // the pieces view its buffer
  std::vector<Tensor<T, B>> pieces;
  std::int64_t offset = 0;
  for (const auto& s : shapes) {
    const Shape shape = detail::with_batch(batch, s);
    pieces.push_back(outer == 1
                         ? Tensor<T, B>::view(const_cast<T*>(flat.value().data()) + offset, shape)
                         : raw::slice(rows, 1, offset, s.numel()).reshaped(shape));
    offset += s.numel();
  }
  std::vector<Shape> owned(shapes.begin(), shapes.end());
  return record_many("unflatten", std::span<const Var<T, B>>(&flat, 1), std::move(pieces),
                     [batch, owned = std::move(owned)](Backward<T, B>& c) {
                       std::vector<Var<T, B>> grads;
                       for (std::size_t k = 0; k < c.output_count(); ++k)
                         grads.push_back(c.grad(k));
                       c.set(0, flatten(std::span<const Var<T, B>>(grads), batch, owned));
                     });
}

// Pieces [batch..., shape_k] into one [batch..., P]; undefined pieces are zeros.
template <class T, class B>
Var<T, B> flatten(std::span<const Var<T, B>> pieces, const Shape& batch,
                  std::span<const Shape> shapes) {
  check(pieces.size() == shapes.size(), "flatten", "{} pieces for {} shapes", pieces.size(),
        shapes.size());
  const std::int64_t outer = batch.numel();
  std::int64_t total = 0;
  for (const auto& s : shapes) total += s.numel();
  const bool complete = std::ranges::all_of(pieces, [](const auto& p) { return p.defined(); });
  Tensor<T, B> out =
      complete ? Tensor<T, B>(Shape{outer, total}) : Tensor<T, B>::zeros(Shape{outer, total});
  const Strides out_strides = contiguous_strides(out.shape());
  std::vector<Var<T, B>> inputs;
  std::vector<const T*> from;
  std::vector<T*> to;
  std::vector<std::int64_t> sizes;
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const std::int64_t n = shapes[k].numel();
    if (pieces[k].defined()) {
      check(pieces[k].shape() == detail::with_batch(batch, shapes[k]), "flatten",
            "piece {} has shape {}, expected {}", k, pieces[k].shape(),
            detail::with_batch(batch, shapes[k]));
      if (outer == 1) {
        from.push_back(pieces[k].value().data());
        to.push_back(out.data() + offset);
        sizes.push_back(n);
      } else {
        const Shape block{outer, n};
        raw::detail::copy_block<T, B>(pieces[k].value().data(), contiguous_strides(block),
                                      out.data() + offset, out_strides, block);
      }
      inputs.push_back(pieces[k]);
    }
    offset += n;
  }
  // Without batch axes each piece is one contiguous block of the output: one
  // foreach call copies them all (a single kernel on a device, issue 38).
  raw::detail::launch_pieces<T>(from, {}, to, sizes, [](const PiecesLayout<T>& l) {
    B::foreach_unary(UnaryOp::copy, l, T(0));
  });
  Shape out_shape = batch;
  out_shape.push_back(total);
  check(!inputs.empty(), "flatten", "all {} pieces are undefined", pieces.size());
  // Inputs are the defined pieces only; the rule maps them back by position.
  std::vector<std::size_t> positions;
  for (std::size_t k = 0; k < pieces.size(); ++k)
    if (pieces[k].defined()) positions.push_back(k);
  std::vector<Shape> owned(shapes.begin(), shapes.end());
  return record("flatten", std::span<const Var<T, B>>(inputs), std::move(out).reshaped(out_shape),
                [owned = std::move(owned), positions = std::move(positions)](Backward<T, B>& c) {
                  const auto parts = unflatten(c.grad(), owned);
                  for (std::size_t i = 0; i < positions.size(); ++i)
                    if (c.needs(i)) c.set(i, parts[positions[i]]);
                });
}

}  // namespace platipus
