// Helpers of the learning tests: networks, samplers, by-hand measures.
// Part of learning_test.cpp, which includes it once after helpers.hpp: the
// learning tests are one translation unit (build time).
#pragma once

namespace {

using Sampler = data::SinusoidLineSampler<float>;

nn::Sequential small_network() {
  return nn::mlp({.inputs = 1, .hidden = {40, 40}, .outputs = 1});
}

// For each gradient in `gradients`, the largest relative error of its
// directional derivative g . v against a central difference (eps 1e-6) of
// the learner's query loss on `batch` along v, over five random directions v
// about its meta-parameters. Leaves the learner at the last point evaluated.
template <class Learner>
std::vector<double> directional_errors(Learner& learner, const TaskBatch<double>& batch,
                                       Generator& gen,
                                       const std::vector<std::vector<double>>& gradients) {
  const Shape shape = learner.parameters().shape();
  const auto theta = learner.parameters().to_vector();
  auto objective = [&](const std::vector<double>& at) {
    learner.set_parameters(Tensor<double>::from_host(shape, at));
    MetaStepResult r;
    learner.meta_gradient(batch, gen, &r);
    return r.query_loss;
  };
  Generator directions(5);
  std::vector<double> worst(gradients.size(), 0.0);
  for (int d = 0; d < 5; ++d) {
    const auto v =
        raw::normal<double>({static_cast<std::int64_t>(theta.size())}, directions).to_vector();
    const double eps = 1e-6;
    std::vector<double> plus = theta, minus = theta;
    for (std::size_t i = 0; i < theta.size(); ++i) {
      plus[i] += eps * v[i];
      minus[i] -= eps * v[i];
    }
    const double numeric = (objective(plus) - objective(minus)) / (2 * eps);
    for (std::size_t k = 0; k < gradients.size(); ++k) {
      const double analytic = std::inner_product(v.begin(), v.end(), gradients[k].begin(), 0.0);
      worst[k] = std::max(worst[k], std::abs(analytic - numeric) / std::abs(numeric));
    }
  }
  return worst;
}

// PLATIPUS's objective with KL weight beta (query loss + beta KL, plus the
// prior's query loss when weighted), the mean over the batch's tasks, at the
// learner's current parts, with the same draw of the noise (from `noise`, as
// meta_gradient draws it) at every evaluation.
template <class Learner>
auto objective_with_fixed_noise(const Learner& learner, const TaskBatch<double>& batch,
                                const Generator& noise, double kl_weight) {
  return [&learner, &batch, noise, kl_weight] {
    return testing::meta_loss(learner, batch, noise, {.kl_weight = kl_weight});
  };
}

// Mean squared error of predictions [tasks, N, 1] against y.
double mse(const Tensor<float>& prediction, const Tensor<float>& y) {
  const auto p = prediction.to_vector(), t = y.to_vector();
  double s = 0;
  for (std::size_t i = 0; i < p.size(); ++i) s += (p[i] - t[i]) * (p[i] - t[i]);
  return s / static_cast<double>(p.size());
}

}  // namespace

namespace {

using PlatipusModel = Platipus<nn::Sequential, MseLoss>;

// Mean over tasks and inputs of the variance across sampled predictions.
double spread(const PlatipusModel& model, const TaskBatch<float>& tasks, std::int64_t support,
              Generator& gen) {
  const auto xs = raw::slice(tasks.support_x, 1, 0, support),
             ys = raw::slice(tasks.support_y, 1, 0, support);
  const std::int64_t samples = 20;
  const auto predictions =
      model.predict(model.sample(xs, ys, samples, gen), tasks.query_x).to_vector();
  const std::int64_t count = tasks.tasks(), points = tasks.query_x.dim(1);
  double total = 0;
  for (std::int64_t t = 0; t < count; ++t)
    for (std::int64_t i = 0; i < points; ++i) {
      double m = 0, m2 = 0;
      for (std::int64_t s = 0; s < samples; ++s) {
        const double p = predictions[static_cast<std::size_t>((t * samples + s) * points + i)];
        m += p / samples;
        m2 += p * p / samples;
      }
      total += (m2 - m * m) / static_cast<double>(count * points);
    }
  return total;
}

}  // namespace

namespace {

// The largest |a_i - b_i| over the largest |a_i|, across several tensors.
double relative_difference(const std::vector<Tensor<double>>& a,
                           const std::vector<Tensor<double>>& b) {
  double scale = 0, worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const auto x = a[k].to_vector(), y = b[k].to_vector();
    for (std::size_t i = 0; i < x.size(); ++i) {
      scale = std::max(scale, std::abs(x[i]));
      worst = std::max(worst, std::abs(x[i] - y[i]));
    }
  }
  return scale > 0 ? worst / scale : INFINITY;
}

}  // namespace

namespace {

using DoubleMaml = Maml<nn::Sequential, MseLoss, double>;

nn::Sequential tiny_network() {
  return nn::mlp({.inputs = 1, .hidden = {6, 5}, .outputs = 1, .activation = nn::Activation::tanh});
}

// Query MSE on 200 held-out sinusoid tasks before and after adaptation, of a
// learner meta-trained for 1,500 steps of 25 tasks.
template <class Learner>
std::pair<double, double> before_and_after_training(Learner& learner) {
  const Sampler sampler({.support = 10, .query = 10, .sinusoid_fraction = 1.0});
  Generator data(2);
  for (int step = 0; step < 1500; ++step) learner.meta_train_step(sampler.sample(25, data), data);
  Generator held_out(99);
  const auto test = sampler.sample(200, held_out);
  const auto& theta = learner.part(static_cast<typename Learner::Part>(0));
  return {
      mse(learner.predict(theta, test.query_x), test.query_y),
      mse(learner.predict(learner.adapt_to(test.support_x, test.support_y, held_out), test.query_x),
          test.query_y)};
}

}  // namespace

namespace {

// Few-shot image classification tasks that need adaptation: per task, `ways`
// random prototype images [1, size, size] with a random class order; each
// point is its class's prototype plus N(0, 0.3^2) noise; y holds class indices.
template <class T>
TaskBatch<T> prototype_tasks(std::int64_t tasks, std::int64_t ways, std::int64_t shots,
                             std::int64_t queries, std::int64_t size, Generator& gen) {
  auto draw = [&](std::int64_t per_class, const std::vector<T>& prototypes) {
    const std::int64_t points = ways * per_class, pixels = size * size;
    const auto noise = raw::normal<T>({tasks, points, pixels}, gen).to_vector();
    std::vector<T> x(noise.size()), y;
    for (std::int64_t t = 0; t < tasks; ++t)
      for (std::int64_t p = 0; p < points; ++p) {
        const std::int64_t c = p % ways;
        y.push_back(static_cast<T>(c));
        for (std::int64_t i = 0; i < pixels; ++i) {
          const auto at = static_cast<std::size_t>((t * points + p) * pixels + i);
          x[at] = prototypes[static_cast<std::size_t>((t * ways + c) * pixels + i)] +
                  static_cast<T>(0.3) * noise[at];
        }
      }
    return std::pair{Tensor<T>::from_host({tasks, points, 1, size, size}, x),
                     Tensor<T>::from_host({tasks, points, 1}, y)};
  };
  const auto prototypes = raw::normal<T>({tasks, ways, size * size}, gen).to_vector();
  auto [sx, sy] = draw(shots, prototypes);
  auto [qx, qy] = draw(queries, prototypes);
  return {std::move(sx), std::move(sy), std::move(qx), std::move(qy)};
}

}  // namespace
