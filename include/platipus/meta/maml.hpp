// MAML (Finn, Abbeel, Levine, ICML 2017) and its "MAML + noise" baseline.
//
//   phi_i = theta - alpha grad L(theta, D_train_i)   (K steps)
//   theta <- Adam( mean_i L(phi_i, D_test_i) )      differentiated through
//                                                   the K steps (second order
//                                                   unless first_order)
//
// All tasks of a meta-batch run as one computation: theta is expanded to
// [tasks, P] and every layer is a batched op over the task axis. With
// inner_gradient_noise > 0 the inner gradient gets N(0, s^2) noise during
// meta-training and adaptation: the "MAML + noise" baseline of the PLATIPUS
// paper, whose `sample` then returns distinct models.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "platipus/meta/inner_loop.hpp"
#include "platipus/meta/predict.hpp"
#include "platipus/meta/step_statistics.hpp"
#include "platipus/meta/task_parallel.hpp"
#include "platipus/optim/optimizers.hpp"

namespace platipus {

struct MamlSettings {
  int inner_steps = 5;
  double inner_learning_rate = 0.01;  // alpha
  bool first_order = false;           // drop the second-order terms (FOMAML)
  double inner_gradient_noise = 0;    // "MAML + noise" when > 0
  // When > 0, each task's inner gradient is clipped to this norm
  // (InnerLoop::max_gradient_norm, clip_task_norms); 0: no clip.
  double inner_max_gradient_norm = 0;
  optim::AdamSettings meta_optimizer{};
  int threads = 0;  // threads over the tasks of a meta-batch; 0: B::default_threads()
  // Chunks a meta-batch is cut into (meta/task_parallel.hpp, chunks_of): 0,
  // one per thread (fastest); N > 0, a fixed cut, so that the same seed gives
  // the same bits on any number of threads.
  int task_chunks = 0;
};

template <class M, class L, class T = float, class B = cpu>
requires Model<M, T, B> && Loss<L, T, B>
class Maml {
 public:
  Maml(M model, L loss, MamlSettings settings, Generator& init)
      : model_(std::move(model)),
        loss_(std::move(loss)),
        settings_(settings),
        params_(model_.template initialize<T, B>(init)),
        optimizer_(settings.meta_optimizer),
        pool_(task_pool<B>(settings.threads)) {
    check(settings.inner_steps >= 0, "Maml", "inner_steps must be non-negative, got {}",
          settings.inner_steps);
    check(settings.task_chunks >= 0, "Maml", "task_chunks must be non-negative, got {}",
          settings.task_chunks);
    check(settings.inner_gradient_noise >= 0, "Maml",
          "inner_gradient_noise is a standard deviation and must be non-negative, got {}",
          settings.inner_gradient_noise);
    check(settings.inner_max_gradient_norm >= 0, "Maml",
          "inner_max_gradient_norm must be non-negative (0: no clip), got {}",
          settings.inner_max_gradient_norm);
  }

  // One meta-update of theta on a batch of tasks.
  MetaStepResult meta_train_step(const TaskBatch<T, B>& batch, Generator& gen) {
    return MetaStepResult::read(meta_train_step_async(batch, gen));
  }

  // The same update with its statistics left on the backend, a [3] tensor
  // for MetaStepResult::read. With one thread nothing here waits for the
  // device, so a CUDA graph can record it (meta/graphed_step.hpp).
  Tensor<T, B> meta_train_step_async(const TaskBatch<T, B>& batch, Generator& gen) {
    auto [gradients, statistics] = gradient_and_statistics(batch, gen);
    Tensor<T, B>* p[] = {&params_};
    const Tensor<T, B>* gp[] = {&gradients[0]};
    optimizer_.step(p, gp);
    return std::move(statistics);
  }

  // The gradient of the meta-loss (the mean post-adaptation query loss) with
  // respect to theta, differentiated through the inner loop; no update.
  Tensor<T, B> meta_gradient(const TaskBatch<T, B>& batch, Generator& gen,
                             MetaStepResult* stats = nullptr) const {
    auto [gradients, statistics] = gradient_and_statistics(batch, gen);
    if (stats) *stats = MetaStepResult::read(statistics);
    return std::move(gradients[0]);
  }

  // Why a recorded meta-step could not be replayed as it is; empty when it can.
  std::string replay_obstacle() const { return recording_obstacle(*pool_, settings_.task_chunks); }

  // Parameters adapted to each task's support set: [tasks, P].
  Tensor<T, B> adapt_to(const Tensor<T, B>& support_x, const Tensor<T, B>& support_y,
                        Generator& gen) const {
    check(support_x.rank() == 3 && support_x.dim(1) > 0, "Maml::adapt",
          "empty or malformed support set {}", support_x.shape());
    Tape<T, B> tape;
    const auto theta = tape.variable(params_);
    TaskNoise noise(gen);
    const auto adapted =
        adapt(model_, loss_, per_task(theta, model_.layout(), support_x.dim(0)),
              tape.constant(support_x), tape.constant(support_y), inner_loop(false), &noise);
    return flat_values(adapted.params, model_.layout());
  }

