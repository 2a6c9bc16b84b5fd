// Recorded meta-steps (meta/driver/graphed_step.hpp): a replayed MAML step is the
// eager step, replays of PLATIPUS draw fresh noise and otherwise are the
// eager step, and what cannot be recorded or replayed says why.
#include <thread>

#include "parity.hpp"
#include "platipus/meta/driver/graphed_step.hpp"

using namespace platipus;
using Catch::Contains;
using parity::check_close;
using parity::image_batch;
using parity::on_device;
using parity::sinusoid_batch;
using parity::small_network;

TEST_CASE("a recorded fill draws fresh normal numbers on every replay", "[cuda][graph]") {
  Tensor<float, cuda> draws;  // made while recording, so from the graph's pool
  CudaGraph graph(42);
  Generator gen(1);
  graph.record([&] { draws = raw::normal<float, cuda>({1 << 16}, gen); });
  graph.replay();
  const auto first = draws.to_vector();
  graph.replay();
  const auto second = draws.to_vector();
  CHECK(first != second);
  for (const auto& values : {first, second}) {
    double mean = 0, square = 0;
    for (float v : values) mean += v, square += double(v) * v;
    mean /= static_cast<double>(values.size());
    square /= static_cast<double>(values.size());
    CHECK(std::abs(mean) < 0.02);
    CHECK(std::abs(square - 1) < 0.03);
  }
}

TEST_CASE("replayed MAML meta-steps match eager meta-steps on the CPU backend", "[cuda][graph]") {
  const MamlSettings settings{.inner_loop = {.steps = 5, .learning_rate = 0.01},
                              .driver = {.threads = 1}};
  Generator host_init(1), device_init(1);
  Maml<nn::Sequential, MseLoss, double, cpu> host(small_network(), MseLoss{}, settings, host_init);
  Maml<nn::Sequential, MseLoss, double, cuda> device(small_network(), MseLoss{}, settings,
                                                     device_init);
  Generator host_gen(2), device_gen(2);
  MetaStepResult expected = host.meta_train_step(sinusoid_batch<double>(10), host_gen);
  GraphedMetaStep step(device, on_device(sinusoid_batch<double>(10)), device_gen);
  CHECK(step.statistics().query_loss == Approx(expected.query_loss).epsilon(1e-9));
  CHECK(step.nodes() > 100);  // every op of the step, not a launch per step
  for (std::uint64_t k = 11; k < 14; ++k) {
    const auto batch = sinusoid_batch<double>(k);
    expected = host.meta_train_step(batch, host_gen);
    step.step(on_device(batch));
  }
  check_close(host.parameters(), device.parameters(), 1e-9, "parameters after four meta-steps");
  const MetaStepResult actual = step.statistics();
  CHECK(actual.query_loss == Approx(expected.query_loss).epsilon(1e-9));
  CHECK(actual.support_loss == Approx(expected.support_loss).epsilon(1e-9));
}

TEST_CASE(
    "replayed conv4 meta-steps with class labels (cuDNN, one-hot on the device) match eager "
    "meta-steps on the CPU backend",
    "[cuda][graph][conv]") {
  const parity::UsingEngine engine(parity::each_convolution_engine());
  const MamlSettings settings{.inner_loop = {.steps = 2, .learning_rate = 0.1},
                              .driver = {.threads = 1}};
  const auto model =
      nn::conv4({.channels = 1, .size = 12, .filters = 4, .blocks = 2, .outputs = 3});
  using Loss = SoftmaxCrossEntropyLoss;
  Generator host_init(1), device_init(1);
  Maml<nn::Sequential, Loss, double, cpu> host(model, Loss{}, settings, host_init);
  Maml<nn::Sequential, Loss, double, cuda> device(model, Loss{}, settings, device_init);
  Generator host_gen(2), device_gen(2);
  host.meta_train_step(image_batch<double>(10, 4, 3, 1, 2, 12), host_gen);
  GraphedMetaStep step(device, on_device(image_batch<double>(10, 4, 3, 1, 2, 12)), device_gen);
  MetaStepResult expected;
  for (std::uint64_t k = 11; k < 14; ++k) {
    const auto batch = image_batch<double>(k, 4, 3, 1, 2, 12);
    expected = host.meta_train_step(batch, host_gen);
    step.step(on_device(batch));
  }
  check_close(host.parameters(), device.parameters(), 1e-9, "parameters after four meta-steps");
  CHECK(step.statistics().query_loss == Approx(expected.query_loss).epsilon(1e-9));
}

