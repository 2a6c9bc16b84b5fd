// The meta-learners behave as the papers say: MAML learns to adapt, its
// meta-gradient is second order, and PLATIPUS's samples carry uncertainty
// that shrinks with data.
#include "catch.hpp"
#include "derivative_checks.hpp"
#include "resident_memory.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include <unistd.h>

#include "platipus/io/checkpoint.hpp"
#include "platipus/io/training_run.hpp"
#include "platipus/platipus.hpp"

using namespace platipus;
using platipus::testing::check_part_gradients;

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
    Generator gen = noise;
    TaskNoise task_noise(gen);
    Tape<double> tape;
    std::vector<Var<double>> parts;
    for (int p = 0; p < Learner::part_count; ++p)
      parts.push_back(tape.variable(learner.part(static_cast<typename Learner::Part>(p))));
    const auto terms = learner.objective().chunk_terms(std::span<const Var<double>>(parts), batch,
                                                       task_noise, {.kl_weight = kl_weight});
    return terms.objective.value().to_vector()[0] / static_cast<double>(batch.tasks());
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

TEST_CASE(
    "second-order MAML learns sinusoids: adaptation beats no adaptation and joint pre-training",
    "[maml][learning][long]") {
  const Sampler sampler({.support = 10, .query = 10, .sinusoid_fraction = 1.0});
  const MamlSettings settings{.inner_loop = {.steps = 5, .learning_rate = 0.01}, .threads = 2};
  Generator init(1), data(2);
  Maml<nn::Sequential, MseLoss> maml(small_network(), MseLoss{}, settings, init);
  // Joint pre-training is MAML with no inner steps: the mean loss over tasks at theta.
  Generator init_joint(1);
  Maml<nn::Sequential, MseLoss> joint(small_network(), MseLoss{},
                                      {.inner_loop = {.steps = 0}, .threads = 2}, init_joint);
  for (int step = 0; step < 1500; ++step) {
    const auto batch = sampler.sample(25, data);
    maml.meta_train_step(batch, data);
    joint.meta_train_step(batch, data);
  }
  // The jointly trained network, fine-tuned on the support set like MAML.
  Generator unused(0);
  Maml<nn::Sequential, MseLoss> fine_tuned(small_network(), MseLoss{}, settings, unused);
  fine_tuned.set_parameters(joint.parameters().clone());

  Generator held_out(99);
  const auto test = sampler.sample(200, held_out);
  const double before = mse(maml.predict(maml.parameters(), test.query_x), test.query_y);
  const double after =
      mse(maml.predict(maml.adapt_to(test.support_x, test.support_y, held_out), test.query_x),
          test.query_y);
  const double joint_after =
      mse(fine_tuned.predict(fine_tuned.adapt_to(test.support_x, test.support_y, held_out),
                             test.query_x),
          test.query_y);
  INFO("query MSE: MAML before adaptation " << before << ", after " << after
                                            << "; joint pre-training fine-tuned " << joint_after);
  CHECK(after < 0.5 * before);
  CHECK(after < 0.75 * joint_after);
}

TEST_CASE("the MAML class's meta-gradient matches finite differences and differs from first order",
          "[maml][grad]") {
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {8, 8}, .outputs = 1, .activation = nn::Activation::tanh});
  const data::SinusoidLineSampler<double> sampler({.support = 5, .query = 5});
  Generator init(3), gen(4);
  const auto batch = sampler.sample(4, gen);
  Maml<nn::Sequential, MseLoss, double> second(
      model, MseLoss{}, {.inner_loop = {.steps = 3, .learning_rate = 0.05}, .threads = 2}, init);
  Generator init2(3);
  Maml<nn::Sequential, MseLoss, double> first(
      model, MseLoss{},
      {.inner_loop = {.steps = 3, .learning_rate = 0.05}, .first_order = true, .threads = 2},
      init2);
  const auto g = second.meta_gradient(batch, gen).to_vector();
  const auto g_first = first.meta_gradient(batch, gen).to_vector();
  const auto errors = directional_errors(second, batch, gen, {g, g_first});
  const double worst = errors[0], first_order_gap = errors[1];
  INFO("worst relative error " << worst << ", first-order gap " << first_order_gap);
  CHECK(worst < 1e-6);
  CHECK(first_order_gap > 1e-3);
}

TEST_CASE("the diagonal Gaussian KL matches a Monte-Carlo estimate", "[platipus]") {
  Tape<double> tape;
  const auto mq = tape.constant(Tensor<double>::from_host({1, 3}, {0.3, -1.0, 2.0}));
  const auto lq =
      tape.constant(Tensor<double>::from_host({3}, {std::log(0.5), std::log(2.0), std::log(0.1)}));
  const auto mp = tape.constant(Tensor<double>::from_host({1, 3}, {0.0, 0.5, 1.5}));
  const auto lp =
      tape.constant(Tensor<double>::from_host({3}, {std::log(1.0), std::log(1.5), std::log(0.3)}));
  const double closed = kl_diagonal_gaussians(mq, lq, mp, lp).item();
  // E_q[log q(x) - log p(x)] by sampling x ~ q.
  Generator gen(6);
  const int n = 200000;
  const auto z = raw::normal<double>({n, 3}, gen).to_vector();
  const double m_q[] = {0.3, -1.0, 2.0}, v_q[] = {0.5, 2.0, 0.1}, m_p[] = {0.0, 0.5, 1.5},
               v_p[] = {1.0, 1.5, 0.3};
  double estimate = 0;
  for (int s = 0; s < n; ++s)
    for (int j = 0; j < 3; ++j) {
      const double x = m_q[j] + std::sqrt(v_q[j]) * z[static_cast<std::size_t>(s * 3 + j)];
      const double log_q =
          -0.5 * (std::log(2 * M_PI * v_q[j]) + (x - m_q[j]) * (x - m_q[j]) / v_q[j]);
      const double log_p =
          -0.5 * (std::log(2 * M_PI * v_p[j]) + (x - m_p[j]) * (x - m_p[j]) / v_p[j]);
      estimate += (log_q - log_p) / n;
    }
  CHECK(closed == Approx(estimate).epsilon(0.01));
  CHECK(kl_diagonal_gaussians(mq, lq, mq, lq).item() == Approx(0.0).margin(1e-12));
}

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

TEST_CASE("PLATIPUS samples differ, and their spread shrinks as support points are added",
          "[platipus][learning][long]") {
  const Sampler train({.support = 5, .query = 10});
  Generator init(7), data(8);
  PlatipusModel model(
      small_network(), MseLoss{},
      {.inner_loop = {.steps = 5, .learning_rate = 0.01}, .kl_weight = 1.5, .threads = 2}, init);
  for (int step = 0; step < 1000; ++step) model.meta_train_step(train.sample(25, data), data);

  const Sampler test({.support = 10, .query = 50});
  Generator held_out(9);
  const auto tasks = test.sample(50, held_out);
  const auto samples = model.sample(raw::slice(tasks.support_x, 0, 0, 1),
                                    raw::slice(tasks.support_y, 0, 0, 1), 4, held_out);
  const auto values = samples.to_vector();
  const auto size = static_cast<std::size_t>(model.model().layout().size());
  for (std::size_t a = 0; a < 4; ++a)
    for (std::size_t b = a + 1; b < 4; ++b) {
      double distance = 0;
      for (std::size_t i = 0; i < size; ++i)
        distance += std::abs(values[a * size + i] - values[b * size + i]);
      CHECK(distance > 1e-3);
    }
  const double one = spread(model, tasks, 1, held_out), five = spread(model, tasks, 5, held_out),
               ten = spread(model, tasks, 10, held_out);
  INFO("prediction variance with 1, 5, 10 support points: " << one << ", " << five << ", " << ten);
  // From 1 point to 5 or 10 the spread falls clearly. From 5 to 10 the change
  // is within what float rounding moves: with one chunk per task, the release
  // build trained a model whose spread fell from 5 to 10 points and the
  // sanitizer build (other float contractions) one whose spread rose (0.87 to
  // 0.96), so the test does not ask for it.
  CHECK(one > 1.5 * five);
  CHECK(one > 1.5 * ten);
}

TEST_CASE(
    "MAML + noise samples distinct models, spread by the noise, and plain MAML samples copies",
    "[maml][noise]") {
  const Sampler sampler({.support = 5, .query = 5});
  Generator gen(11);
  const auto batch = sampler.sample(3, gen);
  auto spread = [&](double noise) {
    Generator init(12);
    Maml<nn::Sequential, MseLoss> maml(
        small_network(), MseLoss{}, {.inner_loop = {.gradient_noise = noise}, .threads = 1}, init);
    maml.meta_train_step(batch, gen);  // training runs with the noise too
    const auto samples = maml.sample(batch.support_x, batch.support_y, 4, gen).to_vector();
    const auto size = static_cast<std::size_t>(maml.model().layout().size());
    double distance = 0;
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t i = 0; i < size; ++i)
        distance += std::abs(samples[(t * 4 + 1) * size + i] - samples[(t * 4) * size + i]);
    return distance;
  };
  CHECK(spread(0.0) == 0.0);
  const double small = spread(0.1), large = spread(1.0);
  CHECK(small > 0.0);
  CHECK(large > 5 * small);
}

TEST_CASE("PLATIPUS anneals its KL weight linearly when asked", "[platipus]") {
  Generator init(13), gen(14);
  Platipus<nn::Sequential, MseLoss> model(
      nn::mlp({.inputs = 1, .hidden = {4}, .outputs = 1}), MseLoss{},
      {.kl_weight = 2.0, .kl_anneal_steps = 4, .threads = 1}, init);
  const auto batch = Sampler({.support = 2, .query = 2}).sample(2, gen);
  std::vector<double> weights;
  for (int step = 0; step < 6; ++step) {
    weights.push_back(model.current_kl_weight());
    model.meta_train_step(batch, gen);
  }
  CHECK(weights == std::vector<double>{0.0, 0.5, 1.0, 1.5, 2.0, 2.0});
  Generator init2(13);
  Platipus<nn::Sequential, MseLoss> plain(nn::mlp({.inputs = 1, .hidden = {4}, .outputs = 1}),
                                          MseLoss{}, {.kl_weight = 2.0, .threads = 1}, init2);
  CHECK(plain.current_kl_weight() == 2.0);
}

TEST_CASE("a meta-step's statistics on the backend are the ones meta_train_step reports",
          "[maml][platipus][statistics]") {
  Generator data(15);
  const auto batch = Sampler({.support = 5, .query = 5}).sample(6, data);
  auto compare = [&](auto eager, auto deferred, bool has_kl) {
    Generator eager_gen(16), deferred_gen(16);
    for (int step = 0; step < 2; ++step) {
      const MetaStepResult expected = eager.meta_train_step(batch, eager_gen);
      const Tensor<float> statistics = deferred.meta_train_step_async(batch, deferred_gen);
      REQUIRE(statistics.shape() == Shape{3});
      const MetaStepResult actual = MetaStepResult::read(statistics);
      CHECK(actual.query_loss == expected.query_loss);
      CHECK(actual.support_loss == expected.support_loss);
      CHECK(actual.kl == expected.kl);
      CHECK(expected.query_loss > 0);
      CHECK((expected.kl > 0) == has_kl);
    }
    CHECK(deferred.state()[0].second->to_vector() == eager.state()[0].second->to_vector());
  };
  // Three threads: the chunks' statistics add up like their gradients.
  Generator a(17), b(17), c(18), d(18);
  compare(Maml<nn::Sequential, MseLoss>(small_network(), MseLoss{}, {.threads = 3}, a),
          Maml<nn::Sequential, MseLoss>(small_network(), MseLoss{}, {.threads = 3}, b), false);
  compare(PlatipusModel(small_network(), MseLoss{}, {.threads = 3}, c),
          PlatipusModel(small_network(), MseLoss{}, {.threads = 3}, d), true);
  CHECK_THROWS_WITH(MetaStepResult::read(Tensor<float>::zeros({2})),
                    Catch::Contains("MetaStepResult::read") && Catch::Contains("[2]"));
}

