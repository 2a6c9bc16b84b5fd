// bind_learners<T, B>: the library's seven learners for one dtype and
// backend; each pair is its own translation unit (learners_float32.cpp,
// learners_float64.cpp, learners_float32_cuda.cpp) so that a parallel build
// compiles them side by side.
#pragma once

#include <string>

#include "learners.hpp"

namespace platipus::python {

template <class T, class B>
void bind_learners(nb::module_& m) {
  using M = nn::Sequential;
  std::string suffix = "_" + std::string(dtype_name<T>);
  if constexpr (!std::is_same_v<B, cpu>) suffix += "_" + std::string(B::name);
  const auto named = [&](const char* learner) {
    return learner + suffix;
  };
  bind_learner<MamlObjective<M, AnyLoss, T, B>>(m, named("Maml").c_str());
  bind_learner<PlatipusObjective<M, AnyLoss, T, B>>(m, named("Platipus").c_str());
  bind_learner<MetaSgdObjective<M, AnyLoss, T, B>>(m, named("MetaSgd").c_str());
  bind_learner<AnilObjective<M, AnyLoss, T, B>>(m, named("Anil").c_str());
  bind_learner<ReptileObjective<M, AnyLoss, T, B>>(m, named("Reptile").c_str());
  bind_learner<MamlPlusPlusObjective<M, AnyLoss, T, B>>(m, named("MamlPlusPlus").c_str());
}

}  // namespace platipus::python
