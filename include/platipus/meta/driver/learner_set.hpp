// Several meta-learners under names, in the order they were added: the
// learners a run compares side by side (MAML, MAML + noise and PLATIPUS in
// the paper's tables), each trained and scored under its name and saved in
// one checkpoint with its tensors prefixed by it ("maml/theta",
// "platipus/mu_theta"; io::save and io::load).
//
//   LearnerSet<Maml<Net, Loss>, Platipus<Net, Loss>> set;
//   set.add("maml", Maml<Net, Loss>(net, loss, {}, gen));
//   set.for_each([&](const std::string& name, auto& learner) { ... });
//   const auto& maml = set.get<Maml<Net, Loss>>("maml");
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "platipus/core/error.hpp"

namespace platipus {

template <class... Learners>
class LearnerSet {
 public:
  // Adds `learner` under `name` (not empty, without '/', which separates it
  // from the tensor names in a checkpoint, and not taken) and returns it.
  template <class Learner>
  Learner& add(std::string name, Learner learner) {
    check(!name.empty() && name.find('/') == std::string::npos, "LearnerSet::add",
          "a learner's name must be non-empty and without '/', got '{}'", name);
    check(!contains(name), "LearnerSet::add", "there is already a learner named '{}'", name);
    auto& [_, added] = learners_.emplace_back(std::move(name), std::move(learner));
    return std::get<Learner>(added);
  }

  bool contains(std::string_view name) const { return find(name) != nullptr; }

  // Removes the learner named `name`; returns whether there was one.
  bool erase(std::string_view name) {
    return std::erase_if(learners_, [&](const auto& named) { return named.first == name; }) > 0;
  }

  // The learner named `name`, which must be a Learner; throws naming it
  // otherwise.
  template <class Learner>
  Learner& get(std::string_view name) {
    return const_cast<Learner&>(std::as_const(*this).template get<Learner>(name));
  }
  template <class Learner>
  const Learner& get(std::string_view name) const {
    const auto* learner = find(name);
    check(learner != nullptr, "LearnerSet::get", "there is no learner named '{}' (the set has: {})",
          name, names_text());
    check(std::holds_alternative<Learner>(*learner), "LearnerSet::get",
          "the learner named '{}' is of another type than the one asked for", name);
    return std::get<Learner>(*learner);
  }

  // f(name, learner) for each learner in the order of `add`, with the
  // learner as its own type.
  template <class F>
  void for_each(F&& f) {
    for (auto& named : learners_)
      std::visit([&](auto& l) { f(std::as_const(named.first), l); }, named.second);
  }
  template <class F>
  void for_each(F&& f) const {
    for (const auto& named : learners_)
      std::visit([&](const auto& l) { f(named.first, l); }, named.second);
  }

  // f(learner) for the learner named `name`, as its own type; throws naming
  // it when there is none.
  template <class F>
  void visit(std::string_view name, F&& f) {
    auto* learner = find(name);
    check(learner != nullptr, "LearnerSet::visit",
          "there is no learner named '{}' (the set has: {})", name, names_text());
    std::visit(f, *learner);
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, _] : learners_) out.push_back(name);
    return out;
  }
  std::size_t size() const { return learners_.size(); }
  bool empty() const { return learners_.empty(); }

 private:
  using Learner = std::variant<Learners...>;

  const Learner* find(std::string_view name) const {
    for (const auto& [n, learner] : learners_)
      if (n == name) return &learner;
    return nullptr;
  }
  Learner* find(std::string_view name) {
    return const_cast<Learner*>(std::as_const(*this).find(name));
  }
  std::string names_text() const {
    std::string text;
    for (const auto& [name, _] : learners_) text += (text.empty() ? "" : ", ") + name;
    return text.empty() ? "none" : text;
  }

  // A deque: references returned by add and get stay valid as learners are
  // added (erase invalidates them).
  std::deque<std::pair<std::string, Learner>> learners_;
};

}  // namespace platipus