TEST_CASE("replayed PLATIPUS meta-steps draw fresh noise and are otherwise the eager step",
          "[cuda][graph]") {
  Generator init(3), gen(4);
  SECTION("with the meta-parameters frozen, two replays on one batch differ only by the noise") {
    Platipus<nn::Sequential, MseLoss, float, cuda> model(
        small_network(), MseLoss{},
        {.inner_loop = {.learning_rate = 0.01},
         .driver = {.meta_optimizer = {.learning_rate = 0}, .threads = 1}},
        init);
    const auto batch = sinusoid_batch<float, cuda>(5);
    GraphedMetaStep step(model, batch, gen);
    const auto before = model.part(decltype(model)::mu_theta).to_vector();
    step.step(batch);
    const MetaStepResult a = step.statistics();
    step.step(batch);
    const MetaStepResult b = step.statistics();
    CHECK(model.part(decltype(model)::mu_theta).to_vector() == before);
    CHECK(std::isfinite(a.query_loss));
    CHECK(a.query_loss != b.query_loss);
    CHECK(a.statistic("kl") ==
          Approx(b.statistic("kl")).epsilon(1e-5));  // KL does not depend on eps
    CHECK(model.steps() == 3);                       // the warm-up and two replays
  }
  SECTION("with a negligible posterior variance, replays match eager steps on the CPU") {
    // v_q = 1e-24 scales the noise to 1e-12: what remains is the deterministic
    // rest of Algorithm 1, the KL term and Adam on all five parts.
    const PlatipusSettings settings{.inner_loop = {.learning_rate = 0.01},
                                    .initial_posterior_variance = 1e-24,
                                    .driver = {.threads = 1}};
    Generator host_init(3), host_gen(4);
    Platipus<nn::Sequential, MseLoss, double, cpu> host(small_network(), MseLoss{}, settings,
                                                        host_init);
    Platipus<nn::Sequential, MseLoss, double, cuda> device(small_network(), MseLoss{}, settings,
                                                           init);
    host.meta_train_step(sinusoid_batch<double>(20), host_gen);
    GraphedMetaStep step(device, on_device(sinusoid_batch<double>(20)), gen);
    MetaStepResult expected;
    for (std::uint64_t k = 21; k < 24; ++k) {
      const auto batch = sinusoid_batch<double>(k);
      expected = host.meta_train_step(batch, host_gen);
      step.step(on_device(batch));
    }
    using Host = decltype(host);
    using Device = decltype(device);
    for (int part = 0; part < Host::part_count; ++part)
      check_close(host.part(static_cast<Host::Part>(part)),
                  device.part(static_cast<Device::Part>(part)), 1e-6,
                  std::string(Host::part_names[part]));
    CHECK(step.statistics().query_loss == Approx(expected.query_loss).epsilon(1e-6));
    CHECK(step.statistics().statistic("kl") == Approx(expected.statistic("kl")).epsilon(1e-6));
    CHECK(device.steps() == 4);
  }
}

TEST_CASE("learners with default settings run on one host thread and record as a graph",
          "[cuda][graph][threads]") {
  Generator init(9), gen(10);
  const auto batch = sinusoid_batch<float, cuda>(11);
  Maml<nn::Sequential, MseLoss, float, cuda> maml(small_network(), MseLoss{}, {}, init);
  Platipus<nn::Sequential, MseLoss, float, cuda> model(small_network(), MseLoss{}, {}, init);
  CHECK(maml.replay_obstacle().empty());
  CHECK(model.replay_obstacle().empty());
  GraphedMetaStep maml_step(maml, batch, gen);
  GraphedMetaStep model_step(model, batch, gen);
  maml_step.step(batch);
  model_step.step(batch);
  CHECK(std::isfinite(maml_step.statistics().query_loss));
  CHECK(std::isfinite(model_step.statistics().statistic("kl")));
}

