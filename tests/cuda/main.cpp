// The CUDA tests' runner: exits with 77 (ctest's "skipped") when there is
// no CUDA device, so that a GPU-less machine reports the tests as skipped,
// not passed.
#define CATCH_CONFIG_RUNNER
#include "../catch.hpp"

#include <cstdio>

#include <cuda_runtime_api.h>

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver ||
      (status == cudaSuccess && devices == 0)) {
    std::printf("no CUDA device (%s): skipping the CUDA tests\n", cudaGetErrorString(status));
    return 77;
  }
  if (status != cudaSuccess) {
    std::fprintf(stderr, "cudaGetDeviceCount: %s\n", cudaGetErrorString(status));
    return 1;
  }
  return Catch::Session().run(argc, argv);
}
