// MAML and PLATIPUS run unchanged on the CUDA backend: on the sinusoid
// workload they give the CPU backend's meta-gradients, updates and samples,
// single- and multi-threaded, and steady-state meta-steps allocate nothing.
#include <cuda_runtime_api.h>

#include "parity.hpp"

using namespace platipus;
using parity::check_close;
using parity::image_batch;
using parity::on_device;
using parity::sinusoid_batch;
using parity::small_network;
using parity::tolerance;

namespace {

template <class T, class B>
using SinusoidMaml = Maml<nn::Sequential, MseLoss, T, B>;
template <class T, class B>
using SinusoidPlatipus = Platipus<nn::Sequential, MseLoss, T, B>;

}  // namespace

TEMPLATE_TEST_CASE("a second-order MAML meta-gradient matches the CPU backend", "[cuda][maml]",
                   float, double) {
  using T = TestType;
  const MamlSettings settings{.inner_loop = {.steps = 5, .learning_rate = 0.01},
                              .driver = {.threads = 1}};
  Generator host_init(1), device_init(1);
  const SinusoidMaml<T, cpu> host(small_network(), MseLoss{}, settings, host_init);
  const SinusoidMaml<T, cuda> device(small_network(), MseLoss{}, settings, device_init);
  check_close(host.parameters(), device.parameters(), 0, "initial parameters");
  const auto batch = sinusoid_batch<T>(2);
  Generator host_gen(3), device_gen(3);
  MetaStepResult host_stats, device_stats;
  check_close(host.meta_gradient(batch, host_gen, &host_stats),
              device.meta_gradient(on_device(batch), device_gen, &device_stats), 10 * tolerance<T>,
              "meta-gradient");
  CHECK(device_stats.query_loss == Approx(host_stats.query_loss).epsilon(10 * tolerance<T>));
  CHECK(device_stats.support_loss == Approx(host_stats.support_loss).epsilon(10 * tolerance<T>));
}

TEST_CASE("MAML meta-training steps, adaptation and evaluation track the CPU backend",
          "[cuda][maml]") {
  const MamlSettings settings{.inner_loop = {.steps = 5, .learning_rate = 0.01},
                              .driver = {.threads = 1}};
  Generator host_init(1), device_init(1);
  SinusoidMaml<double, cpu> host(small_network(), MseLoss{}, settings, host_init);
  SinusoidMaml<double, cuda> device(small_network(), MseLoss{}, settings, device_init);
  Generator host_gen(4), device_gen(4);
  for (std::uint64_t step = 0; step < 3; ++step) {
    const auto batch = sinusoid_batch<double>(10 + step);
    host.meta_train_step(batch, host_gen);
    device.meta_train_step(on_device(batch), device_gen);
  }
  check_close(host.parameters(), device.parameters(), 1e-9, "parameters after three meta-steps");
  const auto test = sinusoid_batch<double>(20);
  check_close(host.adapt_to(test.support_x, test.support_y, host_gen),
              device.adapt_to(test.support_x.to<cuda>(), test.support_y.to<cuda>(), device_gen),
              1e-9, "adapted");
  CHECK(device.evaluate(on_device(test), device_gen) ==
        Approx(host.evaluate(test, host_gen)).epsilon(1e-9));
}

TEMPLATE_TEST_CASE("a PLATIPUS meta-gradient matches the CPU backend, sampled noise included",
                   "[cuda][platipus]", float, double) {
  using T = TestType;
  const PlatipusSettings settings{.inner_loop = {.steps = 5, .learning_rate = 0.01},
                                  .driver = {.threads = 1}};
  Generator host_init(5), device_init(5);
  const SinusoidPlatipus<T, cpu> host(small_network(), MseLoss{}, settings, host_init);
  const SinusoidPlatipus<T, cuda> device(small_network(), MseLoss{}, settings, device_init);
  const auto batch = sinusoid_batch<T>(6);
  Generator host_gen(7), device_gen(7);
  MetaStepResult host_stats, device_stats;
  const auto expected = host.meta_gradient(batch, host_gen, &host_stats);
  const auto actual = device.meta_gradient(on_device(batch), device_gen, &device_stats);
  for (int part = 0; part < SinusoidPlatipus<T, cpu>::part_count; ++part)
    check_close(expected[part], actual[part], 10 * tolerance<T>,
                std::string(SinusoidPlatipus<T, cpu>::part_names[part]));
  CHECK(device_stats.query_loss == Approx(host_stats.query_loss).epsilon(10 * tolerance<T>));
  CHECK(device_stats.statistic("kl") ==
        Approx(host_stats.statistic("kl")).epsilon(10 * tolerance<T>));
}