TEST_CASE("learners say what stops their meta-step from being recorded", "[maml][platipus]") {
  using Catch::Contains;
  Generator gen(19);
  const Maml<nn::Sequential, MseLoss> one(small_network(), MseLoss{}, {.threads = 1}, gen);
  const Maml<nn::Sequential, MseLoss> two(small_network(), MseLoss{},
                                          {.threads = 2, .task_chunks = one_chunk_per_thread}, gen);
  CHECK_THAT(one.replay_obstacle(), Contains("one chunk per task"));
  CHECK_THAT(two.replay_obstacle(), Contains("threads = 2"));
  const Maml<nn::Sequential, MseLoss> chunked(small_network(), MseLoss{},
                                              {.threads = 1, .task_chunks = 3}, gen);
  CHECK_THAT(chunked.replay_obstacle(), Contains("task_chunks = 3"));
  const Maml<nn::Sequential, MseLoss> whole(small_network(), MseLoss{},
                                            {.threads = 2, .task_chunks = 1}, gen);
  CHECK(whole.replay_obstacle().empty());
  const Maml<nn::Sequential, MseLoss> one_chunk(small_network(), MseLoss{},
                                                {.threads = 1, .task_chunks = 1}, gen);
  CHECK(one_chunk.replay_obstacle().empty());
  // One chunk per thread records when there is one thread.
  const Maml<nn::Sequential, MseLoss> per_thread(
      small_network(), MseLoss{}, {.threads = 1, .task_chunks = one_chunk_per_thread}, gen);
  CHECK(per_thread.replay_obstacle().empty());
  PlatipusModel ramped(small_network(), MseLoss{},
                       {.kl_anneal_steps = 2, .threads = 1, .task_chunks = 1}, gen);
  const auto batch = Sampler({.support = 2, .query = 2}).sample(2, gen);
  CHECK_THAT(ramped.replay_obstacle(), Contains("KL weight") && Contains("step 0 of 2"));
  ramped.meta_train_step(batch, gen);
  CHECK_THAT(ramped.replay_obstacle(), Contains("step 1 of 2"));
  ramped.meta_train_step(batch, gen);
  CHECK(ramped.replay_obstacle().empty());  // the ramp is over: beta is constant from here
}

TEST_CASE("meta-learners reject malformed task batches", "[maml][errors]") {
  Generator gen(10);
  Maml<nn::Sequential, MseLoss> maml(small_network(), MseLoss{}, {.threads = 1}, gen);
  auto batch = Sampler({.support = 5, .query = 5}).sample(2, gen);
  TaskBatch<float> empty{Tensor<float>({2, 0, 1}), Tensor<float>({2, 0, 1}), batch.query_x.clone(),
                         batch.query_y.clone()};
  CHECK_THROWS_WITH(maml.meta_train_step(empty, gen), Catch::Contains("support set is empty"));
  TaskBatch<float> mismatched{batch.support_x.clone(), Tensor<float>::zeros({2, 4, 1}),
                              batch.query_x.clone(), batch.query_y.clone()};
  CHECK_THROWS_WITH(maml.meta_train_step(mismatched, gen),
                    Catch::Contains("[2, 5, 1]") && Catch::Contains("[2, 4, 1]"));
  CHECK_THROWS_WITH(maml.adapt_to(Tensor<float>({2, 0, 1}), Tensor<float>({2, 0, 1}), gen),
                    Catch::Contains("empty"));
  CHECK_THROWS_AS(Sampler({.support = 0}), error);
}

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

TEST_CASE("PLATIPUS and MAML + noise draw the same noise with one thread and with three",
          "[platipus][noise][threads]") {
  using DoublePlatipus = Platipus<nn::Sequential, MseLoss, double>;
  using DoubleMaml = Maml<nn::Sequential, MseLoss, double>;
  const auto model = nn::mlp({.inputs = 1, .hidden = {16, 16}, .outputs = 1});
  Generator data(71);
  const auto batch = data::SinusoidLineSampler<double>({.support = 5, .query = 7}).sample(7, data);
  std::vector<std::vector<Tensor<double>>> platipus_gradients, noise_gradients;
  std::vector<MetaStepResult> platipus_results;
  for (const int threads : {1, 3}) {
    Generator init(72), gen(73);
    const DoublePlatipus platipus(
        model, MseLoss{}, {.inner_loop = {.learning_rate = 0.01}, .threads = threads}, init);
    MetaStepResult result;
    platipus_gradients.push_back(platipus.meta_gradient(batch, gen, &result));
    platipus_results.push_back(result);
    Generator maml_init(74), maml_gen(75);
    const DoubleMaml noisy(
        model, MseLoss{},
        {.inner_loop = {.learning_rate = 0.01, .gradient_noise = 0.5}, .threads = threads},
        maml_init);
    noise_gradients.emplace_back();
    noise_gradients.back().push_back(noisy.meta_gradient(batch, maml_gen));
  }
  // The same numbers up to the order of the chunks' sums.
  CHECK(relative_difference(platipus_gradients[0], platipus_gradients[1]) < 1e-10);
  CHECK(relative_difference(noise_gradients[0], noise_gradients[1]) < 1e-10);
  CHECK(platipus_results[0].query_loss == Approx(platipus_results[1].query_loss).epsilon(1e-12));
  CHECK(platipus_results[0].kl == Approx(platipus_results[1].kl).epsilon(1e-12));
}

// The default cut of a meta-batch (on the CPU one chunk per task) fixes every
// float sum, so the thread count changes nothing: a few hundred steps give
// identical bits. (With one_chunk_per_thread they agree only to rounding.)
TEST_CASE("by default, 1, 2 and 3 threads train byte-identical checkpoints",
          "[maml][platipus][threads]") {
  const auto model = nn::mlp({.inputs = 1, .hidden = {16, 16}, .outputs = 1});
  const Sampler sampler({.support = 5, .query = 5});
  std::vector<std::string> maml_files, noise_files, platipus_files;
  const auto dir =
      std::filesystem::temp_directory_path() / ("platipus-threads-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto bytes_of = [&](const auto& learner, const std::string& name) {
    const auto path = dir / name;
    io::save(path, learner);
    const auto bytes = read_file(path);
    std::filesystem::remove(path);
    return bytes;
  };
  for (const int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    Generator init(81), maml_gen(82), noise_gen(83), platipus_gen(84);
    Maml<nn::Sequential, MseLoss> maml(model, MseLoss{},
                                       {.inner_loop = {.steps = 2}, .threads = threads}, init);
    // A fixed cut other than the default holds as well.
    Maml<nn::Sequential, MseLoss> noisy(
        model, MseLoss{},
        {.inner_loop = {.steps = 2, .gradient_noise = 0.5}, .threads = threads, .task_chunks = 3},
        init);
    PlatipusModel platipus(model, MseLoss{}, {.inner_loop = {.steps = 2}, .threads = threads},
                           init);
    for (int step = 0; step < 300; ++step) {
      maml.meta_train_step(sampler.sample(7, maml_gen), maml_gen);
      noisy.meta_train_step(sampler.sample(7, noise_gen), noise_gen);
      const auto result = platipus.meta_train_step(sampler.sample(7, platipus_gen), platipus_gen);
      REQUIRE(std::isfinite(result.query_loss));
    }
    maml_files.push_back(bytes_of(maml, "maml.safetensors"));
    noise_files.push_back(bytes_of(noisy, "noise.safetensors"));
    platipus_files.push_back(bytes_of(platipus, "platipus.safetensors"));
  }
  std::filesystem::remove_all(dir);
  for (const auto* files : {&maml_files, &noise_files, &platipus_files}) {
    CHECK((*files)[0] == (*files)[1]);
    CHECK((*files)[0] == (*files)[2]);
  }
  // Not trivially equal: the three learners trained to different parameters.
  CHECK(maml_files[0] != noise_files[0]);
}

TEST_CASE("PLATIPUS's step sizes gamma stay positive: they are stored as logarithms",
          "[platipus]") {
  Generator init(76), gen(77);
  PlatipusModel model(small_network(), MseLoss{},
                      {.initial_gamma_p = 0.02, .initial_gamma_q = 0.03, .threads = 1}, init);
  CHECK(model.part(PlatipusModel::log_gamma_p).to_vector()[0] == Approx(std::log(0.02)));
  CHECK(model.part(PlatipusModel::log_gamma_q).to_vector()[0] == Approx(std::log(0.03)));
  // Many steps of Adam move a log by about the learning rate each; the step
  // size exp(log gamma) it stands for is positive whatever the log becomes.
  const Sampler sampler({.support = 5, .query = 10});
  for (int step = 0; step < 50; ++step) model.meta_train_step(sampler.sample(5, gen), gen);
  for (auto part : {PlatipusModel::log_gamma_p, PlatipusModel::log_gamma_q})
    for (float v : model.part(part).to_vector()) CHECK(std::isfinite(v));
}

TEST_CASE("PLATIPUS and MAML refuse settings that make no sense, naming the setting",
          "[platipus][errors]") {
  using Catch::Contains;
  Generator init(78);
  auto make = [&](PlatipusSettings s) {
    PlatipusModel(small_network(), MseLoss{}, s, init);
  };
  CHECK_THROWS_WITH(make({.initial_prior_variance = -1}), Contains("initial variances"));
  CHECK_THROWS_WITH(make({.initial_posterior_variance = 0}), Contains("initial variances"));
  CHECK_THROWS_WITH(make({.initial_gamma_p = 0}), Contains("gamma_p 0"));
  CHECK_THROWS_WITH(make({.initial_gamma_q = -0.1}), Contains("gamma_q -0.1"));
  CHECK_THROWS_WITH(make({.kl_weight = -1}), Contains("kl_weight"));
  CHECK_THROWS_WITH(make({.prior_likelihood_weight = -0.5}),
                    Contains("prior_likelihood_weight must be finite and non-negative, got -0.5"));
  CHECK_THROWS_WITH(make({.prior_likelihood_weight = std::nan("")}),
                    Contains("prior_likelihood_weight"));
  CHECK_THROWS_WITH(make({.mean_steps = 0}), Contains("mean_steps"));
  CHECK_THROWS_WITH(make({.inner_loop = {.max_gradient_norm = -1}}),
                    Contains("inner_loop.max_gradient_norm"));
  // Inner-gradient noise is MAML + noise's; PLATIPUS's randomness is its sampled theta.
  CHECK_THROWS_WITH(make({.inner_loop = {.gradient_noise = 1}}),
                    Contains("inner_loop.gradient_noise must be 0"));
  PlatipusModel model(small_network(), MseLoss{}, {.threads = 1}, init);
  const auto batch = Sampler({.support = 2, .query = 2}).sample(1, init);
  CHECK_THROWS_WITH(model.sample(batch.support_x, batch.support_y, 0, init),
                    Contains("number of samples"));
  using MamlModel = Maml<nn::Sequential, MseLoss>;
  auto make_maml = [&](MamlSettings s) {
    MamlModel(small_network(), MseLoss{}, s, init);
  };
  CHECK_THROWS_WITH(make_maml({.inner_loop = {.gradient_noise = -1}}),
                    Contains("inner_loop.gradient_noise"));
  CHECK_THROWS_WITH(make_maml({.inner_loop = {.steps = -1}}), Contains("inner_loop.steps"));
  CHECK_THROWS_WITH(make_maml({.inner_loop = {.max_gradient_norm = -0.5}}),
                    Contains("inner_loop.max_gradient_norm"));
}

