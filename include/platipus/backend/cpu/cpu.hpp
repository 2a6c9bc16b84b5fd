// platipus::cpu, the Eigen backend: contiguous loops that the compiler
// vectorises, Eigen's vectorised exp/log/tanh/sqrt, and Eigen matrix products
// for GEMM (libxsmm's kernels for the small ones, small_gemm.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <thread>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "platipus/backend/block_cache.hpp"
#include "platipus/backend/concept.hpp"
#include "platipus/backend/cpu/convolution.hpp"
#include "platipus/backend/cpu/normalization.hpp"
#include "platipus/backend/cpu/small_gemm.hpp"
#include "platipus/backend/linear_in_parts.hpp"
#include "platipus/core/philox.hpp"

namespace platipus {

struct cpu {
  static constexpr const char* name = "cpu";
  static constexpr std::size_t alignment = 64;
  // One chunk of tasks per core: a chunk's ops are large enough to keep a core busy.
  static int default_threads() {
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  // One chunk per task: the meta-gradient's sums then run over task indices
  // in a fixed order, the same bits for 1 or 16 cores.
  static std::int64_t default_task_chunks(std::int64_t tasks) { return tasks; }
  // Each as it comes: on a core an add of three makes the passes over memory
  // of two adds, and holding gradients costs memory (conv4's are large).
  static constexpr int gradients_per_add = 2;

  // ---- memory ----
  static void* allocate(std::size_t bytes) { return Cache::local().allocate(bytes); }
  static void deallocate(void* p, std::size_t bytes) { Cache::local().deallocate(p, bytes); }
  static void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  static void copy_to_host(void* dst, const void* src, std::size_t bytes) { copy(dst, src, bytes); }
  static void copy_from_host(void* dst, const void* src, std::size_t bytes) {
    copy(dst, src, bytes);
  }
  static void synchronize() {}

  // ---- elementwise ----
  template <class T>
  static void fill(T* y, std::int64_t n, T value) {
    std::fill(y, y + n, value);
  }

  template <class T>
  static void arange(T* y, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(i);
  }

  template <class T>
  static void unary(UnaryOp op, const T* x, T* y, std::int64_t n, T s) {
    using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Array> in(x, n);
    Eigen::Map<Array> out(y, n);
    switch (op) {  // Eigen's packet math for the transcendental ones
      case UnaryOp::exp:
        out = in.exp();
        return;
      case UnaryOp::exp_scaled:  // the bits of scale's output read by exp's case
        out = (in * s).exp();
        return;
      case UnaryOp::log:
        out = in.log();
        return;
      case UnaryOp::tanh:
        out = in.tanh();
        return;
      case UnaryOp::sqrt:
        out = in.sqrt();
        return;
      default:
        break;
    }
    visit_unary(op, [&](auto f) {
      for (std::int64_t i = 0; i < n; ++i) y[i] = f(x[i], s);
    });
  }

  template <class T>
  static void binary(BinaryOp op, const T* a, const T* b, T* y, const BroadcastLayout& l) {
    visit_binary(op, [&](auto f) { broadcast_loop(f, a, b, y, l); });
  }

  template <class T>
  static void axpy(const T* a, const T* b, T* y, std::int64_t n, T s) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + s * b[i];
  }

