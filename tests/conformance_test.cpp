// Every objective of the library through one harness, as Stan's expect_ad
// runs every function through one: the same bits on 1, 2 and 3 threads,
// a checkpoint round trip, the meta-gradient against central differences in
// double, and the refusal of bad settings and batches. A new algorithm joins
// by adding its case to `Objectives`.
#include "catch.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "derivative_checks.hpp"
#include "platipus/io/checkpoint.hpp"
#include "platipus/io/training_state.hpp"
#include "platipus/platipus.hpp"
#include "temporary_directory.hpp"

using namespace platipus;
using Catch::Contains;

namespace {

using Network = nn::Sequential;

// Smooth (tanh), so that central differences see no kink.
Network network(std::int64_t hidden = 6) {
  return nn::mlp(
      {.inputs = 1, .hidden = {hidden}, .outputs = 1, .activation = nn::Activation::tanh});
}

// The settings the cases share: two inner steps, `threads` threads and the
// cut `chunks`, a given inner loop where a test needs another, and the
// meta-steps over which schedules anneal (the meta learning rate; PLATIPUS's
// KL weight), 0 for none.
struct Common {
  int threads = 1, chunks = 0;
  InnerLoop inner_loop{.steps = 2, .learning_rate = 0.02};
  int anneal_steps = 0;
  DriverSettings driver() const {
    return {.meta_optimizer = {.annealing_steps = anneal_steps},
            .threads = threads,
            .task_chunks = chunks};
  }
};

// A case: the learner of one objective on a scalar type, its settings from
// Common (and whatever exercises the objective: noise, a KL weight, MAML++
// past its first-order phase) and whether its meta-gradient is the exact
// derivative of its objective (first-order MAML and Reptile are not, by
// design: docs/algorithms.md). PlainCase: Common's settings alone.
template <template <class, class, class, class> class L, bool Exact>
struct PlainCase {
  template <class T>
  using Learner = L<Network, MseLoss, T, cpu>;
  static constexpr bool exact = Exact;
  template <class T>
  static Learner<T> make(const Common& c, Generator& init, std::int64_t hidden = 6) {
    return {network(hidden), MseLoss{}, {.inner_loop = c.inner_loop, .driver = c.driver()}, init};
  }
};
using MamlCase = PlainCase<Maml, true>;
using MetaSgdCase = PlainCase<MetaSgd, true>;
using AnilCase = PlainCase<Anil, true>;
using ReptileCase = PlainCase<Reptile, false>;

struct FirstOrderMamlCase {
  template <class T>
  using Learner = Maml<Network, MseLoss, T>;
  static constexpr bool exact = false;
  template <class T>
  static Learner<T> make(const Common& c, Generator& init, std::int64_t hidden = 6) {
    return {network(hidden),
            MseLoss{},
            {.inner_loop = c.inner_loop, .first_order = true, .driver = c.driver()},
            init};
  }
};

struct MamlNoiseCase {
  template <class T>
  using Learner = Maml<Network, MseLoss, T>;
  static constexpr bool exact = true;
  template <class T>
  static Learner<T> make(const Common& c, Generator& init, std::int64_t hidden = 6) {
    auto loop = c.inner_loop;
    loop.gradient_noise = loop.gradient_noise > 0 ? loop.gradient_noise : 0.3;
    return {network(hidden), MseLoss{}, {.inner_loop = loop, .driver = c.driver()}, init};
  }
};

struct PlatipusCase {
  template <class T>
  using Learner = Platipus<Network, MseLoss, T>;
  static constexpr bool exact = true;
  template <class T>
  static Learner<T> make(const Common& c, Generator& init, std::int64_t hidden = 6) {
    return {network(hidden),
            MseLoss{},
            {.inner_loop = c.inner_loop,
             .kl_weight = 0.5,
             .kl_anneal_steps = c.anneal_steps,
             .initial_prior_variance = 0.05,
             .initial_posterior_variance = 0.02,
             .initial_gamma_p = 0.03,
             .initial_gamma_q = 0.05,
             .driver = c.driver()},
            init};
  }
};

struct MamlPlusPlusCase {
  template <class T>
  using Learner = MamlPlusPlus<Network, MseLoss, T>;
  static constexpr bool exact = true;
  template <class T>
  static Learner<T> make(const Common& c, Generator& init, std::int64_t hidden = 6) {
    // The multi-step loss on, second order from the start.
    return {network(hidden),
            MseLoss{},
            {.inner_loop = c.inner_loop,
             .multi_step_loss_steps = 100,
             .first_order_steps = 0,
             .driver = c.driver()},
            init};
  }
};

using Objectives = std::tuple<MamlCase, FirstOrderMamlCase, MamlNoiseCase, PlatipusCase,
                              MetaSgdCase, AnilCase, ReptileCase, MamlPlusPlusCase>;

template <class Learner>
auto state_values(const Learner& learner) {
  std::vector<std::vector<typename io::StateTensor<Learner>::value_type>> values;
  for (const auto& [name, tensor] : learner.state()) values.push_back(tensor->to_vector());
  return values;
}

// Meta-parameters, the meta-optimiser's moments and its step number.
template <class Learner>
auto training_values(const Learner& learner) {
  std::vector<std::pair<std::string, std::vector<typename io::StateTensor<Learner>::value_type>>>
      values;
  for (const auto& [name, tensor] : learner.training_state())
    values.emplace_back(name, tensor->to_vector());
  return values;
}

// The meta-gradient as one tensor per part.
template <class Learner, class T>
std::vector<Tensor<T>> part_gradients(const Learner& learner, const TaskBatch<T>& batch,
                                      Generator& gen) {
  if constexpr (Learner::part_count == 1) {
    std::vector<Tensor<T>> one;
    one.push_back(learner.meta_gradient(batch, gen));
    return one;
  } else {
    return learner.meta_gradient(batch, gen);
  }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("every objective trains the same bits on 1, 2 and 3 threads",
                        "[conformance][threads]", Objectives) {
  const data::SinusoidLineSampler<float> sampler({.support = 4, .query = 4});
  for (const int chunks : {0, 3}) {
    std::vector<std::vector<std::vector<float>>> trained;
    for (const int threads : {1, 2, 3}) {
      Generator init(1), gen(2);
      auto learner = TestType::template make<float>({.threads = threads, .chunks = chunks}, init);
      for (int step = 0; step < 4; ++step) learner.meta_train_step(sampler.sample(7, gen), gen);
      trained.push_back(state_values(learner));
    }
    INFO("task_chunks " << chunks);
    CHECK(trained[0] == trained[1]);
    CHECK(trained[0] == trained[2]);
    Generator init(1);
    CHECK(trained[0] != state_values(TestType::template make<float>({}, init)));  // it trained
  }
}

TEMPLATE_LIST_TEST_CASE("every objective's checkpoint restores its meta-parameters exactly",
                        "[conformance][checkpoint]", Objectives) {
  TemporaryDirectory dir;
  const auto path = dir / "learner.safetensors";
  Generator init(3), gen(4);
  auto learner = TestType::template make<float>({}, init);
  learner.meta_train_step(data::SinusoidLineSampler<float>().sample(3, gen), gen);
  io::save(path, learner, {{"steps", learner.steps()}});
  Generator other(5);
  auto restored = TestType::template make<float>({}, other);
  REQUIRE(state_values(restored) != state_values(learner));
  CHECK(io::load(path, restored) == nlohmann::json{{"steps", 1}});
  CHECK(state_values(restored) == state_values(learner));
  SECTION("and refuses a checkpoint of another architecture, leaving the learner as it was") {
    auto wider = TestType::template make<float>({}, other, 7);
    const auto before = state_values(wider);
    CHECK_THROWS_WITH(io::load(path, wider), Contains(path.string()) && Contains("architecture"));
    CHECK(state_values(wider) == before);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "every objective resumed from its training state trains the same bits as a run that never "
    "stopped, schedules included, on 1 and 2 threads",
    "[conformance][checkpoint][resume]", Objectives) {
  const data::SinusoidLineSampler<float> sampler({.support = 4, .query = 4});
  TemporaryDirectory dir;
  const auto path = dir / "run.safetensors";
  for (const int threads : {1, 2}) {
    INFO(threads << " threads");
    // Schedules that still anneal at the stop: the meta learning rate, PLATIPUS's KL
    // weight and MAML++'s multi-step loss weights all change from step to step.
    const Common common{.threads = threads, .chunks = 3, .anneal_steps = 10};
    Generator init(1), gen(2);
    auto straight = TestType::template make<float>(common, init);
    for (int step = 0; step < 6; ++step) straight.meta_train_step(sampler.sample(5, gen), gen);

    Generator first_init(1), first_gen(2);
    auto first = TestType::template make<float>(common, first_init);
    for (int step = 0; step < 3; ++step)
      first.meta_train_step(sampler.sample(5, first_gen), first_gen);
    io::save_training_state(path, first, first_gen, {{"run", "resume test"}});

    Generator other(9);
    auto resumed = TestType::template make<float>(common, other);
    auto [resumed_gen, metadata] = io::load_training_state(path, resumed);
    CHECK(metadata == nlohmann::json{{"run", "resume test"}});
    CHECK(resumed.steps() == 3);
    CHECK(training_values(resumed) == training_values(first));
    for (int step = 0; step < 3; ++step)
      resumed.meta_train_step(sampler.sample(5, resumed_gen), resumed_gen);
    CHECK(resumed_gen.counter() == gen.counter());
    CHECK(training_values(resumed) == training_values(straight));
  }
}

TEMPLATE_LIST_TEST_CASE("every exact objective's meta-gradient matches central differences",
                        "[conformance][gradcheck]", Objectives) {
  if constexpr (!TestType::exact) {
    SUCCEED("a pseudo-gradient by design: no function to difference");
  } else {
    using Learner = typename TestType::template Learner<double>;
    Generator init(6), data(7);
    Learner learner = TestType::template make<double>({.threads = 2}, init);
    const auto batch =
        data::SinusoidLineSampler<double>({.support = 4, .query = 5}).sample(3, data);
    const Generator noise(8);
    Generator gen = noise;
    const auto gradients = part_gradients(learner, batch, gen);
    testing::check_part_gradients(
        learner, gradients,
        [&] { return testing::meta_loss(learner, batch, noise, learner.current_schedule()); }, 1e-5,
        9, 3);
  }
}

TEMPLATE_LIST_TEST_CASE("every objective refuses bad settings and batches, naming what is wrong",
                        "[conformance][errors]", Objectives) {
  Generator init(10);
  auto make = [&](const Common& c) {
    return TestType::template make<float>(c, init);
  };
  CHECK_THROWS_WITH(make({.inner_loop = {.steps = -1}}), Contains("inner_loop.steps"));
  CHECK_THROWS_WITH(make({.inner_loop = {.learning_rate = std::nan("")}}),
                    Contains("inner_loop.learning_rate"));
  CHECK_THROWS_WITH(make({.inner_loop = {.max_gradient_norm = -1}}),
                    Contains("inner_loop.max_gradient_norm"));
  CHECK_THROWS_WITH(make({.threads = -2}), Contains("threads must be non-negative"));
  CHECK_THROWS_WITH(make({.chunks = -2}), Contains("task_chunks"));
  auto learner = make({});
  Generator gen(11);
  auto batch = data::SinusoidLineSampler<float>().sample(2, gen);
  batch.query_y = Tensor<float>::zeros({2, 3, 1});  // a query set of another size than its x
  CHECK_THROWS_AS(learner.meta_train_step(batch, gen), error);
  const auto before = state_values(learner);
  CHECK_THROWS_WITH(learner.meta_train_step(batch, gen), Contains("::meta_train_step"));
  CHECK_THROWS_WITH(learner.meta_gradient(batch, gen), Contains("::meta_gradient"));
  CHECK_THROWS_WITH(learner.evaluate(batch, gen), Contains("::evaluate"));
  CHECK(state_values(learner) == before);
}

TEMPLATE_LIST_TEST_CASE(
    "every objective scores tasks: each one's query loss under sample's first model, and their "
    "mean",
    "[conformance][evaluation]", Objectives) {
  Generator init(12), data(13);
  const auto learner = TestType::template make<double>({}, init);
  const std::int64_t tasks = 4, query = 5;
  const auto batch =
      data::SinusoidLineSampler<double>({.support = 4, .query = query}).sample(tasks, data);
  Generator scored(14), averaged(14), by_hand(14);
  const auto losses = learner.query_losses(batch, scored).to_vector();
  REQUIRE(losses.size() == static_cast<std::size_t>(tasks));
  // The squared error of the model sample draws for each task, by hand.
  const auto models = learner.sample(batch.support_x, batch.support_y, 1, by_hand);
  const auto prediction = learner.predict(models, batch.query_x).to_vector();
  const auto y = batch.query_y.to_vector();
  double mean = 0;
  for (std::int64_t t = 0; t < tasks; ++t) {
    double squared = 0;
    for (std::int64_t i = 0; i < query; ++i) {
      const auto at = static_cast<std::size_t>(t * query + i);
      squared += (prediction[at] - y[at]) * (prediction[at] - y[at]) / query;
    }
    CHECK(losses[static_cast<std::size_t>(t)] == Approx(squared).epsilon(1e-12));
    mean += squared / tasks;
  }
  CHECK(learner.evaluate(batch, averaged) == Approx(mean).epsilon(1e-12));
}
