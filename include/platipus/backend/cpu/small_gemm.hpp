// Small matrix products through libxsmm's just-in-time kernels, when the build
// has libxsmm (PLATIPUS_HAVE_LIBXSMM, set by the platipus target where
// libxsmm is found). A meta-step's products are tiny (a task's 10 points
// times a 40 x 40 weight), where Eigen's GEMM spends as long packing its
// operands into panels as multiplying them: libxsmm generates one kernel per
// shape that reads the operands in place, about 2.5x Eigen's rate on these
// shapes (benchmarks/README.md). The kernels' sums are in their own order, so
// a build with libxsmm and one without give different bits; each is
// deterministic on any number of threads.
#pragma once

#include <cstdint>

#include "platipus/backend/layouts.hpp"

#ifdef PLATIPUS_HAVE_LIBXSMM
#include <type_traits>
#include <vector>

#include <libxsmm.h>
#endif

namespace platipus::detail::cpu_small_gemm {

// C = op(A) op(B) (+ C where beta is 1) for each matrix of g's batch, row-major,
// through libxsmm; false (nothing written) where it does not apply: a build
// without libxsmm, alpha other than 1, beta other than 0 or 1, a product
// larger than `largest_small_gemm` or a shape libxsmm has no kernel for.
inline constexpr std::int64_t largest_small_gemm = std::int64_t{256} * 256 * 256;

template <class T>
bool small_gemm([[maybe_unused]] GemmLayout<T> g, [[maybe_unused]] const T* a,
                [[maybe_unused]] const T* b, [[maybe_unused]] T* c) {
#ifdef PLATIPUS_HAVE_LIBXSMM
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (g.alpha != T(1) || (g.beta != T(0) && g.beta != T(1)) ||
        g.m * g.n * g.k > largest_small_gemm || g.k == 0)
      return false;
    // A vector's transpose is the same memory.
    if (g.n == 1 || g.k == 1) g.trans_b = false;
    // A column C = op(A) b is computed as the row C' = b' op(A)': the
    // kernels vectorise along C's rows, which a column has one of.
    if (g.n == 1 && g.m > 1) {
      GemmLayout<T> row = g;
      row.m = 1;
      row.n = g.m;
      row.trans_a = false;
      row.trans_b = !g.trans_a;
      row.stride_a = g.stride_b;
      row.stride_b = g.stride_a;
      return small_gemm(row, b, a, c);
    }
    // libxsmm is column-major: the row-major C = op(A) op(B) is the
    // column-major C' = op(B)' op(A)' with the operands' roles swapped. Its
    // kernels transpose their second operand but not their first, so a
    // transposed B is written out transposed first (n x k, small beside the
    // product's n k m).
    const auto m = static_cast<libxsmm_blasint>(g.n), n = static_cast<libxsmm_blasint>(g.m),
               k = static_cast<libxsmm_blasint>(g.k);
    const libxsmm_blasint lda = m, ldb = g.trans_a ? n : k, ldc = m;
    const int flags = g.trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
    const T alpha = 1, beta = g.beta;
    // A batch's kernel calls prefetch the next matrices.
    const int prefetch = g.batch > 1 ? LIBXSMM_PREFETCH_AUTO : LIBXSMM_PREFETCH_NONE;
    static const bool initialised = (libxsmm_init(), true);
    (void)initialised;
    const auto kernel = [&] {
      if constexpr (std::is_same_v<T, float>)
        return libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
      else
        return libxsmm_dmmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
    }();
    if (!kernel) return false;
    thread_local std::vector<T> transposed_b;
    if (g.trans_b) transposed_b.resize(static_cast<std::size_t>(g.k * g.n));
    for (std::int64_t i = 0; i < g.batch; ++i) {
      const T* bi = b + i * g.stride_b;
      if (g.trans_b && (i == 0 || g.stride_b != 0))  // B is stored n x k, read as k x n
        libxsmm_otrans(transposed_b.data(), bi, sizeof(T), k, m, k, m);
      const std::int64_t next = i + 1 < g.batch ? i + 1 : i;
      kernel(g.trans_b ? transposed_b.data() : bi, a + i * g.stride_a, c + i * g.stride_c,
             b + next * g.stride_b, a + next * g.stride_a, c + next * g.stride_c);
    }
    return true;
  }
#endif
  return false;
}

}  // namespace platipus::detail::cpu_small_gemm