TEST_CASE(
    "a learner's own inner-loop defaults survive a designated initialiser that names other "
    "fields",
    "[platipus][metasgd][maml]") {
  const PlatipusSettings platipus{.inner_loop = {.steps = 2}};
  CHECK(platipus.inner_loop.steps == 2);
  CHECK(platipus.inner_loop.learning_rate == 1e-3);  // PLATIPUS's, not the general 0.01
  const MetaSgdSettings meta_sgd{.inner_loop = {.learning_rate = 0.1}};
  CHECK(meta_sgd.inner_loop.steps == 1);  // Meta-SGD's one step, not the general 5
  CHECK(meta_sgd.inner_loop.learning_rate == 0.1);
  const MamlSettings maml{.inner_loop = {.gradient_noise = 0.5}};
  CHECK(maml.inner_loop.steps == 5);
  CHECK(maml.inner_loop.learning_rate == 0.01);
  // The plain InnerLoop, which the inner loop's functions take, keeps every
  // field, and so does the way back.
  const PlatipusSettings full{.inner_loop = {.steps = 3,
                                             .learning_rate = 0.2,
                                             .gradient_noise = 0.1,
                                             .max_gradient_norm = 4,
                                             .evaluation_steps = 7}};
  const InnerLoop plain = full.inner_loop;
  CHECK(plain.steps == 3);
  CHECK(plain.learning_rate == 0.2);
  CHECK(plain.gradient_noise == 0.1);
  CHECK(plain.max_gradient_norm == 4);
  CHECK(plain.evaluation_steps == 7);
  MetaSgdSettings back;
  back.inner_loop = plain;
  CHECK(back.inner_loop.steps == 3);
  CHECK(back.inner_loop.learning_rate == 0.2);
  CHECK(back.inner_loop.evaluation_steps == 7);
  CHECK(back.inner_loop.for_evaluation().steps == 7);
}

TEST_CASE("a meta-gradient through clipped inner gradients matches central finite differences",
          "[maml][grad]") {
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {8, 8}, .outputs = 1, .activation = nn::Activation::tanh});
  const data::SinusoidLineSampler<double> sampler({.support = 5, .query = 5});
  Generator init(3), gen(4);
  const auto batch = sampler.sample(6, gen);
  const MamlSettings unclipped{.inner_loop = {.steps = 3, .learning_rate = 0.02}, .threads = 1};
  Maml<nn::Sequential, MseLoss, double> plain(model, MseLoss{}, unclipped, init);
  // The bound: the median of the tasks' first inner-gradient norms, so that
  // the clip binds for some tasks and not for others.
  std::vector<double> norms;
  {
    Tape<double> tape;
    const auto phi = per_task(tape.variable(plain.parameters()), model.layout(), batch.tasks());
    const auto g = grad(task_loss(model, MseLoss{}, phi, tape.constant(batch.support_x),
                                  tape.constant(batch.support_y)),
                        std::span<const Var<double>>(phi));
    norms.assign(static_cast<std::size_t>(batch.tasks()), 0.0);
    for (const auto& gi : g) {
      const auto v = gi.value().to_vector();
      const std::size_t row = v.size() / norms.size();
      for (std::size_t i = 0; i < v.size(); ++i) norms[i / row] += v[i] * v[i];
    }
    for (auto& n : norms) n = std::sqrt(n);
    std::sort(norms.begin(), norms.end());
  }
  const double bound = 0.5 * (norms[2] + norms[3]);
  INFO("task gradient norms from " << norms.front() << " to " << norms.back() << ", bound "
                                   << bound);
  MamlSettings clipped_settings = unclipped;
  clipped_settings.inner_loop.max_gradient_norm = bound;
  Generator init2(3);
  Maml<nn::Sequential, MseLoss, double> clipped(model, MseLoss{}, clipped_settings, init2);
  const auto g = clipped.meta_gradient(batch, gen).to_vector();
  const auto g_plain = plain.meta_gradient(batch, gen).to_vector();
  const double worst = directional_errors(clipped, batch, gen, {g})[0];
  INFO("worst relative error " << worst);
  CHECK(worst < 1e-6);
  // The clip changed the meta-gradient: it bound for some tasks.
  double gap = 0, scale = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    gap = std::max(gap, std::abs(g[i] - g_plain[i]));
    scale = std::max(scale, std::abs(g_plain[i]));
  }
  CHECK(gap > 1e-3 * scale);
}

// A fixed inner step of 0.05 on MSE is past the stability limit for the
// sinusoid-or-line tasks of large amplitude: MAML's loss turned NaN within
// a few meta-steps. Clipping each task's inner gradient to norm 2 (a trust
// region of 0.1 per inner step) trains the same network for 2,000 steps.
TEST_CASE("an inner step that diverges trains for 2,000 meta-steps once its gradients are clipped",
          "[maml][stability][long]") {
  const Sampler sampler({.support = 5, .query = 10});
  auto run = [&](double clip, long steps) {
    Generator init(1), gen(2);
    Maml<nn::Sequential, MseLoss> maml(
        small_network(), MseLoss{},
        {.inner_loop = {.steps = 5, .learning_rate = 0.05, .max_gradient_norm = clip},
         .threads = 1},
        init);
    std::vector<double> losses;
    for (long step = 0; step < steps; ++step) {
      losses.push_back(maml.meta_train_step(sampler.sample(10, gen), gen).query_loss);
      if (!std::isfinite(losses.back())) break;
    }
    return losses;
  };
  const auto unclipped = run(0, 100);
  CHECK_FALSE(std::isfinite(unclipped.back()));
  const auto clipped = run(2, 2000);
  REQUIRE(clipped.size() == 2000);
  CHECK(std::all_of(clipped.begin(), clipped.end(), [](double l) { return std::isfinite(l); }));
  // The loss falls within a few hundred steps and then levels off (on this
  // task stream from 9.3 over the first 100 steps to 6.1-7.2 per later 100,
  // which float rounding of the CPU at hand moves): compare the first 100
  // steps with the last 500.
  const double first = std::accumulate(clipped.begin(), clipped.begin() + 100, 0.0) / 100,
               last = std::accumulate(clipped.end() - 500, clipped.end(), 0.0) / 500;
  INFO("mean query loss over the first 100 steps " << first << ", the last 500 " << last);
  CHECK(last < 0.85 * first);
}

// Before gammas were stored as logarithms this run diverged (a NaN query
// loss at meta-step 1801 with one chunk of tasks; at 1724 with seed 3):
// Adam's 1e-2 steps pushed gammas through zero, and the mean steps then
// ascended. With positive gammas but no bound on the inner step it diverged
// too, at step 1185 with one chunk per task: the meta-parameters stayed
// finite and ordinary, but the inner loop's fixed step of 0.01 blew up on
// single tasks (query losses of 1e3 to 5e9 in the 30 steps before the NaN).
// Clipping each inner gradient to norm 100 (a step of at most 1) fixes that.
TEST_CASE("PLATIPUS trains 2,000 meta-steps at meta learning rate 1e-2 without diverging",
          "[platipus][learning][stability][long]") {
  const Sampler sampler({.support = 5, .query = 10});
  Generator init(1), data(1, 2);
  PlatipusModel model(small_network(), MseLoss{},
                      {.inner_loop = {.steps = 5, .learning_rate = 0.01, .max_gradient_norm = 100},
                       .kl_weight = 1.5,
                       .initial_prior_variance = 1e-3,
                       .initial_posterior_variance = 1e-3,
                       .initial_gamma_p = 0.01,
                       .initial_gamma_q = 0.01,
                       .meta_optimizer = {.learning_rate = 1e-2},
                       .threads = 1},
                      init);
  double first = 0, last = 0;
  for (int step = 1; step <= 2000; ++step) {
    const auto result = model.meta_train_step(sampler.sample(25, data), data);
    REQUIRE(std::isfinite(result.query_loss));
    REQUIRE(std::isfinite(result.kl));
    if (step <= 200) first += result.query_loss / 200;
    if (step > 1800) last += result.query_loss / 200;
  }
  INFO("mean query loss over the first and the last 200 steps: " << first << ", " << last);
  CHECK(last < 0.7 * first);
}

TEST_CASE("PLATIPUS's meta-gradient matches central finite differences of its objective",
          "[platipus][gradcheck]") {
  using DoublePlatipus = Platipus<nn::Sequential, GaussianNllLoss, double>;
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {6}, .outputs = 1, .activation = nn::Activation::tanh});
  Generator data(79);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  for (const Reduction query_reduction : {Reduction::sum, Reduction::mean})
    for (const double prior_likelihood_weight : {0.0, 0.6}) {
      Generator init(80);
      const PlatipusSettings settings{.inner_loop = {.steps = 2, .learning_rate = 0.02},
                                      .kl_weight = 0.7,
                                      .query_reduction = query_reduction,
                                      .prior_likelihood_weight = prior_likelihood_weight,
                                      // step 1 on the support and query points in
                                      // the two cases with a prior likelihood, on
                                      // the query points alone in the other two
                                      .posterior_data = prior_likelihood_weight > 0
                                                            ? PosteriorData::support_and_query
                                                            : PosteriorData::query,
                                      .initial_prior_variance = 0.05,
                                      .initial_posterior_variance = 0.02,
                                      .initial_gamma_p = 0.03,
                                      .initial_gamma_q = 0.05,
                                      .threads = 1};
      DoublePlatipus learner(model, GaussianNllLoss{.noise_std = 0.5}, settings, init);
      // The objective for one fixed draw of the noise: the same generator state every time.
      const Generator noise(81);
      const auto objective = objective_with_fixed_noise(learner, batch, noise, settings.kl_weight);
      Generator gen = noise;
      check_part_gradients(learner, learner.meta_gradient(batch, gen), objective, 1e-5, 82);
    }
}

// Step 1 on the support and query points together is step 1 on a query set
// that holds both: the KL, which depends on the means and variances alone, is
// the same as a query-only learner's on that batch, and not the same as its
// KL on the batch's own query set.
TEST_CASE("PLATIPUS's posterior can step on the support and query points together", "[platipus]") {
  using DoublePlatipus = Platipus<nn::Sequential, GaussianNllLoss, double>;
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {6}, .outputs = 1, .activation = nn::Activation::tanh});
  Generator data(87);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  auto make = [&](PosteriorData posterior_data) {
    Generator init(88);
    return DoublePlatipus(model, GaussianNllLoss{.noise_std = 0.5},
                          {.inner_loop = {.steps = 2, .learning_rate = 0.02},
                           .posterior_data = posterior_data,
                           .initial_prior_variance = 0.05,
                           .initial_posterior_variance = 0.02,
                           .initial_gamma_p = 0.03,
                           .initial_gamma_q = 0.05,
                           .threads = 1},
                          init);
  };
  const auto both = make(PosteriorData::support_and_query), query = make(PosteriorData::query);
  auto side_by_side = [](const Tensor<double>& a, const Tensor<double>& b) {
    const std::array parts{&a, &b};
    return raw::concat(std::span<const Tensor<double>* const>(parts), 1);
  };
  const TaskBatch<double> widened{.support_x = batch.support_x.clone(),
                                  .support_y = batch.support_y.clone(),
                                  .query_x = side_by_side(batch.support_x, batch.query_x),
                                  .query_y = side_by_side(batch.support_y, batch.query_y)};
  auto kl = [](const DoublePlatipus& learner, const TaskBatch<double>& b) {
    MetaStepResult result;
    Generator gen(89);
    learner.meta_gradient(b, gen, &result);
    return result.kl;
  };
  const double kl_both = kl(both, batch);
  CHECK(kl_both == Approx(kl(query, widened)).epsilon(1e-12));
  CHECK(std::abs(kl_both - kl(query, batch)) > 1e-3 * kl_both);
}

