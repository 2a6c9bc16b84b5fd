#include "learners_all.hpp"

template void platipus::python::bind_learners<float, platipus::cpu>(nanobind::module_&);