TEST_CASE(
    "a step recorded after an eager warm-up reuses the warm-up's memory, and its kernels are "
    "counted",
    "[cuda][graph][memory]") {
  // Device memory that `work` holds when it calls its argument, on a fresh
  // thread (whose block cache starts empty).
  const auto held_by = [](auto work) {
    std::size_t held = 0;
    std::thread([&] {
      const std::size_t before = cuda::allocated_bytes();
      work([&] {
        cuda::synchronize();
        held = cuda::allocated_bytes() - before;
      });
    }).join();
    return held;
  };
  const auto model =
      nn::conv4({.channels = 1, .size = 28, .filters = 16, .blocks = 2, .outputs = 5});
  const MamlSettings settings{.inner_loop = {.steps = 2}, .driver = {.threads = 1}};
  using Loss = SoftmaxCrossEntropyLoss;
  const auto batch = on_device(image_batch<float>(10, 4, 5, 1, 3, 28));
  const std::size_t eager = held_by([&](auto measure) {
    Generator init(1), gen(2);
    Maml<nn::Sequential, Loss, float, cuda> maml(model, Loss{}, settings, init);
    maml.meta_train_step(batch, gen);
    maml.meta_train_step(batch, gen);
    measure();
  });
  std::size_t kernels = 0, nodes = 0;
  const std::size_t recorded = held_by([&](auto measure) {
    Generator init(1), gen(2);
    Maml<nn::Sequential, Loss, float, cuda> maml(model, Loss{}, settings, init);
    GraphedMetaStep step(maml, batch, gen);  // a warm-up step, then the recording
    step.step(batch);
    measure();
    kernels = step.kernels();
    nodes = step.nodes();
  });
  INFO("eager steps hold " << eager << " bytes, the warm-up and the recording " << recorded);
  CHECK(recorded < eager + eager / 4);  // not a second copy of the step's memory
  CHECK(kernels > 100);
  CHECK(kernels <= nodes);
}

TEST_CASE("what cannot be recorded or replayed throws platipus::error saying why",
          "[cuda][graph][errors]") {
  Generator init(6), gen(7);
  const auto batch = sinusoid_batch<float, cuda>(8);
  SECTION("several threads") {
    Maml<nn::Sequential, MseLoss, float, cuda> maml(
        small_network(), MseLoss{}, {.driver = {.threads = 2, .task_chunks = one_chunk_per_thread}},
        init);
    CHECK_THROWS_WITH(GraphedMetaStep(maml, batch, gen),
                      Contains("GraphedMetaStep") && Contains("threads = 2"));
  }
  SECTION("a KL weight that still ramps up") {
    Platipus<nn::Sequential, MseLoss, float, cuda> model(
        small_network(), MseLoss{}, {.kl_anneal_steps = 10, .driver = {.threads = 1}}, init);
    CHECK_THROWS_WITH(GraphedMetaStep(model, batch, gen), Contains("KL weight"));
  }
  SECTION("a batch of another shape, and meta-parameters replaced after recording") {
    Maml<nn::Sequential, MseLoss, float, cuda> maml(small_network(), MseLoss{},
                                                    {.driver = {.threads = 1}}, init);
    GraphedMetaStep step(maml, batch, gen);
    CHECK_THROWS_WITH(
        step.step(sinusoid_batch<float, cuda>(9, 24)),
        Contains("GraphedMetaStep::step") && Contains("support x") && Contains("[24, 10, 1]"));
    maml.set_parameters(maml.parameters().clone());
    CHECK_THROWS_WITH(step.step(batch), Contains("theta") && Contains("replaced"));
  }
}

// The query losses meta_train reports after every step.
template <class Learner>
std::vector<double> trained_losses(Learner& learner, std::int64_t steps, bool cuda_graph) {
  using T = typename Learner::T;
  const data::SinusoidLineSampler<T, cuda> sampler({.support = 10, .query = 10});
  Generator gen(12);
  std::vector<double> losses;
  meta_train(learner, sampler, gen,
             {.steps = steps, .meta_batch = 5, .record_every = 1, .cuda_graph = cuda_graph},
             [&](const TrainingRecord& r) { losses.push_back(r.query_loss); });
  return losses;
}

