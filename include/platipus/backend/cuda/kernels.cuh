// The CUDA backend's kernels and the platipus::cuda members that launch
// them. nvcc only: src/cuda/kernels.cu instantiates them for float and
// double. Every kernel is a grid-stride loop on the calling thread's stream
// (cudaStreamPerThread), and every formula comes from op_codes.hpp's
// functors or core/philox.hpp, which the CPU backend uses too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <cuda_runtime.h>

#include "platipus/backend/cuda/cuda.hpp"
#include "platipus/backend/cuda/graph.hpp"
#include "platipus/backend/cuda/status.hpp"
#include "platipus/backend/layouts.hpp"
#include "platipus/core/philox.hpp"

namespace platipus::cuda_kernels {

constexpr int block_threads = 256;
constexpr int warp_threads = 32;
// A block that one output fills alone (a long reduction's, a batch-norm
// group's): large, because there may be few such outputs (conv4 on 4 tasks
// x 32 filters: 128 sums of half a million elements, one block per SM), and
// each SM then has one block's loads in flight.
constexpr int wide_block_threads = 1024;
// Several waves on an H100 or H200; larger inputs loop in the kernels.
constexpr std::int64_t max_blocks = 4096;

// Runs kernel(args...) with at least `threads` threads (up to the cap) on
// the calling thread's stream.
template <class... Params, class... Args>
void launch(const char* name, std::int64_t threads, void (*kernel)(Params...),
            const Args&... args) {
  if (threads <= 0) return;
  const std::int64_t blocks = std::min((threads + block_threads - 1) / block_threads, max_blocks);
  kernel<<<static_cast<unsigned>(blocks), block_threads, 0, cudaStreamPerThread>>>(args...);
  detail::check_cuda(cudaGetLastError(), name);
}

__device__ inline std::int64_t thread_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t thread_count() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

template <class I = std::int64_t>
struct Offsets {
  I first = 0, second = 0;
};

// Element i's row-major multi-index over `dims`, dotted with two stride
// vectors. The outermost index needs no division: it is what remains. I is
// the index type: 32-bit arithmetic where every offset fits (a 64-bit
// division costs several times a 32-bit one).
template <class I = std::int64_t>
__device__ inline Offsets<I> offsets(I i, int rank, const Strides& dims, const Strides& first,
                                     const Strides& second) {
  Offsets<I> o;
  for (int d = rank - 1; d > 0; --d) {
    const I extent = static_cast<I>(dims[d]);
    const I k = i % extent;
    i /= extent;
    o.first += k * static_cast<I>(first[d]);
    o.second += k * static_cast<I>(second[d]);
  }
  if (rank > 0) {
    o.first += i * static_cast<I>(first[0]);
    o.second += i * static_cast<I>(second[0]);
  }
  return o;
}

// The largest count or offset a kernel indexes with 32-bit integers: their
// range less the longest stride of a loop over threads, so that a loop's
// last step past the end does not overflow.
constexpr std::int64_t int32_limit =
    std::numeric_limits<std::int32_t>::max() - max_blocks * wide_block_threads;

// Whether n elements and every offset a layout reaches fit 32-bit indices.
inline bool fits_int32(std::int64_t n, int rank, const Strides& dims, const Strides& first,
                       const Strides& second) {
  std::int64_t a = 0, b = 0;
  for (int d = 0; d < rank; ++d) {
    a += (dims[d] - 1) * first[d];
    b += (dims[d] - 1) * second[d];
  }
  return n <= int32_limit && a <= int32_limit && b <= int32_limit;
}

template <class T>
__global__ void fill_kernel(T* y, std::int64_t n, T value) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) y[i] = value;
}

template <class T>
__global__ void arange_kernel(T* y, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) y[i] = static_cast<T>(i);
}

template <class T, class F>
__global__ void unary_kernel(F f, const T* x, T* y, std::int64_t n, T s) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) y[i] = f(x[i], s);
}

template <class T, class F>
__global__ void binary_kernel(F f, const T* a, const T* b, T* y, BroadcastLayout l,
                              std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    const Offsets<> o = offsets(i, l.rank, l.dims, l.stride_a, l.stride_b);
    y[i] = f(a[o.first], b[o.second]);
  }
}

template <class T>
__global__ void axpy_kernel(const T* a, const T* b, T* y, std::int64_t n, T s) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) y[i] = a[i] + s * b[i];
}

// add_n's summand k at y's element i.
template <class T>
__device__ T summand(const SummandsLayout<T>& l, std::size_t k, std::int64_t i) {
  return l.x[k][l.repetition[k].source(i)];
}

// add_n's sum at y's element i, in order from summand 0.
template <class T>
__device__ T add_summands(const SummandsLayout<T>& l, std::int64_t i) {
  T s = l.negate[0] ? -summand(l, 0, i) : summand(l, 0, i);
  for (std::size_t k = 1; k < static_cast<std::size_t>(l.count); ++k)
    s = l.negate[k] ? s - summand(l, k, i) : s + summand(l, k, i);
  return s;
}

// add_n's element i, routed where l.route is set or scaled where l.scale is
// not 1, stored and returned.
template <class T>
__device__ T add_n_element(const SummandsLayout<T>& l, std::int64_t i) {
  const T sum = add_summands(l, i);
  return l.y[i] = l.route           ? functors::relu_backward{}(sum, l.route[i])
                  : l.scale != T(1) ? functors::scale{}(sum, l.scale)
                                    : sum;
}

template <class T>
__global__ void add_n_kernel(SummandsLayout<T> l) {
  for (std::int64_t i = thread_index(); i < l.n; i += thread_count()) add_n_element(l, i);
}

// Element o of a bias's gradient (BiasLayout: batch entry o / n, column
// o % n): element(at), at the flat index of a [batch, rows, n] block, summed
// down its column from +0, rows in order (the CPU's order).
template <class T, class Element>
__device__ T column_sum(const BiasLayout& l, std::int64_t o, Element element) {
  const std::int64_t k = o / l.n, i = o % l.n;
  T sum = T(0);
  for (std::int64_t r = 0; r < l.rows; ++r) sum = sum + element((k * l.rows + r) * l.n + i);
  return sum;
}

// add_n and y's rows summed: a thread per bias element, down its column of
// rows (as relu_bias_backward_kernel).
template <class T>
__global__ void add_n_row_sums_kernel(SummandsLayout<T> l, BiasLayout bias, T* sums) {
  for (std::int64_t o = thread_index(); o < bias.batch * bias.n; o += thread_count())
    sums[o] = column_sum<T>(bias, o, [&](std::int64_t at) { return add_n_element(l, at); });
}

// blockIdx.y picks the sum, as in the foreach kernels. The layout is passed
// by value: it must fit the 4 KiB of a kernel's parameters.
template <class T>
__global__ void foreach_add_n_kernel(SumsLayout<T> l) {
  const SummandsLayout<T>& s = l.sum[blockIdx.y];
  for (std::int64_t i = thread_index(); i < s.n; i += thread_count()) s.y[i] = add_summands(s, i);
}
static_assert(sizeof(SumsLayout<double>) <= 4096);

// Foreach kernels: blockIdx.y picks the piece, a grid-stride loop along x
// covers its elements.
template <class T>
__global__ void foreach_axpy_kernel(PiecesLayout<T> l, T s) {
  const int p = static_cast<int>(blockIdx.y);
  const T *a = l.a[p], *b = l.b[p];
  T* y = l.y[p];
  for (std::int64_t i = thread_index(); i < l.n[p]; i += thread_count()) y[i] = a[i] + s * b[i];
}

// The product rounded alone (no contraction into a -+ r g), as mul and sub.
template <class T>
__device__ T multiplied_rn(T a, T b) {
  if constexpr (std::is_same_v<T, float>)
    return __fmul_rn(a, b);
  else
    return __dmul_rn(a, b);
}