  template <class T>
  static void foreach_axpy(const PiecesLayout<T>& l, T s) {
    for (int i = 0; i < l.count; ++i) axpy(l.a[i], l.b[i], l.y[i], l.n[i], s);
  }
  template <class T>
  static void foreach_sub_mul(const SubMulLayout<T>& l) {
    for (int i = 0; i < l.count; ++i) {
      const std::int64_t n = l.n[i], rn = l.rn[i];
      const T *a = l.a[i], *r = l.r[i], *g = l.g[i];
      T* y = l.y[i];
      // The product is stored before the difference, as mul's and sub's
      // kernels round them: a contracted a - r g would round once.
      repeated_products(r, g, y, n, rn);
      if (l.add)
        for (std::int64_t j = 0; j < n; ++j) y[j] = a[j] + y[j];
      else
        for (std::int64_t j = 0; j < n; ++j) y[j] = a[j] - y[j];
    }
  }
  template <class T>
  static void foreach_mul(const MulLayout<T>& l) {
    for (int i = 0; i < l.count; ++i) {
      const std::int64_t n = l.n[i], rn = l.rn[i];
      const T *r = l.r[i], *g = l.g[i];
      T* y = l.y[i];
      if (l.negate[i])
        repeated_products<true>(r, g, y, n, rn);
      else
        repeated_products(r, g, y, n, rn);
    }
  }
  template <class T>
  static void add_n(const SummandsLayout<T>& l) {
    std::size_t k = 1;
    const T* sum = l.x[0];
    if (l.negate[0] || !l.repetition[0].none()) {
      // x[1] ± x[0] in one pass where x[1] is plain (a + b is b + a, and
      // b - a is b + (-a), to the bit); else ±x[0] in y first.
      const bool plain = !l.negate[1] && l.repetition[1].none();
      add_summand(l, 0, plain ? l.x[1] : nullptr);
      k = plain ? 2 : 1;
      sum = l.y;
    }
    for (; k < static_cast<std::size_t>(l.count); ++k, sum = l.y) add_summand(l, k, sum);
    if (l.route)
      for (std::int64_t i = 0; i < l.n; ++i) l.y[i] = functors::relu_backward{}(l.y[i], l.route[i]);
    else if (l.scale != T(1))
      for (std::int64_t i = 0; i < l.n; ++i) l.y[i] = functors::scale{}(l.y[i], l.scale);
  }
  template <class T>
  static void add_n(const SummandsLayout<T>& l, const BiasLayout& bias, T* sums) {
    add_n(l);
    sum_rows(bias, sums, [y = l.y](std::int64_t at) { return y[at]; });
  }
  template <class T>
  static void foreach_add_n(const SumsLayout<T>& l) {
    for (int i = 0; i < l.count; ++i) add_n(l.sum[static_cast<std::size_t>(i)]);
  }
  template <class T>
  static void foreach_unary(UnaryOp op, const PiecesLayout<T>& l, T s) {
    for (int i = 0; i < l.count; ++i) unary(op, l.a[i], l.y[i], l.n[i], s);
  }
  template <class T>
  static void foreach_expand(const PiecesLayout<T>& l, std::int64_t copies) {
    for (int k = 0; k < l.count; ++k)
      for (std::int64_t c = 0; c < copies; ++c) std::copy_n(l.a[k], l.n[k], l.y[k] + c * l.n[k]);
  }
  // The copies' sums in order, from 0, as reduce sums a leading axis.
  template <class T>
  static void foreach_sum_to(const PiecesLayout<T>& l, std::int64_t copies) {
    for (int k = 0; k < l.count; ++k) {
      const std::int64_t n = l.n[k];
      T* y = l.y[k];
      std::fill_n(y, n, T(0));
      for (const T* x = l.a[k]; x != l.a[k] + copies * n; x += n)
        for (std::int64_t i = 0; i < n; ++i) y[i] = y[i] + x[i];
    }
  }

  // Row by row, each formula's results stored before the next reads them
  // (as the ops' kernels round them: a contracted r + s w would round once),
  // and the sums in order from 0, as reduce's.
  template <class T>
  static void kl_from_ratios(const KlLayout<T>& l, T* y) {
    std::vector<T> buffer(static_cast<std::size_t>(longest_piece(l)));
    T* terms = buffer.data();
    for (int i = 0; i < l.count; ++i) {
      const std::int64_t n = l.n[i];
      const T *r = l.r[i], *w = l.w[i];
      for (std::int64_t t = 0; t < l.rows; ++t) {
        const T* s = l.s[i] + t * n;
        for (std::int64_t j = 0; j < n; ++j) terms[j] = s[j] * w[j];
        for (std::int64_t j = 0; j < n; ++j) terms[j] = (r[j] + terms[j]) + T(-1);
        T sum = n == 1 ? terms[0] : T(0);  // a one-element row is not summed
        if (n != 1)
          for (std::int64_t j = 0; j < n; ++j) sum = sum + terms[j];
        const T term = sum * T(0.5);
        y[t] = i == 0 && !l.accumulate ? term : y[t] + term;
      }
    }
  }
  template <class T>
  static void kl_from_ratios_backward(const KlLayout<T>& l, const T* g, T scale) {
    std::vector<T> buffer(static_cast<std::size_t>(longest_piece(l)));
    T* products = buffer.data();
    for (int i = 0; i < l.count; ++i) {
      const std::int64_t n = l.n[i];
      const T* w = l.w[i];
      T *dr = l.dr[i], *ds = l.ds[i], *dw = l.dw[i];
      if (dr) std::fill_n(dr, n, T(0));
      if (dw) std::fill_n(dw, n, T(0));
      for (std::int64_t t = 0; t < l.rows; ++t) {
        const T h = g ? g[t] * scale : scale;
        const T* s = l.s[i] + t * n;
        if (ds)
          for (std::int64_t j = 0; j < n; ++j) ds[t * n + j] = h * w[j];
        if (dr)
          for (std::int64_t j = 0; j < n; ++j) dr[j] = dr[j] + h;
        if (dw) {
          for (std::int64_t j = 0; j < n; ++j) products[j] = h * s[j];
          for (std::int64_t j = 0; j < n; ++j) dw[j] = dw[j] + products[j];
        }
      }
    }
  }

