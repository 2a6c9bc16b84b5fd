// CountingBackend<B>: backend B with every kernel it is asked for counted,
// by kind and, for the elementwise and reduction kernels, by op code: how
// many kernels a meta-step launches, measured on a machine without a
// device (issue 38 tracks this count for the CUDA backend, whose cost on
// small networks is launches, not arithmetic). Like a device backend it
// takes a meta-batch as one chunk of tasks on one thread, and like any
// backend other than cpu it has the inner loop record its gradient clip, so
// CountingBackend<cpu> asks for the kernels platipus::cuda launches, in the
// same order, with the CPU's arithmetic.
//
//   using counted = CountingBackend<cpu>;
//   Maml<nn::Sequential, MseLoss, float, counted> maml(...);
//   maml.meta_train_step(batch, gen);  // the first step also makes Adam's moments
//   counted::reset();
//   maml.meta_train_step(batch, gen);
//   counted::calls().total();          // kernels of one meta-step
//
// A kernel counts once however B runs it (cuBLAS may split a product into
// two launches); byte copies within the device count as "copy" (a CUDA
// graph's memcpy nodes, not kernels), copies across the host boundary as
// "copy_to_host" and "copy_from_host"; allocation and synchronisation do
// not count.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "platipus/backend/concept.hpp"

namespace platipus {

// Kernel calls by name ("gemm", "binary add", "unary relu", "reduce sum", ...).
struct KernelCalls {
  std::map<std::string, std::uint64_t, std::less<>> by_name;

  std::uint64_t total() const {
    std::uint64_t n = 0;
    for (const auto& [name, count] : by_name) n += count;
    return n;
  }
  std::uint64_t operator[](std::string_view name) const {
    const auto it = by_name.find(name);
    return it == by_name.end() ? 0 : it->second;
  }
};

template <Backend B>
struct CountingBackend : B {
  static int default_threads() { return 1; }
  static std::int64_t default_task_chunks(std::int64_t /*tasks*/) { return 1; }
  static constexpr int gradients_per_add = SummandsLayout<float>::capacity;

  // The calls since the last reset(), from every thread.
  static KernelCalls calls() {
    const std::lock_guard lock(mutex());
    return counts();
  }
  static void reset() {
    const std::lock_guard lock(mutex());
    counts() = {};
  }

