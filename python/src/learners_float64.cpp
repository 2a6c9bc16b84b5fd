#include "learners_all.hpp"

template void platipus::python::bind_learners<double, platipus::cpu>(nanobind::module_&);
