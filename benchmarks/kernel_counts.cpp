// Kernels per meta-step of the workloads that cuda_meta_step.cpp replays as
// CUDA graphs (and of the paper network on the Gaussian NLL the regression
// examples train on), counted without a device: each learner on
// CountingBackend<cpu> (backend/counting.hpp), which cuts the meta-batch as
// platipus::cuda does (one chunk, one thread) and counts every backend call
// of one meta-step, taken after a first step that also makes Adam's
// moments. A replay's kernels_per_step on a device is this count plus the
// launches that a call makes beyond one kernel (cuDNN's own transposes,
// cuBLAS's split products); benchmarks/README.md puts the two side by side.
//
//   kernel_counts              every workload (the conv4 ones take seconds)
//   kernel_counts maml         those whose name contains "maml"
#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "conv_workloads.hpp"
#include "platipus/backend/counting.hpp"
#include "platipus/platipus.hpp"
#include "sinusoid_workloads.hpp"

using namespace platipus;

namespace {

using counted = CountingBackend<cpu>;
using sinusoid_workloads::paper_network;
using sinusoid_workloads::small_network;

// The calls of the learner's second meta-step on `batch`.
template <class Learner>
KernelCalls second_step(Learner& learner, const TaskBatch<float, counted>& batch, Generator& gen) {
  learner.meta_train_step(batch, gen);
  counted::reset();
  learner.meta_train_step(batch, gen);
  return counted::calls();
}

template <class Loss>
KernelCalls maml_sinusoid(nn::Sequential network, Loss loss, bool first_order) {
  Generator gen(1);
  Maml<nn::Sequential, Loss, float, counted> maml(
      std::move(network), loss,
      {.inner_loop = {.steps = 5, .learning_rate = 0.01}, .first_order = first_order}, gen);
  const auto batch = sinusoid_workloads::batch<counted>(gen);
  return second_step(maml, batch, gen);
}

template <class Loss>
KernelCalls platipus_sinusoid(nn::Sequential network, Loss loss) {
  Generator gen(2);
  Platipus<nn::Sequential, Loss, float, counted> model(
      std::move(network), loss, {.inner_loop = {.steps = 5, .learning_rate = 0.01}}, gen);
  const auto batch = sinusoid_workloads::batch<counted>(gen);
  return second_step(model, batch, gen);
}

// The likelihood the regression examples train on (sine_line,
// active_learning, algorithms): the Gaussian NLL at the tasks' known noise.
const GaussianNllLoss examples_loss{.noise_std = data::SinusoidLineSettings{}.noise_std};

template <const conv_workloads::Workload& W, bool BatchNorm>
KernelCalls maml_conv4() {
  Generator gen(3);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss, float, counted> maml(
      conv_workloads::network(W, BatchNorm), SoftmaxCrossEntropyLoss{}, conv_workloads::settings(0),
      gen);
  return second_step(maml, conv_workloads::batch<counted>(W, gen), gen);
}

KernelCalls platipus_conv4() {
  Generator gen(4);
  const auto maml = conv_workloads::settings(0);
  Platipus<nn::Sequential, SoftmaxCrossEntropyLoss, float, counted> model(
      conv_workloads::network(conv_workloads::miniimagenet), SoftmaxCrossEntropyLoss{},
      {.inner_loop = maml.inner_loop, .driver = maml.driver}, gen);
  return second_step(model, conv_workloads::batch<counted>(conv_workloads::miniimagenet, gen), gen);
}

// Byte copies are a graph's memcpy nodes, not kernels.
bool is_copy(const std::string& name) {
  return name.starts_with("copy");
}

void print(const std::string& workload, const KernelCalls& calls) {
  std::vector<std::pair<std::string, std::uint64_t>> rows(calls.by_name.begin(),
                                                          calls.by_name.end());
  std::ranges::stable_sort(rows, std::greater{}, &std::pair<std::string, std::uint64_t>::second);
  std::uint64_t kernels = 0, copies = 0;
  for (const auto& [name, count] : rows) (is_copy(name) ? copies : kernels) += count;
  fmt::print("{}: {} kernels and {} copies per meta-step\n", workload, kernels, copies);
  for (const auto& [name, count] : rows) fmt::print("  {:>6}  {}\n", count, name);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  const std::vector<std::pair<std::string, std::function<KernelCalls()>>> workloads = {
      {"maml_sinusoid/second_order",
       [] {
         return maml_sinusoid(small_network(), MseLoss{}, false);
       }},
      {"maml_sinusoid/first_order",
       [] {
         return maml_sinusoid(small_network(), MseLoss{}, true);
       }},
      {"platipus_sinusoid/1-40-40-1",
       [] {
         return platipus_sinusoid(small_network(), MseLoss{});
       }},
      {"platipus_sinusoid/paper_network",
       [] {
         return platipus_sinusoid(paper_network(), MseLoss{});
       }},
      {"maml_sinusoid/paper_network_gaussian_nll",
       [] {
         return maml_sinusoid(paper_network(), examples_loss, false);
       }},
      {"platipus_sinusoid/paper_network_gaussian_nll",
       [] {
         return platipus_sinusoid(paper_network(), examples_loss);
       }},
      {"maml_conv4/miniimagenet", maml_conv4<conv_workloads::miniimagenet, true>},
      {"maml_conv4/omniglot", maml_conv4<conv_workloads::omniglot, true>},
      {"maml_conv4_no_bn/miniimagenet", maml_conv4<conv_workloads::miniimagenet, false>},
      {"maml_conv4_no_bn/omniglot", maml_conv4<conv_workloads::omniglot, false>},
      {"platipus_conv4/miniimagenet", platipus_conv4},
  };
  for (const auto& [name, count] : workloads)
    if (name.find(filter) != std::string::npos) print(name, count());
}
