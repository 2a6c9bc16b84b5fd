// The host side of platipus::cuda, compiled by the host compiler: device
// memory through the block cache, copies and synchronisation on the calling
// thread's stream, GEMM through cuBLAS, a linear layer's forward through
// cuBLASLt, and CUDA and cuBLAS statuses as platipus::error.
#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "device_memory.hpp"
#include "platipus/backend/cuda/cuda.hpp"
#include "platipus/backend/cuda/status.hpp"
#include "platipus/backend/linear_in_parts.hpp"
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

// ---- linear: one cuBLASLt GEMM whose epilogue adds the bias (and ReLU) ----
// The operands are laid out as in cuda::gemm (b first, column-major views);
// the bias runs along the column-major D's rows, which is what cuBLASLt's
// bias epilogue broadcasts. The product is summed before the bias is added,
// the CPU sums onto the bias (linear_in_parts): the same arithmetic up to
// rounding. Layouts for which cuBLASLt offers no kernel take the three calls.

namespace {

cublasLtHandle_t blas_lt() {
  struct Handle {
    cublasLtHandle_t handle = nullptr;
    Handle() { check_cublas(cublasLtCreate(&handle), "cublasLtCreate"); }
    ~Handle() { cublasLtDestroy(handle); }  // at thread exit; see raw_device_free
  };
  thread_local Handle h;
  return h.handle;
}

// The largest power of two up to 256 that divides the address: the kernels
// cuBLASLt may choose depend on it (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*).
std::uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  return static_cast<std::uint32_t>(std::min<std::uintptr_t>(256, address & (~address + 1)));
}

template <class Setter, class Object, class Attribute, class Value>
void set(Setter setter, Object object, Attribute attribute, const Value& value) {
  check_cublas(setter(object, attribute, &value, sizeof(value)), "cublasLt attribute");
}

// One layout's descriptors and kernel, made once per thread (the bias
// pointer is set at each call: the descriptor is the thread's own).
struct LinearPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool fused = false;  // whether cuBLASLt has a kernel for the layout

  LinearPlan() = default;
  LinearPlan(const LinearPlan&) = delete;
  LinearPlan& operator=(const LinearPlan&) = delete;
  ~LinearPlan() {
    for (cublasLtMatrixLayout_t l : {a, b, d})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

template <class T>
cublasLtMatrixLayout_t matrix_layout(std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                     std::int64_t batch, std::int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  check_cublas(
      cublasLtMatrixLayoutCreate(&l, std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F,
                                 static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols),
                                 std::max<std::int64_t>(1, ld)),
      "cublasLtMatrixLayoutCreate");
  set(cublasLtMatrixLayoutSetAttribute, l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
      static_cast<std::int32_t>(blas_int(batch)));
  set(cublasLtMatrixLayoutSetAttribute, l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  return l;
}

template <class T>
void make_plan(LinearPlan& plan, const LinearLayout<T>& l, const T* a, const T* b, const T* bias,
               const T* c) {
  const GemmLayout<T>& g = l.gemm;
  check_cublas(cublasLtMatmulDescCreate(
                   &plan.desc, std::is_same_v<T, float> ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F,
                   std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F),
               "cublasLtMatmulDescCreate");
  const auto op = [](bool transpose) {
    return static_cast<std::int32_t>(transpose ? CUBLAS_OP_T : CUBLAS_OP_N);
  };
  set(cublasLtMatmulDescSetAttribute, plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, op(g.trans_b));
  set(cublasLtMatmulDescSetAttribute, plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, op(g.trans_a));
  const auto epilogue = static_cast<std::uint32_t>(
      l.activation == UnaryOp::relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS);
  set(cublasLtMatmulDescSetAttribute, plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  set(cublasLtMatmulDescSetAttribute, plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  set(cublasLtMatmulDescSetAttribute, plan.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
      l.stride_bias);
  // Column-major: D is n x m, cuBLASLt's A is op(b) (n x k), its B op(a) (k x m).
  plan.a = g.trans_b ? matrix_layout<T>(g.k, g.n, g.k, g.batch, g.stride_b)
                     : matrix_layout<T>(g.n, g.k, g.n, g.batch, g.stride_b);
  plan.b = g.trans_a ? matrix_layout<T>(g.m, g.k, g.m, g.batch, g.stride_a)
                     : matrix_layout<T>(g.k, g.m, g.k, g.batch, g.stride_a);
  plan.d = matrix_layout<T>(g.n, g.m, g.n, g.batch, g.stride_c);

  // No workspace (the default), so no split-K kernel that reduces in a
  // separate order: the same bits at every call.
  cublasLtMatmulPreference_t preference = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  set(cublasLtMatmulPreferenceSetAttribute, preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
      alignment(b));
  set(cublasLtMatmulPreferenceSetAttribute, preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      alignment(a));
  set(cublasLtMatmulPreferenceSetAttribute, preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      alignment(c));
  set(cublasLtMatmulPreferenceSetAttribute, preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
      alignment(c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      blas_lt(), plan.desc, plan.a, plan.b, plan.d, plan.d, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  plan.fused =
      status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.fused) plan.algo = result.algo;
}

// The calling thread's plan for a layout and the pointers' alignments.
template <class T>
LinearPlan& linear_plan(const LinearLayout<T>& l, const T* a, const T* b, const T* bias,
                        const T* c) {
  const GemmLayout<T>& g = l.gemm;
  using Key = std::array<std::int64_t, 16>;
  const Key key{sizeof(T),    g.trans_a,    g.trans_b,       g.m,
                g.n,          g.k,          g.batch,         g.stride_a,
                g.stride_b,   g.stride_c,   l.stride_bias,   l.activation == UnaryOp::relu,
                alignment(a), alignment(b), alignment(bias), alignment(c)};
  thread_local std::map<Key, std::unique_ptr<LinearPlan>> plans;
  std::unique_ptr<LinearPlan>& plan = plans[key];
  if (!plan) {
    auto made = std::make_unique<LinearPlan>();
    make_plan(*made, l, a, b, bias, c);
    plan = std::move(made);
  }
  return *plan;
}

}  // namespace

template <class T>
void cuda::linear(const LinearLayout<T>& l, const T* a, const T* b, const T* bias, T* c) {
  const GemmLayout<T>& g = l.gemm;
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  LinearPlan& plan = linear_plan(l, a, b, bias, c);
  if (!plan.fused) return detail::linear_in_parts<cuda>(l, a, b, bias, c);
  set(cublasLtMatmulDescSetAttribute, plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const T zero(0);
  // A kernel the heuristic offered may still refuse the call (NOT_SUPPORTED,
  // queueing nothing): the layout then takes the three calls from now on.
  const cublasStatus_t status =
      cublasLtMatmul(blas_lt(), plan.desc, &g.alpha, b, plan.a, a, plan.b, &zero, c, plan.d, c,
                     plan.d, &plan.algo, nullptr, 0, cudaStreamPerThread);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
    plan.fused = false;
    return detail::linear_in_parts<cuda>(l, a, b, bias, c);
  }
  check_cublas(status, "cublasLtMatmul");
  // cuBLASLt's epilogues have ReLU but not tanh or sigmoid.
  if (l.activation != UnaryOp::copy && l.activation != UnaryOp::relu)
    unary(l.activation, c, c, g.c_extent(), T(0));
}

template void cuda::linear<float>(const LinearLayout<float>&, const float*, const float*,
                                  const float*, float*);
template void cuda::linear<double>(const LinearLayout<double>&, const double*, const double*,
                                   const double*, double*);

}  // namespace platipus
