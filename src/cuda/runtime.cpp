// The host side of platipus::cuda, compiled by the host compiler: device
// memory through the block cache, copies and synchronisation on the calling
// thread's stream, GEMM through cuBLAS, and CUDA and cuBLAS statuses as
// platipus::error.
#include <algorithm>
#include <limits>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "device_memory.hpp"
#include "platipus/backend/cuda/cuda.hpp"
#include "platipus/backend/cuda/status.hpp"
#include "platipus/core/error.hpp"

namespace platipus {

namespace detail {

void throw_cuda_error(cudaError_t status, const char* call) {
  cudaGetLastError();  // reset the thread's error, so that the next check does not report it again
  fail(call, "{} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
}

namespace {
// The bytes of every live cudaMalloc block, for cuda::allocated_bytes. The
// caches allocate rarely, so a locked map costs nothing that shows; it is
// never destroyed, as blocks may be freed at exit after static destructors.
struct DeviceLedger {
  std::mutex lock;
  std::unordered_map<void*, std::size_t> blocks;
  std::size_t bytes = 0, peak = 0;
};
DeviceLedger& ledger() {
  static auto* const ledger = new DeviceLedger;
  return *ledger;
}
}  // namespace

void* raw_device_allocate(std::size_t bytes) {
  void* p = nullptr;
  if (const cudaError_t status = cudaMalloc(&p, bytes); status != cudaSuccess) {
    cudaGetLastError();  // reset, as throw_cuda_error does
    fail("cudaMalloc", "{} (requested {} bytes)", cudaGetErrorString(status), bytes);
  }
  DeviceLedger& l = ledger();
  const std::lock_guard guard(l.lock);
  l.blocks[p] = bytes;
  l.bytes += bytes;
  l.peak = std::max(l.peak, l.bytes);
  return p;
}

// Only caches' destructors free, at thread exit or when a graph goes, which
// cannot throw. At process exit the runtime may already be unloading
// (cudaErrorCudartUnloading) and has reclaimed the memory itself, so the
// status is ignored.
void raw_device_free(void* p) {
  cudaFree(p);
  DeviceLedger& l = ledger();
  const std::lock_guard guard(l.lock);
  if (const auto block = l.blocks.find(p); block != l.blocks.end()) {
    l.bytes -= block->second;
    l.blocks.erase(block);
  }
}

DeviceCache*& recording_pool() {
  thread_local DeviceCache* pool = nullptr;
  return pool;
}

}  // namespace detail

namespace {

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) fail(call, "{}", cublasGetStatusString(status));
}

// The calling thread's cuBLAS handle, bound to its stream.
cublasHandle_t blas() {
  struct Handle {
    cublasHandle_t handle = nullptr;
    Handle() {
      check_cublas(cublasCreate(&handle), "cublasCreate");
      if (const auto status = cublasSetStream(handle, cudaStreamPerThread);
          status != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(handle);
        check_cublas(status, "cublasSetStream");
      }
    }
    ~Handle() { cublasDestroy(handle); }  // at thread exit; see raw_device_free
  };
  thread_local Handle h;
  return h.handle;
}

int blas_int(std::int64_t value) {
  check(value <= std::numeric_limits<int>::max(), "cuda::gemm",
        "extent {} exceeds cuBLAS's int range", value);
  return static_cast<int>(value);
}

}  // namespace

namespace {
detail::DeviceCache& thread_cache() {
  detail::DeviceCache* pool = detail::recording_pool();
  return pool ? *pool : detail::DeviceCache::local();
}
}  // namespace

void* cuda::allocate(std::size_t bytes) {
  return thread_cache().allocate(bytes);
}
void cuda::deallocate(void* p, std::size_t bytes) {
  thread_cache().deallocate(p, bytes);
}

void cuda::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  detail::check_cuda(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread),
      "cudaMemcpyAsync (device to device)");
}

void cuda::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  detail::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread),
                     "cudaMemcpyAsync (device to host)");
  synchronize();
}

// Synchronises too: the caller may free or reuse the host buffer on return.
void cuda::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  detail::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread),
                     "cudaMemcpyAsync (host to device)");
  synchronize();
}

std::size_t cuda::allocated_bytes() {
  detail::DeviceLedger& l = detail::ledger();
  const std::lock_guard guard(l.lock);
  return l.bytes;
}

std::size_t cuda::peak_allocated_bytes() {
  detail::DeviceLedger& l = detail::ledger();
  const std::lock_guard guard(l.lock);
  return l.peak;
}

void cuda::synchronize() {
  detail::check_cuda(cudaStreamSynchronize(cudaStreamPerThread), "cudaStreamSynchronize");
}

// cuBLAS is column-major, and a row-major matrix read column-major is its
// transpose: the row-major C = op(A) op(B) is the column-major
// C^T = op(B)^T op(A)^T. So B goes first, each operand keeps its own
// transpose flag, and each leading dimension is a row-major row length.
// A batch stride of 0 makes cuBLAS reuse one matrix for every batch.
template <class T>
void cuda::gemm(const GemmLayout<T>& g, const T* a, const T* b, T* c) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const auto op = [](bool transpose) {
    return transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  };
  const int m = blas_int(g.n), n = blas_int(g.m), k = blas_int(g.k), batch = blas_int(g.batch);
  const int ld_b = blas_int(std::max<std::int64_t>(1, g.trans_b ? g.k : g.n));
  const int ld_a = blas_int(std::max<std::int64_t>(1, g.trans_a ? g.m : g.k));
  if constexpr (std::is_same_v<T, float>) {
    check_cublas(cublasSgemmStridedBatched(blas(), op(g.trans_b), op(g.trans_a), m, n, k, &g.alpha,
                                           b, ld_b, g.stride_b, a, ld_a, g.stride_a, &g.beta, c, m,
                                           g.stride_c, batch),
                 "cublasSgemmStridedBatched");
  } else {
    check_cublas(cublasDgemmStridedBatched(blas(), op(g.trans_b), op(g.trans_a), m, n, k, &g.alpha,
                                           b, ld_b, g.stride_b, a, ld_a, g.stride_a, &g.beta, c, m,
                                           g.stride_c, batch),
                 "cublasDgemmStridedBatched");
  }
}

template void cuda::gemm<float>(const GemmLayout<float>&, const float*, const float*, float*);
template void cuda::gemm<double>(const GemmLayout<double>&, const double*, const double*, double*);

}  // namespace platipus
