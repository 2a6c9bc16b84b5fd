// GraphedMetaStep: a meta-learner's training step on the CUDA backend,
// recorded once as a CUDA graph (backend/cuda/graph.hpp) and replayed for
// every later meta-batch of the same shapes; the role of PyTorch's
// torch.cuda.graphs.make_graphed_callables for a whole training step. All
// tasks, the inner loop, the meta-gradient through it and the Adam update
// run as one launch.
//
//   GraphedMetaStep step(platipus, sampler.sample(25, gen), gen);
//   for (...) step.step(sampler.sample(25, gen));   // queued, not waited for
//   step.statistics();                              // the latest step's
//
// Construction runs one ordinary meta-step on the batch (the warm-up, which
// makes what a learner creates on first use: the optimiser's moments, the
// thread's cuBLAS handle), then records a second one without running it.
// Each step() copies the batch into the recording's inputs and replays.
//
// What a recording fixes: the batch's shapes, every host-side setting (the
// inner step size, the KL weight, the optimiser's learning rate) and the
// learner's buffers. Replacing the meta-parameters (set_state, a checkpoint
// load) makes step() throw; record a new GraphedMetaStep. Random draws
// (PLATIPUS's eps, MAML + noise) are fresh on every replay, from a salt the
// generator seeds, but are not the numbers an eager step would draw. A
// learner says why it cannot be recorded through replay_obstacle(): more
// than one thread, or a KL weight still ramping up. Losses that read labels
// on the host (softmax cross-entropy) fail while recording, with a
// platipus::error naming the CUDA call.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <memory>
#include <string>
#include <vector>

#include "platipus/backend/cuda/cuda.hpp"
#include "platipus/backend/cuda/graph.hpp"
#include "platipus/meta/driver/concepts.hpp"
#include "platipus/meta/driver/step_statistics.hpp"

namespace platipus {

// What GraphedMetaStep needs of a learner; Maml and Platipus provide it.
template <class L, class T>
concept ReplayableLearner = requires(L& learner, const L& view, const TaskBatch<T, cuda>& batch,
                                     Generator& gen) {
  { learner.meta_train_step_async(batch, gen) } -> std::same_as<Tensor<T, cuda>>;
  { view.replay_obstacle() } -> std::convertible_to<std::string>;
  {view.state()};  // the meta-parameters by name, as (name, const Tensor*) pairs
};

template <class Learner, class T>
requires ReplayableLearner<Learner, T>
class GraphedMetaStep {
 public:
  GraphedMetaStep(Learner& learner, const TaskBatch<T, cuda>& batch, Generator& gen)
      : learner_(learner) {
    const std::string obstacle = learner.replay_obstacle();
    check(obstacle.empty(), "GraphedMetaStep", "this learner's meta-step cannot be recorded: {}",
          obstacle);
    check_batch(learner.objective().loss(), learner.objective().model(), batch, "GraphedMetaStep");
    const Tensor<T, cuda> warm_up = learner_.meta_train_step_async(batch, gen);
    inputs_ = {batch.support_x.clone(), batch.support_y.clone(), batch.query_x.clone(),
               batch.query_y.clone()};
    for (const auto& part : learner_.state()) buffers_.push_back(part.second->data());
    graph_ = std::make_unique<CudaGraph>(gen.bits());
    graph_->record([&] { statistics_ = learner_.meta_train_step_async(inputs_, gen); });
    cuda::copy(statistics_.data(), warm_up.data(), warm_up.bytes());
  }

  // One meta-step on `batch`, queued on the calling thread's stream.
  void step(const TaskBatch<T, cuda>& batch) {
    const auto from = tensors(batch);
    const auto to = tensors(inputs_);
    for (std::size_t i = 0; i < from.size(); ++i)
      check(from[i]->shape() == to[i]->shape(), "GraphedMetaStep::step",
            "{} is {}, but the recording's is {}", names[i], from[i]->shape(), to[i]->shape());
    std::size_t i = 0;
    for (const auto& part : learner_.state())
      check(i < buffers_.size() && part.second->data() == buffers_[i++], "GraphedMetaStep::step",
            "the learner's {} was replaced after recording; record a new GraphedMetaStep",
            part.first);
    for (std::size_t k = 0; k < from.size(); ++k)
      cuda::copy(to[k]->data(), from[k]->data(), to[k]->bytes());
    graph_->replay();
  }

  // Whether `batch` has the recording's shapes, the only ones step() takes.
  bool fits(const TaskBatch<T, cuda>& batch) const {
    return std::ranges::equal(tensors(batch), tensors(inputs_), [](const auto* a, const auto* b) {
      return a->shape() == b->shape();
    });
  }

  // The latest step's statistics (waits for it).
  MetaStepResult statistics() const {
    return MetaStepResult::read(statistics_, Learner::statistic_names);
  }

  // Kernels, copies and other nodes in the recording.
  std::size_t nodes() const { return graph_->nodes(); }
  // The kernel launches among them: what one replayed meta-step costs.
  std::size_t kernels() const { return graph_->kernels(); }

 private:
  static constexpr const char* names[] = {"support x", "support y", "query x", "query y"};
  // Pointers to a batch's tensors (const where it is), in the order of `names`.
  template <class Batch>
  static auto tensors(Batch& batch) {
    return std::array{&batch.support_x, &batch.support_y, &batch.query_x, &batch.query_y};
  }

  Learner& learner_;
  TaskBatch<T, cuda> inputs_;
  std::vector<const T*> buffers_;  // the meta-parameters' storage at recording
  Tensor<T, cuda> statistics_;     // written by every replay
  // Last, so that it goes first: no replay can outlive the buffers it writes.
  std::unique_ptr<CudaGraph> graph_;
};

}  // namespace platipus
