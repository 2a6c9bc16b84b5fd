// A downstream program, written against the public headers only: meta-trains
// MAML on sinusoid-or-line tasks with the library's training loop, then
// adapts to held-out tasks and scores fresh ones. Exits non-zero unless adaptation helps.
#include <cstdio>

#include <platipus/platipus.hpp>

using namespace platipus;

int main() {
  Generator gen(0);
  const data::SinusoidLineSampler<float> tasks({.support = 10, .query = 10});
  Maml<nn::Sequential, MseLoss> maml(nn::mlp({.inputs = 1, .hidden = {40, 40}, .outputs = 1}),
                                     MseLoss{}, {.inner_loop = {.steps = 5, .learning_rate = 0.01}},
                                     gen);
  meta_train(maml, tasks, gen, {.steps = 500, .record_every = 100}, [](const TrainingRecord& r) {
    std::printf("step %lld: query loss %.3f\n", static_cast<long long>(r.step), r.query_loss);
  });
  const auto test = tasks.sample(100, gen);
  const auto unadapted = maml.predict(maml.parameters(), test.query_x).to_vector();
  const auto y = test.query_y.to_vector();
  double before = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    before += (unadapted[i] - y[i]) * (unadapted[i] - y[i]);
  before /= static_cast<double>(y.size());
  const double after = maml.evaluate(test, gen);  // MSE after 5 steps on each support set
  std::printf("held-out query MSE: %.3f unadapted, %.3f adapted\n", before, after);
  // Fresh tasks scored by the library's held-out evaluation: each task's
  // scores, and their mean with a 95% interval.
  Generator held_out(1, 1), models(1, 2);
  const auto scores = held_out_regression(maml, tasks, {.tasks = 100}, 0.3, held_out, models);
  std::printf("query MSE over 100 fresh tasks: %s\n",
              estimate(scores, &RegressionScores::mse).text().c_str());
  return after < before ? 0 : 1;
}
