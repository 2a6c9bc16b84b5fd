// grad(outputs, inputs): reverse-mode gradients by walking the tape backwards.
//
// Only the part of the tape between the inputs and the outputs is visited:
// a forward sweep marks the values that depend on an input, and the backward
// sweep runs the rules of marked nodes that received a gradient, asking each
// rule only for the input gradients that lead somewhere. With create_graph
// the rules record onto the same tape, so the returned gradients are
// differentiable; without it they run with recording off and return
// constants. The tape is never consumed: grad can be called again on the
// same outputs until the tape ends (PyTorch's retain_graph, always on).
//
// A rule may give an input's gradient at the input's rank with axes of size
// 1 where it is the same along them (sum_to's rule does): the sweep adds it
// to the value's other gradients with a broadcast, and expands it only where
// the caller or a rule reads it alone (Backward::grad; a rule that maps it
// elementwise reads it as it is, Backward::broadcast_grad).
//
// What the sweep itself makes (a rule's temporaries, a value's gradient once
// its producer has used it) is released as soon as nothing can read it: no
// slot holds it and no recorded rule saved it (Tape::release). So without
// create_graph the sweep keeps a frontier of gradients, not one per value.
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "platipus/autodiff/ops/arithmetic.hpp"

namespace platipus {

struct GradOptions {
  // Record the backward pass so that its results can be differentiated again.
  bool create_graph = false;
  // Return zeros (as JAX does) for inputs that the outputs do not depend on,
  // instead of throwing.
  bool allow_unused = false;
  // Differentiate the sum of each output's elements (JAX's grad of f(x).sum()):
  // without grad_outputs, an output of any shape is seeded with 1 in every
  // element, known on the host as a single value's seed is. The inner loop's
  // loss per task (its tasks' gradients are independent) needs no kernel to
  // add the tasks up when nobody reads the sum (issue 38).
  bool sum_outputs = false;
};

namespace detail {
// Whether a gradient of shape g can stand for one of shape x: the same rank,
// each axis x's or 1.
inline bool broadcasts_at_rank(const Shape& g, const Shape& x) {
  if (g.rank() != x.rank()) return false;
  for (int i = 0; i < x.rank(); ++i)
    if (g[i] != x[i] && g[i] != 1) return false;
  return true;
}
}  // namespace detail

// Gradients of sum_k <outputs[k], grad_outputs[k]> with respect to each input.
// Without grad_outputs every output must be a single value (seed 1), or
// options.sum_outputs seeds 1 in each element of any output.
template <class T, class B>
std::vector<Var<T, B>> grad(std::span<const Var<T, B>> outputs, std::span<const Var<T, B>> inputs,
                            std::span<const Var<T, B>> grad_outputs, GradOptions options = {}) {
  using Value = detail::Value<T, B>;
  Tape<T, B>& tape = detail::common_tape("grad", outputs);
  check(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "grad",
        "{} grad_outputs given for {} outputs", grad_outputs.size(), outputs.size());
  check(grad_outputs.empty() || !options.sum_outputs, "grad",
        "grad_outputs given with sum_outputs, which seeds 1 in every element itself");
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    if (grad_outputs.empty()) {
      check(outputs[k].numel() == 1 || options.sum_outputs, "grad",
            "output {} has shape {}; a non-scalar output needs grad_outputs (a seed of its shape) "
            "or sum_outputs",
            k, outputs[k].shape());
    } else {
      check(grad_outputs[k].defined() && grad_outputs[k].shape() == outputs[k].shape(), "grad",
            "grad_outputs[{}] must have the shape of output {} ({})", k, k, outputs[k].shape());
    }
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check(inputs[i].defined(), "grad", "input {} is an undefined Var", i);
    check(&inputs[i].tape() == &tape, "grad",
          "input {} (shape {}) is on a different tape than the outputs", i, inputs[i].shape());
    check(inputs[i].requires_grad() || options.allow_unused, "grad",
          "input {} (shape {}) is not on the tape as a variable (it is a constant); pass "
          "allow_unused "
          "to get zeros",
          i, inputs[i].shape());
  }

