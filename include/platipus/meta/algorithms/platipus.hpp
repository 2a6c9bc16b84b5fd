// PLATIPUS: probabilistic MAML (Finn, Xu, Levine, NeurIPS 2018), Algorithm 1
// (meta-training) and Algorithm 2 (meta-testing) with the data-dependent
// prior of Section 4.4 ("Adding additional dependencies").
//
// Meta-parameters Theta = {mu_theta, log sigma2_theta, log v_q, log gamma_p,
// log gamma_q}, each a vector the size of the model's parameters. Per task:
//   1. mu_q  = mu_theta - gamma_q * grad L(mu_theta, D_test)   posterior mean
//      (or on D_train and D_test together: posterior_data)
//   2. theta = mu_q + sqrt(v_q) * eps,  eps ~ N(0, I)           reparameterised
//   3. phi   = theta after K SGD steps on D_train with step alpha
//   4. mu_p  = mu_theta - gamma_p * grad L(mu_theta, D_train)  prior mean
//   5. objective L(phi, D_test) + beta KL(N(mu_q, v_q) || N(mu_p, sigma2_theta))
//   6. optionally + lambda L(phi_p, D_test), phi_p adapted from a theta drawn
//      from the prior N(mu_p, sigma2_theta) as at meta-test time (lambda =
//      prior_likelihood_weight, 0 by default: Algorithm 1 as printed)
// averaged over the meta-batch, Adam on Theta. Every gradient in 1, 3 and 4
// is itself differentiated (create_graph). At meta-test time theta is drawn
// from the prior N(mu_p, sigma2_theta) and adapted on D_train, S times.
//
// The step sizes gamma are stored as logarithms, as the variances are: a
// gamma is a learning rate, positive, so every coordinate of steps 1 and 4
// descends, and Adam's scale-free updates change it by a fraction of itself.
// Stored as plain values, gammas of 0.01 moved by Adam's 1e-3 per step crossed
// zero within a few hundred steps; coordinates with a negative gamma ascend,
// and on high-loss tasks the step threw mu_q to where the inner loop diverged
// (docs/results.md, "Why PLATIPUS diverged"). eps is drawn per task
// (meta/driver/task_noise.hpp), so a meta-step's numbers do not depend on threads.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "platipus/meta/algorithms/inner_loop.hpp"
#include "platipus/meta/algorithms/kl_divergence.hpp"
#include "platipus/meta/driver/meta_learner.hpp"
#include "platipus/nn/losses.hpp"

namespace platipus {

// The points of the posterior mean's step (step 1). Algorithm 1 as printed
// steps on the query points alone; Section 4.2's inference network steps on
// the support and query points together, the posterior of all the task's data
// that the data-dependent prior of Section 4.4, a step on the support points,
// is compared with in the KL.
enum class PosteriorData { query, support_and_query };

struct PlatipusSettings {
  // Step 3's K steps of alpha (paper: 1e-3 regression, 1e-2 classification);
  // no gradient noise: PLATIPUS's randomness is its sampled theta.
  struct InnerLoopDefaults {
    static constexpr int steps = 5;
    static constexpr double learning_rate = 1e-3;
  };
  BasicInnerLoop<InnerLoopDefaults> inner_loop{};
  int mean_steps = 1;      // gradient steps for the prior and posterior means (paper: 1)
  double kl_weight = 1.5;  // beta (paper: 1.5 for 1-D regression, 0.01 for 2-D classification)
  // How step 5 reduces the losses of a task's query points: their sum, the
  // likelihood term of the ELBO (Section 4), or their mean. The loss's own
  // reduction sets the scale of the gradient steps 1, 3 and 4 only.
  Reduction query_reduction = Reduction::sum;
  int kl_anneal_steps = 0;  // ramp beta linearly from 0 over this many meta-steps (0: none)
  // lambda of step 6: the weight of the query likelihood of a model drawn from
  // the prior and adapted on D_train, reduced as step 5's. The ELBO's
  // likelihood term sees theta drawn from q, which has seen the query points,
  // while predictions come from the prior, which has not: the model learns to
  // lean on a step it will not get at meta-test time. Sohn, Lee and Yan
  // (NeurIPS 2015) met the same gap in conditional VAEs and trained on this
  // hybrid of the ELBO and the prior's likelihood (docs/algorithms.md).
  double prior_likelihood_weight = 0;
  PosteriorData posterior_data = PosteriorData::query;
  double initial_prior_variance = 0.01;      // sigma2_theta at initialisation
  double initial_posterior_variance = 0.01;  // v_q at initialisation
  double initial_gamma_p = 0.01, initial_gamma_q = 0.01;
  DriverSettings driver{};
};

// PLATIPUS's meta-parameters Theta in a fixed order (the checkpoint's names).
struct PlatipusNames {
  enum Part : int { mu_theta = 0, log_sigma2_theta, log_v_q, log_gamma_p, log_gamma_q, part_count };
  static constexpr std::array<std::string_view, part_count> part_names{
      "mu_theta", "log_sigma2_theta", "log_v_q", "log_gamma_p", "log_gamma_q"};
};

// PLATIPUS as an Objective of the meta-learner driver (meta/driver/meta_learner.hpp).
template <class M, class L, class T = float, class B = cpu>
requires Model<M, T, B> && Loss<L, T, B>
class PlatipusObjective : public ObjectiveBase<M, L, T, B, PlatipusSettings, PlatipusNames> {
  using Base = ObjectiveBase<M, L, T, B, PlatipusSettings, PlatipusNames>;
  using Base::loss_, Base::model_, Base::settings_;

