// bind_learners<T>: the library's seven learners for one dtype; each dtype
// is its own translation unit (learners_float32.cpp, learners_float64.cpp)
// so that a parallel build compiles them side by side.
#pragma once

#include <string>

#include "learners.hpp"

namespace platipus::python {

template <class T>
void bind_learners(nb::module_& m) {
  using M = nn::Sequential;
  const std::string dtype(dtype_name<T>);
  const auto named = [&](const char* learner) {
    return learner + ("_" + dtype);
  };
  bind_learner<MamlObjective<M, AnyLoss, T>>(m, named("Maml").c_str());
  bind_learner<PlatipusObjective<M, AnyLoss, T>>(m, named("Platipus").c_str());
  bind_learner<MetaSgdObjective<M, AnyLoss, T>>(m, named("MetaSgd").c_str());
  bind_learner<AnilObjective<M, AnyLoss, T>>(m, named("Anil").c_str());
  bind_learner<ReptileObjective<M, AnyLoss, T>>(m, named("Reptile").c_str());
  bind_learner<MamlPlusPlusObjective<M, AnyLoss, T>>(m, named("MamlPlusPlus").c_str());
}

}  // namespace platipus::python