TEST_CASE("PLATIPUS samples from the prior match the CPU backend", "[cuda][platipus]") {
  const PlatipusSettings settings{.inner_loop = {.steps = 3, .learning_rate = 0.01},
                                  .driver = {.threads = 1}};
  Generator host_init(8), device_init(8);
  const SinusoidPlatipus<double, cpu> host(small_network(), MseLoss{}, settings, host_init);
  const SinusoidPlatipus<double, cuda> device(small_network(), MseLoss{}, settings, device_init);
  const auto test = sinusoid_batch<double>(9);
  Generator host_gen(10), device_gen(10);
  check_close(host.sample(test.support_x, test.support_y, 4, host_gen),
              device.sample(test.support_x.to<cuda>(), test.support_y.to<cuda>(), 4, device_gen),
              1e-9, "samples");
}

TEST_CASE("task-parallel meta-steps on several threads match one thread on the device",
          "[cuda][threads]") {
  const auto batch = on_device(sinusoid_batch<double>(11));
  Generator one_init(12), many_init(12);
  SinusoidMaml<double, cuda> one(small_network(), MseLoss{}, {.driver = {.threads = 1}}, one_init);
  SinusoidMaml<double, cuda> many(small_network(), MseLoss{},
                                  {.driver = {.threads = 4, .task_chunks = one_chunk_per_thread}},
                                  many_init);
  Generator one_gen(13), many_gen(13);
  for (int step = 0; step < 3; ++step) {
    one.meta_train_step(batch, one_gen);
    many.meta_train_step(batch, many_gen);
  }
  check_close(one.parameters().to<cpu>(), many.parameters(), 1e-9,
              "parameters after three meta-steps");
}

TEMPLATE_TEST_CASE("MAML and PLATIPUS meta-gradients through conv4 match the CPU backend",
                   "[cuda][maml][platipus][conv]", float, double) {
  using T = TestType;
  const parity::UsingEngine engine(parity::each_convolution_engine());
  const auto model =
      nn::conv4({.channels = 1, .size = 12, .filters = 4, .blocks = 2, .outputs = 3});
  const auto batch = image_batch<T>(21, 3, 3, 1, 2, 12);
  const InnerLoop loop{.steps = 2, .learning_rate = 0.1};
  SECTION("second-order MAML") {
    using ConvMaml = Maml<nn::Sequential, SoftmaxCrossEntropyLoss, T, cpu>;
    using DeviceMaml = Maml<nn::Sequential, SoftmaxCrossEntropyLoss, T, cuda>;
    Generator host_init(22), device_init(22), host_gen(23), device_gen(23);
    const ConvMaml host(model, SoftmaxCrossEntropyLoss{},
                        {.inner_loop = loop, .driver = {.threads = 1}}, host_init);
    const DeviceMaml device(model, SoftmaxCrossEntropyLoss{},
                            {.inner_loop = loop, .driver = {.threads = 1}}, device_init);
    check_close(host.meta_gradient(batch, host_gen),
                device.meta_gradient(on_device(batch), device_gen), 10 * tolerance<T>,
                "meta-gradient");
  }
  SECTION("PLATIPUS") {
    using ConvPlatipus = Platipus<nn::Sequential, SoftmaxCrossEntropyLoss, T, cpu>;
    using DevicePlatipus = Platipus<nn::Sequential, SoftmaxCrossEntropyLoss, T, cuda>;
    Generator host_init(24), device_init(24), host_gen(25), device_gen(25);
    const ConvPlatipus host(model, SoftmaxCrossEntropyLoss{},
                            {.inner_loop = loop, .driver = {.threads = 1}}, host_init);
    const DevicePlatipus device(model, SoftmaxCrossEntropyLoss{},
                                {.inner_loop = loop, .driver = {.threads = 1}}, device_init);
    const auto expected = host.meta_gradient(batch, host_gen);
    const auto actual = device.meta_gradient(on_device(batch), device_gen);
    for (int part = 0; part < ConvPlatipus::part_count; ++part)
      check_close(expected[part], actual[part], 10 * tolerance<T>,
                  std::string(ConvPlatipus::part_names[part]));
  }
}

TEST_CASE("steady-state conv4 meta-steps allocate no device memory", "[cuda][memory][conv]") {
  const parity::UsingEngine engine(parity::each_convolution_engine());
  const auto batch = on_device(image_batch<float>(26, 4, 5, 1, 3, 28));
  Generator gen(27);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss, float, cuda> maml(
      nn::conv4({.channels = 1, .size = 28, .filters = 16, .outputs = 5}),
      SoftmaxCrossEntropyLoss{},
      {.inner_loop = {.steps = 3, .learning_rate = 0.1}, .driver = {.threads = 1}}, gen);
  for (int step = 0; step < 3; ++step) maml.meta_train_step(batch, gen);
  std::size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  for (int step = 0; step < 20; ++step) maml.meta_train_step(batch, gen);
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_after >= free_before);
}

TEST_CASE("steady-state meta-steps allocate no device memory", "[cuda][memory]") {
  const auto batch = on_device(sinusoid_batch<float>(14));
  Generator gen(15);
  SinusoidPlatipus<float, cuda> model(small_network(), MseLoss{}, {.driver = {.threads = 1}}, gen);
  for (int step = 0; step < 3; ++step) model.meta_train_step(batch, gen);
  std::size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  for (int step = 0; step < 5; ++step) model.meta_train_step(batch, gen);
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_after >= free_before);
}
