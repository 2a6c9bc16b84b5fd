// Everything platipus offers on the CPU. The CUDA backend is opt-in:
// include "platipus/backend/cuda/cuda.hpp" to name platipus::cuda.
#pragma once

#include "platipus/autodiff.hpp"
#include "platipus/nn/losses.hpp"