 public:
  using typename Base::Parts;
  using enum PlatipusNames::Part;
  static constexpr std::string_view name = "Platipus";
  // Reported beside the losses: the mean KL(q(theta | D_test) || p(theta |
  // D_train)) of Algorithm 1's meta-objective, before the weight beta.
  static constexpr std::array<std::string_view, 1> statistic_names{"kl"};
  // What a meta-step anneals: beta, ramped over kl_anneal_steps.
  struct Schedule {
    double kl_weight = 0;
  };

  PlatipusObjective(M model, L loss, PlatipusSettings settings)
      : Base(std::move(model), std::move(loss), settings) {
    check(settings.initial_prior_variance > 0 && settings.initial_posterior_variance > 0, name,
          "initial variances must be positive (got {} and {})", settings.initial_prior_variance,
          settings.initial_posterior_variance);
    check(settings.initial_gamma_p > 0 && settings.initial_gamma_q > 0, name,
          "initial gammas must be positive step sizes (got gamma_p {} and gamma_q {})",
          settings.initial_gamma_p, settings.initial_gamma_q);
    check_non_negative(name, "kl_weight", settings.kl_weight);
    check_finite(name, "prior_likelihood_weight", settings.prior_likelihood_weight);
    check_non_negative(name, "prior_likelihood_weight", settings.prior_likelihood_weight);
    check_at_least(name, "mean_steps", settings.mean_steps, 1);
    settings.inner_loop.validate(name);
    check(settings.inner_loop.gradient_noise == 0, name,
          "inner_loop.gradient_noise must be 0: PLATIPUS samples theta, and gradient noise is "
          "MAML + noise's (got {})",
          settings.inner_loop.gradient_noise);
  }

  Parts initialize(Generator& init) const {
    const Shape shape{model_.layout().size()};
    auto full = [&](double value) {
      return Tensor<T, B>::full(shape, static_cast<T>(std::log(value)));
    };
    Parts theta;
    theta[mu_theta] = model_.template initialize<T, B>(init);
    theta[log_sigma2_theta] = full(settings_.initial_prior_variance);
    theta[log_v_q] = full(settings_.initial_posterior_variance);
    theta[log_gamma_p] = full(settings_.initial_gamma_p);
    theta[log_gamma_q] = full(settings_.initial_gamma_q);
    return theta;
  }

  // The chunk's summed objective L(phi, D_test) + beta KL (+ lambda
  // L(phi_p, D_test)), per task.
  ChunkTerms<T, B> chunk_terms(std::span<const Var<T, B>> parts, const TaskBatch<T, B>& chunk,
                               TaskNoise& noise, const Schedule& schedule) const {
    std::array<Var<T, B>, part_count> v;
    std::copy(parts.begin(), parts.end(), v.begin());
    const auto [query, kl, prior_query] = objective_terms(v, chunk, noise);
    auto objective = query + static_cast<T>(schedule.kl_weight) * kl;
    if (prior_query.defined())
      objective = objective + static_cast<T>(settings_.prior_likelihood_weight) * prior_query;
    return {
        .objective = sum(objective), .query = sum(query), .support = {}, .statistics = {sum(kl)}};
  }