  // Each formula's results stored before the next reads them (as the ops'
  // kernels round them: a contracted sum + q, q a product, would round
  // once), each row's sum in order from 0, as reduce's.
  template <class T>
  static void squared_error(const SquaredErrorLayout<T>& l, const T* pred, const T* target,
                            T* difference, T* y) {
    const std::int64_t n = l.points;
    std::vector<T> buffer(static_cast<std::size_t>(n));
    T* q = buffer.data();
    for (std::int64_t row = 0; row < l.rows; ++row, pred += n, target += n, difference += n) {
      for (std::int64_t j = 0; j < n; ++j) difference[j] = pred[j] - target[j];
      for (std::int64_t j = 0; j < n; ++j) q[j] = difference[j] * difference[j];
      if (l.gaussian)
        for (std::int64_t j = 0; j < n; ++j)
          q[j] = ((q[j] / l.variance + l.log_variance) + l.log_two_pi) * T(0.5);
      if (n == 1) {
        y[row] = q[0];
        continue;
      }
      T sum = T(0);
      for (std::int64_t j = 0; j < n; ++j) sum = sum + q[j];
      y[row] = l.mean ? sum * (T(1) / static_cast<T>(n)) : sum;
    }
  }

  // The bits of the ops it replaced (equal against arange, reduce max, sub,
  // exp, sum, log, add, mul, sum, sub and div): exp and log by the same Eigen
  // calls over the whole block, into outputs as aligned as a tensor's (the
  // softmax's and the losses', where Eigen's packet loops start as on a new
  // tensor), products stored before their sums, the sums in order from 0, as
  // reduce's.
  template <class T>
  static void cross_entropy(const CrossEntropyLayout& l, const T* z, const T* targets, T* loss,
                            T* p, T* target_rows) {
    const std::int64_t rows = l.rows, k = l.classes;
    const T* y = targets;
    if (l.class_indices) {
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < k; ++j)
          target_rows[r * k + j] = functors::equal{}(targets[r], static_cast<T>(j));
      y = target_rows;
    }
    // Per row: the maximum, the sum of exponentials, then the products.
    std::vector<T> buffer(static_cast<std::size_t>(2 * rows + k));
    T *max = buffer.data(), *sum_exp = max + rows, *products = sum_exp + rows;
    for (std::int64_t r = 0; r < rows; ++r) {
      max[r] = -std::numeric_limits<T>::infinity();
      for (std::int64_t j = 0; j < k; ++j) {
        const T v = z[r * k + j];
        max[r] = v > max[r] ? v : max[r];
      }
      for (std::int64_t j = 0; j < k; ++j) p[r * k + j] = z[r * k + j] - max[r];
    }
    unary(UnaryOp::exp, p, p, rows * k, T(0));
    for (std::int64_t r = 0; r < rows; ++r) {
      sum_exp[r] = T(0);
      for (std::int64_t j = 0; j < k; ++j) sum_exp[r] = sum_exp[r] + p[r * k + j];
    }
    unary(UnaryOp::log, sum_exp, loss, rows, T(0));
    for (std::int64_t r = 0; r < rows; ++r) {
      const T lse = loss[r] + max[r];
      for (std::int64_t j = 0; j < k; ++j) products[j] = y[r * k + j] * z[r * k + j];
      T target_logit = T(0);
      for (std::int64_t j = 0; j < k; ++j) target_logit = target_logit + products[j];
      loss[r] = lse - target_logit;
      for (std::int64_t j = 0; j < k; ++j) p[r * k + j] = p[r * k + j] / sum_exp[r];
    }
  }
  // Row by row, each step's results stored before the next reads them (so
  // that no product and sum contract into one rounding), the row's sum in
  // order from 0, as reduce's, and a one-class row's its product (sum_to
  // over an axis of one is the identity: 0 + -0 would be +0).
  template <class T>
  static void cross_entropy_backward(const CrossEntropyGradLayout<T>& l, const T* p, const T* y,
                                     const T* loss_grad, const T* p_grad, T* dz) {
    const std::int64_t k = l.classes;
    std::vector<T> buffer(p_grad ? static_cast<std::size_t>(2 * k) : 0);
    T *pq = buffer.data(), *p_sum = pq + (p_grad ? k : 0);
    for (std::int64_t r = 0; r < l.rows; ++r) {
      const T *pr = p + r * k, *yr = y + r * k;
      T* d = dz + r * k;
      if (l.from_loss) {
        const T g = loss_grad ? loss_grad[l.repetition.source(r)] : l.uniform;
        for (std::int64_t j = 0; j < k; ++j) d[j] = (pr[j] - yr[j]) * g;
      }
      if (!p_grad) continue;
      const T* q = p_grad + r * k;
      for (std::int64_t j = 0; j < k; ++j) pq[j] = pr[j] * q[j];
      T sum = pq[0];
      if (k > 1) {
        sum = T(0);
        for (std::int64_t j = 0; j < k; ++j) sum = sum + pq[j];
      }
      for (std::int64_t j = 0; j < k; ++j) p_sum[j] = pr[j] * sum;
      if (l.from_loss)
        for (std::int64_t j = 0; j < k; ++j) d[j] = d[j] + (pq[j] - p_sum[j]);
      else
        for (std::int64_t j = 0; j < k; ++j) d[j] = pq[j] - p_sum[j];
    }
  }