template <class T>
__global__ void foreach_sub_mul_kernel(SubMulLayout<T> l) {
  const int p = static_cast<int>(blockIdx.y);
  const T *a = l.a[p], *r = l.r[p], *g = l.g[p];
  T* y = l.y[p];
  const std::int64_t rn = l.rn[p];
  for (std::int64_t i = thread_index(); i < l.n[p]; i += thread_count()) {
    const T product = multiplied_rn(r[i % rn], g[i]);
    y[i] = l.add ? a[i] + product : a[i] - product;
  }
}

template <class T>
__global__ void foreach_mul_kernel(MulLayout<T> l) {
  const int p = static_cast<int>(blockIdx.y);
  const T *r = l.r[p], *g = l.g[p];
  T* y = l.y[p];
  const std::int64_t rn = l.rn[p];
  const bool negate = l.negate[p];
  for (std::int64_t i = thread_index(); i < l.n[p]; i += thread_count()) {
    const T product = r[i % rn] * g[i];
    y[i] = negate ? -product : product;
  }
}

template <class T, class F>
__global__ void foreach_unary_kernel(F f, PiecesLayout<T> l, T s) {
  const int p = static_cast<int>(blockIdx.y);
  const T* x = l.a[p];
  T* y = l.y[p];
  for (std::int64_t i = thread_index(); i < l.n[p]; i += thread_count()) y[i] = f(x[i], s);
}

// A thread per bias gradient element, down its column of rows.
template <class T>
__global__ void relu_bias_backward_kernel(BiasLayout l, const T* g, const T* y, T* dx, T* db) {
  for (std::int64_t o = thread_index(); o < l.batch * l.n; o += thread_count())
    db[o] =
        column_sum<T>(l, o, [=](std::int64_t at) { return dx[at] = y[at] > T(0) ? g[at] : T(0); });
}

template <class T>
__global__ void foreach_expand_kernel(PiecesLayout<T> l, std::int64_t copies) {
  const int p = static_cast<int>(blockIdx.y);
  const T* x = l.a[p];
  T* y = l.y[p];
  const std::int64_t n = l.n[p];
  for (std::int64_t i = thread_index(); i < n * copies; i += thread_count()) y[i] = x[i % n];
}

// Each sum in order from 0, as the CPU's (and reduce's) leading-axis sums.
template <class T>
__global__ void foreach_sum_to_kernel(PiecesLayout<T> l, std::int64_t copies) {
  const int p = static_cast<int>(blockIdx.y);
  const T* x = l.a[p];
  T* y = l.y[p];
  const std::int64_t n = l.n[p];
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    T sum = T(0);
    for (std::int64_t c = 0; c < copies; ++c) sum = sum + x[c * n + i];
    y[i] = sum;
  }
}

// Launches a foreach kernel over a layout of pieces (PiecesLayout,
// AdamLayout, SumsLayout): a row of blocks per piece, as many as the largest
// piece needs (up to the cap).
template <class Layout, class... Params, class... Args>
void launch_foreach(const char* name, const Layout& l, void (*kernel)(Params...),
                    const Args&... args) {
  if (l.count == 0) return;
  const std::int64_t longest = longest_piece(l);
  const std::int64_t blocks =
      std::clamp<std::int64_t>((longest + block_threads - 1) / block_threads, 1, max_blocks);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(l.count));
  kernel<<<grid, block_threads, 0, cudaStreamPerThread>>>(args...);
  detail::check_cuda(cudaGetLastError(), name);
}

template <class T>
__global__ void adam_kernel(AdamLayout<T> l, AdamStep<T> step, const T* t) {
  const int k = static_cast<int>(blockIdx.y);
  const auto correction = step.at(*t);
  T *p = l.p[k], *m = l.m[k], *v = l.v[k];
  const T* g = l.g[k];
  for (std::int64_t i = thread_index(); i < l.n[k]; i += thread_count())
    step.apply(correction, p[i], m[i], v[i], g[i]);
}

template <class T>
__global__ void select_kernel(const T* mask, const T* a, const T* b, T* y, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count())
    y[i] = mask[i] != T(0) ? a[i] : b[i];
}

// A reduction split into kept axes (one output element per multi-index)
// and reduced axes, with their strides in the input.
struct ReducePlan {
  int kept_rank = 0, reduced_rank = 0;
  Strides kept_dims{}, kept_in{}, kept_out{}, reduced_dims{}, reduced_in{};
  std::int64_t outputs = 1, length = 1;  // output elements; inputs combined into each
};

inline ReducePlan plan_reduce(const ReduceLayout& l) {
  const Strides& in = l.stride_in;
  ReducePlan p;
  for (int d = 0; d < l.rank; ++d) {
    if (l.stride_out[d] != 0) {
      const int k = p.kept_rank++;
      p.kept_dims[k] = l.dims[d];
      p.kept_in[k] = in[d];
      p.kept_out[k] = l.stride_out[d];
      p.outputs *= l.dims[d];
    } else {
      const int k = p.reduced_rank++;
      p.reduced_dims[k] = l.dims[d];
      p.reduced_in[k] = in[d];
      p.length *= l.dims[d];
    }
  }
  return p;
}

// Combines `value` over the Group threads that share an output (a warp, or
// a whole block); the result is valid in the group's first thread. The
// order is fixed, so a reduction gives the same bits on every run.
template <int Group, class T, class Combine>
__device__ T group_combine(T value, Combine combine) {
  for (int offset = warp_threads / 2; offset > 0; offset /= 2)
    value = combine(__shfl_down_sync(0xffffffffu, value, offset), value);
  if constexpr (Group > warp_threads) {
    __shared__ T warp_values[Group / warp_threads];
    const int warp = static_cast<int>(threadIdx.x) / warp_threads;
    if (threadIdx.x % warp_threads == 0) warp_values[warp] = value;
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 1; w < Group / warp_threads; ++w) value = combine(warp_values[w], value);
    __syncthreads();  // warp_values is reused by the block's next output
  }
  return value;
}

// out[o] = combine over the inputs of output o, times `factor` (1 but for a
// mean: exact), by a group of Group threads per output: a warp, or a whole
// wide block. I as in offsets(). `combine(value, acc)` is called in the CPU
// backend's order.
template <int Group, class I, class T, class Combine>
__global__ void __launch_bounds__(Group > block_threads ? Group : block_threads)
    reduce_kernel(Combine combine, T identity, T factor, const T* x, T* y, ReducePlan p) {
  constexpr int groups_per_block = (Group > block_threads ? Group : block_threads) / Group;
  const int member = static_cast<int>(threadIdx.x) % Group;
  const I outputs = static_cast<I>(p.outputs), length = static_cast<I>(p.length);
  const I stride = static_cast<I>(gridDim.x) * groups_per_block;
  for (I o = static_cast<I>(blockIdx.x) * groups_per_block + static_cast<I>(threadIdx.x) / Group;
       o < outputs; o += stride) {
    const Offsets<I> base = offsets<I>(o, p.kept_rank, p.kept_dims, p.kept_in, p.kept_out);
    T acc = identity;
    for (I j = member; j < length; j += Group)
      acc = combine(
          x[base.first +
            offsets<I>(j, p.reduced_rank, p.reduced_dims, p.reduced_in, p.reduced_in).first],
          acc);
    acc = group_combine<Group>(acc, combine);
    if (member == 0) y[base.second] = acc * factor;
  }
}