// Step 6 (docs/algorithms.md): with variances too small to matter, the
// prior's term is the summed query NLL of the model Algorithm 2 samples, and
// the meta-step's reported query loss and KL stay those of step 5.
TEST_CASE(
    "PLATIPUS's prior likelihood term is the query loss of the model it samples at meta-test "
    "time",
    "[platipus]") {
  using DoublePlatipus = Platipus<nn::Sequential, GaussianNllLoss, double>;
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {6}, .outputs = 1, .activation = nn::Activation::tanh});
  Generator data(83);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  const GaussianNllLoss loss{.noise_std = 0.5};
  auto make = [&](double weight) {
    Generator init(84);
    return DoublePlatipus(model, loss,
                          {.inner_loop = {.steps = 2, .learning_rate = 0.02},
                           .kl_weight = 0.7,
                           .prior_likelihood_weight = weight,
                           .initial_prior_variance = 1e-24,
                           .initial_posterior_variance = 1e-24,
                           .initial_gamma_p = 0.03,
                           .initial_gamma_q = 0.05,
                           .threads = 1},
                          init);
  };
  const auto paper = make(0), hybrid = make(2.5);
  // Without the KL (beta 0): with such variances it is about 1e23.
  const Generator noise(85);
  const double difference = objective_with_fixed_noise(hybrid, batch, noise, 0)() -
                            objective_with_fixed_noise(paper, batch, noise, 0)();
  Generator gen(86);
  const auto prediction =
      paper.predict(paper.sample(batch.support_x, batch.support_y, 1, gen), batch.query_x)
          .to_vector();
  const auto y = batch.query_y.to_vector();
  double nll = 0;  // summed over each task's points, the mean over tasks
  for (std::size_t i = 0; i < y.size(); ++i)
    nll += (std::pow(y[i] - prediction[i], 2) / (2 * 0.25) + std::log(0.5) +
            0.5 * std::log(2 * M_PI)) /
           static_cast<double>(batch.tasks());
  CHECK(difference == Approx(2.5 * nll).epsilon(1e-9));
  MetaStepResult paper_result, hybrid_result;
  Generator g1 = noise, g2 = noise;
  paper.meta_gradient(batch, g1, &paper_result);
  hybrid.meta_gradient(batch, g2, &hybrid_result);
  CHECK(hybrid_result.query_loss == paper_result.query_loss);
  CHECK(hybrid_result.kl == paper_result.kl);
}

TEST_CASE(
    "Meta-SGD with every rate alpha has MAML's meta-gradient, and its meta-gradient matches "
    "central finite differences",
    "[metasgd][gradcheck]") {
  using DoubleMetaSgd = MetaSgd<nn::Sequential, MseLoss, double>;
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {6}, .outputs = 1, .activation = nn::Activation::tanh});
  Generator data(91);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  const InnerLoop loop{.steps = 2, .learning_rate = 0.03};
  Generator maml_init(92), init(92), gen(93);
  const Maml<nn::Sequential, MseLoss, double> maml(model, MseLoss{},
                                                   {.inner_loop = loop, .threads = 1}, maml_init);
  DoubleMetaSgd learner(model, MseLoss{}, {.inner_loop = loop, .threads = 1}, init);
  const auto gradients = learner.meta_gradient(batch, gen);
  // With alpha = 0.03 everywhere, Meta-SGD's inner loop is MAML's.
  const auto maml_gradient = maml.meta_gradient(batch, gen).to_vector();
  const auto theta_gradient = gradients[DoubleMetaSgd::theta].to_vector();
  for (std::size_t i = 0; i < maml_gradient.size(); ++i)
    CHECK(theta_gradient[i] == Approx(maml_gradient[i]).epsilon(1e-12).margin(1e-15));
  // Both parts against central differences, after moving the rates apart.
  auto rates = learner.part(DoubleMetaSgd::learning_rate_scales).to_vector();
  Generator spread(94);
  for (auto& r : rates) r *= 0.5 + spread.uniform<double>();
  learner.set_part(DoubleMetaSgd::learning_rate_scales,
                   Tensor<double>::from_host({static_cast<std::int64_t>(rates.size())}, rates));
  const auto moved = learner.meta_gradient(batch, gen);
  auto objective = [&] {
    MetaStepResult result;
    learner.meta_gradient(batch, gen, &result);
    return result.query_loss;
  };
  check_part_gradients(learner, moved, objective, 1e-6, 95);
}

TEST_CASE("Meta-SGD learns sinusoids in one inner step, and learns its rates",
          "[metasgd][learning][long]") {
  const Sampler sampler({.support = 10, .query = 10, .sinusoid_fraction = 1.0});
  Generator init(1), data(2);
  MetaSgd<nn::Sequential, MseLoss> learner(
      small_network(), MseLoss{}, {.inner_loop = {.steps = 1, .learning_rate = 0.01}, .threads = 2},
      init);
  for (int step = 0; step < 1500; ++step) learner.meta_train_step(sampler.sample(25, data), data);
  Generator held_out(99);
  const auto test = sampler.sample(200, held_out);
  const double before =
      mse(learner.predict(learner.part(decltype(learner)::theta), test.query_x), test.query_y);
  const double after =
      mse(learner.predict(learner.adapt_to(test.support_x, test.support_y, held_out), test.query_x),
          test.query_y);
  const auto rates = learner.part(decltype(learner)::learning_rate_scales).to_vector();
  const auto [low, high] = std::minmax_element(rates.begin(), rates.end());
  INFO("query MSE before adaptation " << before << ", after one step " << after
                                      << "; rate scales in [" << *low << ", " << *high << "]");
  CHECK(after < 0.5 * before);
  // The rates are learned: their scales are no longer all at their initial 1.
  CHECK(*high - *low > 0.1);
}

TEST_CASE("Meta-SGD refuses settings that make no sense, naming the setting", "[metasgd][errors]") {
  using Catch::Contains;
  Generator init(1);
  auto make = [&](MetaSgdSettings s) {
    MetaSgd<nn::Sequential, MseLoss>(small_network(), MseLoss{}, s, init);
  };
  CHECK_THROWS_WITH(make({.inner_loop = {.steps = -1}}), Contains("inner_loop.steps"));
  CHECK_THROWS_WITH(make({.inner_loop = {.gradient_noise = 0.5}}),
                    Contains("inner_loop.gradient_noise must be 0"));
  CHECK_THROWS_WITH(make({.task_chunks = -2}), Contains("task_chunks"));
}

TEST_CASE("meta_train records the mean query loss of each interval and trains as a hand loop does",
          "[training]") {
  const Sampler sampler({.support = 5, .query = 5});
  const MamlSettings settings{.inner_loop = {.steps = 1, .learning_rate = 0.01}, .threads = 1};
  Generator init_a(5), init_b(5), gen_a(6), gen_b(6);
  Maml<nn::Sequential, MseLoss> by_hand(small_network(), MseLoss{}, settings, init_a);
  Maml<nn::Sequential, MseLoss> looped(small_network(), MseLoss{}, settings, init_b);
  std::vector<double> losses;
  for (int step = 0; step < 10; ++step)
    losses.push_back(by_hand.meta_train_step(sampler.sample(4, gen_a), gen_a).query_loss);
  std::vector<TrainingRecord> records;
  meta_train(looped, sampler, gen_b, {.steps = 10, .meta_batch = 4, .record_every = 3},
             [&](const TrainingRecord& r) { records.push_back(r); });
  CHECK(looped.parameters().to_vector() == by_hand.parameters().to_vector());
  REQUIRE(records.size() == 4);
  const std::vector<std::pair<int, int>> intervals{{0, 3}, {3, 6}, {6, 9}, {9, 10}};
  for (std::size_t r = 0; r < records.size(); ++r) {
    const auto [first, last] = intervals[r];
    const double mean =
        std::accumulate(losses.begin() + first, losses.begin() + last, 0.0) / (last - first);
    CHECK(records[r].step == last);
    CHECK(records[r].query_loss == Approx(mean).epsilon(1e-12));
    CHECK(records[r].seconds >= 0);
  }
}

TEST_CASE(
    "meta_train stops a diverging run with an error naming it and the step, and refuses "
    "settings that make no sense",
    "[training][errors]") {
  using Catch::Contains;
  const Sampler sampler({.support = 5, .query = 5});
  Generator init(1), gen(2);
  Maml<nn::Sequential, MseLoss> maml(small_network(), MseLoss{},
                                     {.inner_loop = {.learning_rate = 100},
                                      .meta_optimizer = {.learning_rate = 100},
                                      .threads = 1},
                                     init);
  std::int64_t recorded = 0;
  CHECK_THROWS_WITH(
      meta_train(maml, sampler, gen, {.steps = 50, .record_every = 1, .name = "my run"},
                 [&](const TrainingRecord& r) { recorded = r.step; }),
      Contains("my run") && Contains("meta-training diverged at step"));
  INFO("last step recorded before the divergence: " << recorded);
  CHECK(recorded < 50);
  // Its own type, so that a driver of many runs can record it and go on;
  // the learner's meta-parameters are NaN now, and the first step says so.
  CHECK_THROWS_AS(meta_train(maml, sampler, gen, {.steps = 5, .name = "again"}), divergence);
  CHECK_THROWS_WITH(meta_train(maml, sampler, gen, {.meta_batch = 0}), Contains("meta_batch"));
  CHECK_THROWS_WITH(meta_train(maml, sampler, gen, {.steps = -1}), Contains("steps"));
}

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

TEST_CASE("first-order MAML's meta-gradient is the query loss's gradient at the adapted weights",
          "[maml][gradcheck]") {
  Generator data(31), init(32), gen(33);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(1, data);
  const DoubleMaml fomaml(
      tiny_network(), MseLoss{},
      {.inner_loop = {.steps = 3, .learning_rate = 0.05}, .first_order = true, .threads = 1}, init);
  const auto gradient = fomaml.meta_gradient(batch, gen).to_vector();
  // A learner with no inner steps at phi: its query loss is L(phi, D_test).
  Generator unused(0);
  DoubleMaml at_phi(tiny_network(), MseLoss{}, {.inner_loop = {.steps = 0}, .threads = 1}, unused);
  at_phi.set_parameters(
      fomaml.adapt_to(batch.support_x, batch.support_y, gen).reshaped(fomaml.parameters().shape()));
  const double worst = directional_errors(at_phi, batch, gen, {gradient})[0];
  INFO("worst relative error " << worst);
  CHECK(worst < 1e-6);
}