  // Each kernel of the Backend concept (concept.hpp): counted, then B's.
  static void copy(void* dst, const void* src, std::size_t bytes) {
    count("copy");
    B::copy(dst, src, bytes);
  }
  static void copy_to_host(void* dst, const void* src, std::size_t bytes) {
    count("copy_to_host");
    B::copy_to_host(dst, src, bytes);
  }
  static void copy_from_host(void* dst, const void* src, std::size_t bytes) {
    count("copy_from_host");
    B::copy_from_host(dst, src, bytes);
  }
  template <class T>
  static void fill(T* y, std::int64_t n, T value) {
    count("fill");
    B::fill(y, n, value);
  }
  template <class T>
  static void arange(T* y, std::int64_t n) {
    count("arange");
    B::arange(y, n);
  }
  template <class T>
  static void unary(UnaryOp op, const T* x, T* y, std::int64_t n, T s) {
    count("unary", op_name(op));
    B::unary(op, x, y, n, s);
  }
  template <class T>
  static void binary(BinaryOp op, const T* a, const T* b, T* y, const BroadcastLayout& l) {
    count("binary", op_name(op));
    B::binary(op, a, b, y, l);
  }
  template <class T>
  static void axpy(const T* a, const T* b, T* y, std::int64_t n, T s) {
    count("axpy");
    B::axpy(a, b, y, n, s);
  }
  template <class T>
  static void foreach_axpy(const PiecesLayout<T>& l, T s) {
    count("foreach_axpy");
    B::foreach_axpy(l, s);
  }
  template <class T>
  static void foreach_sub_mul(const SubMulLayout<T>& l) {
    count("foreach_sub_mul");
    B::foreach_sub_mul(l);
  }
  template <class T>
  static void foreach_mul(const MulLayout<T>& l) {
    count("foreach_mul");
    B::foreach_mul(l);
  }
  template <class T>
  static void foreach_unary(UnaryOp op, const PiecesLayout<T>& l, T s) {
    count("foreach_unary", op_name(op));
    B::foreach_unary(op, l, s);
  }
  template <class T>
  static void relu_bias_backward(const BiasLayout& l, const T* g, const T* y, T* dx, T* db) {
    count("relu_bias_backward");
    B::relu_bias_backward(l, g, y, dx, db);
  }
  template <class T>
  static void foreach_expand(const PiecesLayout<T>& l, std::int64_t copies) {
    count("foreach_expand");
    B::foreach_expand(l, copies);
  }
  template <class T>
  static void foreach_sum_to(const PiecesLayout<T>& l, std::int64_t copies) {
    count("foreach_sum_to");
    B::foreach_sum_to(l, copies);
  }
  template <class T>
  static void kl_from_ratios(const KlLayout<T>& l, T* y) {
    count("kl_from_ratios");
    B::kl_from_ratios(l, y);
  }
  template <class T>
  static void kl_from_ratios_backward(const KlLayout<T>& l, const T* g, T scale) {
    count("kl_from_ratios_backward");
    B::kl_from_ratios_backward(l, g, scale);
  }
  template <class T>
  static void squared_error(const SquaredErrorLayout<T>& l, const T* pred, const T* target,
                            T* difference, T* y) {
    count("squared_error");
    B::squared_error(l, pred, target, difference, y);
  }
  template <class T>
  static void cross_entropy(const CrossEntropyLayout& l, const T* logits, const T* targets, T* loss,
                            T* softmax, T* target_rows) {
    count("cross_entropy");
    B::cross_entropy(l, logits, targets, loss, softmax, target_rows);
  }
  template <class T>
  static void cross_entropy_backward(const CrossEntropyGradLayout<T>& l, const T* p, const T* y,
                                     const T* loss_grad, const T* p_grad, T* dz) {
    count("cross_entropy_backward");
    B::cross_entropy_backward(l, p, y, loss_grad, p_grad, dz);
  }
  template <class T>
  static void add_n(const SummandsLayout<T>& l) {
    count("add_n");
    B::add_n(l);
  }
  template <class T>
  static void add_n(const SummandsLayout<T>& l, const BiasLayout& bias, T* sums) {
    count("add_n");
    B::add_n(l, bias, sums);
  }
  template <class T>
  static void foreach_add_n(const SumsLayout<T>& l) {
    count("foreach_add_n");
    B::foreach_add_n(l);
  }
  template <class T>
  static void select(const T* mask, const T* a, const T* b, T* y, std::int64_t n) {
    count("select");
    B::select(mask, a, b, y, n);
  }
  template <class T>
  static void adam(const AdamLayout<T>& l, const AdamStep<T>& step, const T* t) {
    count("adam");
    B::adam(l, step, t);
  }
  template <class T>
  static void reduce(ReduceOp op, const T* x, T* y, const ReduceLayout& l) {
    count("reduce", op_name(op));
    B::reduce(op, x, y, l);
  }
  template <class T>
  static void strided_copy(const T* src, T* dst, const CopyLayout& l) {
    count("strided_copy");
    B::strided_copy(src, dst, l);
  }
  template <class T>
  static void foreach_strided_copy(const CopiesLayout<T>& l) {
    count("foreach_strided_copy");
    B::foreach_strided_copy(l);
  }
  template <class T>
  static void gemm(const GemmLayout<T>& g, const T* a, const T* b, T* c) {
    count("gemm");
    B::gemm(g, a, b, c);
  }
  template <class T>
  static void gemms(const GemmsLayout<T>& l) {
    count("gemms");
    B::gemms(l);
  }
  template <class T>
  static void linear(const LinearLayout<T>& l, const T* a, const T* b, const T* bias, T* c) {
    count("linear", l.activation == UnaryOp::copy ? "" : op_name(l.activation));
    B::linear(l, a, b, bias, c);
  }
  template <class T>
  static void gather(const T* src, const std::int64_t* index, T* dst, const IndexLayout& l) {
    count("gather");
    B::gather(src, index, dst, l);
  }
  template <class T>
  static void scatter_add(const T* src, const std::int64_t* index, T* dst, const IndexLayout& l) {
    count("scatter_add");
    B::scatter_add(src, index, dst, l);
  }
  template <class T>
  static void conv2d(const ConvLayout& l, const T* x, const T* w, const T* bias, T* y) {
    count("conv2d");
    B::conv2d(l, x, w, bias, y);
  }
  template <class T>
  static void conv2d_input_grad(const ConvLayout& l, const T* dy, const T* w, T* dx) {
    count("conv2d_input_grad");
    B::conv2d_input_grad(l, dy, w, dx);
  }
  template <class T>
  static void conv2d_weight_grad(const ConvLayout& l, const T* x, const T* dy, T* dw) {
    count("conv2d_weight_grad");
    B::conv2d_weight_grad(l, x, dy, dw);
  }
  template <class T>
  static void max_pool2d(const PoolLayout& l, const T* x, T* y, std::int64_t* positions) {
    count("max_pool2d");
    B::max_pool2d(l, x, y, positions);
  }
  template <class T>
  static void max_pool2d_backward(const PoolLayout& l, const T* g, const T* y,
                                  const std::int64_t* positions, T* dx) {
    count("max_pool2d_backward");
    B::max_pool2d_backward(l, g, y, positions, dx);
  }
  template <class T>
  static void max_pool2d_double_backward(const PoolLayout& l, const T* h, const T* y,
                                         const std::int64_t* positions, T* dg) {
    count("max_pool2d_double_backward");
    B::max_pool2d_double_backward(l, h, y, positions, dg);
  }
  template <class T>
  static void batch_norm(const NormLayout& l, const T* x, T epsilon, const T* scale, const T* shift,
                         T* x_hat, T* inv_std, T* y) {
    count("batch_norm");
    B::batch_norm(l, x, epsilon, scale, shift, x_hat, inv_std, y);
  }
  template <class T>
  static void batch_norm_backward(const NormLayout& l, const T* x_hat, const T* inv_std,
                                  const T* scale, const T* g, const T* g_x_hat, const T* g_inv_std,
                                  T* dx, T* d_scale, T* d_shift) {
    count("batch_norm_backward");
    B::batch_norm_backward(l, x_hat, inv_std, scale, g, g_x_hat, g_inv_std, dx, d_scale, d_shift);
  }
  template <class T>
  static void batch_norm_double_backward(const NormLayout& l, const T* x_hat, const T* inv_std,
                                         const T* scale, const T* g, const T* sum_xg,
                                         const T* sum_g, const T* h, const T* k, const T* u,
                                         T* d_x_hat, T* d_inv_std, T* d_scale, T* d_g) {
    count("batch_norm_double_backward");
    B::batch_norm_double_backward(l, x_hat, inv_std, scale, g, sum_xg, sum_g, h, k, u, d_x_hat,
                                  d_inv_std, d_scale, d_g);
  }
  template <class T>
  static void fill_uniform(T* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                           std::uint64_t block) {
    count("fill_uniform");
    B::fill_uniform(y, n, seed, stream, block);
  }
  template <class T>
  static void fill_normal(T* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                          std::uint64_t block) {
    count("fill_normal");
    B::fill_normal(y, n, seed, stream, block);
  }
  template <class T>
  static void fill_normal_rows(T* y, std::int64_t rows, std::int64_t n, std::uint64_t seed,
                               const TaskStreams& streams, std::uint64_t block) {
    count("fill_normal_rows");
    B::fill_normal_rows(y, rows, n, seed, streams, block);
  }
  template <class T>
  static void foreach_fill_normal_rows(const NormalRowsLayout<T>& l, std::uint64_t seed,
                                       const TaskStreams& streams) {
    count("foreach_fill_normal_rows");
    B::foreach_fill_normal_rows(l, seed, streams);
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static KernelCalls& counts() {
    static KernelCalls c;
    return c;
  }
  static void count(std::string_view kind, std::string_view op = {}) {
    std::string name(kind);
    if (!op.empty()) (name += ' ') += op;
    const std::lock_guard lock(mutex());
    ++counts().by_name[name];
  }
};

}  // namespace platipus