// PLATIPUS's KL over pieces: a block per row, each piece's sum combined by
// the block (group_combine's fixed order) and added to the row's KL by its
// first thread, in piece order. The rows are a meta-batch's tasks, few, and
// a block's threads stride over a piece's elements; where a row is one
// element the sum is that element, as on the CPU.
template <class T>
__global__ void kl_from_ratios_kernel(KlLayout<T> l, T* y) {
  for (std::int64_t t = blockIdx.x; t < l.rows; t += gridDim.x) {
    T kl = l.accumulate ? y[t] : T(0);
    for (int i = 0; i < l.count; ++i) {
      const std::int64_t n = l.n[i];
      const T *r = l.r[i], *s = l.s[i] + t * n, *w = l.w[i];
      T sum = T(0);
      for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
        sum = sum + ((r[j] + multiplied_rn(s[j], w[j])) + T(-1));
      sum = group_combine<block_threads>(sum, functors::add{});
      if (threadIdx.x == 0) {
        const T term = sum * T(0.5);
        kl = i == 0 && !l.accumulate ? term : kl + term;
      }
    }
    if (threadIdx.x == 0) y[t] = kl;
  }
}
static_assert(sizeof(KlLayout<double>) <= 4096);

// A thread per element of a piece, down the rows in order: the CPU's bits.
template <class T>
__global__ void kl_from_ratios_backward_kernel(KlLayout<T> l, const T* g, T scale) {
  const int p = static_cast<int>(blockIdx.y);
  const std::int64_t n = l.n[p];
  const T *s = l.s[p], *w = l.w[p];
  T *dr = l.dr[p], *ds = l.ds[p], *dw = l.dw[p];
  for (std::int64_t j = thread_index(); j < n; j += thread_count()) {
    T r_sum = T(0), w_sum = T(0);
    for (std::int64_t t = 0; t < l.rows; ++t) {
      const T h = g ? g[t] * scale : scale;
      if (ds) ds[t * n + j] = h * w[j];
      r_sum = r_sum + h;
      w_sum = w_sum + multiplied_rn(h, s[t * n + j]);
    }
    if (dr) dr[j] = r_sum;
    if (dw) dw[j] = w_sum;
  }
}

// A squared-error loss: a warp per row, its points' q combined by the warp
// (group_combine's fixed order); a row of one point is its q, as on the CPU.
template <class T>
__global__ void squared_error_kernel(SquaredErrorLayout<T> l, const T* pred, const T* target,
                                     T* difference, T* y) {
  const int lane = static_cast<int>(threadIdx.x) % warp_threads;
  const std::int64_t warps = thread_count() / warp_threads;
  for (std::int64_t row = thread_index() / warp_threads; row < l.rows; row += warps) {
    T sum = T(0), q = T(0);
    for (std::int64_t j = lane; j < l.points; j += warp_threads) {
      const std::int64_t i = row * l.points + j;
      const T d = pred[i] - target[i];
      difference[i] = d;
      q = multiplied_rn(d, d);
      if (l.gaussian) q = multiplied_rn((q / l.variance + l.log_variance) + l.log_two_pi, T(0.5));
      sum = sum + q;
    }
    sum = group_combine<warp_threads>(sum, functors::add{});
    if (lane == 0)
      y[row] = l.points == 1 ? q : l.mean ? sum * (T(1) / static_cast<T>(l.points)) : sum;
  }
}

// A softmax cross-entropy: a warp per row, its maximum, sum of exponentials
// and target logit combined by the warp (group_combine's fixed order), the
// exponentials kept in the softmax's row until the sum divides them.
template <class T>
__global__ void cross_entropy_kernel(CrossEntropyLayout l, const T* z, const T* targets, T* loss,
                                     T* p, T* target_rows) {
  constexpr unsigned all_lanes = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x) % warp_threads;
  const std::int64_t warps = thread_count() / warp_threads, k = l.classes;
  for (std::int64_t row = thread_index() / warp_threads; row < l.rows; row += warps) {
    const T* zr = z + row * k;
    T* pr = p + row * k;
    T max = -std::numeric_limits<T>::infinity();
    for (std::int64_t j = lane; j < k; j += warp_threads) max = functors::max{}(zr[j], max);
    max = __shfl_sync(all_lanes, group_combine<warp_threads>(max, functors::max{}), 0);
    T sum = T(0), target_logit = T(0);
    for (std::int64_t j = lane; j < k; j += warp_threads) {
      const T e = functors::exp{}(zr[j] - max, T(0));
      pr[j] = e;
      sum = sum + e;
      T y;
      if (l.class_indices) {
        y = functors::equal{}(targets[row], static_cast<T>(j));
        target_rows[row * k + j] = y;
      } else {
        y = targets[row * k + j];
      }
      target_logit = target_logit + multiplied_rn(y, zr[j]);
    }
    sum = __shfl_sync(all_lanes, group_combine<warp_threads>(sum, functors::add{}), 0);
    target_logit = group_combine<warp_threads>(target_logit, functors::add{});
    if (lane == 0) loss[row] = (functors::log{}(sum, T(0)) + max) - target_logit;
    for (std::int64_t j = lane; j < k; j += warp_threads) pr[j] = pr[j] / sum;
  }
}

// Its gradient in the logits: a warp per row, <p, q> combined by the warp.
template <class T>
__global__ void cross_entropy_backward_kernel(CrossEntropyGradLayout<T> l, const T* p, const T* y,
                                              const T* loss_grad, const T* p_grad, T* dz) {
  constexpr unsigned all_lanes = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x) % warp_threads;
  const std::int64_t warps = thread_count() / warp_threads, k = l.classes;
  for (std::int64_t row = thread_index() / warp_threads; row < l.rows; row += warps) {
    const T *pr = p + row * k, *yr = y + row * k;
    const T g = loss_grad ? loss_grad[l.repetition.source(row)] : l.uniform;
    T sum = T(0);
    if (p_grad && k == 1) {  // no sum (the CPU's: 0 + -0 would be +0)
      sum = multiplied_rn(pr[0], p_grad[row]);
    } else if (p_grad) {
      for (std::int64_t j = lane; j < k; j += warp_threads)
        sum = sum + multiplied_rn(pr[j], p_grad[row * k + j]);
      sum = __shfl_sync(all_lanes, group_combine<warp_threads>(sum, functors::add{}), 0);
    }
    for (std::int64_t j = lane; j < k; j += warp_threads) {
      T d = l.from_loss ? multiplied_rn(pr[j] - yr[j], g) : T(0);
      if (p_grad) {
        const T jacobian_product =
            multiplied_rn(pr[j], p_grad[row * k + j]) - multiplied_rn(pr[j], sum);
        d = l.from_loss ? d + jacobian_product : jacobian_product;
      }
      dz[row * k + j] = d;
    }
  }
}

template <class T, class I>
__global__ void copy_kernel(const T* src, T* dst, CopyLayout l, I n) {
  for (I i = static_cast<I>(thread_index()); i < n; i += static_cast<I>(thread_count())) {
    const Offsets<I> o = offsets<I>(i, l.rank, l.dims, l.stride_src, l.stride_dst);
    dst[o.second] = src[o.first];
  }
}

// blockIdx.y picks the copy, as in the foreach kernels; a null source writes
// zeros.
template <class T, class I>
__global__ void foreach_copy_kernel(CopiesLayout<T> l) {
  const int k = static_cast<int>(blockIdx.y);
  const T* src = l.src[k];
  T* dst = l.dst[k];
  const CopyLayout& c = l.copy[k];
  const I n = static_cast<I>(l.n[k]);
  for (I i = static_cast<I>(thread_index()); i < n; i += static_cast<I>(thread_count())) {
    const Offsets<I> o = offsets<I>(i, c.rank, c.dims, c.stride_src, c.stride_dst);
    dst[o.second] = src ? src[o.first] : T(0);
  }
}

// GemmsLayout's products by 16 x 16 tiles of C, a tile a block: blocks
// first[p] to first[p + 1] - 1 are product p's, batch entry by batch entry,
// each tile's rows and columns in row-major order. op(A) and op(B) pass
// through shared memory a 16-wide slab of k at a time.
constexpr int gemm_tile = 16;

