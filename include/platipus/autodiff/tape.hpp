// The tape and its records, and Var: a handle to a value on a tape.
//
// A Tape is the scope of one computation (one meta-step, say): every value
// and every backward node recorded on it lives in its arena and is freed when
// the Tape is destroyed. Records refer to each other by plain pointers into
// the arena, in creation order, so there are no reference counts and no
// cycles; the backward pass walks the node list from the end. A Var is one
// pointer and is valid while its tape lives. A value's buffer may go sooner:
// Tape::release frees one that no rule reads (Sequential and grad release
// what they made and no one else holds), keeping the record and its shape.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "platipus/autodiff/arena.hpp"
#include "platipus/autodiff/grad_mode.hpp"
#include "platipus/tensor/tensor.hpp"

namespace platipus {

template <class T, class B>
class Tape;
template <class T, class B>
class Var;
template <class T, class B>
class Backward;

namespace detail {

template <class T, class B>
struct Node;

template <class T, class B>
struct Value {
  Tensor<T, B> data;
  Tape<T, B>* tape = nullptr;
  Node<T, B>* producer = nullptr;  // null for leaves and constants
  std::uint32_t id = 0;            // position on the tape, in creation order
  std::uint32_t output_index = 0;  // which output of `producer`
  bool requires_grad = false;
  // Whether a recorded backward rule reads this value's elements (not just
  // its shape), and whether another value views its buffer (a reshape):
  // the buffer of a value that is neither can be released once no one holds
  // it (Tape::release), as PyTorch frees what no saved variable refers to.
  bool saved = false;
  bool viewed = false;
};

// One recorded op: its inputs and outputs and the rule that maps output
// gradients to input gradients, written with differentiable ops.
template <class T, class B>
struct Node {
  const char* name = "";
  std::span<Value<T, B>*> inputs;
  std::span<Value<T, B>*> outputs;
  // Where set, the rule gives input 0 the output's gradient where input
  // routed_by is > 0 and 0 elsewhere (relu_backward), and nothing else, so
  // that a sweep may add the gradient's parts and route them in one call.
  std::optional<std::uint32_t> routed_by;
  // Where set, the rule may read its output's gradient as the parts a sweep
  // that records nothing still holds (Backward::grad_parts), to add them
  // within a call of its own.
  bool takes_parts = false;
  virtual void backward(Backward<T, B>& context) = 0;
  virtual ~Node() = default;
};

template <class T, class B, class Rule>
struct RuleNode final : Node<T, B> {
  explicit RuleNode(Rule r) : rule(std::move(r)) {}
  void backward(Backward<T, B>& context) override { rule(context); }
  Rule rule;
};

}  // namespace detail

template <class T, class B = cpu>
class Var {
 public:
  using value_type = T;
  using backend = B;

  Var() = default;
  explicit Var(detail::Value<T, B>* v) : v_(v) {}

  bool defined() const { return v_ != nullptr; }
  const Tensor<T, B>& value() const { return v_->data; }
  const Shape& shape() const { return v_->data.shape(); }
  int rank() const { return shape().rank(); }
  std::int64_t numel() const { return shape().numel(); }
  std::int64_t dim(int axis) const { return shape().dim(axis); }
  T item() const { return value().item(); }
  std::vector<T> to_vector() const { return value().to_vector(); }

  // True when gradients can flow to this value (a variable, or computed from one).
  bool requires_grad() const { return v_->requires_grad; }
  Tape<T, B>& tape() const { return *v_->tape; }
  detail::Value<T, B>* record() const { return v_; }

  friend bool operator==(const Var& a, const Var& b) { return a.v_ == b.v_; }

 private:
  detail::Value<T, B>* v_ = nullptr;
};

template <class T, class B = cpu>
class Tape {
 public:
  using Value = detail::Value<T, B>;
  using Node = detail::Node<T, B>;

  Tape() = default;
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;
  ~Tape() {
    for (Node* n : nodes_) n->~Node();
    for (Value* v : values_) v->~Value();
  }