  template <class T>
  static void adam(const AdamLayout<T>& l, const AdamStep<T>& step, const T* t) {
    const auto correction = step.at(*t);
    for (int k = 0; k < l.count; ++k)
      for (std::int64_t i = 0; i < l.n[k]; ++i)
        step.apply(correction, l.p[k][i], l.m[k][i], l.v[k][i], l.g[k][i]);
  }

  template <class T>
  static void select(const T* mask, const T* a, const T* b, T* y, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = mask[i] != T(0) ? a[i] : b[i];
  }

  // ---- reductions ----
  template <class T>
  static void reduce(ReduceOp op, const T* x, T* y, const ReduceLayout& l) {
    if (op == ReduceOp::max) {
      reduce_loop(x, y, l, -std::numeric_limits<T>::infinity(),
                  [](T acc, T v) { return v > acc ? v : acc; });
      return;
    }
    reduce_loop(x, y, l, T(0), [](T acc, T v) { return acc + v; });
    if (op == ReduceOp::mean) {
      const T s = T(1) / static_cast<T>(l.reduced_count());
      for (std::int64_t i = 0; i < l.out_numel; ++i) y[i] = y[i] * s;
    }
  }

  // The sum of x's squares in any order, vectorised (not part of the
  // backend concept: a host-side test, clip_task_norms's).
  template <class T>
  static double squared_norm(const T* x, std::int64_t n) {
    return static_cast<double>(
        Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(x, n).square().sum());
  }

  // ---- layout ----
  template <class T>
  static void strided_copy(const T* src, T* dst, const CopyLayout& l) {
    if (l.rank == 0) {
      *dst = *src;
      return;
    }
    const int last = l.rank - 1;
    const std::int64_t inner = l.dims[last], ss = l.stride_src[last], sd = l.stride_dst[last];
    for_each_row(l.rank, l.dims, l.stride_src, l.stride_dst, [&](auto os, auto od) {
      const T* s = src + os;
      T* d = dst + od;
      if (ss == 1 && sd == 1) {
        // Eigen's packet loop: a call to memmove costs more than a short row.
        using Row = Eigen::Array<T, Eigen::Dynamic, 1>;
        Eigen::Map<Row>(d, inner) = Eigen::Map<const Row>(s, inner);
      } else {
        for (std::int64_t i = 0; i < inner; ++i) d[i * sd] = s[i * ss];
      }
    });
  }

  template <class T>
  static void foreach_strided_copy(const CopiesLayout<T>& l) {
    for (int i = 0; i < l.count; ++i)
      if (l.src[i])
        strided_copy(l.src[i], l.dst[i], l.copy[i]);
      else
        zero_block(l.dst[i], l.copy[i]);
  }

  // ---- GEMM ----
  template <class T>
  static void gemm(const GemmLayout<T>& g, const T* a, const T* b, T* c) {
    if (!detail::cpu_small_gemm::small_gemm(g, a, b, c)) eigen_gemm(g, a, b, c);
  }
  template <class T>
  static void gemms(const GemmsLayout<T>& l) {
    for (int i = 0; i < l.count; ++i) gemm(l.gemm[i], l.a[i], l.b[i], l.c[i]);
    if (l.sums) sum_rows(l.bias, l.sums, [g = l.rows](std::int64_t at) { return g[at]; });
  }
  template <class T>
  static void linear(const LinearLayout<T>& l, const T* a, const T* b, const T* bias, T* c) {
    detail::linear_in_parts<cpu>(l, a, b, bias, c);
  }
  template <class T>
  static void relu_bias_backward(const BiasLayout& l, const T* g, const T* y, T* dx, T* db) {
    sum_rows(l, db, [=](std::int64_t at) {
      return dx[at] = y[at] > T(0) ? g[at] : T(0);  // relu_backward's formula (op_codes.hpp)
    });
  }
  // Eigen's product for each matrix of the batch: the products small_gemm
  // does not take, and every product of a build without libxsmm.
  template <class T>
  static void eigen_gemm(const GemmLayout<T>& g, const T* a, const T* b, T* c) {
    using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const auto a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
    const auto b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
    for (std::int64_t i = 0; i < g.batch; ++i) {
      Eigen::Map<const Matrix> A(a + i * g.stride_a, a_rows, a_cols);
      Eigen::Map<const Matrix> B(b + i * g.stride_b, b_rows, b_cols);
      Eigen::Map<Matrix> C(c + i * g.stride_c, g.m, g.n);
      if (g.beta == T(0))
        C.setZero();
      else if (g.beta != T(1))
        C *= g.beta;
      if (g.trans_a && g.trans_b)
        C.noalias() += g.alpha * A.transpose() * B.transpose();
      else if (g.trans_a)
        C.noalias() += g.alpha * A.transpose() * B;
      else if (g.trans_b)
        C.noalias() += g.alpha * A * B.transpose();
      else
        C.noalias() += g.alpha * A * B;
    }
  }