TEST_CASE(
    "ANIL's meta-gradient matches central finite differences, adapts only the head, and is "
    "MAML's when the head is every piece",
    "[anil][gradcheck]") {
  using DoubleAnil = Anil<nn::Sequential, MseLoss, double>;
  Generator data(41), init(42), maml_init(42), all_init(42), gen(43);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  const InnerLoop loop{.steps = 3, .learning_rate = 0.05};
  DoubleAnil anil(tiny_network(), MseLoss{}, {.inner_loop = loop, .threads = 1}, init);
  const auto& layout = anil.model().layout();
  REQUIRE(anil.objective().head().size() == 2);  // the last layer's weight and bias
  CHECK(layout.specs()[anil.objective().head()[0]].name == "layer4.weight");
  const auto gradient = anil.meta_gradient(batch, gen).to_vector();
  const double worst = directional_errors(anil, batch, gen, {gradient})[0];
  INFO("worst relative error " << worst);
  CHECK(worst < 1e-6);
  // The body learns through the head: its gradient is not zero.
  const auto body = layout.piece(anil.meta_gradient(batch, gen), "layer0.weight").to_vector();
  CHECK(std::any_of(body.begin(), body.end(), [](double g) { return std::abs(g) > 1e-6; }));
  // Adapted rows keep the body's values and move the head's.
  const auto adapted = anil.adapt_to(batch.support_x, batch.support_y, gen);
  for (std::int64_t t = 0; t < batch.tasks(); ++t) {
    CHECK(layout.piece(adapted, "layer0.weight", t).to_vector() ==
          layout.piece(anil.parameters(), "layer0.weight").to_vector());
    CHECK(layout.piece(adapted, "layer4.weight", t).to_vector() !=
          layout.piece(anil.parameters(), "layer2.weight").to_vector());
  }
  // With every piece in the head ANIL is MAML.
  std::vector<std::string> every;
  for (const auto& spec : layout.specs()) every.push_back(spec.name);
  const DoubleAnil all(tiny_network(), MseLoss{}, {.inner_loop = loop, .head = every, .threads = 1},
                       all_init);
  const DoubleMaml maml(tiny_network(), MseLoss{}, {.inner_loop = loop, .threads = 1}, maml_init);
  const auto a = all.meta_gradient(batch, gen).to_vector(),
             m = maml.meta_gradient(batch, gen).to_vector();
  for (std::size_t i = 0; i < m.size(); ++i)
    CHECK(a[i] == Approx(m[i]).epsilon(1e-12).margin(1e-15));
}

TEST_CASE(
    "Reptile's meta-gradient is mean(theta - phi), alpha times the joint loss's gradient "
    "after one step",
    "[reptile][gradcheck]") {
  using DoubleReptile = Reptile<nn::Sequential, MseLoss, double>;
  Generator data(51), gen(53);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  // All of each task's points: the data Reptile's inner loop trains on.
  const std::array<const Tensor<double>*, 2> xs{&batch.support_x, &batch.query_x},
      ys{&batch.support_y, &batch.query_y};
  const Tensor<double> all_x = raw::concat(std::span<const Tensor<double>*const>(xs), 1),
                       all_y = raw::concat(std::span<const Tensor<double>*const>(ys), 1);
  SECTION("K steps: the mean of theta - phi_i, phi_i from K plain SGD steps") {
    Generator init(52), maml_init(52);
    const InnerLoop loop{.steps = 4, .learning_rate = 0.05};
    const DoubleReptile reptile(tiny_network(), MseLoss{}, {.inner_loop = loop, .threads = 2},
                                init);
    const DoubleMaml sgd(tiny_network(), MseLoss{}, {.inner_loop = loop, .threads = 1}, maml_init);
    const auto gradient = reptile.meta_gradient(batch, gen).to_vector();
    const auto phi = sgd.adapt_to(all_x, all_y, gen).to_vector();
    const auto theta = reptile.parameters().to_vector();
    const std::size_t p = theta.size(), tasks = 3;
    for (std::size_t i = 0; i < p; ++i) {
      double mean = 0;
      for (std::size_t t = 0; t < tasks; ++t) mean += (theta[i] - phi[t * p + i]) / tasks;
      CHECK(gradient[i] == Approx(mean).epsilon(1e-12).margin(1e-15));
    }
  }
  SECTION(
      "one step: alpha times the gradient of the mean loss on all points, against central "
      "differences") {
    Generator init(52), joint_init(52);
    const double alpha = 0.05;
    const DoubleReptile reptile(tiny_network(), MseLoss{},
                                {.inner_loop = {.steps = 1, .learning_rate = alpha}, .threads = 1},
                                init);
    auto gradient = reptile.meta_gradient(batch, gen).to_vector();
    for (auto& g : gradient) g /= alpha;
    // No inner steps and every point as the query set: the joint loss.
    DoubleMaml joint(tiny_network(), MseLoss{}, {.inner_loop = {.steps = 0}, .threads = 1},
                     joint_init);
    const TaskBatch<double> points{batch.support_x.clone(), batch.support_y.clone(), all_x.clone(),
                                   all_y.clone()};
    const double worst = directional_errors(joint, points, gen, {gradient})[0];
    INFO("worst relative error " << worst);
    CHECK(worst < 1e-6);
  }
}

TEST_CASE(
    "MAML++'s meta-gradient: MAML's at equal rates, its multi-step loss, first order while "
    "annealing, and both parts (theta, log-rates) against central finite differences",
    "[mamlpp][gradcheck]") {
  using DoubleMamlPlusPlus = MamlPlusPlus<nn::Sequential, MseLoss, double>;
  Generator data(61), gen(63);
  const auto batch = data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
  const InnerLoop loop{.steps = 3, .learning_rate = 0.05};
  const MamlPlusPlusSettings last_step_only{
      .inner_loop = loop, .multi_step_loss_steps = 0, .first_order_steps = 0, .threads = 1};
  auto maml_gradient = [&](int steps, bool first_order) {
    Generator init(62);
    return DoubleMaml(tiny_network(), MseLoss{},
                      {.inner_loop = {.steps = steps, .learning_rate = loop.learning_rate},
                       .first_order = first_order,
                       .threads = 1},
                      init)
        .meta_gradient(batch, gen)
        .to_vector();
  };
  auto theta_gradient = [&](const MamlPlusPlusSettings& settings) {
    Generator init(62);
    return DoubleMamlPlusPlus(tiny_network(), MseLoss{}, settings, init)
        .meta_gradient(batch, gen)[DoubleMamlPlusPlus::theta]
        .to_vector();
  };
  SECTION("the last step's loss at the initial rates is MAML's objective") {
    const auto g = theta_gradient(last_step_only), m = maml_gradient(3, false);
    for (std::size_t i = 0; i < m.size(); ++i)
      CHECK(g[i] == Approx(m[i]).epsilon(1e-12).margin(1e-15));
  }
  SECTION("at step 0 the multi-step loss weighs the K steps' query losses equally") {
    auto settings = last_step_only;
    settings.multi_step_loss_steps = 100;
    const auto g = theta_gradient(settings);
    std::vector<double> expected(g.size(), 0.0);
    for (int k = 1; k <= 3; ++k) {
      const auto m = maml_gradient(k, false);
      for (std::size_t i = 0; i < m.size(); ++i) expected[i] += m[i] / 3;
    }
    for (std::size_t i = 0; i < g.size(); ++i)
      CHECK(g[i] == Approx(expected[i]).epsilon(1e-12).margin(1e-15));
  }
  SECTION("during derivative-order annealing the gradient is first order") {
    auto settings = last_step_only;
    settings.first_order_steps = 10;
    const auto g = theta_gradient(settings), m = maml_gradient(3, true);
    for (std::size_t i = 0; i < m.size(); ++i)
      CHECK(g[i] == Approx(m[i]).epsilon(1e-12).margin(1e-15));
  }
  SECTION("theta and the per-layer per-step rates against central differences") {
    Generator init(62);
    DoubleMamlPlusPlus learner(tiny_network(), MseLoss{}, last_step_only, init);
    auto rates = learner.part(DoubleMamlPlusPlus::log_learning_rates).to_vector();
    Generator spread(64);
    for (auto& r : rates) r += spread.uniform<double>() - 0.5;
    learner.set_part(DoubleMamlPlusPlus::log_learning_rates,
                     Tensor<double>::from_host(
                         learner.part(DoubleMamlPlusPlus::log_learning_rates).shape(), rates));
    auto objective = [&] {
      MetaStepResult result;
      learner.meta_gradient(batch, gen, &result);
      return result.query_loss;
    };
    check_part_gradients(learner, learner.meta_gradient(batch, gen), objective, 1e-6, 65);
  }
}

TEST_CASE("MAML++ anneals its step-loss weights towards the last step", "[mamlpp]") {
  Generator init(1);
  const MamlPlusPlus<nn::Sequential, MseLoss> learner(tiny_network(), MseLoss{},
                                                      {.inner_loop = {.steps = 4},
                                                       .multi_step_loss_steps = 100,
                                                       .first_order_steps = 0,
                                                       .meta_optimizer = {.learning_rate = 1e-3},
                                                       .threads = 1,
                                                       .task_chunks = 1},
                                                      init);
  const auto& o = learner.objective();
  CHECK(o.multi_step_weights(0) == std::vector<double>(4, 0.25));
  double previous_last = 0;
  for (int step : {0, 10, 50, 90, 99}) {
    const auto w = o.multi_step_weights(step);
    CHECK(std::accumulate(w.begin(), w.end(), 0.0) == Approx(1.0));
    CHECK(w.back() > previous_last);
    CHECK(w[0] >= 0.03 / 4);
    previous_last = w.back();
  }
  CHECK(o.multi_step_weights(100) == std::vector<double>{0, 0, 0, 1});
  CHECK_THAT(learner.replay_obstacle(), Catch::Contains("multi-step loss"));
}

TEST_CASE(
    "a meta-learner anneals its meta learning rate: the first step as at a constant rate, the "
    "second smaller, none after the cosine ends at a final rate of 0",
    "[maml][optim]") {
  const Sampler sampler({.support = 5, .query = 5});
  const MamlSettings constant{.inner_loop = {.steps = 1, .learning_rate = 0.01},
                              .meta_optimizer = {.learning_rate = 1e-2},
                              .threads = 1,
                              .task_chunks = 1};
  MamlSettings annealed = constant;
  annealed.meta_optimizer.annealing_steps = 2;
  annealed.meta_optimizer.final_learning_rate = 0;
  Generator init(1), init_again(1), data(2);
  Maml<nn::Sequential, MseLoss> steady(small_network(), MseLoss{}, constant, init),
      annealing(small_network(), MseLoss{}, annealed, init_again);
  CHECK_THAT(annealing.replay_obstacle(), Catch::Contains("meta learning rate still anneals"));
  std::vector<std::vector<float>> steady_after, annealing_after;
  for (int step = 0; step < 3; ++step) {
    const auto batch = sampler.sample(4, data);
    Generator noise(3), same_noise(3);
    steady.meta_train_step(batch, noise);
    annealing.meta_train_step(batch, same_noise);
    steady_after.push_back(steady.parameters().to_vector());
    annealing_after.push_back(annealing.parameters().to_vector());
  }
  CHECK(annealing_after[0] == steady_after[0]);  // learning_rate_at(0) is the rate itself
  CHECK(annealing_after[1] != steady_after[1]);
  CHECK(annealing_after[1] != annealing_after[0]);  // step 2 at half the rate still moves
  CHECK(annealing_after[2] == annealing_after[1]);  // step 3 at the final rate, 0, does not
  CHECK_THAT(annealing.replay_obstacle(), !Catch::Contains("meta learning rate"));
}

template <class Learner>
void check_adaptation_halves_the_error(Learner& learner) {
  const auto [before, after] = before_and_after_training(learner);
  INFO("query MSE before adaptation " << before << ", after " << after);
  CHECK(after < 0.5 * before);
}

