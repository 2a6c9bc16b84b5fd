// platipus::cuda, the CUDA backend: a kernel per elementwise map, reduction,
// strided copy, index op and random fill, and cuBLAS for GEMM, cuDNN for convolution. All work of a
// host thread goes on that thread's default stream (cudaStreamPerThread), so
// the threads of a task-parallel meta-step never wait on each other's work;
// functions that hand data to the host synchronise that stream first.
//
// This header only declares, and g++ compiles it without CUDA. The
// definitions are in the platipus::cuda library: the kernels in
// backend/cuda/kernels.cuh, instantiated for float and double by nvcc in
// src/cuda/kernels.cu, and the host side (memory, copies, cuBLAS) in
// src/cuda/runtime.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "platipus/backend/concept.hpp"
#include "platipus/core/philox.hpp"

namespace platipus {

// How platipus::cuda computes convolutions: cuDNN's grouped convolution, or
// im2col into a column buffer and one cuBLAS GEMM for every group of a call
// (a buffer of C k k values per output position of every image, freed after
// the call); `automatic`, the default, takes the GEMM engine for calls of
// more than 4 groups (tasks with their own filters), cuDNN otherwise: cuDNN
// 9.19 runs a grouped convolution's gradients as kernels per group, which
// costs more than the column buffer's traffic at many groups (measured in
// benchmarks/README.md). The choice depends on the layout alone, so a run
// gives the same numbers every time.
enum class ConvolutionEngine { automatic, cudnn, gemm };

struct cuda {
  static constexpr const char* name = "cuda";
  // One host thread: for the networks of the paper a meta-step is hundreds
  // of microsecond-sized kernels, and host threads launching them concurrently
  // contend for the driver (an H100 took 2.6 ms for a MAML step on one
  // thread, 4.8 ms on 4, 110 ms on 16; benchmarks/README.md). One thread also
  // keeps meta-steps recordable as a CUDA graph.
  static int default_threads() { return 1; }
  // The whole meta-batch on one tape: one stream's work, recordable as a graph.
  static std::int64_t default_task_chunks(std::int64_t /*tasks*/) { return 1; }
  // Three at once: a kernel launch costs more than holding a gradient.
  static constexpr int gradients_per_add = SummandsLayout<float>::capacity;

  // ---- memory ----
  // Device blocks from a per-thread cache: no cudaMalloc per op in steady state.
  static void* allocate(std::size_t bytes);
  static void deallocate(void* p, std::size_t bytes);
  static void copy(void* dst, const void* src, std::size_t bytes);
  static void copy_to_host(void* dst, const void* src, std::size_t bytes);
  static void copy_from_host(void* dst, const void* src, std::size_t bytes);
  // Waits for the work this thread has queued.
  static void synchronize();
  // Device memory the process holds from cudaMalloc (tensors, cuDNN's
  // workspaces, cached blocks, graph pools; not the CUDA context or cuBLAS's
  // own workspace), now and at its peak: the peak compares with PyTorch's
  // torch.cuda.max_memory_reserved.
  static std::size_t allocated_bytes();
  static std::size_t peak_allocated_bytes();

  // ---- elementwise ----
  template <class T>
  static void fill(T* y, std::int64_t n, T value);
  template <class T>
  static void arange(T* y, std::int64_t n);
  template <class T>
  static void unary(UnaryOp op, const T* x, T* y, std::int64_t n, T s);
  template <class T>
  static void binary(BinaryOp op, const T* a, const T* b, T* y, const BroadcastLayout& l);
  template <class T>
  static void axpy(const T* a, const T* b, T* y, std::int64_t n, T s);
  template <class T>
  static void select(const T* mask, const T* a, const T* b, T* y, std::int64_t n);
  template <class T>
  static void foreach_axpy(const PiecesLayout<T>& l, T s);
  template <class T>
  static void foreach_sub_mul(const SubMulLayout<T>& l);
  template <class T>
  static void foreach_mul(const MulLayout<T>& l);
  template <class T>
  static void add_n(const SummandsLayout<T>& l);
  template <class T>
  static void add_n(const SummandsLayout<T>& l, const BiasLayout& bias, T* sums);
  template <class T>
  static void foreach_add_n(const SumsLayout<T>& l);
  template <class T>
  static void foreach_unary(UnaryOp op, const PiecesLayout<T>& l, T s);
  template <class T>
  static void relu_bias_backward(const BiasLayout& l, const T* g, const T* y, T* dx, T* db);
  template <class T>
  static void foreach_expand(const PiecesLayout<T>& l, std::int64_t copies);
  template <class T>
  static void foreach_sum_to(const PiecesLayout<T>& l, std::int64_t copies);
  template <class T>
  static void kl_from_ratios(const KlLayout<T>& l, T* y);
  template <class T>
  static void kl_from_ratios_backward(const KlLayout<T>& l, const T* g, T scale);
  template <class T>
  static void squared_error(const SquaredErrorLayout<T>& l, const T* pred, const T* target,
                            T* difference, T* y);
  template <class T>
  static void cross_entropy(const CrossEntropyLayout& l, const T* logits, const T* targets, T* loss,
                            T* softmax, T* target_rows);
  template <class T>
  static void cross_entropy_backward(const CrossEntropyGradLayout<T>& l, const T* p, const T* y,
                                     const T* loss_grad, const T* p_grad, T* dz);
  template <class T>
  static void adam(const AdamLayout<T>& l, const AdamStep<T>& step, const T* t);

