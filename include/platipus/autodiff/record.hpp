// Recording an op on a tape. An op computes its result with raw kernels and
// hands `record` the result, its inputs and its backward rule:
//
//   return record("mul", {a, b}, raw::map(BinaryOp::mul, ...),
//                 [](Backward<T, B>& c) {
//                   if (c.needs(0)) c.set(0, sum_to(c.grad() * c.input(1), c.input(0).shape()));
//                   if (c.needs(1)) c.set(1, sum_to(c.grad() * c.input(0), c.input(1).shape()));
//                 });
//
// Rules use differentiable ops, so under create_graph the backward pass is
// itself recorded and can be differentiated again, to any order.
#pragma once

#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "platipus/autodiff/tape.hpp"
#include "platipus/tensor/elementwise.hpp"

namespace platipus {

template <class T, class B>
Var<T, B> expand(const Var<T, B>& x, const Shape& shape);
template <class T, class B>
Var<T, B> neg(const Var<T, B>& x);

// What a backward rule sees: the node's inputs and outputs, the gradients
// flowing into its outputs, and which input gradients are wanted.
template <class T, class B>
class Backward {
 public:
  // grads[k] is the k-th output's gradient, or its negation where
  // grads_negated[k], or, where uniform[k] holds a value, undefined: every
  // element of the gradient is that value (see uniform_grad); the rule's
  // results[i] likewise with negated[i] and uniform_results[i]. Where
  // `parts` is given, grads[0] is undefined: the output's gradient is their
  // sum (see grad_parts).
  Backward(detail::Node<T, B>& node, std::span<Var<T, B>> grads, std::span<char> grads_negated,
           std::span<std::optional<T>> uniform, std::span<const char> needs,
           std::span<Var<T, B>> results, std::span<char> negated,
           std::span<std::optional<T>> uniform_results,
           std::span<const Tensor<T, B>* const> parts = {},
           std::span<const bool> parts_negated = {})
      : node_(node),
        grads_(grads),
        grads_negated_(grads_negated),
        uniform_(uniform),
        needs_(needs),
        results_(results),
        negated_(negated),
        uniform_results_(uniform_results),
        parts_(parts),
        parts_negated_(parts_negated) {}