TEST_CASE(
    "first-order MAML, ANIL, Reptile and MAML++ learn sinusoids: adaptation halves the query "
    "error",
    "[maml][anil][reptile][mamlpp][learning][long]") {
  const InnerLoop loop{.steps = 5, .learning_rate = 0.01};
  Generator init(1);
  SECTION("first-order MAML") {
    Maml<nn::Sequential, MseLoss> learner(
        small_network(), MseLoss{}, {.inner_loop = loop, .first_order = true, .threads = 2}, init);
    check_adaptation_halves_the_error(learner);
  }
  SECTION("ANIL") {
    Anil<nn::Sequential, MseLoss> learner(small_network(), MseLoss{},
                                          {.inner_loop = loop, .threads = 2}, init);
    check_adaptation_halves_the_error(learner);
  }
  SECTION("Reptile") {
    Reptile<nn::Sequential, MseLoss> learner(small_network(), MseLoss{},
                                             {.inner_loop = loop, .threads = 2}, init);
    check_adaptation_halves_the_error(learner);
  }
  SECTION("MAML++") {
    MamlPlusPlus<nn::Sequential, MseLoss> learner(
        small_network(), MseLoss{},
        {.inner_loop = loop, .multi_step_loss_steps = 150, .first_order_steps = 500, .threads = 2},
        init);
    check_adaptation_halves_the_error(learner);
  }
}

// A learner of sinusoids with the given inner loop, from the initial
// parameters of Generator(1).
template <class Learner>
Learner learner_with(const InnerLoop& loop) {
  Generator init(1);
  return Learner(small_network(), MseLoss{}, {.inner_loop = loop}, init);
}

// A learner that trains with 2 inner steps and evaluates with 7 adapts as one
// with 7 steps does, and not as one with 2.
template <class Learner>
void check_evaluation_steps(const TaskBatch<float>& batch) {
  const InnerLoop two{.steps = 2, .learning_rate = 0.01}, seven{.steps = 7, .learning_rate = 0.01};
  InnerLoop two_then_seven = two;
  two_then_seven.evaluation_steps = 7;
  const auto adapted = [&](const InnerLoop& loop) {
    Generator gen(5);
    if constexpr (requires(Learner l) { l.sample(batch.support_x, batch.support_y, 3, gen); })
      return learner_with<Learner>(loop)
          .sample(batch.support_x, batch.support_y, 3, gen)
          .to_vector();
    else
      return learner_with<Learner>(loop)
          .adapt_to(batch.support_x, batch.support_y, gen)
          .to_vector();
  };
  const auto phi = adapted(two_then_seven);
  CHECK(phi == adapted(seven));
  CHECK(phi != adapted(two));
}

TEST_CASE("inner_loop.evaluation_steps sets the steps of adapt_to and sample, not of training",
          "[maml][platipus][anil][metasgd][reptile][mamlpp]") {
  data::SinusoidLineSampler<float> tasks({.support = 5, .query = 5});
  Generator gen(3);
  const auto batch = tasks.sample(4, gen);
  check_evaluation_steps<Maml<nn::Sequential, MseLoss>>(batch);
  check_evaluation_steps<Anil<nn::Sequential, MseLoss>>(batch);
  check_evaluation_steps<MetaSgd<nn::Sequential, MseLoss>>(batch);
  check_evaluation_steps<Reptile<nn::Sequential, MseLoss>>(batch);
  check_evaluation_steps<Platipus<nn::Sequential, MseLoss>>(batch);
  // Training keeps `steps`: a meta-step's query loss is that of a learner
  // without evaluation_steps.
  const InnerLoop two{.steps = 2, .learning_rate = 0.01};
  InnerLoop two_then_seven = two;
  two_then_seven.evaluation_steps = 7;
  auto a = learner_with<Platipus<nn::Sequential, MseLoss>>(two_then_seven),
       b = learner_with<Platipus<nn::Sequential, MseLoss>>(two);
  Generator ga(9), gb(9);
  CHECK(a.meta_train_step(batch, ga).query_loss == b.meta_train_step(batch, gb).query_loss);
  // MAML++ learns one rate per step, so its steps cannot change at test time.
  CHECK_THROWS_WITH((learner_with<MamlPlusPlus<nn::Sequential, MseLoss>>(two_then_seven)),
                    Catch::Contains("evaluation_steps must equal inner_loop.steps"));
  CHECK_THROWS_WITH((learner_with<Maml<nn::Sequential, MseLoss>>({.evaluation_steps = -1})),
                    Catch::Contains("evaluation_steps must be non-negative"));
}

TEST_CASE("detached inner steps give the values of steps on one tape", "[maml][metasgd][anil]") {
  Generator init(1), gen(2);
  const auto network = nn::mlp({.inputs = 1, .hidden = {16}, .outputs = 1});
  const auto& layout = network.layout();
  InnerLoop loop{.steps = 3, .learning_rate = 0.05};
  const auto x = raw::normal<float>({2, 20, 1}, gen), y = raw::normal<float>({2, 20, 1}, gen);
  Tape<float> tape;
  const auto start = per_task(tape.variable(raw::normal<float>({layout.size()}, init)), layout, 2);
  const auto rates =
      unflatten(tape.constant(raw::normal<float>({layout.size()}, init)) * 0.01f, layout.shapes());
  // Plain steps, Meta-SGD's rates, ANIL's head.
  for (const auto& options : {AdaptOptions<float, cpu>{}, AdaptOptions<float, cpu>{.rates = &rates},
                              AdaptOptions<float, cpu>{.adapted = {2, 3}}}) {
    auto detached = options;
    detached.detached = true;
    const auto one_tape =
        adapt(network, MseLoss{}, start, tape.constant(x), tape.constant(y), loop, options);
    const auto stepwise =
        adapt(network, MseLoss{}, start, tape.constant(x), tape.constant(y), loop, detached);
    CHECK(flat_values(stepwise.params, layout).to_vector() ==
          flat_values(one_tape.params, layout).to_vector());
    CHECK(stepwise.initial_loss.value().item() == one_tape.initial_loss.value().item());
  }
  // MAML + noise's draws: the same, in the same order.
  loop.gradient_noise = 0.1;
  const auto noisy = [&](bool detached) {
    Generator g(4);
    TaskNoise n(g);
    return flat_values(adapt(network, MseLoss{}, start, tape.constant(x), tape.constant(y), loop,
                             {.noise = &n, .detached = detached})
                           .params,
                       layout)
        .to_vector();
  };
  CHECK(noisy(true) == noisy(false));
  CHECK_THROWS_WITH(adapt(network, MseLoss{}, start, tape.constant(x), tape.constant(y), loop,
                          {.create_graph = true, .detached = true}),
                    Catch::Contains("detached steps cannot be differentiable"));
}

TEST_CASE("adaptation outside meta-training holds one inner step's memory", "[maml][platipus]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("not measured under AddressSanitizer, whose quarantine holds freed blocks back");
  return;
#endif
  Generator init(1), gen(2);
  const auto network = nn::mlp({.inputs = 1, .hidden = {256, 256}, .outputs = 1});
  const InnerLoop loop{.steps = 1, .learning_rate = 1e-3, .evaluation_steps = 60};
  const Maml<nn::Sequential, MseLoss> maml(network, MseLoss{}, {.inner_loop = loop}, init);
  const Platipus<nn::Sequential, MseLoss> platipus(network, MseLoss{}, {.inner_loop = loop}, init);
  const auto x = raw::normal<float>({2, 1000, 1}, gen), y = raw::normal<float>({2, 1000, 1}, gen);
  // One step's activations and gradients, 2 tasks x 1000 points through two
  // layers of 256, are about 20 MB; 60 steps on one tape would hold 1.2 GB.
  reset_peak_resident();
  const long before = resident_kib();
  maml.adapt_to(x, y, gen);
  platipus.sample(x, y, 1, gen);
  const long peak = peak_resident_kib();
  INFO("resident " << before << " KiB before, peak " << peak << " KiB");
  CHECK(peak - before < 200 * 1024);
}

TEST_CASE("the memory check's arithmetic: the bound, each rank's threads, the tasks in flight",
          "[memory][errors]") {
  using Catch::Contains;
  CHECK(meta_step_bytes_bound(25, 1000, 5, sizeof(float)) == 25.0 * 1000 * 4 * 6);
  CHECK(meta_step_bytes_bound(4, 1000, 0, sizeof(double)) == 4.0 * 1000 * 8);
  CHECK_THROWS_WITH(meta_step_bytes_bound(-1, 10, 1, 4), Contains("non-negative"));
  // --threads 0 on a 16-core machine: four ranks take four cores each.
  CHECK(threads_per_rank(0, 16, 4) == 4);
  CHECK(threads_per_rank(0, 2, 4) == 1);
  CHECK(threads_per_rank(3, 16, 4) == 3);
  CHECK_THROWS_WITH(threads_per_rank(-1, 16, 1), Contains("threads_per_rank"));
  CHECK(tasks_at_once(25, 2) == 2);
  CHECK(tasks_at_once(25, 64) == 25);
  // Rank 0's slice of 5 tasks over 2 ranks is 3; two ranks on the machine.
  CHECK(tasks_at_once(5, 4, 2, 2) == 6);
  CHECK_THROWS_WITH(tasks_at_once(1, 4, 2, 1), Contains("cannot be cut over 2 ranks"));
  CHECK_THROWS_WITH(tasks_at_once(8, 0), Contains("threads must be positive"));
  const TaskMemory too_much{.task_bytes = 10, .tasks_at_once = 4, .available = 35};
  CHECK_FALSE(too_much.fits());
  CHECK(too_much.bytes() == 40);
  CHECK(too_much.tasks_that_fit() == 3);
  CHECK(TaskMemory{.task_bytes = 10, .tasks_at_once = 4, .available = 0}.fits());  // unknown
  CHECK(TaskMemory{.task_bytes = 50, .tasks_at_once = 2, .available = 40}.tasks_that_fit() == 0);
}

TEST_CASE("measure_task_bytes sees at least a task's adapted parameters", "[memory]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("not measured under AddressSanitizer, whose quarantine holds freed blocks back");
  return;
#endif
  // 8.2 million parameters (33 MB), larger than anything else in the tests,
  // so that no freed memory of theirs can hold the task's copies of them.
  Generator init(1), gen(2);
  const Maml<nn::Sequential, MseLoss> maml(
      nn::mlp({.inputs = 1, .hidden = {4099, 1999}, .outputs = 1}), MseLoss{},
      {.inner_loop = {.steps = 1}, .threads = 1}, init);
  const auto bytes =
      measure_task_bytes(maml, data::SinusoidLineSampler<float>({.support = 2, .query = 2}), gen);
  if (!bytes) {
    WARN("Linux's peak resident counter cannot be reset here");
    return;
  }
  INFO(*bytes << " bytes");
  CHECK(*bytes >= maml.parameters().numel() * sizeof(float));
  CHECK(*bytes < 40 * maml.parameters().numel() * sizeof(float));
}