  // beta at the meta-step after `steps()` steps; reads the count only while
  // beta ramps up (on CUDA reading it waits for the device).
  Schedule schedule(const std::function<int()>& steps) const {
    if (settings_.kl_anneal_steps <= 0) return {.kl_weight = settings_.kl_weight};
    return {.kl_weight = settings_.kl_weight *
                         std::min(1.0, static_cast<double>(steps()) / settings_.kl_anneal_steps)};
  }

  std::string replay_obstacle(const std::function<int()>& steps) const {
    if (settings_.kl_anneal_steps > 0 && steps() < settings_.kl_anneal_steps)
      return fmt::format("the KL weight still ramps up (step {} of {}) and a recording fixes it",
                         steps(), settings_.kl_anneal_steps);
    return {};
  }

  // Per task: step 5's query loss of phi and KL(q || p), and step 6's query
  // loss of phi_p (undefined when lambda is 0).
  struct Terms {
    Var<T, B> query, kl, prior_query;
  };

  // Steps 1-6 for a batch of tasks. Theta's parts are leaves of the caller's
  // tape; `noise` gives the batch's first task its eps (step 6 draws after
  // step 2, so lambda = 0 leaves step 2's draws as they were).
  Terms objective_terms(const std::array<Var<T, B>, part_count>& v, const TaskBatch<T, B>& batch,
                        TaskNoise& noise) const {
    Tape<T, B>& tape = v[0].tape();
    const auto& layout = model_.layout();
    const std::int64_t tasks = batch.tasks();
    const auto xs = tape.constant_view(batch.support_x), ys = tape.constant_view(batch.support_y);
    const auto xq = tape.constant_view(batch.query_x), yq = tape.constant_view(batch.query_y);
    const auto mu = per_task(v[mu_theta], layout, tasks);
    const auto log_vq = unflatten(v[log_v_q], layout.shapes()),
               log_s2 = unflatten(v[log_sigma2_theta], layout.shapes());

    const auto [x_post, y_post] = posterior_points(batch, xq, yq);
    const auto mu_q = descend(mu, unflatten(exp(v[log_gamma_q]), layout.shapes()), x_post, y_post,
                              true);  // step 1
    const auto mu_p = descend(mu, unflatten(exp(v[log_gamma_p]), layout.shapes()), xs, ys,
                              true);  // step 4

    const auto theta = draw(mu_q, log_vq, noise);          // step 2
    const auto query = query_loss(theta, xs, ys, xq, yq);  // steps 3 and 5
    Pieces<T, B> mean_q, log_var_q, mean_p, log_var_p;     // [tasks, D_i] and [D_i]
    for (std::size_t i = 0; i < mu_q.size(); ++i) {
      mean_q.push_back(reshape(mu_q[i], {tasks, -1}));
      log_var_q.push_back(reshape(log_vq[i], {-1}));
      mean_p.push_back(reshape(mu_p[i], {tasks, -1}));
      log_var_p.push_back(reshape(log_s2[i], {-1}));
    }
    using Span = std::span<const Var<T, B>>;
    const auto kl =
        kl_diagonal_gaussians(Span(mean_q), Span(log_var_q), Span(mean_p), Span(log_var_p));
    Var<T, B> prior_query;  // step 6
    if (settings_.prior_likelihood_weight > 0)
      prior_query = query_loss(draw(mu_p, log_s2, noise), xs, ys, xq, yq);
    return {query, kl, prior_query};
  }