template <class T>
struct GemmTiles {
  std::int64_t first[GemmsLayout<T>::capacity + 1] = {};
};

// Blocks after the products' tiles sum the rows of l.rows, a thread per
// bias element down its column from row 0 (the CPU's order).
template <class T>
__global__ void gemms_kernel(GemmsLayout<T> l, GemmTiles<T> tiles) {
  __shared__ T op_a[gemm_tile][gemm_tile + 1], op_b[gemm_tile][gemm_tile + 1];
  const std::int64_t block = blockIdx.x;
  if (block >= tiles.first[l.count]) {
    const std::int64_t o = (block - tiles.first[l.count]) * gemm_tile * gemm_tile +
                           threadIdx.y * gemm_tile + threadIdx.x;
    if (o < l.bias.batch * l.bias.n)
      l.sums[o] = column_sum<T>(l.bias, o, [rows = l.rows](std::int64_t at) { return rows[at]; });
    return;
  }
  int p = 0;
  while (p + 1 < l.count && block >= tiles.first[p + 1]) ++p;
  const GemmLayout<T>& g = l.gemm[p];
  const std::int64_t columns = (g.n + gemm_tile - 1) / gemm_tile,
                     rows = (g.m + gemm_tile - 1) / gemm_tile;
  const std::int64_t t = block - tiles.first[p], entry = t / (rows * columns);
  const std::int64_t row = (t / columns) % rows * gemm_tile + threadIdx.y,
                     column = t % columns * gemm_tile + threadIdx.x;
  const T* a = l.a[p] + entry * g.stride_a;
  const T* b = l.b[p] + entry * g.stride_b;
  T sum = T(0);
  for (std::int64_t k0 = 0; k0 < g.k; k0 += gemm_tile) {
    const std::int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    op_a[threadIdx.y][threadIdx.x] =
        row < g.m && ka < g.k ? (g.trans_a ? a[ka * g.m + row] : a[row * g.k + ka]) : T(0);
    op_b[threadIdx.y][threadIdx.x] =
        kb < g.k && column < g.n ? (g.trans_b ? b[column * g.k + kb] : b[kb * g.n + column]) : T(0);
    __syncthreads();
    for (int k = 0; k < gemm_tile; ++k) sum += op_a[threadIdx.y][k] * op_b[k][threadIdx.x];
    __syncthreads();
  }
  if (row < g.m && column < g.n) {  // beta 0 never reads C (it may be unset)
    T& c = l.c[p][entry * g.stride_c + row * g.n + column];
    c = g.beta == T(0) ? g.alpha * sum : g.alpha * sum + g.beta * c;
  }
}

// The [outer, axis, inner] position in the larger tensor of element i of the
// [outer, count, inner] one.
__device__ inline std::int64_t indexed_position(std::int64_t i, const std::int64_t* index,
                                                const IndexLayout& l) {
  const std::int64_t inner = i % l.inner, row = i / l.inner;
  return ((row / l.count) * l.source_axis + index[row % l.count]) * l.inner + inner;
}

template <class T>
__global__ void gather_kernel(const T* src, const std::int64_t* index, T* dst, IndexLayout l,
                              std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count())
    dst[i] = src[indexed_position(i, index, l)];
}

// Repeated indices add into one element, hence the atomics.
template <class T>
__global__ void scatter_add_kernel(const T* src, const std::int64_t* index, T* dst, IndexLayout l,
                                   std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count())
    atomicAdd(dst + indexed_position(i, index, l), src[i]);
}

// One thread per output: the window's maximum and its flat input position
// (the first in row-major order among equal ones, as on the CPU).
template <class T>
__global__ void max_pool_kernel(const T* x, T* y, std::int64_t* positions, PoolLayout l,
                                std::int64_t n) {
  for (std::int64_t out = thread_index(); out < n; out += thread_count()) {
    const std::int64_t j = out % l.wo, i = (out / l.wo) % l.ho, plane = out / (l.wo * l.ho);
    std::int64_t best = (plane * l.h + i * l.stride) * l.w + j * l.stride;
    for (std::int64_t a = 0; a < l.kernel; ++a)
      for (std::int64_t b = 0; b < l.kernel; ++b) {
        const std::int64_t at = (plane * l.h + i * l.stride + a) * l.w + j * l.stride + b;
        if (x[at] > x[best]) best = at;
      }
    y[out] = l.relu ? functors::relu{}(x[best], T(0)) : x[best];
    positions[out] = best;
  }
}

// The gradient an output passes back: relu_backward's where the pooling
// ended in a ReLU.
template <class T>
__device__ T pooled_gradient(const PoolLayout& l, const T* g, const T* y, std::int64_t out) {
  return l.relu ? functors::relu_backward{}(g[out], y[out]) : g[out];
}

// Windows that do not overlap (stride >= kernel): one thread per input
// element, which is at most one window's maximum, written once (0 + the
// gradient, as the CPU's scatter onto zeros: -0 becomes +0), no fill and
// no atomics.
template <class T>
__global__ void max_pool_backward_kernel(PoolLayout l, const T* g, const T* y,
                                         const std::int64_t* positions, T* dx, std::int64_t n) {
  for (std::int64_t at = thread_index(); at < n; at += thread_count()) {
    const std::int64_t col = at % l.w, row = (at / l.w) % l.h, plane = at / (l.w * l.h);
    const std::int64_t i = row / l.stride, j = col / l.stride;
    T v = T(0);
    if (i < l.ho && j < l.wo && row - i * l.stride < l.kernel && col - j * l.stride < l.kernel) {
      const std::int64_t out = (plane * l.ho + i) * l.wo + j;
      if (positions[out] == at) v = T(0) + pooled_gradient(l, g, y, out);
    }
    dx[at] = v;
  }
}

// Each output's gradient from dx's at its maximum (masked where relu).
template <class T>
__global__ void max_pool_double_backward_kernel(PoolLayout l, const T* h, const T* y,
                                                const std::int64_t* positions, T* dg,
                                                std::int64_t n) {
  for (std::int64_t out = thread_index(); out < n; out += thread_count())
    dg[out] = l.relu ? functors::relu_backward{}(h[positions[out]], y[out]) : h[positions[out]];
}

// Overlapping windows: each output's gradient added at its maximum onto
// zeros (as scatter_add_kernel).
template <class T>
__global__ void max_pool_scatter_kernel(PoolLayout l, const T* g, const T* y,
                                        const std::int64_t* positions, T* dx, std::int64_t n) {
  for (std::int64_t out = thread_index(); out < n; out += thread_count())
    atomicAdd(dx + positions[out], pooled_gradient(l, g, y, out));
}

// Batch normalisation (NormLayout): a wide block per group, looping over
// groups. Each thread sums its strided share in double, the block combines
// in a fixed order (group_combine), so a run gives the same bits every time.

// Element j of the group (o, ch): its n * inner elements lie in n runs of
// `inner`, one per image, `c * inner` apart. I as in offsets().
template <class I>
struct NormGroup {
  I base, inner, image_stride;
  __device__ NormGroup(const NormLayout& l, std::int64_t group)
      : base(static_cast<I>(((group / l.c) * l.n * l.c + group % l.c) * l.inner)),
        inner(static_cast<I>(l.inner)),
        image_stride(static_cast<I>(l.c * l.inner)) {}
  __device__ I operator[](I j) const { return base + (j / inner) * image_stride + j % inner; }
};

// The block's total of `value`, in every thread.
__device__ inline double block_total(double value) {
  __shared__ double total;
  value = group_combine<wide_block_threads>(value, functors::add{});
  if (threadIdx.x == 0) total = value;
  __syncthreads();
  const double result = total;
  __syncthreads();  // `total` is reused by the next call
  return result;
}

