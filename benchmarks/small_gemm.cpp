// The products of an MLP meta-step on one chunk of 13 tasks (10 points, 40
// features): X W, dY W^T and X^T dY, through cpu::gemm (libxsmm's kernels
// where the build has them, backend/cpu/small_gemm.hpp) and through
// cpu::eigen_gemm, the path a build without libxsmm takes.
#include <benchmark/benchmark.h>

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
  for (auto _ : state) {
    if (state.range(1) == 0)
      cpu::gemm(g, a.data(), b.data(), c.data());
    else
      cpu::eigen_gemm(g, a.data(), b.data(), c.data());
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