  // Algorithm 2 with the data-dependent prior: n models per task, [tasks, n, P].
  Tensor<T, B> sample(const Parts& theta, const Tensor<T, B>& support_x,
                      const Tensor<T, B>& support_y, std::int64_t n, Generator& gen) const {
    check_support_set(model_, loss_, support_x, support_y, "Platipus::sample");
    check_positive("Platipus::sample", "the number of samples", n);
    const auto& layout = model_.layout();
    const std::int64_t tasks = support_x.dim(0), size = layout.size();
    Tape<T, B> tape;
    const auto mu_p = descend(per_task(tape.variable(theta[mu_theta]), layout, tasks),
                              unflatten(exp(tape.constant(theta[log_gamma_p])), layout.shapes()),
                              tape.constant_view(support_x), tape.constant_view(support_y), false);
    const auto log_s2 = unflatten(tape.constant(theta[log_sigma2_theta]), layout.shapes());
    Pieces<T, B> start;
    for (std::size_t i = 0; i < mu_p.size(); ++i) {
      const Shape& shape = layout.shapes()[i];
      Shape one{tasks, 1}, many{tasks, n}, merged{tasks * n};
      for (auto d : shape.dims()) one.push_back(d), many.push_back(d), merged.push_back(d);
      const auto draw = reshape(mu_p[i], one) +
                        exp_scaled(log_s2[i], T(0.5)) * tape.constant(raw::normal<T, B>(many, gen));
      start.push_back(reshape(draw, merged));
    }
    const auto phi = adapt(model_, loss_, start, tape.constant(repeat_tasks(support_x, n)),
                           tape.constant(repeat_tasks(support_y, n)),
                           settings_.inner_loop.for_evaluation(), {.detached = true})
                         .params;
    return flat_values(phi, layout).reshaped(Shape{tasks, n, size});
  }

 private:
  // Step 1's points: the query set's tape constants, or the support and query
  // sets side by side on the points axis.
  std::pair<Var<T, B>, Var<T, B>> posterior_points(const TaskBatch<T, B>& batch,
                                                   const Var<T, B>& xq, const Var<T, B>& yq) const {
    if (settings_.posterior_data == PosteriorData::query) return {xq, yq};
    Tape<T, B>& tape = xq.tape();
    const std::array x{&batch.support_x, &batch.query_x}, y{&batch.support_y, &batch.query_y};
    return {tape.constant(raw::concat(std::span<const Tensor<T, B>* const>(x), 1)),
            tape.constant(raw::concat(std::span<const Tensor<T, B>* const>(y), 1))};
  }

  // The query loss per task after the inner loop from theta on D_train,
  // reduced over the query points by query_reduction.
  Var<T, B> query_loss(const Pieces<T, B>& theta, const Var<T, B>& xs, const Var<T, B>& ys,
                       const Var<T, B>& xq, const Var<T, B>& yq) const {
    const auto phi =
        adapt(model_, loss_, theta, xs, ys, settings_.inner_loop, {.create_graph = true}).params;
    const auto per_point = loss_(model_.forward(std::span<const Var<T, B>>(phi), xq), yq, 2);
    return settings_.query_reduction == Reduction::sum ? sum(per_point, {1}) : mean(per_point, {1});
  }

  // mean + exp(log_v / 2) eps for every piece, eps ~ N(0, I) drawn piece by
  // piece: one foreach_exp_scaled and one foreach_add_mul for all pieces
  // (issue 38).
  Pieces<T, B> draw(const Pieces<T, B>& mean, const Pieces<T, B>& log_v, TaskNoise& noise) const {
    Tape<T, B>& tape = mean[0].tape();
    const auto deviation = foreach_exp_scaled(std::span<const Var<T, B>>(log_v), T(0.5));
    std::vector<Shape> shapes;
    for (const auto& m : mean) shapes.push_back(m.shape());
    Pieces<T, B> eps;  // drawn by one call for all pieces
    for (auto& e : noise.normal<T, B>(std::span<const Shape>(shapes)))
      eps.push_back(tape.constant(std::move(e)));
    return foreach_add_mul(std::span<const Var<T, B>>(mean), std::span<const Var<T, B>>(deviation),
                           std::span<const Var<T, B>>(eps));
  }

  // mean - gamma * grad L(mean, D), piece by piece, repeated mean_steps times.
  Pieces<T, B> descend(Pieces<T, B> m, const Pieces<T, B>& gamma, const Var<T, B>& x,
                       const Var<T, B>& y, bool create_graph) const {
    return adapt(model_, loss_, std::move(m), x, y, {.steps = settings_.mean_steps},
                 {.create_graph = create_graph, .rates = &gamma})
        .params;
  }
};

template <class M, class L, class T = float, class B = cpu>
using Platipus = MetaLearner<PlatipusObjective<M, L, T, B>>;

}  // namespace platipus