template <class T, class I>
__global__ void __launch_bounds__(wide_block_threads)
    batch_norm_kernel(NormLayout l, const T* x, T epsilon, const T* scale, const T* shift, T* x_hat,
                      T* inv_std, T* y) {
  const I m = static_cast<I>(l.count());
  for (std::int64_t group = blockIdx.x; group < l.groups(); group += gridDim.x) {
    const NormGroup<I> at(l, group);
    double sum = 0;
    for (I j = threadIdx.x; j < m; j += blockDim.x) sum += x[at[j]];
    const T mean = static_cast<T>(block_total(sum) / static_cast<double>(m));
    double squares = 0;
    for (I j = threadIdx.x; j < m; j += blockDim.x) {
      const T d = x[at[j]] - mean;
      squares += d * d;
    }
    const T r = static_cast<T>(
        1.0 / sqrt(block_total(squares) / static_cast<double>(m) + static_cast<double>(epsilon)));
    if (threadIdx.x == 0) inv_std[group] = r;
    const T s = scale[group], b = shift[group];
    for (I j = threadIdx.x; j < m; j += blockDim.x) {
      const I e = at[j];
      const T normalised = (x[e] - mean) * r;
      x_hat[e] = normalised;
      y[e] = normalised * s + b;
    }
  }
}

// With g_x_hat and g_inv_std (or null), batch_norm's whole gradient
// (cpu_normalization::backward).
template <class T, class I>
__global__ void __launch_bounds__(wide_block_threads)
    batch_norm_backward_kernel(NormLayout l, const T* x_hat, const T* inv_std, const T* scale,
                               const T* g, const T* g_x_hat, const T* g_inv_std, T* dx, T* d_scale,
                               T* d_shift) {
  const I m = static_cast<I>(l.count());
  for (std::int64_t group = blockIdx.x; group < l.groups(); group += gridDim.x) {
    const NormGroup<I> at(l, group);
    double sum_g = 0, sum_xg = 0, sum_h = 0, sum_xh = 0;
    for (I j = threadIdx.x; j < m; j += blockDim.x) {
      const I e = at[j];
      sum_g += g[e];
      sum_xg += static_cast<double>(x_hat[e]) * g[e];
      if (g_x_hat) {
        sum_h += g_x_hat[e];
        sum_xh += static_cast<double>(x_hat[e]) * g_x_hat[e];
      }
    }
    const double total_g = block_total(sum_g), total_xg = block_total(sum_xg);
    const double total_h = g_x_hat ? block_total(sum_h) : 0.0,
                 total_xh = g_x_hat ? block_total(sum_xh) : 0.0;
    if (threadIdx.x == 0) {
      d_shift[group] = static_cast<T>(total_g);
      d_scale[group] = static_cast<T>(total_xg);
    }
    const T mean_g = static_cast<T>(total_g / static_cast<double>(m));
    const T mean_xg = static_cast<T>(total_xg / static_cast<double>(m));
    const T mean_h = static_cast<T>(total_h / static_cast<double>(m));
    const T mean_xh = static_cast<T>(total_xh / static_cast<double>(m));
    const T r = inv_std[group], rs = r * scale[group];
    const T by_inv_std = g_inv_std ? g_inv_std[group] * (r * r) * (T(-1) / T(m)) : T(0);
    for (I j = threadIdx.x; j < m; j += blockDim.x) {
      const I e = at[j];
      T d = rs * (g[e] - mean_g - x_hat[e] * mean_xg);
      if (g_x_hat) d = d + r * (g_x_hat[e] - mean_h - x_hat[e] * mean_xh);
      if (g_inv_std) d = d + x_hat[e] * by_inv_std;
      dx[e] = d;
    }
  }
}

// batch_norm_backward's own gradients (cpu_normalization::double_backward).
template <class T, class I>
__global__ void __launch_bounds__(wide_block_threads)
    batch_norm_double_backward_kernel(NormLayout l, const T* x_hat, const T* inv_std,
                                      const T* scale, const T* g, const T* sum_xg, const T* sum_g,
                                      const T* h, const T* k, const T* u, T* d_x_hat, T* d_inv_std,
                                      T* d_scale, T* d_g) {
  const I m = static_cast<I>(l.count());
  for (std::int64_t group = blockIdx.x; group < l.groups(); group += gridDim.x) {
    const NormGroup<I> at(l, group);
    double sum_h = 0, sum_xh = 0, sum_hg = 0;
    for (I j = threadIdx.x; j < m; j += blockDim.x) {
      const I e = at[j];
      sum_h += h[e];
      sum_xh += static_cast<double>(x_hat[e]) * h[e];
      sum_hg += static_cast<double>(h[e]) * g[e];
    }
    const double a = block_total(sum_h), x = block_total(sum_xh), hg = block_total(sum_hg);
    const double bracket = hg - (a * sum_g[group] + x * sum_xg[group]) / static_cast<double>(m);
    if (threadIdx.x == 0) {
      d_scale[group] = static_cast<T>(inv_std[group] * bracket);
      d_inv_std[group] = static_cast<T>(scale[group] * bracket);
    }
    const T rs = inv_std[group] * scale[group];
    const T mean_h = static_cast<T>(a / static_cast<double>(m));
    const T mean_xh = static_cast<T>(x / static_cast<double>(m));
    const T mean_xg = static_cast<T>(sum_xg[group] / static_cast<double>(m));
    const T kg = k ? k[group] : T(0), ug = u ? u[group] : T(0);
    for (I j = threadIdx.x; j < m; j += blockDim.x) {
      const I e = at[j];
      d_g[e] = rs * (h[e] - mean_h - x_hat[e] * mean_xh) + x_hat[e] * kg + ug;
      d_x_hat[e] = g[e] * kg - rs * (h[e] * mean_xg + g[e] * mean_xh);
    }
  }
}

// im2col and col2im of the GEMM convolution engine (src/cuda/convolution_kernels.hpp).
template <class T, class I>
__global__ void im2col_kernel(const T* x, T* col, ConvLayout cl, I total) {
  const I positions = static_cast<I>(cl.ho * cl.wo), n = static_cast<I>(cl.n);
  const I kernel = static_cast<I>(cl.kernel), kk = kernel * kernel,
          rows = static_cast<I>(cl.c) * kk;
  const I h = static_cast<I>(cl.h), w = static_cast<I>(cl.w), wo = static_cast<I>(cl.wo);
  const I stride = static_cast<I>(cl.stride), padding = static_cast<I>(cl.padding);
  for (I e = static_cast<I>(thread_index()); e < total; e += static_cast<I>(thread_count())) {
    const I position = e % positions, rest = e / positions;
    const I image = rest % n, group_row = rest / n;
    const I row = group_row % rows, group = group_row / rows;
    const I ch = row / kk, a = (row % kk) / kernel, b = row % kernel;
    const I y = (position / wo) * stride + a - padding;
    const I x_ = (position % wo) * stride + b - padding;
    col[e] = y >= 0 && y < h && x_ >= 0 && x_ < w
                 ? x[(((group * n + image) * static_cast<I>(cl.c) + ch) * h + y) * w + x_]
                 : T(0);
  }
}

template <class T, class I>
__global__ void col2im_kernel(const T* col, T* dx, ConvLayout cl, I total) {
  const I positions = static_cast<I>(cl.ho * cl.wo), n = static_cast<I>(cl.n);
  const I kernel = static_cast<I>(cl.kernel), kk = kernel * kernel, c = static_cast<I>(cl.c);
  const I h = static_cast<I>(cl.h), w = static_cast<I>(cl.w);
  const I ho = static_cast<I>(cl.ho), wo = static_cast<I>(cl.wo);
  const I stride = static_cast<I>(cl.stride), padding = static_cast<I>(cl.padding);
  for (I e = static_cast<I>(thread_index()); e < total; e += static_cast<I>(thread_count())) {
    const I x_ = e % w, y = (e / w) % h, rest = e / (w * h);
    const I ch = rest % c, image = (rest / c) % n, group = rest / (c * n);
    T sum = 0;
    for (I a = 0; a < kernel; ++a) {
      const I oy = y + padding - a;
      if (oy < 0 || oy % stride != 0 || oy / stride >= ho) continue;
      for (I b = 0; b < kernel; ++b) {
        const I ox = x_ + padding - b;
        if (ox < 0 || ox % stride != 0 || ox / stride >= wo) continue;
        const I row = ch * kk + a * kernel + b;
        sum += col[((group * c * kk + row) * n + image) * positions + (oy / stride) * wo +
                   ox / stride];
      }
    }
    dx[e] = sum;
  }
}