  // ---- indexing ----
  template <class T>
  static void gather(const T* src, const std::int64_t* index, T* dst, const IndexLayout& l) {
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t j = 0; j < l.count; ++j)
        std::copy_n(src + (o * l.source_axis + index[j]) * l.inner, l.inner,
                    dst + (o * l.count + j) * l.inner);
  }
  // dst is zeroed a block at a time just ahead of the sums that land in it
  // (for any order of the indices: everything below `zeroed` is zeros or
  // sums), so that where the indices mostly ascend, as max pooling's
  // positions do, each block is written while it is in cache rather than
  // zero-filled in a sweep of its own (the same sums onto the same zeros).
  template <class T>
  static void scatter_add(const T* src, const std::int64_t* index, T* dst, const IndexLayout& l) {
    scatter_add_of(index, dst, l, [src](std::int64_t i) { return src[i]; });
  }

  // ---- convolution and pooling (backend/cpu/convolution.hpp) ----
  template <class T>
  static void conv2d(const ConvLayout& l, const T* x, const T* w, const T* bias, T* y) {
    detail::cpu_convolution::forward(l, x, w, bias, y);
  }
  template <class T>
  static void conv2d_input_grad(const ConvLayout& l, const T* dy, const T* w, T* dx) {
    detail::cpu_convolution::input_grad(l, dy, w, dx);
  }
  template <class T>
  static void conv2d_weight_grad(const ConvLayout& l, const T* x, const T* dy, T* dw) {
    detail::cpu_convolution::weight_grad(l, x, dy, dw);
  }
  template <class T>
  static void max_pool2d(const PoolLayout& l, const T* x, T* y, std::int64_t* positions) {
    detail::cpu_convolution::max_pool(l, x, y, positions);
    if (l.relu)  // on the outputs while they are in cache: relu's formula
      for (std::int64_t i = 0; i < l.planes * l.ho * l.wo; ++i) y[i] = functors::relu{}(y[i], T(0));
  }
  // scatter_add of relu_backward's values (or g's), as those two did it.
  template <class T>
  static void max_pool2d_backward(const PoolLayout& l, const T* g, const T* y,
                                  const std::int64_t* positions, T* dx) {
    const IndexLayout at{.outer = 1,
                         .inner = 1,
                         .source_axis = l.planes * l.h * l.w,
                         .count = l.planes * l.ho * l.wo};
    if (l.relu)
      scatter_add_of(positions, dx, at,
                     [g, y](std::int64_t i) { return functors::relu_backward{}(g[i], y[i]); });
    else
      scatter_add(g, positions, dx, at);
  }
  template <class T>
  static void max_pool2d_double_backward(const PoolLayout& l, const T* h, const T* y,
                                         const std::int64_t* positions, T* dg) {
    for (std::int64_t i = 0; i < l.planes * l.ho * l.wo; ++i)
      dg[i] = l.relu ? functors::relu_backward{}(h[positions[i]], y[i]) : h[positions[i]];
  }

  // ---- batch normalisation (backend/cpu/normalization.hpp) ----
  template <class T>
  static void batch_norm(const NormLayout& l, const T* x, T epsilon, const T* scale, const T* shift,
                         T* x_hat, T* inv_std, T* y) {
    detail::cpu_normalization::forward(l, x, epsilon, scale, shift, x_hat, inv_std, y);
  }
  template <class T>
  static void batch_norm_backward(const NormLayout& l, const T* x_hat, const T* inv_std,
                                  const T* scale, const T* g, const T* g_x_hat, const T* g_inv_std,
                                  T* dx, T* d_scale, T* d_shift) {
    detail::cpu_normalization::backward(l, x_hat, inv_std, scale, g, g_x_hat, g_inv_std, dx,
                                        d_scale, d_shift);
  }
  template <class T>
  static void batch_norm_double_backward(const NormLayout& l, const T* x_hat, const T* inv_std,
                                         const T* scale, const T* g, const T* sum_xg,
                                         const T* sum_g, const T* h, const T* k, const T* u,
                                         T* d_x_hat, T* d_inv_std, T* d_scale, T* d_g) {
    detail::cpu_normalization::double_backward(l, x_hat, inv_std, scale, g, sum_xg, sum_g, h, k, u,
                                               d_x_hat, d_inv_std, d_scale, d_g);
  }

  // ---- random ----
  template <class T>
  static void fill_uniform(T* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                           std::uint64_t block) {
    philox_fill(y, n, seed, stream, block,
                [](const PhiloxBlock& b, int lane) { return PhiloxDraw<T>::uniform(b, lane); });
  }
  template <class T>
  static void fill_normal(T* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                          std::uint64_t block) {
    if constexpr (std::is_same_v<T, float>) {
      normal_float(y, n, seed, stream, block);
    } else {
      philox_fill(y, n, seed, stream, block,
                  [](const PhiloxBlock& b, int lane) { return PhiloxDraw<T>::normal(b, lane); });
    }
  }
  template <class T>
  static void fill_normal_rows(T* y, std::int64_t rows, std::int64_t n, std::uint64_t seed,
                               const TaskStreams& streams, std::uint64_t block) {
    for (std::int64_t r = 0; r < rows; ++r)
      fill_normal(y + r * n, n, seed, task_stream(streams, r), block);
  }
  template <class T>
  static void foreach_fill_normal_rows(const NormalRowsLayout<T>& l, std::uint64_t seed,
                                       const TaskStreams& streams) {
    for (int i = 0; i < l.count; ++i)
      fill_normal_rows(l.y[i], l.rows, l.n[i], seed, streams, l.block[i]);
  }

 private:
  // add_n's y = base ± x[k], or ±x[k] where base is null, in one pass.
  template <class T>
  static void add_summand(const SummandsLayout<T>& l, std::size_t k, const T* base) {
    T* y = l.y;
    const bool negate = l.negate[k];
    for_summand(l, k, [&](std::int64_t i, std::int64_t n, const T* x, auto step) {
      const T repeated = *x;  // read once, so that the loops vectorise
      const auto at = [&](std::int64_t t) {
        if constexpr (decltype(step)::value == 1) return x[t];
        return repeated;
      };
      if (!base && negate)
        for (std::int64_t t = 0; t < n; ++t) y[i + t] = -at(t);
      else if (!base)
        for (std::int64_t t = 0; t < n; ++t) y[i + t] = at(t);
      else if (negate)
        for (std::int64_t t = 0; t < n; ++t) y[i + t] = base[i + t] - at(t);
      else
        for (std::int64_t t = 0; t < n; ++t) y[i + t] = base[i + t] + at(t);
    });
  }
  // f(i, n, x, step) over the stretches of add_n's y that summand k adds to
  // in order: y[i], ..., y[i + n - 1] take x[0], x[step], ..., step 1 (a
  // contiguous stretch) or 0 (one element repeated), a compile-time
  // constant (std::integral_constant).
  template <class T, class F>
  static void for_summand(const SummandsLayout<T>& l, std::size_t k, F f) {
    constexpr std::integral_constant<std::int64_t, 1> contiguous;
    constexpr std::integral_constant<std::int64_t, 0> repeated;
    const Repetition& r = l.repetition[k];
    const T* x = l.x[k];
    if (r.none()) return f(0, l.n, x, contiguous);
    const std::int64_t block = r.middle * r.inner;  // x's elements per outer index
    for (std::int64_t i = 0, o = 0; i < l.n; o += block)
      for (std::int64_t a = 0; a < r.outer_repeat; ++a)
        for (std::int64_t m = o; m < o + block; m += r.inner) {
          if (r.inner == 1) {
            f(i, r.inner_repeat, x + m, repeated);
            i += r.inner_repeat;
          } else {
            for (std::int64_t b = 0; b < r.inner_repeat; ++b, i += r.inner)
              f(i, r.inner, x + m, contiguous);
          }
        }
  }
  // y = r g over n elements, r's rn values repeated along them; -(r g) where
  // Negated, in the same pass as (-r) g, which has its bits.
  template <bool Negated = false, class T>
  static void repeated_products(const T* r, const T* g, T* y, std::int64_t n, std::int64_t rn) {
    const auto rate = [r](std::int64_t j) {
      return Negated ? -r[j] : r[j];
    };
    if (rn == 1) {
      const T r0 = rate(0);
      for (std::int64_t j = 0; j < n; ++j) y[j] = r0 * g[j];
    } else {
      for (std::int64_t o = 0; o < n; o += rn)
        for (std::int64_t j = 0; j < rn; ++j) y[o + j] = rate(j) * g[o + j];
    }
  }
  // Writes the whole block at once: a cached block serves requests of several
  // sizes in its class, and pages first touched by a later, larger request
  // would grow the resident set for hundreds of steps (a conv4 meta-step by
  // 4 MB a step, benchmarks/README.md). Committed now, it stays flat.
  static void* raw_allocate(std::size_t bytes) {
    void* block = ::operator new (bytes, std::align_val_t{alignment});
    std::memset(block, 0, bytes);
    return block;
  }
  static void raw_free(void* p) { ::operator delete (p, std::align_val_t{alignment}); }
  using Cache = detail::BlockCache<&raw_allocate, &raw_free>;

  // Zeros into strided_copy's destination block.
  template <class T>
  static void zero_block(T* dst, const CopyLayout& l) {
    if (l.rank == 0) {
      *dst = T(0);
      return;
    }
    const int last = l.rank - 1;
    const std::int64_t inner = l.dims[last], sd = l.stride_dst[last];
    for_each_row(l.rank, l.dims, l.stride_dst, l.stride_dst, [&](auto od, auto) {
      T* d = dst + od;
      for (std::int64_t i = 0; i < inner; ++i) d[i * sd] = T(0);
    });
  }

  // Calls f(offset0, offset1) for every row (every multi-index over all axes
  // but the last): the offsets of its first element under strides s0 and s1,
  // kept as running sums, which a short row would otherwise spend longer
  // recomputing than copying.
  template <class F>
  static void for_each_row(int rank, const Strides& dims, const Strides& s0, const Strides& s1,
                           F&& f) {
    Strides index{};
    std::int64_t rows = 1, o0 = 0, o1 = 0;
    for (int a = 0; a + 1 < rank; ++a) rows *= dims[a];
    for (std::int64_t r = 0; r < rows; ++r) {
      f(o0, o1);
      for (int a = rank - 2; a >= 0; --a) {
        o0 += s0[a];
        o1 += s1[a];
        if (++index[a] < dims[a]) break;
        o0 -= dims[a] * s0[a];
        o1 -= dims[a] * s1[a];
        index[a] = 0;
      }
    }
  }

  template <class F, class T>
  static void broadcast_loop(F f, const T* a, const T* b, T* y, const BroadcastLayout& l) {
    if (l.rank == 0) {
      *y = f(*a, *b);
      return;
    }
    const int last = l.rank - 1;
    const std::int64_t inner = l.dims[last], sa = l.stride_a[last], sb = l.stride_b[last];
    for_each_row(l.rank, l.dims, l.stride_a, l.stride_b, [&](auto oa, auto ob) {
      const T* pa = a + oa;
      const T* pb = b + ob;
      // The inner loop specialised on the common stride pairs, so that it vectorises.
      if (sa == 1 && sb == 1) {
        for (std::int64_t i = 0; i < inner; ++i) y[i] = f(pa[i], pb[i]);
      } else if (sa == 1 && sb == 0) {
        const T vb = *pb;
        for (std::int64_t i = 0; i < inner; ++i) y[i] = f(pa[i], vb);
      } else if (sa == 0 && sb == 1) {
        const T va = *pa;
        for (std::int64_t i = 0; i < inner; ++i) y[i] = f(va, pb[i]);
      } else {
        for (std::int64_t i = 0; i < inner; ++i) y[i] = f(pa[i * sa], pb[i * sb]);
      }
      y += inner;
    });
  }

  // scatter_add's loop with the source's element i given by source(i).
  template <class T, class Source>
  static void scatter_add_of(const std::int64_t* index, T* dst, const IndexLayout& l,
                             Source source) {
    constexpr std::int64_t block = 4096;
    const std::int64_t size = l.outer * l.source_axis * l.inner;
    std::int64_t zeroed = 0;
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t j = 0; j < l.count; ++j) {
        const std::int64_t from = (o * l.count + j) * l.inner;
        const std::int64_t at = (o * l.source_axis + index[j]) * l.inner;
        if (at + l.inner > zeroed) {
          const std::int64_t to = std::min(size, std::max(at + l.inner, zeroed + block));
          std::fill(dst + zeroed, dst + to, T(0));
          zeroed = to;
        }
        for (std::int64_t i = 0; i < l.inner; ++i) dst[at + i] += source(from + i);
      }
    std::fill(dst + zeroed, dst + size, T(0));
  }

  // Each batch entry's rows of element(at), at the flat index of a
  // [batch, rows, n] block, summed into its n elements of db from +0, rows
  // in order: reduce_loop's order, so sum_to's bits.
  template <class T, class Element>
  static void sum_rows(const BiasLayout& l, T* db, Element element) {
    for (std::int64_t k = 0, row = 0; k < l.batch; ++k, db += l.n) {
      std::fill_n(db, l.n, T(0));
      for (std::int64_t r = 0; r < l.rows; ++r, row += l.n)
        for (std::int64_t i = 0; i < l.n; ++i) db[i] = db[i] + element(row + i);
    }
  }

  template <class T, class Combine>
  static void reduce_loop(const T* x, T* y, const ReduceLayout& l, T identity, Combine combine) {
    std::fill(y, y + l.out_numel, identity);
    if (l.rank == 0) {
      *y = combine(*y, *x);
      return;
    }
    // Specialised on a contiguous row (all but a slice's rows of width 1),
    // so that the inner loops vectorise.
    const std::int64_t si = l.stride_in[l.rank - 1];
    if (si == 1)
      reduce_rows(x, y, l, combine, std::integral_constant<std::int64_t, 1>{});
    else
      reduce_rows(x, y, l, combine, si);
  }

  template <class T, class Combine, class Stride>
  static void reduce_rows(const T* x, T* y, const ReduceLayout& l, Combine combine, Stride si) {
    const int last = l.rank - 1;
    const std::int64_t inner = l.dims[last], so = l.stride_out[last];
    if (so != 0) {
      for_each_row(l.rank, l.dims, l.stride_out, l.stride_in, [&](auto oo, auto io) {
        T* out = y + oo;
        const T* in = x + io;
        if (so == 1)
          for (std::int64_t i = 0; i < inner; ++i) out[i] = combine(out[i], in[i * si]);
        else
          for (std::int64_t i = 0; i < inner; ++i) out[i * so] = combine(out[i * so], in[i * si]);
      });
      return;
    }
    // Each row folds into one output, a serial chain bound by the add's
    // latency (a conv bias's gradient sums H W elements a row). Up to eight
    // rows with distinct outputs run as independent chains side by side;
    // each output still takes its rows, and their elements, in order, so
    // the sums are the same bits as one row at a time.
    constexpr int lanes = 8;
    std::array<T*, lanes> outs{};
    std::array<const T*, lanes> ins{};
    int pending = 0;
    const auto flush = [&] {
      if (pending == lanes) {
        std::array<T, lanes> acc;
        for (int k = 0; k < lanes; ++k) acc[k] = *outs[k];
        for (std::int64_t i = 0; i < inner; ++i)
          for (int k = 0; k < lanes; ++k) acc[k] = combine(acc[k], ins[k][i * si]);
        for (int k = 0; k < lanes; ++k) *outs[k] = acc[k];
      } else {
        for (int k = 0; k < pending; ++k) {
          T acc = *outs[k];
          for (std::int64_t i = 0; i < inner; ++i) acc = combine(acc, ins[k][i * si]);
          *outs[k] = acc;
        }
      }
      pending = 0;
    };
    for_each_row(l.rank, l.dims, l.stride_out, l.stride_in, [&](auto oo, auto io) {
      T* out = y + oo;
      if (pending == lanes ||
          std::find(outs.begin(), outs.begin() + pending, out) != outs.begin() + pending)
        flush();
      outs[pending] = out;
      ins[pending++] = x + io;
    });
    flush();
  }

  // Box-Muller for float fills, with Eigen's vectorised log, sin and cos:
  // pair p (elements 2p, 2p + 1) reads lanes 2 (p % 2) and 2 (p % 2) + 1 of
  // block p / 2, as PhiloxDraw<float>::normal defines. Each block is
  // computed once for its two pairs.
  static void normal_float(float* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                           std::uint64_t block) {
    using Array = Eigen::ArrayXf;
    constexpr std::int64_t chunk = 1024;  // pairs per pass (even), so temporaries stay in L1
    Array u0(chunk), u1(chunk), radius(chunk), angle(chunk);
    std::array<PhiloxBlock, chunk / 2> blocks;
    const std::int64_t total_pairs = (n + 1) / 2;
    for (std::int64_t first = 0; first < total_pairs; first += chunk) {
      const std::int64_t pairs = std::min(chunk, total_pairs - first);
      philox4x32_10_blocks(seed, block + static_cast<std::uint64_t>(first / 2), stream,
                           (pairs + 1) / 2, blocks.data());
      for (std::int64_t j = 0; 2 * j < pairs; ++j) {
        const PhiloxBlock& b = blocks[static_cast<std::size_t>(j)];
        u0[2 * j] = PhiloxDraw<float>::uniform(b, 0);
        u1[2 * j] = PhiloxDraw<float>::uniform(b, 1);
        u0[2 * j + 1] = PhiloxDraw<float>::uniform(b, 2);
        u1[2 * j + 1] = PhiloxDraw<float>::uniform(b, 3);
      }
      radius.head(pairs) = (-2.0f * u0.head(pairs).log()).sqrt();
      angle.head(pairs) = PhiloxDraw<float>::two_pi * u1.head(pairs);
      const Array cosine = radius.head(pairs) * angle.head(pairs).cos();
      const Array sine = radius.head(pairs) * angle.head(pairs).sin();
      for (std::int64_t p = 0; p < pairs; ++p) {
        const std::int64_t i = 2 * (first + p);
        y[i] = cosine[p];
        if (i + 1 < n) y[i + 1] = sine[p];
      }
    }
  }

  template <class T, class Draw>
  static void philox_fill(T* y, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                          std::uint64_t block, Draw draw) {
    constexpr int per = PhiloxDraw<T>::per_block;
    constexpr std::int64_t chunk = 256;  // blocks per pass, so they stay in L1
    std::array<PhiloxBlock, chunk> blocks;
    for (std::int64_t first = 0; first * per < n; first += chunk) {
      const std::int64_t count = std::min(chunk, (n - first * per + per - 1) / per);
      philox4x32_10_blocks(seed, block + static_cast<std::uint64_t>(first), stream, count,
                           blocks.data());
      for (std::int64_t j = 0; j < count; ++j) {
        const std::int64_t i = (first + j) * per;
        for (int lane = 0; lane < per && i + lane < n; ++lane)
          y[i + lane] = draw(blocks[static_cast<std::size_t>(j)], lane);
      }
    }
  }
};

static_assert(Backend<cpu>);

}  // namespace platipus