// Two learners of one initialisation trained by meta_train, one replaying
// its steps and one eager, and the query losses each reported.
template <class Learner>
struct ReplayedAndEager {
  Learner replayed, eager;
  std::vector<double> replayed_losses, eager_losses;

  ReplayedAndEager(const typename Learner::Settings& settings, std::uint64_t seed,
                   std::int64_t steps)
      : replayed(make(settings, seed)),
        eager(make(settings, seed)),
        replayed_losses(trained_losses(replayed, steps, true)),
        eager_losses(trained_losses(eager, steps, false)) {}
  static Learner make(const typename Learner::Settings& settings, std::uint64_t seed) {
    Generator init(seed);
    return Learner(small_network(), MseLoss{}, settings, init);
  }
};

TEST_CASE("meta_train replays meta-steps as a CUDA graph from the first the learner allows",
          "[cuda][graph][training]") {
  SECTION("MAML's replayed training is its eager training") {
    ReplayedAndEager<Maml<nn::Sequential, MseLoss, double, cuda>> runs(
        {.inner_loop = {.steps = 3, .learning_rate = 0.01}, .driver = {.threads = 1}}, 1, 6);
    check_close(runs.eager_losses, runs.replayed_losses, 1e-12, "query losses of each step");
    check_close(runs.eager.parameters().to_vector(), runs.replayed.parameters().to_vector(), 1e-12,
                "parameters after six steps");
    CHECK(runs.replayed.steps() == 6);
  }
  SECTION("PLATIPUS steps eagerly while its KL weight ramps up, then replays with fresh noise") {
    ReplayedAndEager<Platipus<nn::Sequential, MseLoss, double, cuda>> runs(
        {.inner_loop = {.learning_rate = 0.01}, .kl_anneal_steps = 3, .driver = {.threads = 1}}, 2,
        6);
    // Steps 1-3 ramp, step 4 is the recording's eager warm-up: the eager
    // run's numbers. Steps 5 and 6 replay, drawing eps from the graph's salt.
    for (std::size_t k = 0; k < 4; ++k) CHECK(runs.replayed_losses[k] == runs.eager_losses[k]);
    for (std::size_t k = 4; k < 6; ++k) {
      CHECK(std::isfinite(runs.replayed_losses[k]));
      CHECK(runs.replayed_losses[k] != runs.eager_losses[k]);
    }
    CHECK(runs.replayed.steps() == 6);
  }
  SECTION("every learner of the driver trains through replays") {
    Generator init(3);
    const InnerLoop loop{.steps = 2, .learning_rate = 0.01};
    const DriverSettings driver{.threads = 1};
    const auto trains = [](auto learner) {
      const auto losses = trained_losses(learner, 4, true);
      REQUIRE(losses.size() == 4);
      for (double loss : losses) CHECK(std::isfinite(loss));
      CHECK(learner.steps() == 4);
    };
    using Net = nn::Sequential;
    const auto net = small_network();
    trains(Maml<Net, MseLoss, float, cuda>(
        net, MseLoss{}, {.inner_loop = loop, .first_order = true, .driver = driver}, init));
    trains(Maml<Net, MseLoss, float, cuda>(
        net, MseLoss{},
        {.inner_loop = {.steps = 2, .learning_rate = 0.01, .gradient_noise = 0.01},
         .driver = driver},
        init));
    trains(Reptile<Net, MseLoss, float, cuda>(net, MseLoss{},
                                              {.inner_loop = loop, .driver = driver}, init));
    trains(MetaSgd<Net, MseLoss, float, cuda>(net, MseLoss{},
                                              {.inner_loop = loop, .driver = driver}, init));
    trains(Anil<Net, MseLoss, float, cuda>(net, MseLoss{}, {.inner_loop = loop, .driver = driver},
                                           init));
    // Eager while its multi-step loss and first order anneal (2 steps), then replays.
    trains(MamlPlusPlus<Net, MseLoss, float, cuda>(
        net, MseLoss{},
        {.inner_loop = loop, .multi_step_loss_steps = 2, .first_order_steps = 2, .driver = driver},
        init));
  }
}
