// The backend the example programs compute on. Each program is built twice
// from one source: for platipus::cpu, and, where CMake finds CUDA, as
// <name>_cuda with PLATIPUS_EXAMPLES_ON_CUDA defined; this type is
// the only difference.
#pragma once

#include "platipus/platipus.hpp"

#ifdef PLATIPUS_EXAMPLES_ON_CUDA
#include "platipus/backend/cuda/cuda.hpp"
#endif

namespace examples {

#ifdef PLATIPUS_EXAMPLES_ON_CUDA
using ExampleBackend = platipus::cuda;
#else
using ExampleBackend = platipus::cpu;
#endif

}  // namespace examples