  Var<T, B> input(std::size_t i) const { return Var<T, B>(node_.inputs[i]); }
  Var<T, B> output(std::size_t k = 0) const { return Var<T, B>(node_.outputs[k]); }
  // The gradient of the k-th output, at the output's shape; undefined when
  // none flowed into it (only possible for ops with several outputs).
  Var<T, B> grad(std::size_t k = 0) const {
    add_parts(k);
    fill_uniform(k, node_.outputs[k]->data.shape());
    negate_now(k);
    return expanded(k);
  }
  // The gradient as it arrived, which may broadcast to the output's shape at
  // its rank (sum_to's rule gives such): for rules that only map it
  // elementwise or broadcast it against a full-shape operand, so that no copy
  // expands it (issue 38). A sweep that records gets grad(k), so that the
  // graph it records, and the bits of that graph's own derivatives, are those
  // of the expanded gradient.
  Var<T, B> broadcast_grad(std::size_t k = 0) const {
    if (GradMode::enabled()) return grad(k);
    add_parts(k);
    fill_uniform(k, one_value(k));
    negate_now(k);
    return grads_[k];
  }
  // grad(k) up to its sign: g at the output's shape and whether the gradient
  // is -g, which only a sweep that records nothing leaves standing
  // (set_negated). For rules whose results are g times what does not depend
  // on g, elementwise or a view of it, which pass the sign on with
  // set(i, ..., negated) so that no kernel negates it: (-a) b is -(a b) to
  // the bit. Not for a sum of g's elements (see detail::set_sum_to).
  std::pair<Var<T, B>, bool> signed_grad(std::size_t k = 0) const {
    add_parts(k);
    fill_uniform(k, node_.outputs[k]->data.shape());
    return {expanded(k), grads_negated_[k] != 0};
  }
  // signed_grad(k) as it arrived, unexpanded where a sweep records nothing
  // (see broadcast_grad), for rules that pass it on as a view.
  std::pair<Var<T, B>, bool> signed_broadcast_grad(std::size_t k = 0) const {
    if (GradMode::enabled()) return signed_grad(k);
    add_parts(k);
    fill_uniform(k, one_value(k));
    return {grads_[k], grads_negated_[k] != 0};
  }
  // The value of every element of the k-th output's gradient where the sweep
  // knows it on the host (the seed of a scalar output, and what scale, neg,
  // shift, reshape, sum_to, add and sub make of such a gradient), until a rule reads
  // the gradient as a tensor. Rules that use it make no kernel for the
  // gradient: a loss's mean or sum passes it on, and mse's square takes one
  // scale (issue 38). Host arithmetic on it is T's, as a kernel's.
  std::optional<T> uniform_grad(std::size_t k = 0) const { return uniform_[k]; }
  // Output 0's gradient as the parts (2 or more, which add_n takes) that a
  // sweep recording nothing still holds for a rule that takes them
  // (Node::takes_parts), in the order they arrived, negated where
  // grad_parts_negated says: their sum, as add_n adds them, is the
  // gradient. Empty where the gradient is one tensor, or once grad() or
  // the like has added them.
  std::span<const Tensor<T, B>* const> grad_parts() const { return parts_; }
  std::span<const bool> grad_parts_negated() const { return parts_negated_; }
  bool needs(std::size_t i) const { return needs_[i] != 0; }
  void set(std::size_t i, Var<T, B> g) { results_[i] = g; }
  void set(std::size_t i, Var<T, B> g, bool negated) {
    if (negated)
      set_negated(i, g);
    else
      set(i, g);
  }
  // Input i's gradient is -g. A sweep that records nothing subtracts g where
  // it adds the input's gradients and negates it only if it is read alone,
  // so a rule's negation costs no kernel where the gradient has company
  // (issue 38); a - b and a + (-b) have the same bits. One that records
  // records neg(g).
  void set_negated(std::size_t i, Var<T, B> g) {
    if (GradMode::enabled()) {
      set(i, neg(g));
    } else {
      results_[i] = g;
      negated_[i] = 1;
    }
  }
  // Input i's gradient is u in every element, at the input's shape.
  void set_uniform(std::size_t i, T u) { uniform_results_[i] = u; }
  std::size_t input_count() const { return node_.inputs.size(); }
  std::size_t output_count() const { return node_.outputs.size(); }
  Tape<T, B>& tape() const { return *node_.outputs[0]->tape; }

 private:
  // The k-th output's gradient (or its negation) expanded to the output's
  // shape, once.
  Var<T, B> expanded(std::size_t k) const {
    Var<T, B>& g = grads_[k];
    if (g.defined() && g.shape() != node_.outputs[k]->data.shape())
      g = expand(g, node_.outputs[k]->data.shape());
    return g;
  }
  // A uniform gradient as a tensor of `shape`, filled once, its sign taken.
  void fill_uniform(std::size_t k, const Shape& shape) const {
    if (!uniform_[k]) return;
    grads_[k] = tape().filled(shape, *uniform_[k]);
    grads_negated_[k] = 0;
    uniform_[k].reset();
  }
  // One value at the k-th output's rank: how a sweep that records nothing
  // hands a broadcast gradient to rules that read it unexpanded.
  Shape one_value(std::size_t k) const {
    return Shape(std::vector<std::int64_t>(
        static_cast<std::size_t>(node_.outputs[k]->data.shape().rank()), 1));
  }
  // The parts added up, as the sweep adds a value's gradients, for a rule
  // that reads the gradient as one tensor.
  void add_parts(std::size_t k) const {
    if (k != 0 || parts_.empty()) return;
    grads_[0] = tape().constant(raw::add_n(parts_, parts_negated_));
    parts_ = {};
    parts_negated_ = {};
  }
  void negate_now(std::size_t k) const {
    if (!grads_negated_[k]) return;
    grads_[k] = neg(grads_[k]);
    grads_negated_[k] = 0;
  }