  // n adapted models per task, [tasks, n, P]: n copies of the one MAML
  // solution, or n noisy solutions for MAML + noise.
  Tensor<T, B> sample(const Tensor<T, B>& support_x, const Tensor<T, B>& support_y, std::int64_t n,
                      Generator& gen) const {
    check(n > 0, "Maml::sample", "the number of samples must be positive, got {}", n);
    const std::int64_t tasks = support_x.dim(0), size = params_.numel();
    Tensor<T, B> adapted = adapt_to(repeat(support_x, n), repeat(support_y, n), gen);
    return std::move(adapted).reshaped(Shape{tasks, n, size});
  }

  // Predictions of parameters [P], [T, P] or [T, S, P] on x (see meta/predict.hpp).
  Tensor<T, B> predict(const Tensor<T, B>& params, const Tensor<T, B>& x) const {
    return platipus::predict(model_, params, x);
  }

  // Mean post-adaptation query loss of a batch (an evaluation, no update).
  double evaluate(const TaskBatch<T, B>& batch, Generator& gen) const {
    batch.validate("Maml::evaluate");
    const auto prediction = predict(adapt_to(batch.support_x, batch.support_y, gen), batch.query_x);
    Tape<T, B> tape;
    NoGradGuard no_grad;
    return mean(loss_(tape.constant(prediction), tape.constant(batch.query_y), 1)).item();
  }

  // The meta-parameters by name, for checkpoints: {"theta"}.
  std::vector<std::pair<std::string, const Tensor<T, B>*>> state() const {
    return {{"theta", &params_}};
  }
  void set_state(const std::string& name, Tensor<T, B> value) {
    check(name == "theta", "Maml::set_state", "unknown meta-parameter '{}'", name);
    set_parameters(std::move(value));
  }

  const M& model() const { return model_; }
  const L& loss() const { return loss_; }
  const MamlSettings& settings() const { return settings_; }
  const Tensor<T, B>& parameters() const { return params_; }
  void set_parameters(Tensor<T, B> params) {
    check(params.shape() == params_.shape(), "Maml::set_parameters", "expected {}, got {}",
          params_.shape(), params.shape());
    params_ = std::move(params);
  }

  // x [tasks, ...] -> [tasks * n, ...], each task repeated n times in a row.
  static Tensor<T, B> repeat(const Tensor<T, B>& x, std::int64_t n) {
    Shape with_axis{x.dim(0), 1}, expanded{x.dim(0), n}, merged{x.dim(0) * n};
    for (int a = 1; a < x.rank(); ++a) {
      with_axis.push_back(x.dim(a));
      expanded.push_back(x.dim(a));
      merged.push_back(x.dim(a));
    }
    return raw::expand(Tensor<T, B>::view(x, with_axis), expanded).reshaped(merged);
  }

 private:
  // Chunks of tasks run in parallel on the pool, each on its own tape.
  typename ChunkResults<T, B>::Total gradient_and_statistics(const TaskBatch<T, B>& batch,
                                                             Generator& gen) const {
    batch.validate("Maml::meta_gradient");
    const auto ranges = chunks_of(batch.tasks(), settings_.task_chunks, *pool_);
    const Shape shape = params_.shape();
    ChunkResults<T, B> results(ranges.size(), std::span<const Shape>(&shape, 1));
    const TaskNoise noise(gen);
    const std::int64_t tasks = batch.tasks();
    if (ranges.size() > 1) B::synchronize();  // the workers' streams read this thread's work
    pool_->run(static_cast<int>(ranges.size()), [&](int c) {
      const auto chunk = slice_tasks(batch, ranges[c]);
      Tape<T, B> tape;
      const auto theta = tape.variable(params_);
      const auto xs = tape.constant(chunk.support_x), ys = tape.constant(chunk.support_y);
      TaskNoise chunk_noise = noise.from_task(ranges[c].start);
      const auto adapted = adapt(model_, loss_, per_task(theta, model_.layout(), chunk.tasks()), xs,
                                 ys, inner_loop(!settings_.first_order), &chunk_noise);
      const auto query = sum(loss_(forward(adapted.params, tape.constant(chunk.query_x)),
                                   tape.constant(chunk.query_y), 1));
      const auto g = grad(query / static_cast<double>(tasks), theta);  // the mean over all tasks
      results.store(c, std::span<const Var<T, B>>(&g, 1),
                    step_statistics(query, adapted.initial_loss, Var<T, B>{}, tasks));
    });
    return results.sum();
  }

  Var<T, B> forward(const Pieces<T, B>& params, const Var<T, B>& x) const {
    return model_.forward(std::span<const Var<T, B>>(params), x);
  }

  InnerLoop inner_loop(bool create_graph) const {
    return {settings_.inner_steps, settings_.inner_learning_rate, create_graph,
            settings_.inner_gradient_noise, settings_.inner_max_gradient_norm};
  }

  M model_;
  L loss_;
  MamlSettings settings_;
  Tensor<T, B> params_;
  optim::Adam<T, B> optimizer_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace platipus