  // ---- reductions ----
  template <class T>
  static void reduce(ReduceOp op, const T* x, T* y, const ReduceLayout& l);

  // ---- layout ----
  template <class T>
  static void strided_copy(const T* src, T* dst, const CopyLayout& l);
  template <class T>
  static void foreach_strided_copy(const CopiesLayout<T>& l);

  // ---- GEMM ----
  template <class T>
  static void gemm(const GemmLayout<T>& g, const T* a, const T* b, T* c);
  // One kernel of 16 x 16 tiles for every product where each is small (one
  // graph node where cuBLAS took one per product), else cuBLAS for each.
  template <class T>
  static void gemms(const GemmsLayout<T>& l);
  // One cuBLASLt call with a bias (and ReLU) epilogue, or the three calls of
  // linear_in_parts where cuBLASLt has no kernel for the layout.
  template <class T>
  static void linear(const LinearLayout<T>& l, const T* a, const T* b, const T* bias, T* c);

  // ---- indexing ----
  template <class T>
  static void gather(const T* src, const std::int64_t* index, T* dst, const IndexLayout& l);
  template <class T>
  static void scatter_add(const T* src, const std::int64_t* index, T* dst, const IndexLayout& l);

  // ---- convolution (src/cuda/convolution.cpp) and pooling ----
  // The engine for every thread's convolutions from now on.
  static void set_convolution_engine(ConvolutionEngine engine);
  static ConvolutionEngine convolution_engine();
  template <class T>
  static void conv2d(const ConvLayout& l, const T* x, const T* w, const T* bias, T* y);
  template <class T>
  static void conv2d_input_grad(const ConvLayout& l, const T* dy, const T* w, T* dx);
  template <class T>
  static void conv2d_weight_grad(const ConvLayout& l, const T* x, const T* dy, T* dw);
  template <class T>
  static void max_pool2d(const PoolLayout& l, const T* x, T* y, std::int64_t* positions);
  template <class T>
  static void max_pool2d_backward(const PoolLayout& l, const T* g, const T* y,
                                  const std::int64_t* positions, T* dx);
  template <class T>
  static void max_pool2d_double_backward(const PoolLayout& l, const T* h, const T* y,
                                         const std::int64_t* positions, T* dg);

  // ---- batch normalisation ----
  template <class T>
  static void batch_norm(const NormLayout& l, const T* x, T epsilon, const T* scale, const T* shift,
                         T* x_hat, T* inv_std, T* y);
  template <class T>
  static void batch_norm_backward(const NormLayout& l, const T* x_hat, const T* inv_std,
                                  const T* scale, const T* g, const T* g_x_hat, const T* g_inv_std,
                                  T* dx, T* d_scale, T* d_shift);
  template <class T>
  static void batch_norm_double_backward(const NormLayout& l, const T* x_hat, const T* inv_std,
                                         const T* scale, const T* g, const T* sum_xg,
                                         const T* sum_g, const T* h, const T* k, const T* u,
                                         T* d_x_hat, T* d_inv_std, T* d_scale, T* d_g);

  // ---- random ----
  template <class T>
  static void fill_uniform(T* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                           std::uint64_t block);
  template <class T>
  static void fill_normal(T* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                          std::uint64_t block);
  template <class T>
  static void fill_normal_rows(T* y, std::int64_t rows, std::int64_t n, std::uint64_t seed,
                               const TaskStreams& streams, std::uint64_t block);
  template <class T>
  static void foreach_fill_normal_rows(const NormalRowsLayout<T>& l, std::uint64_t seed,
                                       const TaskStreams& streams);
};

static_assert(Backend<cuda>);

}  // namespace platipus
