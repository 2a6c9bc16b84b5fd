// One meta-step of second-order MAML and of PLATIPUS on the sinusoid
// workloads of benchmarks/README.md, and of MAML on conv4. The same workloads run in PyTorch and
// JAX in benchmarks/peers/ for side-by-side ratios. Every learner takes one
// chunk of tasks per thread (one_chunk_per_thread), the cut benchmarks/README.md's
// figures were measured with; the default cut's cost is in README.md. Each
// reports the process's peak resident memory beside its time (run one
// benchmark per process for a clean figure).
#include <benchmark/benchmark.h>

#include "conv_workloads.hpp"
#include "platipus/platipus.hpp"
#include "sinusoid_workloads.hpp"

using namespace platipus;

namespace {

using sinusoid_workloads::paper_network;
using sinusoid_workloads::small_network;

void maml_sinusoid(benchmark::State& state) {
  memory::reset_peak_resident();
  Generator gen(1);
  Maml<nn::Sequential, MseLoss> maml(small_network(), MseLoss{},
                                     {.inner_loop = {.steps = 5, .learning_rate = 0.01},
                                      .first_order = state.range(0) == 1,
                                      .driver = {.task_chunks = one_chunk_per_thread}},
                                     gen);
  const auto batch = sinusoid_workloads::batch<cpu>(gen);
  for (auto _ : state) benchmark::DoNotOptimize(maml.meta_train_step(batch, gen));
  state.SetLabel(state.range(0) ? "first order" : "second order");
  state.counters["peak_resident_MB"] = static_cast<double>(memory::peak_resident_bytes()) / 1e6;
}
BENCHMARK(maml_sinusoid)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

template <nn::Sequential (*Network)()>
void platipus_sinusoid(benchmark::State& state) {
  memory::reset_peak_resident();
  Generator gen(2);
  Platipus<nn::Sequential, MseLoss> model(Network(), MseLoss{},
                                          {.inner_loop = {.steps = 5, .learning_rate = 0.01},
                                           .driver = {.task_chunks = one_chunk_per_thread}},
                                          gen);
  const auto batch = sinusoid_workloads::batch<cpu>(gen);
  for (auto _ : state) benchmark::DoNotOptimize(model.meta_train_step(batch, gen));
  state.counters["peak_resident_MB"] = static_cast<double>(memory::peak_resident_bytes()) / 1e6;
}
BENCHMARK(platipus_sinusoid<small_network>)
    ->Name("platipus_sinusoid/1-40-40-1")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(platipus_sinusoid<paper_network>)
    ->Name("platipus_sinusoid/paper_network")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Meta-steps of `learner` on conv4 (conv_workloads.hpp) after one untimed
// step, which fills the buffer caches (gigabytes, page by page); reports the
// process's peak resident memory over the benchmark beside the time.
template <class Learner>
void conv4_steps(benchmark::State& state, Learner& learner, const conv_workloads::Workload& w,
                 Generator& gen) {
  const auto batch = conv_workloads::batch<cpu>(w, gen);
  learner.meta_train_step(batch, gen);
  for (auto _ : state) benchmark::DoNotOptimize(learner.meta_train_step(batch, gen));
  state.counters["peak_resident_MB"] = static_cast<double>(memory::peak_resident_bytes()) / 1e6;
}

// Second-order MAML on conv4, with batch norm (as the examples train it) or
// without (the `_no_bn` variants), on the default threads.
template <const conv_workloads::Workload& W, bool BatchNorm>
void maml_conv4(benchmark::State& state) {
  memory::reset_peak_resident();
  Generator gen(3);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss> maml(conv_workloads::network(W, BatchNorm),
                                                     SoftmaxCrossEntropyLoss{},
                                                     conv_workloads::settings(0), gen);
  conv4_steps(state, maml, W, gen);
}
BENCHMARK(maml_conv4<conv_workloads::miniimagenet, true>)
    ->Name("maml_conv4/miniimagenet")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(maml_conv4<conv_workloads::omniglot, true>)
    ->Name("maml_conv4/omniglot")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(maml_conv4<conv_workloads::miniimagenet, false>)
    ->Name("maml_conv4_no_bn/miniimagenet")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(maml_conv4<conv_workloads::omniglot, false>)
    ->Name("maml_conv4_no_bn/omniglot")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// PLATIPUS (Algorithm 1, one mean step for the prior and the posterior) on
// conv4 with batch norm, the MiniImagenet-sized workload.
void platipus_conv4(benchmark::State& state) {
  memory::reset_peak_resident();
  Generator gen(4);
  const auto maml = conv_workloads::settings(0);
  Platipus<nn::Sequential, SoftmaxCrossEntropyLoss> model(
      conv_workloads::network(conv_workloads::miniimagenet), SoftmaxCrossEntropyLoss{},
      {.inner_loop = maml.inner_loop, .driver = maml.driver}, gen);
  conv4_steps(state, model, conv_workloads::miniimagenet, gen);
}
BENCHMARK(platipus_conv4)
    ->Name("platipus_conv4/miniimagenet")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
