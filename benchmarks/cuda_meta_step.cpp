// One meta-step of second-order MAML and of PLATIPUS on the CUDA backend:
// the workloads of meta_step.cpp (and of peers/meta_step.py --device cuda).
// Eager steps take the number of host threads that run chunks of the
// meta-batch (one chunk per thread), each on its own stream, as the argument; for networks this
// small a step costs kernel launches, not arithmetic: fewer chunks mean
// fewer launches, more chunks mean more threads launching at once. The
// *_graph benchmarks replay the step recorded as one CUDA graph
// (meta/driver/graphed_step.hpp), the batch copied in each time, and count
// its kernels (kernels_per_step). device_MB is the process's peak device
// memory (cuda::peak_allocated_bytes): the workload's own when the benchmark
// runs alone in its process, as benchmarks/gpu_check.sh runs them.
#include <benchmark/benchmark.h>

#include "conv_workloads.hpp"
#include "platipus/backend/cuda/cuda.hpp"
#include "platipus/meta/driver/graphed_step.hpp"
#include "platipus/platipus.hpp"
#include "sinusoid_workloads.hpp"

using namespace platipus;

namespace {

using sinusoid_workloads::paper_network;
using sinusoid_workloads::small_network;

void cuda_maml_sinusoid(benchmark::State& state) {
  Generator gen(1);
  Maml<nn::Sequential, MseLoss, float, cuda> maml(
      small_network(), MseLoss{},
      {.inner_loop = {.steps = 5, .learning_rate = 0.01},
       .first_order = state.range(0) == 1,
       .driver = {.threads = static_cast<int>(state.range(1)),
                  .task_chunks = one_chunk_per_thread}},
      gen);
  const auto batch = sinusoid_workloads::batch<cuda>(gen);
  for (auto _ : state) {
    benchmark::DoNotOptimize(maml.meta_train_step(batch, gen));
    cuda::synchronize();  // the optimiser's kernels belong to this step
  }
  state.SetLabel(state.range(0) ? "first order" : "second order");
}
BENCHMARK(cuda_maml_sinusoid)
    ->ArgNames({"first_order", "threads"})
    ->ArgsProduct({{0, 1}, {1, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

template <nn::Sequential (*Network)()>
void cuda_platipus_sinusoid(benchmark::State& state) {
  Generator gen(2);
  Platipus<nn::Sequential, MseLoss, float, cuda> model(
      Network(), MseLoss{},
      {.inner_loop = {.steps = 5, .learning_rate = 0.01},
       .driver = {.threads = static_cast<int>(state.range(0)),
                  .task_chunks = one_chunk_per_thread}},
      gen);
  const auto batch = sinusoid_workloads::batch<cuda>(gen);
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.meta_train_step(batch, gen));
    cuda::synchronize();
  }
}
BENCHMARK(cuda_platipus_sinusoid<small_network>)
    ->Name("cuda_platipus_sinusoid/1-40-40-1")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(cuda_platipus_sinusoid<paper_network>)
    ->Name("cuda_platipus_sinusoid/paper_network")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Replays of a recorded step, each waited for as the eager steps are.
template <class Learner>
void replay(benchmark::State& state, Learner& learner, const TaskBatch<float, cuda>& batch,
            Generator& gen) {
  GraphedMetaStep step(learner, batch, gen);
  for (auto _ : state) {
    step.step(batch);
    cuda::synchronize();
  }
  state.counters["graph_nodes"] = static_cast<double>(step.nodes());
  state.counters["kernels_per_step"] = static_cast<double>(step.kernels());
  state.counters["device_MB"] = static_cast<double>(cuda::peak_allocated_bytes()) / 1e6;
}

void cuda_maml_sinusoid_graph(benchmark::State& state) {
  Generator gen(1);
  Maml<nn::Sequential, MseLoss, float, cuda> maml(
      small_network(), MseLoss{},
      {.inner_loop = {.steps = 5, .learning_rate = 0.01},
       .first_order = state.range(0) == 1,
       .driver = {.threads = 1}},
      gen);
  replay(state, maml, sinusoid_workloads::batch<cuda>(gen), gen);
  state.SetLabel(state.range(0) ? "first order" : "second order");
}
BENCHMARK(cuda_maml_sinusoid_graph)
    ->ArgName("first_order")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

template <nn::Sequential (*Network)()>
void cuda_platipus_sinusoid_graph(benchmark::State& state) {
  Generator gen(2);
  Platipus<nn::Sequential, MseLoss, float, cuda> model(
      Network(), MseLoss{},
      {.inner_loop = {.steps = 5, .learning_rate = 0.01}, .driver = {.threads = 1}}, gen);
  replay(state, model, sinusoid_workloads::batch<cuda>(gen), gen);
}
BENCHMARK(cuda_platipus_sinusoid_graph<small_network>)
    ->Name("cuda_platipus_sinusoid_graph/1-40-40-1")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(cuda_platipus_sinusoid_graph<paper_network>)
    ->Name("cuda_platipus_sinusoid_graph/paper_network")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Second-order MAML on conv4 (conv_workloads.hpp) with each convolution
// engine (engine:1 cuDNN, engine:2 im2col + cuBLAS, engine:0 the automatic
// choice), with batch norm as the examples train it (batch_norm:1) or
// without: eager on one thread (the first step, which chooses cuDNN's
// algorithms, not timed) and replayed as a CUDA graph. PLATIPUS on the
// MiniImagenet-sized conv4 with batch norm, replayed.
void use_engine(benchmark::State& state) {
  const auto engine = static_cast<ConvolutionEngine>(state.range(0));
  cuda::set_convolution_engine(engine);
  state.SetLabel(engine == ConvolutionEngine::automatic ? "automatic"
                 : engine == ConvolutionEngine::cudnn   ? "cuDNN"
                                                        : "im2col + cuBLAS");
}

template <const conv_workloads::Workload& W>
void cuda_maml_conv4(benchmark::State& state) {
  use_engine(state);
  Generator gen(3);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss, float, cuda> maml(
      conv_workloads::network(W, state.range(1) == 1), SoftmaxCrossEntropyLoss{},
      conv_workloads::settings(1), gen);
  const auto batch = conv_workloads::batch<cuda>(W, gen);
  maml.meta_train_step(batch, gen);
  cuda::synchronize();
  for (auto _ : state) {
    benchmark::DoNotOptimize(maml.meta_train_step(batch, gen));
    cuda::synchronize();
  }
  state.counters["device_MB"] = static_cast<double>(cuda::peak_allocated_bytes()) / 1e6;
}
BENCHMARK(cuda_maml_conv4<conv_workloads::miniimagenet>)
    ->ArgNames({"engine", "batch_norm"})
    ->ArgsProduct({{1, 2}, {1}})
    ->Name("cuda_maml_conv4/miniimagenet")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(cuda_maml_conv4<conv_workloads::omniglot>)
    ->ArgNames({"engine", "batch_norm"})
    ->ArgsProduct({{1, 2}, {1}})
    ->Name("cuda_maml_conv4/omniglot")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

template <const conv_workloads::Workload& W>
void cuda_maml_conv4_graph(benchmark::State& state) {
  use_engine(state);
  Generator gen(3);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss, float, cuda> maml(
      conv_workloads::network(W, state.range(1) == 1), SoftmaxCrossEntropyLoss{},
      conv_workloads::settings(1), gen);
  replay(state, maml, conv_workloads::batch<cuda>(W, gen), gen);
}
BENCHMARK(cuda_maml_conv4_graph<conv_workloads::miniimagenet>)
    ->ArgNames({"engine", "batch_norm"})
    ->ArgsProduct({{1, 2}, {1, 0}})
    ->Name("cuda_maml_conv4_graph/miniimagenet")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(cuda_maml_conv4_graph<conv_workloads::omniglot>)
    ->ArgNames({"engine", "batch_norm"})
    ->ArgsProduct({{1, 2}, {1, 0}})
    ->Name("cuda_maml_conv4_graph/omniglot")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void cuda_platipus_conv4_graph(benchmark::State& state) {
  use_engine(state);
  Generator gen(4);
  const auto maml = conv_workloads::settings(1);
  Platipus<nn::Sequential, SoftmaxCrossEntropyLoss, float, cuda> model(
      conv_workloads::network(conv_workloads::miniimagenet), SoftmaxCrossEntropyLoss{},
      {.inner_loop = maml.inner_loop, .driver = maml.driver}, gen);
  replay(state, model, conv_workloads::batch<cuda>(conv_workloads::miniimagenet, gen), gen);
}
BENCHMARK(cuda_platipus_conv4_graph)
    ->ArgName("engine")
    ->Arg(0)
    ->Name("cuda_platipus_conv4_graph/miniimagenet")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
