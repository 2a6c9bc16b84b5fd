// CUDA runtime statuses as platipus::error. The throwing half is compiled
// by the host compiler (src/cuda/runtime.cpp), so that code nvcc compiles
// never needs fmt.
#pragma once

#include <cuda_runtime_api.h>

namespace platipus::detail {

// Throws platipus::error "<call>: <CUDA's description> (<error name>)".
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call);

inline void check_cuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw_cuda_error(status, call);
}

}  // namespace platipus::detail
