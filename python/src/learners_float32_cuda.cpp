// The learners on the GPU (platipus::cuda), float32 only: the examples'
// arithmetic on the device; float64 on the GPU is for the C++ parity tests.
#include <cuda_runtime_api.h>

#include "learners_all.hpp"
#include "platipus/backend/cuda/cuda.hpp"

template void platipus::python::bind_learners<float, platipus::cuda>(nanobind::module_&);

// The CUDA devices this process sees; 0 where there is none, or no driver.
int platipus::python::cuda_device_count() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess ? devices : 0;
}
