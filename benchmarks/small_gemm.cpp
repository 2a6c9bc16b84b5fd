// The products of an MLP meta-step on one chunk of 13 tasks (10 points, 40
// features): X W, dY W^T and X^T dY, through cpu::gemm (libxsmm's kernels
// where the build has them, backend/cpu/small_gemm.hpp) and through Eigen's
// product directly, the path a build without libxsmm takes.
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include "platipus/platipus.hpp"

using namespace platipus;

namespace {

constexpr std::int64_t tasks = 13, points = 10, features = 40;

// range(0): 0 X W, 1 dY W^T, 2 X^T dY; range(1): 0 cpu::gemm, 1 Eigen.
void small_gemm(benchmark::State& state) {
  const int product = static_cast<int>(state.range(0));
  GemmLayout<float> g{.trans_a = product == 2, .trans_b = product == 1};
  g.m = product == 2 ? features : points;
  g.n = features;
  g.k = product == 2 ? points : features;
  g.batch = tasks;
  g.stride_a = g.m * g.k;
  g.stride_b = g.k * g.n;
  g.stride_c = g.m * g.n;
  Generator gen(1);
  const auto a = raw::normal<float>({tasks, g.m * g.k}, gen);
  const auto b = raw::normal<float>({tasks, g.k * g.n}, gen);
  auto c = Tensor<float>::zeros({tasks, g.m * g.n});
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  for (auto _ : state) {
    if (state.range(1) == 0) {
      cpu::gemm(g, a.data(), b.data(), c.data());
    } else {
      for (std::int64_t i = 0; i < tasks; ++i) {
        Eigen::Map<const Matrix> A(a.data() + i * g.stride_a, product == 2 ? g.k : g.m,
                                   product == 2 ? g.m : g.k);
        Eigen::Map<const Matrix> B(b.data() + i * g.stride_b, product == 1 ? g.n : g.k,
                                   product == 1 ? g.k : g.n);
        Eigen::Map<Matrix> C(c.data() + i * g.stride_c, g.m, g.n);
        if (product == 0) C.noalias() = A * B;
        if (product == 1) C.noalias() = A * B.transpose();
        if (product == 2) C.noalias() = A.transpose() * B;
      }
    }
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel(std::string{product == 0   ? "X W"
                             : product == 1 ? "dY W^T"
                                            : "X^T dY"} +
                 (state.range(1) == 0 ? ", cpu::gemm" : ", Eigen"));
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(2 * tasks * g.m * g.n * g.k),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(small_gemm)->ArgsProduct({{0, 1, 2}, {0, 1}});

}  // namespace