TEST_CASE("ANIL, Reptile and MAML++ refuse settings that make no sense, naming the setting",
          "[anil][reptile][mamlpp][errors]") {
  using Catch::Contains;
  Generator init(1);
  CHECK_THROWS_WITH((Anil<nn::Sequential, MseLoss>(small_network(), MseLoss{},
                                                   {.head = {"layer9.weight"}}, init)),
                    Contains("no parameter named 'layer9.weight'"));
  CHECK_THROWS_WITH((Reptile<nn::Sequential, MseLoss>(small_network(), MseLoss{},
                                                      {.inner_loop = {.gradient_noise = 1}}, init)),
                    Contains("inner_loop.gradient_noise must be 0"));
  CHECK_THROWS_WITH((MamlPlusPlus<nn::Sequential, MseLoss>(small_network(), MseLoss{},
                                                           {.first_order_steps = -1}, init)),
                    Contains("first_order_steps"));
  CHECK_THROWS_WITH(
      (MamlPlusPlus<nn::Sequential, MseLoss>(small_network(), MseLoss{},
                                             {.meta_optimizer = {.learning_rate = 1e-3,
                                                                 .annealing_steps = 10,
                                                                 .final_learning_rate = 1}},
                                             init)),
      Contains("MamlPlusPlus") && Contains("meta_optimizer.final_learning_rate"));
  CHECK_THROWS_WITH(
      (Maml<nn::Sequential, MseLoss>(small_network(), MseLoss{},
                                     {.meta_optimizer = {.annealing_steps = -1}}, init)),
      Contains("Maml") && Contains("meta_optimizer.annealing_steps"));
}

TEST_CASE("estimate gives the mean and 1.96 standard errors, and refuses no values",
          "[evaluation]") {
  const std::vector<double> values{1, 2, 3, 4};
  const Estimate e = estimate(values);
  CHECK(e.mean == Approx(2.5));
  CHECK(e.interval == Approx(1.96 * std::sqrt(5.0 / 3.0) / 2));  // sample std over sqrt(n)
  CHECK(e.text() == "2.500 +- 1.265");
  CHECK(estimate(std::vector<double>{7}).interval == 0);
  CHECK_THROWS_WITH(estimate(std::vector<double>{}), Catch::Contains("no values"));
  // Of one score of each task.
  const std::vector<ClassificationScores> tasks{
      {.accuracy = 1}, {.accuracy = 2}, {.accuracy = 3}, {.accuracy = 4}};
  const Estimate of_tasks = estimate(tasks, &ClassificationScores::accuracy);
  CHECK((of_tasks.mean == e.mean && of_tasks.interval == e.interval));
}

// Samplers meet the TaskSampler concept for the learners that take their
// batches: the scalar type and the backend must match the learner's.
static_assert(TaskSamplerFor<Sampler, Maml<nn::Sequential, MseLoss>>);
static_assert(
    TaskSamplerFor<data::SinusoidLineSampler<double>, Maml<nn::Sequential, MseLoss, double>>);
static_assert(!TaskSamplerFor<data::SinusoidLineSampler<double>, Maml<nn::Sequential, MseLoss>>);
static_assert(!TaskSamplerFor<int, Maml<nn::Sequential, MseLoss>>);

TEST_CASE("held_out_losses gives each task's loss after adaptation, batch by batch",
          "[evaluation]") {
  const Sampler sampler({.support = 5, .query = 8});
  Generator init(1), gen(2), by_hand(2);
  const Maml<nn::Sequential, MseLoss> maml(
      small_network(), MseLoss{}, {.inner_loop = {.steps = 2, .learning_rate = 0.01}, .threads = 1},
      init);
  const auto losses = held_out_losses(maml, sampler, 30, gen, 20);
  REQUIRE(losses.size() == 30);
  // The same tasks and adaptation as evaluate() on the two batches, 20 then 10 tasks.
  for (const auto& [first, count] : {std::pair{0, 20}, std::pair{20, 10}}) {
    const auto batch = sampler.sample(count, by_hand);
    const double mean = maml.evaluate(batch, by_hand);
    const double ours =
        std::accumulate(losses.begin() + first, losses.begin() + first + count, 0.0) / count;
    CHECK(ours == Approx(mean).epsilon(1e-6));
  }
  CHECK(losses[0] != losses[1]);
  CHECK_THROWS_WITH(held_out_losses(maml, sampler, 0, gen), Catch::Contains("tasks"));
}

// Tasks of three classes for a classifier of 2-D points: uniform points,
// labels drawn at random (what the held-out scores do is the subject, not
// what a classifier learns).
struct ThreeClasses {
  TaskBatch<float> sample(std::int64_t tasks, Generator& gen) const {
    auto labels = [&](std::int64_t points) {
      std::vector<float> y;
      for (std::int64_t i = 0; i < tasks * points; ++i)
        y.push_back(static_cast<float>(gen.index(3)));
      return Tensor<float>::from_host({tasks, points, 1}, y);
    };
    auto support_x = raw::uniform<float>({tasks, 4, 2}, gen);
    auto support_y = labels(4);
    auto query_x = raw::uniform<float>({tasks, 6, 2}, gen);
    return {std::move(support_x), std::move(support_y), std::move(query_x), labels(6)};
  }
};

// Each task's scores as held_out_regression and held_out_classification
// must give them: the learner's models adapted batch by batch with draws
// from `models`, on tasks drawn from `tasks` alone; score(batch, [tasks,
// count, N, out] predictions, count) appends a batch's scores.
template <class Learner, class S, class Score>
void by_hand(const Learner& learner, const S& sampler, const std::vector<std::int64_t>& batches,
             std::int64_t count, Generator& tasks, Generator& models, Score score) {
  for (const std::int64_t size : batches) {
    const auto batch = sampler.sample(size, tasks);
    Tensor<float> params;
    if constexpr (requires { learner.adapt_to(batch.support_x, batch.support_y, models); })
      if (count == 1) params = learner.adapt_to(batch.support_x, batch.support_y, models);
    if (params.empty()) params = learner.sample(batch.support_x, batch.support_y, count, models);
    const auto p = learner.predict(params, batch.query_x).to_vector();
    score(batch, std::vector<double>(p.begin(), p.end()), count);
  }
}

TEST_CASE("held_out_regression scores each task's own models, on tasks that no model draw moves",
          "[evaluation]") {
  const Sampler sampler({.support = 5, .query = 8});
  Generator init(1);
  const Maml<nn::Sequential, MseLoss> maml(
      small_network(), MseLoss{}, {.inner_loop = {.steps = 2, .learning_rate = 0.01}, .threads = 1},
      init);
  const Maml<nn::Sequential, MseLoss> noisy(
      small_network(), MseLoss{},
      {.inner_loop = {.steps = 2, .learning_rate = 0.01, .gradient_noise = 0.5}, .threads = 1},
      init);
  const PlatipusModel platipus(small_network(), MseLoss{}, {.threads = 1}, init);
  CHECK_FALSE(maml.adapts_randomly());
  CHECK(noisy.adapts_randomly());
  CHECK(platipus.adapts_randomly());
  const double noise = 0.3;
  auto check_learner = [&](const auto& learner, std::int64_t count) {
    std::vector<std::int64_t> progress;
    Generator tasks(5), models(6);
    const auto scores = held_out_regression(learner, sampler,
                                            {.tasks = 30,
                                             .samples = 4,
                                             .batch = 20,
                                             .progress =
                                                 [&](std::int64_t done) {
                                                   progress.push_back(done);
                                                 }},
                                            noise, tasks, models);
    REQUIRE(scores.size() == 30);
    CHECK(progress == std::vector<std::int64_t>{20, 30});
    std::vector<RegressionScores> expected;
    Generator hand_tasks(5), hand_models(6);
    by_hand(learner, sampler, {20, 10}, count, hand_tasks, hand_models,
            [&](const auto& batch, const std::vector<double>& p, std::int64_t models_per_task) {
              const auto y = batch.query_y.to_vector();
              const std::size_t n = 8, per_task = n * static_cast<std::size_t>(models_per_task);
              for (std::size_t t = 0; t < static_cast<std::size_t>(batch.tasks()); ++t)
                expected.push_back(score_regression(
                    std::span(p).subspan(t * per_task, per_task),
                    std::vector<double>(y.begin() + t * n, y.begin() + (t + 1) * n), noise));
            });
    for (std::size_t t = 0; t < scores.size(); ++t) {
      CHECK(scores[t].mse == Approx(expected[t].mse).epsilon(1e-9));
      CHECK(scores[t].nll == Approx(expected[t].nll).epsilon(1e-9));
      CHECK(scores[t].coverage == expected[t].coverage);
      CHECK(scores[t].mse_per_sample == Approx(expected[t].mse_per_sample).epsilon(1e-9));
    }
    // The tasks' generator drew the tasks and nothing else.
    Generator only_tasks(5);
    sampler.sample(20, only_tasks);
    sampler.sample(10, only_tasks);
    CHECK(tasks.bits() == only_tasks.bits());
    return scores;
  };
  const auto deterministic = check_learner(maml, 1);
  for (const auto& s : deterministic) CHECK(s.mse_per_sample == Approx(s.mse).epsilon(1e-9));
  const auto sampled = check_learner(platipus, 4);
  // A mixture's mean is closer than its average member (Jensen).
  for (const auto& s : sampled) CHECK(s.mse <= s.mse_per_sample * (1 + 1e-9));
  check_learner(noisy, 4);
  Generator tasks(5), models(6);
  CHECK_THROWS_WITH(
      held_out_regression(maml, sampler, {.tasks = 10, .samples = 0}, noise, tasks, models),
      Catch::Contains("held_out_predictions") && Catch::Contains("positive"));
}

TEST_CASE("held_out_classification scores the models' mean softmax, or mean sigmoid of one logit",
          "[evaluation]") {
  Generator init(1);
  auto check_learner = [&](const auto& learner, const auto& sampler, std::size_t outputs) {
    Generator tasks(5), models(6);
    const auto scores = held_out_classification(
        learner, sampler, {.tasks = 7, .samples = 3, .batch = 4}, tasks, models);
    REQUIRE(scores.size() == 7);
    std::vector<ClassificationScores> expected;
    Generator hand_tasks(5), hand_models(6);
    by_hand(learner, sampler, {4, 3}, 3, hand_tasks, hand_models,
            [&](const auto& batch, const std::vector<double>& logits, std::int64_t count) {
              const auto labels = batch.query_y.to_vector();
              const std::size_t n = static_cast<std::size_t>(batch.query_x.dim(1));
              const std::size_t classes = std::max<std::size_t>(outputs, 2);
              for (std::size_t t = 0; t < static_cast<std::size_t>(batch.tasks()); ++t) {
                std::vector<double> p(n * classes);
                for (std::size_t m = 0; m < static_cast<std::size_t>(count); ++m)
                  for (std::size_t i = 0; i < n; ++i) {
                    const auto row = std::span(logits).subspan(
                        ((t * static_cast<std::size_t>(count) + m) * n + i) * outputs, outputs);
                    if (outputs == 1) {
                      const double one = 1 / (1 + std::exp(-row[0]));
                      p[2 * i] += (1 - one) / static_cast<double>(count);
                      p[2 * i + 1] += one / static_cast<double>(count);
                    } else {
                      double total = 0;
                      for (double l : row) total += std::exp(l);
                      for (std::size_t k = 0; k < outputs; ++k)
                        p[i * outputs + k] += std::exp(row[k]) / total / static_cast<double>(count);
                    }
                  }
                expected.push_back(score_classification(
                    p, std::vector<double>(labels.begin() + t * n, labels.begin() + (t + 1) * n),
                    classes));
              }
            });
    for (std::size_t t = 0; t < scores.size(); ++t) {
      CHECK(scores[t].accuracy == expected[t].accuracy);
      CHECK(scores[t].nll == Approx(expected[t].nll).epsilon(1e-9));
      CHECK(scores[t].ece == Approx(expected[t].ece).epsilon(1e-9).margin(1e-12));
    }
  };
  SECTION("K classes: the mean softmax") {
    const Platipus<nn::Sequential, SoftmaxCrossEntropyLoss> platipus(
        nn::mlp({.inputs = 2, .hidden = {16}, .outputs = 3}), SoftmaxCrossEntropyLoss{},
        {.threads = 1}, init);
    check_learner(platipus, ThreeClasses{}, 3);
  }
  SECTION("one logit: the mean sigmoid of binary classification") {
    const Platipus<nn::Sequential, BceWithLogitsLoss> platipus(
        nn::mlp({.inputs = 2, .hidden = {16}, .outputs = 1}), BceWithLogitsLoss{}, {.threads = 1},
        init);
    check_learner(platipus, data::CirclesSampler<float>({.support = 1, .query = 10}), 1);
  }
}