  detail::Node<T, B>& node_;
  std::span<Var<T, B>> grads_;
  std::span<char> grads_negated_;
  std::span<std::optional<T>> uniform_;
  std::span<const char> needs_;
  std::span<Var<T, B>> results_;
  std::span<char> negated_;
  std::span<std::optional<T>> uniform_results_;
  mutable std::span<const Tensor<T, B>* const> parts_;
  mutable std::span<const bool> parts_negated_;
};

// Which values an op's backward rule reads beyond their shapes: bit i of
// `inputs` for input i, `outputs` for its own outputs. The tape keeps those
// buffers alive for the rule and may release the others early (Tape::release).
// Recording assumes everything is read unless an op says otherwise.
struct Saved {
  std::uint32_t inputs = ~std::uint32_t{0};
  bool outputs = true;
};
// For rules that read shapes only (add, reshape, expand, ...).
inline constexpr Saved saves_nothing{.inputs = 0, .outputs = false};
// For rules that read their inputs but not their result (mul, conv2d, ...).
inline constexpr Saved saves_inputs{.outputs = false};

namespace detail {

template <class T, class B>
void mark_saved(Node<T, B>& node, Saved saved) {
  for (std::size_t i = 0; i < node.inputs.size(); ++i)
    if (i >= 32 || (saved.inputs >> i & 1u)) node.inputs[i]->saved = true;
  if (saved.outputs)
    for (auto* v : node.outputs) v->saved = true;
}

// The tape shared by all inputs; throws when they come from different tapes.
template <class T, class B>
Tape<T, B>& common_tape(std::string_view op, std::span<const Var<T, B>> inputs) {
  Tape<T, B>* tape = nullptr;
  for (const auto& x : inputs) {
    check(x.defined(), op, "an input is an undefined Var");
    check(tape == nullptr || &x.tape() == tape, op, "inputs belong to different tapes");
    tape = &x.tape();
  }
  check(tape != nullptr, op, "no inputs");
  return *tape;
}

template <class T, class B>
bool should_record(std::span<const Var<T, B>> inputs) {
  if (!GradMode::enabled()) return false;
  for (const auto& x : inputs)
    if (x.requires_grad()) return true;
  return false;
}

}  // namespace detail

template <class T, class B, class Rule>
Var<T, B> record(const char* name, std::span<const Var<T, B>> inputs, Tensor<T, B> result,
                 Rule&& rule, Saved saved = {}) {
  Tape<T, B>& tape = detail::common_tape(name, inputs);
  if (!detail::should_record(inputs))
    return Var<T, B>(tape.make_value(std::move(result), nullptr, 0, false));
  auto* node = tape.make_node(name, inputs, 1, std::forward<Rule>(rule));
  node->outputs[0] = tape.make_value(std::move(result), node, 0, true);
  detail::mark_saved(*node, saved);
  return Var<T, B>(node->outputs[0]);
}

template <class T, class B, class Rule>
Var<T, B> record(const char* name, std::initializer_list<Var<T, B>> inputs, Tensor<T, B> result,
                 Rule&& rule, Saved saved = {}) {
  return record(name, std::span<const Var<T, B>>(inputs.begin(), inputs.size()), std::move(result),
                std::forward<Rule>(rule), saved);
}

// y, whose node (where one was recorded) takes its output's gradient in
// parts where a sweep still holds them (Node::takes_parts): its rule reads
// Backward::grad_parts.
template <class T, class B>
Var<T, B> taking_parts(Var<T, B> y) {
  if (auto* node = y.record()->producer) node->takes_parts = true;
  return y;
}

// An op with several outputs (split): one node, one Var per result.
template <class T, class B, class Rule>
std::vector<Var<T, B>> record_many(const char* name, std::span<const Var<T, B>> inputs,
                                   std::vector<Tensor<T, B>> results, Rule&& rule,
                                   Saved saved = {}) {
  Tape<T, B>& tape = detail::common_tape(name, inputs);
  std::vector<Var<T, B>> out;
  out.reserve(results.size());
  if (!detail::should_record(inputs)) {
    for (auto& r : results) out.emplace_back(tape.make_value(std::move(r), nullptr, 0, false));
    return out;
  }
  auto* node = tape.make_node(name, inputs, results.size(), std::forward<Rule>(rule));
  for (std::size_t k = 0; k < results.size(); ++k) {
    node->outputs[k] =
        tape.make_value(std::move(results[k]), node, static_cast<std::uint32_t>(k), true);
    out.emplace_back(node->outputs[k]);
  }
  detail::mark_saved(*node, saved);
  return out;
}

}  // namespace platipus