  // A leaf that gradients are taken with respect to.
  Var<T, B> variable(Tensor<T, B>&& value) {
    return Var<T, B>(make_value(std::move(value), nullptr, 0, true));
  }
  Var<T, B> variable(const Tensor<T, B>& value) { return variable(value.clone()); }
  // A variable that reads `value` where it lies, as constant_view does.
  Var<T, B> variable_view(const Tensor<T, B>& value) {
    return variable(Tensor<T, B>::view(value, value.shape()));
  }
  // Data: a value on the tape that no gradient flows to.
  Var<T, B> constant(Tensor<T, B>&& value) {
    return Var<T, B>(make_value(std::move(value), nullptr, 0, false));
  }
  Var<T, B> constant(const Tensor<T, B>& value) { return constant(value.clone()); }
  // A constant that reads `value` where it lies, without a copy: `value`
  // must outlive the tape, unchanged (a meta-step's task batch, an
  // enclosing tape's value).
  Var<T, B> constant_view(const Tensor<T, B>& value) {
    return constant(Tensor<T, B>::view(value, value.shape()));
  }
  // A constant of `shape` with u in every element: a gradient known on the
  // host (Backward::uniform_grad) once a tensor is needed.
  Var<T, B> filled(const Shape& shape, T u) { return constant(Tensor<T, B>::full(shape, u)); }

  std::size_t values() const { return values_.size(); }
  std::size_t nodes() const { return nodes_.size(); }

  // Bytes of the buffers its values own, now and at most so far: what the
  // tape keeps alive (views and released values count nothing).
  std::size_t live_bytes() const { return live_bytes_; }
  std::size_t peak_bytes() const { return peak_bytes_; }

  // Frees a value's buffer, keeping its shape, when no backward rule reads
  // it and nothing views it; the caller vouches that no Var to it will read
  // it again. Returns whether it freed anything.
  bool release(Value* v) {
    if (v->saved || v->viewed || v->data.empty() || v->data.is_view()) return false;
    live_bytes_ -= v->data.bytes();
    v->data.release_buffer();
    return true;
  }
  // The buffer of a value that outlives the tape (a meta-step's gradient):
  // moved out where the tape owns it and neither a view nor a recorded rule
  // reads it (as `release`), else a copy. A moved value keeps its shape.
  Tensor<T, B> take(const Var<T, B>& var) {
    Value* v = var.record();
    check(v->tape == this, "Tape::take", "the value of shape {} is on another tape",
          v->data.shape());
    check(!v->data.empty() || v->data.numel() == 0, "Tape::take",
          "the value of shape {} was taken or released", v->data.shape());
    if (v->data.is_view() || v->viewed || v->saved) return v->data.clone();
    live_bytes_ -= v->data.bytes();
    return std::move(v->data);
  }
  // Releases (as `release`) every value from id `first` on but `kept`:
  // the temporaries of a computation whose only result is `kept`.
  void release_since(std::size_t first, std::span<const Var<T, B>> kept) {
    for (std::size_t id = first; id < values_.size(); ++id) {
      Value* v = values_[id];
      if (std::ranges::none_of(kept, [v](const Var<T, B>& k) { return k.record() == v; }))
        release(v);
    }
  }

  // Internal: used by `record` and the backward engine.
  Value* make_value(Tensor<T, B> data, Node* producer, std::uint32_t output_index,
                    bool requires_grad) {
    Value* v = arena_.make<Value>();
    v->data = std::move(data);
    v->tape = this;
    v->producer = producer;
    v->id = static_cast<std::uint32_t>(values_.size());
    v->output_index = output_index;
    v->requires_grad = requires_grad;
    values_.push_back(v);
    if (!v->data.is_view()) {
      live_bytes_ += v->data.bytes();
      peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    }
    return v;
  }

  template <class Rule>
  Node* make_node(const char* name, std::span<const Var<T, B>> inputs, std::size_t output_count,
                  Rule&& rule) {
    auto* node = arena_.make<detail::RuleNode<T, B, std::decay_t<Rule>>>(std::forward<Rule>(rule));
    node->name = name;
    Value** in = arena_.make_array<Value*>(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) in[i] = inputs[i].record();
    node->inputs = {in, inputs.size()};
    node->outputs = {arena_.make_array<Value*>(output_count), output_count};
    nodes_.push_back(node);
    return node;
  }

  std::span<Node* const> node_list() const { return nodes_; }
  Value* value_at(std::size_t id) const { return values_[id]; }

 private:
  detail::Arena arena_;
  std::vector<Value*> values_;
  std::vector<Node*> nodes_;
  std::size_t live_bytes_ = 0, peak_bytes_ = 0;
};

}  // namespace platipus