TEST_CASE("train_and_record appends a metrics row per record and saves checkpoints on schedule",
          "[training][io]") {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("platipus-training-run-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Sampler sampler({.support = 5, .query = 5});
  Generator init(3), gen(4), fresh_init(9);
  const MamlSettings settings{.inner_loop = {.steps = 1, .learning_rate = 0.01}, .threads = 1};
  Maml<nn::Sequential, MseLoss> maml(small_network(), MseLoss{}, settings, init);
  io::MetricsLog log(dir, "train");
  std::vector<std::int64_t> checkpoint_steps;
  const fs::path file = dir / "maml.safetensors";
  io::train_and_record(
      maml, sampler, gen, {.steps = 30, .meta_batch = 4, .record_every = 4, .name = "maml"}, log,
      {.file = file, .every = 10, .metadata = {{"note", "test"}}}, [&](const TrainingRecord& r) {
        if (!fs::exists(file)) return;
        Maml<nn::Sequential, MseLoss> reader(small_network(), MseLoss{}, settings, fresh_init);
        const auto metadata = io::load(file, reader);
        if (checkpoint_steps.empty() ||
            checkpoint_steps.back() != metadata["step"].get<std::int64_t>())
          checkpoint_steps.push_back(metadata["step"]);
        CHECK(metadata["note"] == "test");
        CHECK(r.step >= checkpoint_steps.back());
      });
  // Records at 4, 8, ..., 28 and 30; checkpoints at the first record past 10, 20 and at the end.
  CHECK(log.rows().size() == 8);
  CHECK(log.rows().back()["learner"] == "maml");
  CHECK(log.rows().back()["step"] == 30);
  CHECK(checkpoint_steps == std::vector<std::int64_t>{12, 20, 30});
  Maml<nn::Sequential, MseLoss> reader(small_network(), MseLoss{}, settings, fresh_init);
  io::load(file, reader);
  CHECK(reader.parameters().to_vector() == maml.parameters().to_vector());
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) ==
        3);  // no temporaries
  fs::remove_all(dir);
}

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

TEST_CASE(
    "MAML's meta-gradient through a small convolutional network matches central finite "
    "differences and differs from first order",
    "[maml][conv][gradcheck]") {
  const auto model = nn::conv4({.channels = 1,
                                .size = 6,
                                .filters = 2,
                                .blocks = 1,
                                .outputs = 2,
                                .activation = nn::Activation::tanh});
  Generator data(71), init(72), first_init(72), gen(73);
  const auto batch = prototype_tasks<double>(2, 2, 1, 2, 6, data);
  const InnerLoop loop{.steps = 2, .learning_rate = 0.1};
  using ConvMaml = Maml<nn::Sequential, SoftmaxCrossEntropyLoss, double>;
  ConvMaml second(model, SoftmaxCrossEntropyLoss{}, {.inner_loop = loop, .threads = 1}, init);
  const ConvMaml first(model, SoftmaxCrossEntropyLoss{},
                       {.inner_loop = loop, .first_order = true, .threads = 1}, first_init);
  const auto g = second.meta_gradient(batch, gen).to_vector();
  const auto g_first = first.meta_gradient(batch, gen).to_vector();
  const auto errors = directional_errors(second, batch, gen, {g, g_first});
  INFO("worst relative error " << errors[0] << ", first-order gap " << errors[1]);
  CHECK(errors[0] < 1e-6);
  CHECK(errors[1] > 1e-3);
}

TEST_CASE(
    "PLATIPUS's meta-gradient through a small convolutional network matches central "
    "finite differences",
    "[platipus][conv][gradcheck]") {
  using ConvPlatipus = Platipus<nn::Sequential, SoftmaxCrossEntropyLoss, double>;
  const auto model = nn::conv4({.channels = 1,
                                .size = 6,
                                .filters = 2,
                                .blocks = 1,
                                .outputs = 2,
                                .activation = nn::Activation::tanh});
  Generator data(74), init(75);
  const auto batch = prototype_tasks<double>(2, 2, 1, 2, 6, data);
  const PlatipusSettings settings{.inner_loop = {.steps = 2, .learning_rate = 0.1},
                                  .kl_weight = 0.5,
                                  .initial_prior_variance = 0.05,
                                  .initial_posterior_variance = 0.02,
                                  .threads = 1};
  ConvPlatipus learner(model, SoftmaxCrossEntropyLoss{}, settings, init);
  const Generator noise(76);  // one fixed draw of the noise for every evaluation
  const auto objective = objective_with_fixed_noise(learner, batch, noise, settings.kl_weight);
  Generator gen = noise;
  check_part_gradients(learner, learner.meta_gradient(batch, gen), objective, 1e-6, 77);
}

TEST_CASE(
    "MAML with a convolutional network learns few-shot image tasks: accuracy after "
    "adaptation far above before",
    "[maml][conv][learning]") {
  const std::int64_t ways = 3, size = 8;
  const auto model =
      nn::conv4({.channels = 1, .size = size, .filters = 4, .blocks = 2, .outputs = ways});
  Generator init(1), data(2);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss> maml(
      model, SoftmaxCrossEntropyLoss{},
      {.inner_loop = {.steps = 3, .learning_rate = 0.5}, .threads = 2}, init);
  for (int step = 0; step < 300; ++step)
    maml.meta_train_step(prototype_tasks<float>(8, ways, 1, 2, size, data), data);
  Generator held_out(99);
  const auto test = prototype_tasks<float>(100, ways, 1, 5, size, held_out);
  auto accuracy = [&](const Tensor<float>& params) {
    const auto logits = maml.predict(params, test.query_x).to_vector();
    const auto labels = test.query_y.to_vector();
    double correct = 0;
    for (std::size_t p = 0; p < labels.size(); ++p) {
      const auto row = logits.begin() + static_cast<std::ptrdiff_t>(p * ways);
      correct += std::max_element(row, row + ways) - row == static_cast<std::ptrdiff_t>(labels[p]);
    }
    return correct / static_cast<double>(labels.size());
  };
  const double before = accuracy(maml.parameters());
  const double after = accuracy(maml.adapt_to(test.support_x, test.support_y, held_out));
  INFO("query accuracy before adaptation " << before << ", after " << after);
  CHECK(before < 0.5);
  CHECK(after > 0.8);
}

// Every buffer of a meta-step returns to the thread caches, so after a few
// steps that fill them a conv4 meta-step takes no new memory. (Under
// AddressSanitizer, 100 steps of the live heap: the sanitized build is
// several times slower.)
TEST_CASE("the resident memory of conv4 meta-steps does not grow over 1,000 steps",
          "[maml][conv][memory]") {
#if defined(__SANITIZE_ADDRESS__)
  constexpr int steps = 100;
#else
  constexpr int steps = 1000;
#endif
  const std::int64_t ways = 3, size = 16;
  Generator init(41), data(42);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss> maml(
      nn::conv4({.channels = 1, .size = size, .filters = 8, .blocks = 2, .outputs = ways}),
      SoftmaxCrossEntropyLoss{}, {.inner_loop = {.steps = 2, .learning_rate = 0.1}, .threads = 2},
      init);
  const auto batch = prototype_tasks<float>(4, ways, 1, 3, size, data);
  for (int step = 0; step < 20; ++step) maml.meta_train_step(batch, data);
  const long before = resident_kib();
  for (int step = 0; step < steps; ++step) maml.meta_train_step(batch, data);
  const long after = resident_kib();
  INFO("resident " << before << " KiB after 20 steps, " << after << " KiB after " << steps
                   << " more");
  // One step's activations alone are over 1 MB: a leak of a step's buffers
  // would grow by 100 MB at least.
  CHECK(after - before < 4096);
}

TEST_CASE("learners refuse class labels outside the model's classes, once per batch",
          "[maml][errors]") {
  using Catch::Contains;
  Generator init(1), gen(2);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss, double> maml(
      nn::mlp({.inputs = 2, .hidden = {4}, .outputs = 3}), SoftmaxCrossEntropyLoss{},
      {.threads = 1}, init);
  const auto x = raw::normal<double>({1, 3, 2}, gen);
  const auto good = Tensor<double>::from_host({1, 3, 1}, {0, 1, 2});
  for (const double bad : {3.0, -1.0, 1.5}) {
    const auto y = Tensor<double>::from_host({1, 3, 1}, {0, bad, 2});
    const TaskBatch<double> in_support{x.clone(), y.clone(), x.clone(), good.clone()};
    const TaskBatch<double> in_query{x.clone(), good.clone(), x.clone(), y.clone()};
    const std::string label = fmt::format("class label {} is not in [0, 3)", bad);
    CHECK_THROWS_WITH(maml.meta_train_step(in_support, gen),
                      Contains(label) && Contains("Maml::meta_train_step"));
    CHECK_THROWS_WITH(maml.meta_gradient(in_query, gen),
                      Contains(label) && Contains("Maml::meta_gradient"));
    CHECK_THROWS_WITH(maml.evaluate(in_query, gen), Contains(label) && Contains("Maml::evaluate"));
    CHECK_THROWS_WITH(maml.adapt_to(x, y, gen), Contains(label) && Contains("Maml::adapt_to"));
  }
  CHECK(std::isfinite(
      maml.meta_train_step({x.clone(), good.clone(), x.clone(), good.clone()}, gen).query_loss));
}

TEST_CASE("Sequential tracks image shapes and refuses layers that do not fit them",
          "[conv][errors]") {
  using Catch::Contains;
  const auto net = nn::conv4({.channels = 3, .size = 84, .filters = 32, .outputs = 5});
  CHECK(net.input_shape() == Shape{3, 84, 84});
  CHECK(net.outputs() == 5);
  // 84 -> 42 -> 21 -> 10 -> 5: 32 x 5 x 5 features into the linear layer
  // after four blocks of [conv, batch norm, ReLU, pool] and a flatten.
  CHECK(net.layout().find("layer17.weight").shape == Shape{32 * 5 * 5, 5});
  CHECK(net.layout().find("layer1.scale").shape == Shape{32});
  CHECK(net.layout().find("layer1.shift").shape == Shape{32});
  const auto strided =
      nn::conv4({.channels = 1, .size = 28, .filters = 64, .outputs = 5, .strided = true});
  CHECK(strided.layout().find("layer13.weight").shape ==
        Shape{64 * 2 * 2, 5});  // 28 -> 14 -> 7 -> 4 -> 2
  CHECK_THROWS_WITH(nn::Sequential(Shape{1, 8, 8}).linear(3), Contains("flatten()"));
  CHECK_THROWS_WITH(nn::Sequential(4).conv2d(2), Contains("images [C, H, W]"));
  CHECK_THROWS_WITH(nn::Sequential(Shape{1, 2, 2}).conv2d(2, {.kernel = 5}),
                    Contains("does not fit"));
}