  // Value ids [lo, hi] bound everything that can carry a gradient from an
  // output to an input.
  std::uint32_t lo = UINT32_MAX, hi = 0;
  for (const auto& x : inputs)
    if (x.requires_grad()) lo = std::min(lo, x.record()->id);
  // The range holds every output of the nodes it reaches: an output's
  // node's last output, not the output asked for, bounds it.
  for (const auto& y : outputs) {
    const Value* v = y.record();
    hi = std::max(hi, v->producer ? v->producer->outputs.back()->id : v->id);
  }
  std::vector<Var<T, B>> result(inputs.size());
  if (lo <= hi) {
    const std::size_t span = hi - lo + 1;
    auto slot = [lo](const Value* v) {
      return static_cast<std::size_t>(v->id - lo);
    };
    auto in_range = [lo, hi](const Value* v) {
      return v->id >= lo && v->id <= hi;
    };
    std::vector<char> reaches(span, 0);
    for (const auto& x : inputs)
      if (x.requires_grad()) reaches[slot(x.record())] = 1;

    const auto nodes = tape.node_list();
    auto first_output_id = [](const detail::Node<T, B>* n) {
      return n->outputs[0]->id;
    };
    const auto begin =
        std::ranges::partition_point(nodes, [&](auto* n) { return first_output_id(n) <= lo; });
    const auto end =
        std::ranges::partition_point(nodes, [&](auto* n) { return first_output_id(n) <= hi; });
    const auto first = static_cast<std::size_t>(begin - nodes.begin());
    const auto last = static_cast<std::size_t>(end - nodes.begin());

    for (std::size_t n = first; n < last; ++n) {
      const auto* node = nodes[n];
      const bool any = std::ranges::any_of(
          node->inputs, [&](const Value* v) { return in_range(v) && reaches[slot(v)]; });
      if (any)
        for (const Value* v : node->outputs) reaches[slot(v)] = 1;
    }

    GradModeGuard mode(options.create_graph);
    // A value's gradients so far. Without create_graph a part may stand
    // negated (Backward::set_negated): it is negated where the parts are
    // added, by subtracting it (the bits of adding its negation), and on its
    // own only when it is read alone. A value whose one gradient so far is
    // known on the host to be u in every element holds u and no part
    // (Backward::uniform_grad); a second gradient makes it a tensor.
    struct Summands {
      std::array<Var<T, B>, SummandsLayout<T>::capacity> parts;
      std::array<bool, SummandsLayout<T>::capacity> negated{};
      int count = 0;
      std::optional<T> uniform;
    };
    std::vector<Summands> grads(span);
    // How many slots hold each value made from here on (id >= fresh).
    const std::size_t fresh = tape.values();
    std::vector<std::uint32_t> holds;
    auto held = [&](const Var<T, B>& g) -> std::uint32_t* {
      const std::size_t id = g.record()->id;
      if (id < fresh) return nullptr;
      if (holds.size() <= id - fresh) holds.resize(tape.values() - fresh, 0);
      return &holds[id - fresh];
    };
    auto release_unheld = [&](const Var<T, B>& g) {
      if (auto* h = held(g); h && *h == 0) tape.release(g.record());
    };
    auto let_go = [&](const Var<T, B>& g) {
      if (auto* h = held(g); h && --*h == 0) tape.release(g.record());
    };
    // A value's gradients are added in the order they arrive. A sweep that
    // records (create_graph) adds each as it comes; one that does not holds
    // up to the backend's gradients_per_add and adds them with one add_n (the
    // chain's bits) when they fill it or the gradient is read, broadcast ones
    // (a bias's [tasks, 1, n] beside [tasks, points, n]) included where they
    // repeat along at most two runs of axes.
    static_assert(B::gradients_per_add >= 2 && B::gradients_per_add <= SummandsLayout<T>::capacity);
    const int fold_at = options.create_graph ? 2 : B::gradients_per_add;
    // One of several outputs (a foreach op's piece), or the output of a node
    // that routes its gradient (Node::routed_by) or takes it in parts
    // (Node::takes_parts), holds a full set until one more comes, so that a
    // set read first is added with its op's others (fold_outputs), routed in
    // the same call (route) or added by the rule's own call, where the backend
    // adds more than two in a call (on the CPU, adding two at a time, waiting
    // would hold memory for a loop of add_n); any other value adds a set as
    // it fills. A recording sweep adds each as it comes: the tape's order
    // either way.
    const bool pieces_wait = !options.create_graph && B::gradients_per_add > 2;
    using Values = std::array<const Tensor<T, B>*, SummandsLayout<T>::capacity>;
    auto values_of = [](const Summands& p, Values& values) {
      for (int k = 0; k < p.count; ++k)
        values[static_cast<std::size_t>(k)] = &p.parts[static_cast<std::size_t>(k)].value();
      return std::span<const Tensor<T, B>* const>(values.data(), static_cast<std::size_t>(p.count));
    };
    auto negated_of = [](const Summands& p) {
      return std::span<const bool>(p.negated.data(), static_cast<std::size_t>(p.count));
    };
    // p's parts replaced by their sum.
    auto settle = [&](Summands& p, const Var<T, B>& sum) {
      if (auto* h = held(sum)) ++*h;
      for (int k = 0; k < p.count; ++k) let_go(p.parts[static_cast<std::size_t>(k)]);
      p = Summands{};
      p.parts[0] = sum;
      p.count = 1;
    };
    auto fold = [&](Summands& p) {
      if (p.count < 2) return;
      const auto parts =
          std::span<const Var<T, B>>(p.parts.data(), static_cast<std::size_t>(p.count));
      Var<T, B> sum = parts[0];
      Values values{};
      const auto summands = values_of(p, values);
      if (!options.create_graph && raw::add_n_takes(summands)) {
        sum = tape.constant(raw::add_n(summands, negated_of(p)));
      } else {
        if (p.negated[0]) sum = neg(sum);
        for (std::size_t k = 1; k < parts.size(); ++k) {
          const Var<T, B> previous = sum;
          sum = p.negated[k] ? sub(previous, parts[k]) : add(previous, parts[k]);
          if (k > 1 || p.negated[0]) release_unheld(previous);
        }
      }
      settle(p, sum);
    };
    // The gradients of a foreach op's outputs (its pieces) added up by one
    // foreach_add_n where add_n would add each: one call where there were
    // one a piece, the same bits (issue 38).
    std::vector<Summands*> due;
    std::vector<Values> due_values;
    std::vector<std::span<const Tensor<T, B>* const>> due_summands;
    std::vector<std::span<const bool>> due_negated;
    auto fold_outputs = [&](const detail::Node<T, B>& node) {
      if (!pieces_wait || node.outputs.size() < 2) return;
      due.clear();
      due_values.resize(node.outputs.size());
      due_summands.clear();
      due_negated.clear();
      for (const Value* v : node.outputs) {
        Summands& p = grads[slot(v)];
        if (p.count < 2) continue;
        const auto summands = values_of(p, due_values[due.size()]);
        if (!raw::add_n_takes(summands)) continue;
        due.push_back(&p);
        due_summands.push_back(summands);
        due_negated.push_back(negated_of(p));
      }
      if (due.size() < 2) return;
      auto sums =
          raw::foreach_add_n(std::span<const std::span<const Tensor<T, B>* const>>(due_summands),
                             std::span<const std::span<const bool>>(due_negated));
      for (std::size_t i = 0; i < due.size(); ++i)
        settle(*due[i], tape.constant(std::move(sums[i])));
    };
    auto accumulate = [&](const Value* v, Var<T, B> g, bool negated) {
      Summands& p = grads[slot(v)];
      if (p.uniform) {
        Var<T, B> filled = tape.filled(v->data.shape(), *p.uniform);
        p.uniform.reset();
        if (auto* h = held(filled)) ++*h;
        p.parts[static_cast<std::size_t>(p.count++)] = std::move(filled);
      }
      const bool piece = pieces_wait && v->producer != nullptr &&
                         (v->producer->outputs.size() > 1 || v->producer->routed_by.has_value() ||
                          v->producer->takes_parts);
      if (piece && p.count == fold_at) fold(p);
      if (auto* h = held(g)) ++*h;
      p.negated[static_cast<std::size_t>(p.count)] = negated;
      p.parts[static_cast<std::size_t>(p.count++)] = std::move(g);
      if (!piece && p.count == fold_at) fold(p);
    };
    auto accumulate_uniform = [&](const Value* v, T u) {
      Summands& p = grads[slot(v)];
      if (p.count == 0 && !p.uniform)
        p.uniform = u;
      else
        accumulate(v, tape.filled(v->data.shape(), u), false);
    };
    // The gradient of v so far (undefined if none has reached it), up to its
    // sign: the gradient is -g where the flag says so; or its uniform value.
    struct Gradient {
      Var<T, B> g;
      bool negated = false;
      std::optional<T> uniform;
    };
    auto gradient = [&](const Value* v) -> Gradient {
      Summands& p = grads[slot(v)];
      if (p.uniform) return {Var<T, B>(), false, p.uniform};
      fold(p);
      return {p.count ? p.parts[0] : Var<T, B>(), p.count && p.negated[0], std::nullopt};
    };
    std::vector<char> wanted(span, 0);  // slots read after the sweep
    // A node that routes its gradient (Node::routed_by) whose gradient is
    // still parts, in a sweep that records nothing: input 0's gradient is
    // their sum routed by add_n in one call, where add_n and relu_backward
    // were two, with their bits (issue 38). False where it does not apply,
    // and the rule runs.
    auto route = [&](const detail::Node<T, B>& node) {
      if (!node.routed_by || options.create_graph) return false;
      const Value* out = node.outputs[0];
      const Value* in = node.inputs[0];
      Summands& p = grads[slot(out)];
      if (p.count < 2 || wanted[slot(out)] || !in->requires_grad || !in_range(in) ||
          !reaches[slot(in)])
        return false;
      const Tensor<T, B>& by = node.inputs[*node.routed_by]->data;
      if (in->data.shape() != by.shape()) return false;  // a broadcast g: the rule's error
      Values values{};
      const auto summands = values_of(p, values);
      if (raw::add_n_takes(summands) != by.shape()) return false;
      Var<T, B> routed = tape.constant(raw::add_n(summands, negated_of(p), &by));
      for (int k = 0; k < p.count; ++k) let_go(p.parts[static_cast<std::size_t>(k)]);
      p = Summands{};
      accumulate(in, std::move(routed), false);
      return true;
    };
    for (const auto& x : inputs)
      if (x.requires_grad() && in_range(x.record())) wanted[slot(x.record())] = 1;
    for (std::size_t k = 0; k < outputs.size(); ++k) {
      const Value* y = outputs[k].record();
      if (!in_range(y) || !reaches[slot(y)]) continue;
      if (grad_outputs.empty())
        accumulate_uniform(y, T(1));
      else
        accumulate(y, grad_outputs[k], false);
    }

    std::vector<Var<T, B>> out_grads, in_grads;
    std::vector<char> out_negated, needs, negated;
    std::vector<std::optional<T>> out_uniform, in_uniform;
    // Output 0's gradient parts, offered to a rule that takes them
    // (Node::takes_parts) in a sweep that records nothing: the rule adds
    // them in its own call, one kernel fewer (issue 38).
    Values part_values{};
    auto parts_for = [&](const detail::Node<T, B>& node) -> std::span<const Tensor<T, B>* const> {
      if (!node.takes_parts || options.create_graph) return {};
      const Value* out = node.outputs[0];
      Summands& p = grads[slot(out)];
      if (p.count < 2 || wanted[slot(out)]) return {};
      const auto summands = values_of(p, part_values);
      if (raw::add_n_takes(summands) != out->data.shape())
        return {};  // broadcast parts only: the rule reads their sum expanded
      return summands;
    };
    for (std::size_t n = last; n-- > first;) {
      auto* node = tape.node_list()[n];  // re-read: recording rules grow the list
      out_grads.clear();
      out_negated.clear();
      out_uniform.clear();
      bool any_grad = false;
      fold_outputs(*node);
      if (route(*node)) continue;
      const auto parts = parts_for(*node);
      for (const Value* v : node->outputs) {
        auto [g, g_negated, uniform] =
            parts.empty() || v != node->outputs[0] ? gradient(v) : Gradient{};
        any_grad = any_grad || g.defined() || uniform || !parts.empty();
        out_grads.push_back(std::move(g));
        out_negated.push_back(g_negated);
        out_uniform.push_back(uniform);
      }
      if (!any_grad) continue;
      needs.assign(node->inputs.size(), 0);
      bool any_need = false;
      for (std::size_t i = 0; i < node->inputs.size(); ++i) {
        const Value* v = node->inputs[i];
        needs[i] = v->requires_grad && in_range(v) && reaches[slot(v)];
        any_need = any_need || needs[i];
      }
      if (!any_need) continue;
      in_grads.assign(node->inputs.size(), Var<T, B>());
      negated.assign(node->inputs.size(), 0);
      in_uniform.assign(node->inputs.size(), std::nullopt);
      const std::size_t made = tape.values();  // the rule's temporaries, expansions included
      Backward<T, B> context(
          *node, out_grads, out_negated, out_uniform, needs, in_grads, negated, in_uniform, parts,
          parts.empty() ? std::span<const bool>() : negated_of(grads[slot(node->outputs[0])]));
      node->backward(context);
      // A gradient the rule gives several inputs (sub's, to both) is held
      // for all of them before any is added in: adding it into one input's
      // gradients can add them up (fold) and let go of it, which would
      // release it before the next input took it.
      const auto given = [&](std::size_t i) {
        return needs[i] && !in_uniform[i] && in_grads[i].defined();
      };
      for (std::size_t i = 0; i < node->inputs.size(); ++i)
        if (given(i))
          if (auto* h = held(in_grads[i])) ++*h;
      for (std::size_t i = 0; i < node->inputs.size(); ++i) {
        if (!needs[i]) continue;
        if (in_uniform[i]) {
          accumulate_uniform(node->inputs[i], *in_uniform[i]);
          continue;
        }
        if (!in_grads[i].defined()) continue;
        check(detail::broadcasts_at_rank(in_grads[i].shape(), node->inputs[i]->data.shape()),
              "grad", "the backward rule of '{}' gave shape {} for input {} of shape {}",
              node->name, in_grads[i].shape(), i, node->inputs[i]->data.shape());
        accumulate(node->inputs[i], in_grads[i], negated[i] != 0);
      }
      for (std::size_t i = 0; i < node->inputs.size(); ++i)
        if (given(i)) let_go(in_grads[i]);
      // The rule's temporaries, then this node's output gradients: used up.
      for (std::size_t id = made; id < tape.values(); ++id)
        release_unheld(Var<T, B>(tape.value_at(id)));
      for (const Value* v : node->outputs) {
        Summands& p = grads[slot(v)];
        if (wanted[slot(v)]) continue;
        for (int k = 0; k < p.count; ++k) let_go(p.parts[static_cast<std::size_t>(k)]);
        p = Summands{};
      }
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].requires_grad() || !in_range(inputs[i].record())) continue;
      if (const auto [g, negated, uniform] = gradient(inputs[i].record()); uniform)
        result[i] = tape.filled(inputs[i].shape(), *uniform);
      else if (g.defined())
        result[i] = expand(negated ? neg(g) : g, inputs[i].shape());
    }
  }

  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (result[i].defined()) continue;
    check(options.allow_unused, "grad",
          "input {} (shape {}) does not influence the outputs; pass allow_unused to get zeros", i,
          inputs[i].shape());
    result[i] = tape.constant(Tensor<T, B>::zeros(inputs[i].shape()));
  }
  return result;
}

template <class T, class B>
std::vector<Var<T, B>> grad(const Var<T, B>& output, std::span<const Var<T, B>> inputs,
                            GradOptions options = {}) {
  return grad(std::span<const Var<T, B>>(&output, 1), inputs, {}, options);
}

template <class T, class B>
std::vector<Var<T, B>> grad(const Var<T, B>& output, std::initializer_list<Var<T, B>> inputs,
                            GradOptions options = {}) {
  return grad(output, std::span<const Var<T, B>>(inputs.begin(), inputs.size()), options);
}

template <class T, class B>
Var<T, B> grad(const Var<T, B>& output, const Var<T, B>& input, GradOptions options = {}) {
  return grad(output, std::span<const Var<T, B>>(&input, 1), options)[0];
}

}  // namespace platipus
