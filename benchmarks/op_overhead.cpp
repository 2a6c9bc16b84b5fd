// The fixed cost of recording an op: tiny tensors, so that the time is the
// tape's bookkeeping (arena records, buffer cache, rule capture), not math.
#include <benchmark/benchmark.h>

#include "platipus/platipus.hpp"

using namespace platipus;

namespace {

// 64 recorded ops (32 mul + 32 add) on 4-element tensors per iteration.
void recorded_ops(benchmark::State& state) {
  const auto a0 = Tensor<float>::ones({4}), b0 = Tensor<float>::full({4}, 0.5f);
  for (auto _ : state) {
    Tape<float> tape;
    auto a = tape.variable(a0.clone());
    const auto b = tape.variable(b0.clone());
    for (int i = 0; i < 32; ++i) a = a * b + b;
    benchmark::DoNotOptimize(a.value().data());
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(recorded_ops);

// The same ops plus the backward pass over them (64 more rule evaluations).
void recorded_ops_and_grad(benchmark::State& state) {
  const auto a0 = Tensor<float>::ones({4}), b0 = Tensor<float>::full({4}, 0.5f);
  for (auto _ : state) {
    Tape<float> tape;
    auto a = tape.variable(a0.clone());
    const auto b = tape.variable(b0.clone());
    for (int i = 0; i < 32; ++i) a = a * b + b;
    benchmark::DoNotOptimize(grad(sum(a), b).value().data());
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(recorded_ops_and_grad);

// Raw kernels without a tape, for comparison.
void raw_ops(benchmark::State& state) {
  const auto b = Tensor<float>::full({4}, 0.5f);
  for (auto _ : state) {
    auto a = Tensor<float>::ones({4});
    for (int i = 0; i < 32; ++i)
      a = raw::map(BinaryOp::add, raw::map(BinaryOp::mul, a, b, "mul"), b, "add");
    benchmark::DoNotOptimize(a.data());
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(raw_ops);

}  // namespace