// One thread per Philox block: element i reads block first_block + i / per_block,
// lane i % per_block, exactly as the CPU backend does. Inside a graph
// recording, `salt` (device memory the graph advances after each replay) is
// mixed into the stream; elsewhere it is null.
template <class T, bool Normal>
__global__ void philox_kernel(T* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                              std::uint64_t first_block, const std::uint64_t* salt) {
  constexpr int per_block = PhiloxDraw<T>::per_block;
  if (salt) stream ^= *salt;
  const std::int64_t blocks = (n + per_block - 1) / per_block;
  for (std::int64_t b = thread_index(); b < blocks; b += thread_count()) {
    const PhiloxBlock bits =
        philox4x32_10(seed, first_block + static_cast<std::uint64_t>(b), stream);
    for (int lane = 0; lane < per_block && b * per_block + lane < n; ++lane)
      y[b * per_block + lane] =
          Normal ? PhiloxDraw<T>::normal(bits, lane) : PhiloxDraw<T>::uniform(bits, lane);
  }
}

// fill_normal over `rows` rows of each piece of a layout at once, blockIdx.y
// the piece: one thread per (row, Philox block), row r under
// task_stream(streams, r), salted as philox_kernel is.
template <class T>
__global__ void foreach_philox_rows_kernel(NormalRowsLayout<T> l, std::uint64_t seed,
                                           TaskStreams streams, const std::uint64_t* salt) {
  constexpr int per_block = PhiloxDraw<T>::per_block;
  const int p = static_cast<int>(blockIdx.y);
  const std::int64_t n = l.n[p], blocks = (n + per_block - 1) / per_block;
  for (std::int64_t i = thread_index(); i < l.rows * blocks; i += thread_count()) {
    const std::int64_t r = i / blocks, b = i % blocks;
    const std::uint64_t stream = task_stream(streams, r) ^ (salt ? *salt : 0);
    const PhiloxBlock bits =
        philox4x32_10(seed, l.block[p] + static_cast<std::uint64_t>(b), stream);
    T* row = l.y[p] + r * n;
    for (int lane = 0; lane < per_block && b * per_block + lane < n; ++lane)
      row[b * per_block + lane] = PhiloxDraw<T>::normal(bits, lane);
  }
}
static_assert(sizeof(NormalRowsLayout<double>) <= 4096);

__global__ void advance_salt_kernel(std::uint64_t* salt) {
  const PhiloxBlock b = philox4x32_10(*salt, 0, 0x243f6a8885a308d3ull);
  *salt = static_cast<std::uint64_t>(b[0]) << 32 | b[1];
}

}  // namespace platipus::cuda_kernels

namespace platipus {

template <class T>
void cuda::fill(T* y, std::int64_t n, T value) {
  cuda_kernels::launch("cuda::fill", n, cuda_kernels::fill_kernel<T>, y, n, value);
}

template <class T>
void cuda::arange(T* y, std::int64_t n) {
  cuda_kernels::launch("cuda::arange", n, cuda_kernels::arange_kernel<T>, y, n);
}

template <class T>
void cuda::unary(UnaryOp op, const T* x, T* y, std::int64_t n, T s) {
  visit_unary(op, [&](auto f) {
    cuda_kernels::launch("cuda::unary", n, cuda_kernels::unary_kernel<T, decltype(f)>, f, x, y, n,
                         s);
  });
}

template <class T>
void cuda::binary(BinaryOp op, const T* a, const T* b, T* y, const BroadcastLayout& l) {
  const std::int64_t n = l.numel();
  visit_binary(op, [&](auto f) {
    cuda_kernels::launch("cuda::binary", n, cuda_kernels::binary_kernel<T, decltype(f)>, f, a, b, y,
                         l, n);
  });
}

template <class T>
void cuda::axpy(const T* a, const T* b, T* y, std::int64_t n, T s) {
  cuda_kernels::launch("cuda::axpy", n, cuda_kernels::axpy_kernel<T>, a, b, y, n, s);
}

template <class T>
void cuda::add_n(const SummandsLayout<T>& l) {
  cuda_kernels::launch("cuda::add_n", l.n, cuda_kernels::add_n_kernel<T>, l);
}

template <class T>
void cuda::add_n(const SummandsLayout<T>& l, const BiasLayout& bias, T* sums) {
  cuda_kernels::launch("cuda::add_n", bias.batch * bias.n, cuda_kernels::add_n_row_sums_kernel<T>,
                       l, bias, sums);
}

template <class T>
void cuda::foreach_add_n(const SumsLayout<T>& l) {
  cuda_kernels::launch_foreach("cuda::foreach_add_n", l, cuda_kernels::foreach_add_n_kernel<T>, l);
}

template <class T>
void cuda::foreach_axpy(const PiecesLayout<T>& l, T s) {
  cuda_kernels::launch_foreach("cuda::foreach_axpy", l, cuda_kernels::foreach_axpy_kernel<T>, l, s);
}

template <class T>
void cuda::foreach_sub_mul(const SubMulLayout<T>& l) {
  cuda_kernels::launch_foreach("cuda::foreach_sub_mul", l, cuda_kernels::foreach_sub_mul_kernel<T>,
                               l);
}

template <class T>
void cuda::foreach_mul(const MulLayout<T>& l) {
  cuda_kernels::launch_foreach("cuda::foreach_mul", l, cuda_kernels::foreach_mul_kernel<T>, l);
}

template <class T>
void cuda::foreach_unary(UnaryOp op, const PiecesLayout<T>& l, T s) {
  visit_unary(op, [&](auto f) {
    cuda_kernels::launch_foreach("cuda::foreach_unary", l,
                                 cuda_kernels::foreach_unary_kernel<T, decltype(f)>, f, l, s);
  });
}

template <class T>
void cuda::relu_bias_backward(const BiasLayout& l, const T* g, const T* y, T* dx, T* db) {
  cuda_kernels::launch("cuda::relu_bias_backward", l.batch * l.n,
                       cuda_kernels::relu_bias_backward_kernel<T>, l, g, y, dx, db);
}

template <class T>
void cuda::foreach_expand(const PiecesLayout<T>& l, std::int64_t copies) {
  cuda_kernels::launch_foreach("cuda::foreach_expand", l, cuda_kernels::foreach_expand_kernel<T>, l,
                               copies);
}

template <class T>
void cuda::foreach_sum_to(const PiecesLayout<T>& l, std::int64_t copies) {
  cuda_kernels::launch_foreach("cuda::foreach_sum_to", l, cuda_kernels::foreach_sum_to_kernel<T>, l,
                               copies);
}

template <class T>
void cuda::kl_from_ratios(const KlLayout<T>& l, T* y) {
  using namespace cuda_kernels;
  if (l.count == 0 || l.rows == 0) return;
  const auto blocks = static_cast<unsigned>(std::min(l.rows, max_blocks));
  kl_from_ratios_kernel<T><<<blocks, block_threads, 0, cudaStreamPerThread>>>(l, y);
  detail::check_cuda(cudaGetLastError(), "cuda::kl_from_ratios");
}

template <class T>
void cuda::kl_from_ratios_backward(const KlLayout<T>& l, const T* g, T scale) {
  cuda_kernels::launch_foreach("cuda::kl_from_ratios_backward", l,
                               cuda_kernels::kl_from_ratios_backward_kernel<T>, l, g, scale);
}

template <class T>
void cuda::squared_error(const SquaredErrorLayout<T>& l, const T* pred, const T* target,
                         T* difference, T* y) {
  cuda_kernels::launch("cuda::squared_error", l.rows * cuda_kernels::warp_threads,
                       cuda_kernels::squared_error_kernel<T>, l, pred, target, difference, y);
}

template <class T>
void cuda::cross_entropy(const CrossEntropyLayout& l, const T* logits, const T* targets, T* loss,
                         T* softmax, T* target_rows) {
  cuda_kernels::launch("cuda::cross_entropy", l.rows * cuda_kernels::warp_threads,
                       cuda_kernels::cross_entropy_kernel<T>, l, logits, targets, loss, softmax,
                       target_rows);
}

template <class T>
void cuda::cross_entropy_backward(const CrossEntropyGradLayout<T>& l, const T* p, const T* y,
                                  const T* loss_grad, const T* p_grad, T* dz) {
  cuda_kernels::launch("cuda::cross_entropy_backward", l.rows * cuda_kernels::warp_threads,
                       cuda_kernels::cross_entropy_backward_kernel<T>, l, p, y, loss_grad, p_grad,
                       dz);
}

template <class T>
void cuda::adam(const AdamLayout<T>& l, const AdamStep<T>& step, const T* t) {
  cuda_kernels::launch_foreach("cuda::adam", l, cuda_kernels::adam_kernel<T>, l, step, t);
}

template <class T>
void cuda::select(const T* mask, const T* a, const T* b, T* y, std::int64_t n) {
  cuda_kernels::launch("cuda::select", n, cuda_kernels::select_kernel<T>, mask, a, b, y, n);
}

template <class T>
void cuda::reduce(ReduceOp op, const T* x, T* y, const ReduceLayout& l) {
  using namespace cuda_kernels;
  if (l.out_numel <= 0) return;
  const ReducePlan p = plan_reduce(l);
  // A warp per output element, or a wide block when few outputs each
  // combine many inputs (a full sum, a convolution bias's gradient).
  const bool wide = p.length >= 4096 && p.outputs < 1024;
  const bool narrow = fits_int32(l.in_numel, l.rank, l.dims, l.stride_in, l.stride_out);
  const auto run = [&](auto combine, T identity, T factor) {
    using Combine = decltype(combine);
    const auto kernel = wide
                            ? (narrow ? reduce_kernel<wide_block_threads, std::int32_t, T, Combine>
                                      : reduce_kernel<wide_block_threads, std::int64_t, T, Combine>)
                            : (narrow ? reduce_kernel<warp_threads, std::int32_t, T, Combine>
                                      : reduce_kernel<warp_threads, std::int64_t, T, Combine>);
    const int threads = wide ? wide_block_threads : block_threads;
    const std::int64_t groups_per_block = threads / (wide ? wide_block_threads : warp_threads);
    const auto blocks = static_cast<unsigned>(
        std::min((p.outputs + groups_per_block - 1) / groups_per_block, max_blocks));
    kernel<<<blocks, threads, 0, cudaStreamPerThread>>>(combine, identity, factor, x, y, p);
    detail::check_cuda(cudaGetLastError(), "cuda::reduce");
  };
  if (op == ReduceOp::max)
    run(functors::max{}, -std::numeric_limits<T>::infinity(), T(1));
  else
    run(functors::add{}, T(0),
        op == ReduceOp::mean ? T(1) / static_cast<T>(l.reduced_count()) : T(1));
}

template <class T>
void cuda::strided_copy(const T* src, T* dst, const CopyLayout& l) {
  const std::int64_t n = l.numel();
  if (cuda_kernels::fits_int32(n, l.rank, l.dims, l.stride_src, l.stride_dst))
    cuda_kernels::launch("cuda::strided_copy", n, cuda_kernels::copy_kernel<T, std::int32_t>, src,
                         dst, l, static_cast<std::int32_t>(n));
  else
    cuda_kernels::launch("cuda::strided_copy", n, cuda_kernels::copy_kernel<T, std::int64_t>, src,
                         dst, l, n);
}

template <class T>
void cuda::foreach_strided_copy(const CopiesLayout<T>& l) {
  bool fits = true;
  for (int k = 0; k < l.count; ++k)
    fits = fits && cuda_kernels::fits_int32(l.n[k], l.copy[k].rank, l.copy[k].dims,
                                            l.copy[k].stride_src, l.copy[k].stride_dst);
  if (fits)
    cuda_kernels::launch_foreach("cuda::foreach_strided_copy", l,
                                 cuda_kernels::foreach_copy_kernel<T, std::int32_t>, l);
  else
    cuda_kernels::launch_foreach("cuda::foreach_strided_copy", l,
                                 cuda_kernels::foreach_copy_kernel<T, std::int64_t>, l);
}

// Each product small enough that a tile a block beats a cuBLAS launch per
// product: at most 2^22 multiply-adds (MAML's and PLATIPUS's networks, conv4's
// output layer), k at most 1024 (a block sums k in sequence, where cuBLAS
// would split a long one). Row sums take blocks after the tiles, and a
// kernel of their own after cuBLAS's products: a thread down each column,
// as relu_bias_backward's, for the CPU's bits (a bias's rows are a batch's
// points, not a long reduction).
template <class T>
void cuda::gemms(const GemmsLayout<T>& l) {
  constexpr double small = 1 << 22;
  cuda_kernels::GemmTiles<T> tiles;
  bool all_small = true;
  for (int p = 0; p < l.count; ++p) {
    const GemmLayout<T>& g = l.gemm[p];
    all_small = all_small && g.k <= 1024 &&
                static_cast<double>(g.m) * static_cast<double>(g.n) *
                        static_cast<double>(std::max<std::int64_t>(g.k, 1)) *
                        static_cast<double>(g.batch) <=
                    small;
    tiles.first[p + 1] =
        tiles.first[p] + (g.m + cuda_kernels::gemm_tile - 1) / cuda_kernels::gemm_tile *
                             ((g.n + cuda_kernels::gemm_tile - 1) / cuda_kernels::gemm_tile) *
                             g.batch;
  }
  GemmsLayout<T> launched = l;
  if (!all_small) {
    for (int p = 0; p < l.count; ++p) gemm(l.gemm[p], l.a[p], l.b[p], l.c[p]);
    launched.count = 0;
    tiles = {};
  }
  constexpr std::int64_t per_block = cuda_kernels::gemm_tile * cuda_kernels::gemm_tile;
  const std::int64_t blocks = tiles.first[launched.count] +
                              (l.sums ? (l.bias.batch * l.bias.n + per_block - 1) / per_block : 0);
  if (blocks == 0) return;
  const dim3 block(cuda_kernels::gemm_tile, cuda_kernels::gemm_tile);
  cuda_kernels::gemms_kernel<T>
      <<<static_cast<unsigned>(blocks), block, 0, cudaStreamPerThread>>>(launched, tiles);
  detail::check_cuda(cudaGetLastError(), "cuda::gemms");
}

template <class T>
void cuda::gather(const T* src, const std::int64_t* index, T* dst, const IndexLayout& l) {
  const std::int64_t n = l.outer * l.count * l.inner;
  cuda_kernels::launch("cuda::gather", n, cuda_kernels::gather_kernel<T>, src, index, dst, l, n);
}

template <class T>
void detail::im2col(const ConvLayout& l, const T* x, T* col) {
  const std::int64_t total = l.groups * l.c * l.kernel * l.kernel * l.n * l.ho * l.wo;
  // 32-bit indices where the columns and the images fit them.
  if (total <= cuda_kernels::int32_limit && l.x_numel() <= cuda_kernels::int32_limit)
    cuda_kernels::launch("cuda::conv2d (im2col)", total,
                         cuda_kernels::im2col_kernel<T, std::int32_t>, x, col, l,
                         static_cast<std::int32_t>(total));
  else
    cuda_kernels::launch("cuda::conv2d (im2col)", total,
                         cuda_kernels::im2col_kernel<T, std::int64_t>, x, col, l, total);
}

template <class T>
void detail::col2im(const ConvLayout& l, const T* col, T* dx) {
  const std::int64_t total = l.x_numel();
  const std::int64_t columns = l.groups * l.c * l.kernel * l.kernel * l.n * l.ho * l.wo;
  if (columns <= cuda_kernels::int32_limit)
    cuda_kernels::launch("cuda::conv2d_input_grad (col2im)", total,
                         cuda_kernels::col2im_kernel<T, std::int32_t>, col, dx, l,
                         static_cast<std::int32_t>(total));
  else
    cuda_kernels::launch("cuda::conv2d_input_grad (col2im)", total,
                         cuda_kernels::col2im_kernel<T, std::int64_t>, col, dx, l, total);
}

template <class T>
void cuda::max_pool2d(const PoolLayout& l, const T* x, T* y, std::int64_t* positions) {
  const std::int64_t n = l.planes * l.ho * l.wo;
  cuda_kernels::launch("cuda::max_pool2d", n, cuda_kernels::max_pool_kernel<T>, x, y, positions, l,
                       n);
}

template <class T>
void cuda::max_pool2d_backward(const PoolLayout& l, const T* g, const T* y,
                               const std::int64_t* positions, T* dx) {
  using namespace cuda_kernels;
  const std::int64_t inputs = l.planes * l.h * l.w, outputs = l.planes * l.ho * l.wo;
  if (l.stride >= l.kernel) {
    launch("cuda::max_pool2d_backward", inputs, max_pool_backward_kernel<T>, l, g, y, positions, dx,
           inputs);
    return;
  }
  cuda::fill(dx, inputs, T(0));
  launch("cuda::max_pool2d_backward", outputs, max_pool_scatter_kernel<T>, l, g, y, positions, dx,
         outputs);
}

template <class T>
void cuda::max_pool2d_double_backward(const PoolLayout& l, const T* h, const T* y,
                                      const std::int64_t* positions, T* dg) {
  const std::int64_t outputs = l.planes * l.ho * l.wo;
  cuda_kernels::launch("cuda::max_pool2d_double_backward", outputs,
                       cuda_kernels::max_pool_double_backward_kernel<T>, l, h, y, positions, dg,
                       outputs);
}

namespace cuda_kernels {
// A wide block per group of `l` (up to the cap): `narrow`, the kernel
// with 32-bit element offsets, where every offset fits, else `wide`.
template <class... Params, class... Args>
void launch_per_group(const char* name, const NormLayout& l, void (*narrow)(Params...),
                      void (*wide)(Params...), const Args&... args) {
  if (l.numel() <= 0) return;
  const auto blocks = static_cast<unsigned>(std::min(l.groups(), max_blocks));
  const auto kernel = l.numel() <= int32_limit ? narrow : wide;
  kernel<<<blocks, wide_block_threads, 0, cudaStreamPerThread>>>(l, args...);
  detail::check_cuda(cudaGetLastError(), name);
}
}  // namespace cuda_kernels

template <class T>
void cuda::batch_norm(const NormLayout& l, const T* x, T epsilon, const T* scale, const T* shift,
                      T* x_hat, T* inv_std, T* y) {
  using namespace cuda_kernels;
  launch_per_group("cuda::batch_norm", l, batch_norm_kernel<T, std::int32_t>,
                   batch_norm_kernel<T, std::int64_t>, x, epsilon, scale, shift, x_hat, inv_std, y);
}

template <class T>
void cuda::batch_norm_backward(const NormLayout& l, const T* x_hat, const T* inv_std,
                               const T* scale, const T* g, const T* g_x_hat, const T* g_inv_std,
                               T* dx, T* d_scale, T* d_shift) {
  using namespace cuda_kernels;
  launch_per_group("cuda::batch_norm_backward", l, batch_norm_backward_kernel<T, std::int32_t>,
                   batch_norm_backward_kernel<T, std::int64_t>, x_hat, inv_std, scale, g, g_x_hat,
                   g_inv_std, dx, d_scale, d_shift);
}

template <class T>
void cuda::batch_norm_double_backward(const NormLayout& l, const T* x_hat, const T* inv_std,
                                      const T* scale, const T* g, const T* sum_xg, const T* sum_g,
                                      const T* h, const T* k, const T* u, T* d_x_hat, T* d_inv_std,
                                      T* d_scale, T* d_g) {
  using namespace cuda_kernels;
  launch_per_group("cuda::batch_norm_double_backward", l,
                   batch_norm_double_backward_kernel<T, std::int32_t>,
                   batch_norm_double_backward_kernel<T, std::int64_t>, x_hat, inv_std, scale, g,
                   sum_xg, sum_g, h, k, u, d_x_hat, d_inv_std, d_scale, d_g);
}

template <class T>
void cuda::scatter_add(const T* src, const std::int64_t* index, T* dst, const IndexLayout& l) {
  fill(dst, l.outer * l.source_axis * l.inner, T(0));
  const std::int64_t n = l.outer * l.count * l.inner;
  cuda_kernels::launch("cuda::scatter_add", n, cuda_kernels::scatter_add_kernel<T>, src, index, dst,
                       l, n);
}

template <class T>
void cuda::fill_uniform(T* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                        std::uint64_t block) {
  const std::int64_t blocks = (n + PhiloxDraw<T>::per_block - 1) / PhiloxDraw<T>::per_block;
  cuda_kernels::launch("cuda::fill_uniform", blocks, cuda_kernels::philox_kernel<T, false>, y, n,
                       seed, stream, block, detail::graph_random_salt());
}

template <class T>
void cuda::fill_normal(T* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                       std::uint64_t block) {
  const std::int64_t blocks = (n + PhiloxDraw<T>::per_block - 1) / PhiloxDraw<T>::per_block;
  cuda_kernels::launch("cuda::fill_normal", blocks, cuda_kernels::philox_kernel<T, true>, y, n,
                       seed, stream, block, detail::graph_random_salt());
}

template <class T>
void cuda::fill_normal_rows(T* y, std::int64_t rows, std::int64_t n, std::uint64_t seed,
                            const TaskStreams& streams, std::uint64_t block) {
  NormalRowsLayout<T> l;
  l.count = 1;
  l.rows = rows;
  l.y[0] = y;
  l.n[0] = n;
  l.block[0] = block;
  foreach_fill_normal_rows(l, seed, streams);
}

template <class T>
void cuda::foreach_fill_normal_rows(const NormalRowsLayout<T>& l, std::uint64_t seed,
                                    const TaskStreams& streams) {
  using namespace cuda_kernels;
  if (l.count == 0 || l.rows == 0) return;
  // A row of blocks per piece, as many as the piece of most Philox blocks needs.
  const std::int64_t longest =
      l.rows * ((longest_piece(l) + PhiloxDraw<T>::per_block - 1) / PhiloxDraw<T>::per_block);
  const dim3 grid(static_cast<unsigned>(std::clamp<std::int64_t>(
                      (longest + block_threads - 1) / block_threads, 1, max_blocks)),
                  static_cast<unsigned>(l.count));
  foreach_philox_rows_kernel<T><<<grid, block_threads, 0, cudaStreamPerThread>>>(
      l, seed, streams, detail::graph_random_salt());
  detail::check_cuda(cudaGetLastError(), "cuda::foreach_fill_normal_rows");
}

}  // namespace platipus
