// The driver of include/platipus/meta/driver/: statistics, threads, batch
// checks, the training loop and its records, the annealed meta learning rate
// and the memory checks.
// Part of learning_test.cpp, which includes it once after helpers.hpp: the
// learning tests are one translation unit (build time).
#pragma once

TEST_CASE("a meta-step's statistics on the backend are the ones meta_train_step reports",
          "[maml][platipus][statistics]") {
  Generator data(15);
  const auto batch = Sampler({.support = 5, .query = 5}).sample(6, data);
  auto compare = [&](auto eager, auto deferred, bool has_kl) {
    Generator eager_gen(16), deferred_gen(16);
    for (int step = 0; step < 2; ++step) {
      const MetaStepResult expected = eager.meta_train_step(batch, eager_gen);
      const Tensor<float> statistics = deferred.meta_train_step_async(batch, deferred_gen);
      REQUIRE(statistics.shape() == Shape{has_kl ? 3 : 2});
      const MetaStepResult actual = MetaStepResult::read(statistics, deferred.statistic_names);
      CHECK(actual.query_loss == expected.query_loss);
      CHECK(actual.support_loss == expected.support_loss);
      CHECK(expected.query_loss > 0);
      REQUIRE(expected.statistics.size() == (has_kl ? 1u : 0u));
      REQUIRE(actual.statistics.size() == expected.statistics.size());
      if (has_kl) {
        CHECK(actual.statistic("kl") == expected.statistic("kl"));
        CHECK(expected.statistic("kl") > 0);
      } else {
        CHECK_THROWS_WITH(expected.statistic("kl"),
                          Catch::Contains("no statistic 'kl'") && Catch::Contains("none"));
      }
    }
    CHECK(deferred.state()[0].second->to_vector() == eager.state()[0].second->to_vector());
  };
  // Three threads: the chunks' statistics add up like their gradients.
  Generator a(17), b(17), c(18), d(18);
  compare(Maml<nn::Sequential, MseLoss>(small_network(), MseLoss{}, {.driver = {.threads = 3}}, a),
          Maml<nn::Sequential, MseLoss>(small_network(), MseLoss{}, {.driver = {.threads = 3}}, b),
          false);
  compare(PlatipusModel(small_network(), MseLoss{}, {.driver = {.threads = 3}}, c),
          PlatipusModel(small_network(), MseLoss{}, {.driver = {.threads = 3}}, d), true);
  CHECK_THROWS_WITH(
      MetaStepResult::read(Tensor<float>::zeros({2}), PlatipusModel::statistic_names),
      Catch::Contains("MetaStepResult::read") && Catch::Contains("[3]") && Catch::Contains("[2]"));
}

TEST_CASE("learners say what stops their meta-step from being recorded", "[maml][platipus]") {
  using Catch::Contains;
  Generator gen(19);
  const Maml<nn::Sequential, MseLoss> one(small_network(), MseLoss{}, {.driver = {.threads = 1}},
                                          gen);
  const Maml<nn::Sequential, MseLoss> two(
      small_network(), MseLoss{}, {.driver = {.threads = 2, .task_chunks = one_chunk_per_thread}},
      gen);
  CHECK_THAT(one.replay_obstacle(), Contains("one chunk per task"));
  CHECK_THAT(two.replay_obstacle(), Contains("threads = 2"));
  const Maml<nn::Sequential, MseLoss> chunked(small_network(), MseLoss{},
                                              {.driver = {.threads = 1, .task_chunks = 3}}, gen);
  CHECK_THAT(chunked.replay_obstacle(), Contains("task_chunks = 3"));
  const Maml<nn::Sequential, MseLoss> whole(small_network(), MseLoss{},
                                            {.driver = {.threads = 2, .task_chunks = 1}}, gen);
  CHECK(whole.replay_obstacle().empty());
  const Maml<nn::Sequential, MseLoss> one_chunk(small_network(), MseLoss{},
                                                {.driver = {.threads = 1, .task_chunks = 1}}, gen);
  CHECK(one_chunk.replay_obstacle().empty());
  // One chunk per thread records when there is one thread.
  const Maml<nn::Sequential, MseLoss> per_thread(
      small_network(), MseLoss{}, {.driver = {.threads = 1, .task_chunks = one_chunk_per_thread}},
      gen);
  CHECK(per_thread.replay_obstacle().empty());
  PlatipusModel ramped(small_network(), MseLoss{},
                       {.kl_anneal_steps = 2, .driver = {.threads = 1, .task_chunks = 1}}, gen);
  const auto batch = Sampler({.support = 2, .query = 2}).sample(2, gen);
  CHECK_THAT(ramped.replay_obstacle(), Contains("KL weight") && Contains("step 0 of 2"));
  ramped.meta_train_step(batch, gen);
  CHECK_THAT(ramped.replay_obstacle(), Contains("step 1 of 2"));
  ramped.meta_train_step(batch, gen);
  CHECK(ramped.replay_obstacle().empty());  // the ramp is over: beta is constant from here
}

TEST_CASE("a counting backend counts each kernel by name and changes no bit", "[maml][backend]") {
  using counted = CountingBackend<cpu>;
  const auto a = Tensor<double, counted>::full({2, 3}, 0.5);
  const auto b = Tensor<double, counted>::full({1, 3}, 2.0);
  counted::reset();
  const auto c = raw::map(UnaryOp::exp, raw::map(BinaryOp::mul, a, b, "mul"));
  CHECK(c.to<cpu>().to_vector() == std::vector<double>(6, std::exp(1.0)));
  KernelCalls calls = counted::calls();
  CHECK(calls["binary mul"] == 1);
  CHECK(calls["unary exp"] == 1);
  CHECK(calls.total() == 3);  // and the copy to the host
  CHECK(calls["copy_to_host"] == 1);

  // A meta-step as the CUDA backend cuts it (one chunk, one thread), on
  // counted and on plain cpu: the same bits, and the same kernels every step.
  Generator data(23);
  const auto host = Sampler({.support = 5, .query = 5}).sample(4, data);
  const TaskBatch<float, counted> batch{host.support_x.to<counted>(), host.support_y.to<counted>(),
                                        host.query_x.to<counted>(), host.query_y.to<counted>()};
  const MamlSettings settings{.inner_loop = {.steps = 2, .learning_rate = 0.01},
                              .driver = {.threads = 1, .task_chunks = 1}};
  Generator gen(24), counted_gen(24);
  Maml<nn::Sequential, MseLoss> maml(small_network(), MseLoss{}, settings, gen);
  Maml<nn::Sequential, MseLoss, float, counted> counting(small_network(), MseLoss{}, settings,
                                                         counted_gen);
  std::vector<std::uint64_t> per_step;
  for (int step = 0; step < 3; ++step) {
    const double loss = maml.meta_train_step(host, gen).query_loss;
    counted::reset();
    CHECK(counting.meta_train_step(batch, counted_gen).query_loss == loss);
    calls = counted::calls();
    per_step.push_back(calls.total());
  }
  CHECK(per_step[1] == per_step[2]);
  CHECK(per_step[0] > per_step[1]);  // the first step also makes Adam's moments
  // One foreach call per inner step for the update of every piece, and one
  // for its gradient in the meta-gradient; one scales the step's statistics
  // into place.
  CHECK(calls["foreach_axpy"] == 2);
  CHECK(calls["foreach_unary scale"] == 2 + 1);
  // The batch and the meta-parameters are read where they lie, and the one
  // chunk's gradient and statistics are taken from its tape: no byte copy
  // on the device.
  CHECK(calls["copy"] == 0);
  CHECK(calls["axpy"] == 0);
  // One call gives every piece its task axis and one sums their gradients
  // over the tasks, where a copy and a reduction per piece were.
  CHECK(calls["foreach_expand"] == 1);
  CHECK(calls["foreach_sum_to"] == 1);
  // Each layer's forward is one call (bias, product and ReLU): two hidden
  // layers and the output layer at each inner step and on the query set.
  CHECK(calls["linear"] == static_cast<std::uint64_t>(settings.inner_loop.steps + 1));
  CHECK(calls["linear relu"] == 2 * calls["linear"]);
  CHECK(calls["unary relu"] == 0);
  const auto pieces = maml.state().size();
  CHECK(calls["adam"] == pieces);
  CHECK(calls["gemm"] > 0);
  for (std::size_t i = 0; i < pieces; ++i)
    CHECK(counting.state()[i].second->to<cpu>().to_vector() == maml.state()[i].second->to_vector());
}

TEST_CASE("meta-learners reject malformed task batches", "[maml][errors]") {
  Generator gen(10);
  Maml<nn::Sequential, MseLoss> maml(small_network(), MseLoss{}, {.driver = {.threads = 1}}, gen);
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
        model, MseLoss{}, {.inner_loop = {.learning_rate = 0.01}, .driver = {.threads = threads}},
        init);
    MetaStepResult result;
    platipus_gradients.push_back(platipus.meta_gradient(batch, gen, &result));
    platipus_results.push_back(result);
    Generator maml_init(74), maml_gen(75);
    const DoubleMaml noisy(model, MseLoss{},
                           {.inner_loop = {.learning_rate = 0.01, .gradient_noise = 0.5},
                            .driver = {.threads = threads}},
                           maml_init);
    noise_gradients.emplace_back();
    noise_gradients.back().push_back(noisy.meta_gradient(batch, maml_gen));
  }
  // The same numbers up to the order of the chunks' sums.
  CHECK(relative_difference(platipus_gradients[0], platipus_gradients[1]) < 1e-10);
  CHECK(relative_difference(noise_gradients[0], noise_gradients[1]) < 1e-10);
  CHECK(platipus_results[0].query_loss == Approx(platipus_results[1].query_loss).epsilon(1e-12));
  CHECK(platipus_results[0].statistic("kl") ==
        Approx(platipus_results[1].statistic("kl")).epsilon(1e-12));
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
    Maml<nn::Sequential, MseLoss> maml(
        model, MseLoss{}, {.inner_loop = {.steps = 2}, .driver = {.threads = threads}}, init);
    // A fixed cut other than the default holds as well.
    Maml<nn::Sequential, MseLoss> noisy(model, MseLoss{},
                                        {.inner_loop = {.steps = 2, .gradient_noise = 0.5},
                                         .driver = {.threads = threads, .task_chunks = 3}},
                                        init);
    PlatipusModel platipus(model, MseLoss{},
                           {.inner_loop = {.steps = 2}, .driver = {.threads = threads}}, init);
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

TEST_CASE("meta_train records the mean query loss of each interval and trains as a hand loop does",
          "[training]") {
  const Sampler sampler({.support = 5, .query = 5});
  const MamlSettings settings{.inner_loop = {.steps = 1, .learning_rate = 0.01},
                              .driver = {.threads = 1}};
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
  Maml<nn::Sequential, MseLoss> maml(
      small_network(), MseLoss{},
      {.inner_loop = {.learning_rate = 100},
       .driver = {.meta_optimizer = {.learning_rate = 100}, .threads = 1}},
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

TEST_CASE(
    "a meta-learner anneals its meta learning rate: the first step as at a constant rate, the "
    "second smaller, none after the cosine ends at a final rate of 0",
    "[maml][optim]") {
  const Sampler sampler({.support = 5, .query = 5});
  const MamlSettings constant{
      .inner_loop = {.steps = 1, .learning_rate = 0.01},
      .driver = {.meta_optimizer = {.learning_rate = 1e-2}, .threads = 1, .task_chunks = 1}};
  MamlSettings annealed = constant;
  annealed.driver.meta_optimizer.annealing_steps = 2;
  annealed.driver.meta_optimizer.final_learning_rate = 0;
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
      {.inner_loop = {.steps = 1}, .driver = {.threads = 1}}, init);
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

// Samplers meet the TaskSampler concept for the learners that take their
// batches: the scalar type and the backend must match the learner's.
static_assert(TaskSamplerFor<Sampler, Maml<nn::Sequential, MseLoss>>);

static_assert(
    TaskSamplerFor<data::SinusoidLineSampler<double>, Maml<nn::Sequential, MseLoss, double>>);

static_assert(!TaskSamplerFor<data::SinusoidLineSampler<double>, Maml<nn::Sequential, MseLoss>>);

static_assert(!TaskSamplerFor<int, Maml<nn::Sequential, MseLoss>>);

TEST_CASE("train_and_record appends a metrics row per record and saves checkpoints on schedule",
          "[training][io]") {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("platipus-training-run-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Sampler sampler({.support = 5, .query = 5});
  Generator init(3), gen(4), fresh_init(9);
  const MamlSettings settings{.inner_loop = {.steps = 1, .learning_rate = 0.01},
                              .driver = {.threads = 1}};
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
        const auto step = metadata["training_run"]["step"].get<std::int64_t>();
        if (checkpoint_steps.empty() || checkpoint_steps.back() != step)
          checkpoint_steps.push_back(step);
        CHECK(metadata["note"] == "test");
        CHECK(r.step >= checkpoint_steps.back());
      });
  // Records at 4, 8, ..., 28 and 30; checkpoints at 10, 20 and 30 (the last
  // seen after the run).
  CHECK(log.rows().size() == 8);
  CHECK(log.rows().back()["learner"] == "maml");
  CHECK(log.rows().back()["step"] == 30);
  CHECK_FALSE(log.rows().back().contains("kl"));  // MAML has no statistics of its own
  CHECK(checkpoint_steps == std::vector<std::int64_t>{10, 20});
  Maml<nn::Sequential, MseLoss> reader(small_network(), MseLoss{}, settings, fresh_init);
  const auto metadata = io::load(file, reader);
  CHECK(metadata["training_run"]["step"] == 30);
  CHECK(metadata["training_run"]["metrics_rows"] == 8);
  CHECK(reader.parameters().to_vector() == maml.parameters().to_vector());
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) ==
        3);  // no temporaries
  fs::remove_all(dir);
}

// The lines of a metrics file without their "seconds", which differ by run.
std::vector<std::string> rows_without_seconds(const std::filesystem::path& jsonl) {
  std::vector<std::string> rows;
  std::istringstream lines(read_file(jsonl));
  for (std::string line; std::getline(lines, line);) {
    auto row = nlohmann::json::parse(line);
    row.erase("seconds");
    rows.push_back(row.dump());
  }
  return rows;
}

// A run of 30 steps, and the same run stopped (a stop request at step 13,
// inside a record interval, or a kill at step 18, after a record that the
// last checkpoint, at 15, does not count) and taken up by a new learner from
// its checkpoint: the same training state to the bit, and the same metrics.
template <class Learner, class Settings>
void check_stop_and_resume(const Settings& settings, bool killed) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       fmt::format("platipus-resume-{}-{}", ::getpid(), killed ? "kill" : "stop");
  fs::remove_all(dir);
  const Sampler sampler({.support = 5, .query = 5});
  const TrainingLoop loop{.steps = 30, .meta_batch = 4, .record_every = 4, .name = "run"};
  const auto run = [&](const fs::path& out, std::uint64_t init_seed, auto&& go) {
    fs::create_directories(out);
    Generator init(init_seed);
    Learner learner(small_network(), MseLoss{}, settings, init);
    io::MetricsLog log(out, "train");
    const io::CheckpointSchedule schedule{.file = out / "run.safetensors", .every = 5};
    go(learner, log, schedule);
    return learner;
  };
  const auto whole = run(dir / "whole", 3, [&](auto& learner, auto& log, const auto& schedule) {
    Generator gen(4);
    CHECK(io::train_and_record(learner, sampler, gen, loop, log, schedule).step == 30);
  });
  const int stop_at = killed ? 18 : 13;
  run(dir / "stopped", 3, [&](auto& learner, auto& log, const auto& schedule) {
    Generator gen(4);
    const auto stop = [&](const LoopPosition& at) {
      if (killed && at.step == stop_at) throw std::runtime_error("killed");
      return at.step < stop_at;
    };
    if (killed)
      CHECK_THROWS(io::train_and_record(learner, sampler, gen, loop, log, schedule, {},
                                        {.after_step = stop}));
    else
      CHECK(
          io::train_and_record(learner, sampler, gen, loop, log, schedule, {}, {.after_step = stop})
              .step == stop_at);
  });
  const auto resumed =
      run(dir / "stopped", 77, [&](auto& learner, auto& log, const auto& schedule) {
        auto [gen, position, metadata] = io::resume_training(schedule.file, learner, log);
        CHECK(position.loop.step == (killed ? 15 : 13));
        CHECK(position.learner == "run");
        CHECK(log.rows().size() == 3u);  // the records at 4, 8 and 12
        CHECK(io::train_and_record(learner, sampler, gen, loop, log, schedule, {},
                                   {.from = position.loop})
                  .step == 30);
      });
  const auto a = whole.training_state(), b = resumed.training_state();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].first == b[i].first);
    CHECK(a[i].second->to_vector() == b[i].second->to_vector());
  }
  CHECK(rows_without_seconds(dir / "whole" / "train.jsonl") ==
        rows_without_seconds(dir / "stopped" / "train.jsonl"));
  CHECK(rows_without_seconds(dir / "stopped" / "train.jsonl").size() == 8);
  fs::remove_all(dir);
}

TEST_CASE("a stopped or killed run resumes from its checkpoint to the same bits and metrics",
          "[training][io][resume]") {
  const bool killed = GENERATE(false, true);
  SECTION("MAML + noise") {
    check_stop_and_resume<Maml<nn::Sequential, MseLoss>>(
        MamlSettings{.inner_loop = {.steps = 1, .learning_rate = 0.01, .gradient_noise = 0.1},
                     .driver = {.threads = 2}},
        killed);
  }
  SECTION("PLATIPUS, its KL weight and meta learning rate still annealing") {
    check_stop_and_resume<PlatipusModel>(
        PlatipusSettings{.inner_loop = {.steps = 1, .learning_rate = 0.01},
                         .kl_anneal_steps = 40,
                         .driver = {.meta_optimizer = {.annealing_steps = 40}, .threads = 2}},
        killed);
  }
  SECTION("MAML++ on one thread, its multi-step loss and derivative order still annealing") {
    check_stop_and_resume<MamlPlusPlus<nn::Sequential, MseLoss>>(
        MamlPlusPlusSettings{.inner_loop = {.steps = 2, .learning_rate = 0.01},
                             .multi_step_loss_steps = 20,
                             .first_order_steps = 14,
                             .driver = {.meta_optimizer = {.annealing_steps = 30}, .threads = 1}},
        killed);
  }
}

TEST_CASE("a set's run stopped in its second learner resumes without retraining the first",
          "[training][io][resume]") {
  namespace fs = std::filesystem;
  using Set = LearnerSet<Maml<nn::Sequential, MseLoss>, PlatipusModel>;
  const fs::path dir = fs::temp_directory_path() / fmt::format("platipus-set-run-{}", ::getpid());
  fs::remove_all(dir);
  const Sampler sampler({.support = 5, .query = 5});
  const auto make = [](std::uint64_t seed) {
    Set set;
    Generator maml_init(seed), platipus_init(seed);
    set.add("maml", Maml<nn::Sequential, MseLoss>(
                        small_network(), MseLoss{},
                        {.inner_loop = {.steps = 1, .learning_rate = 0.01, .gradient_noise = 0.1},
                         .driver = {.threads = 2}},
                        maml_init));
    set.add("platipus", PlatipusModel(small_network(), MseLoss{},
                                      {.inner_loop = {.steps = 1, .learning_rate = 0.01},
                                       .kl_anneal_steps = 30,
                                       .driver = {.threads = 2}},
                                      platipus_init));
    return set;
  };
  const auto run_in = [&](const fs::path& out, const nlohmann::json& options) {
    return io::SetTrainingRun{
        .loop = {.steps = 20, .meta_batch = 3, .record_every = 3},
        .seed = 5,
        .stream = [](const std::string& name) -> std::uint64_t { return name == "maml" ? 1 : 2; },
        .file = out / "run.safetensors",
        .checkpoint_every = 4,
        .options = options,
        .metadata = {{"note", "set"}}};
  };
  std::vector<std::string> prepared;
  const auto before = [&](const std::string& name, auto&, const LoopPosition& from) {
    prepared.push_back(fmt::format("{}@{}", name, from.step));
  };
  const nlohmann::json options{{"kl_weight", 1}, {"threads", 2}};

  fs::create_directories(dir / "whole");
  Set whole = make(3);
  io::MetricsLog whole_log(dir / "whole", "train");
  CHECK_FALSE(
      io::train_set_and_record(whole, sampler, run_in(dir / "whole", options), &whole_log, before)
          .stopped);
  CHECK(prepared == std::vector<std::string>{"maml@0", "platipus@0"});
  for (const auto& row : whole_log.rows()) {  // PLATIPUS's rows carry its KL term by name
    INFO(row.dump());
    CHECK(row.contains("kl") == (row["learner"] == "platipus"));
    if (row.contains("kl")) CHECK(row["kl"].get<double>() > 0);
  }

  fs::create_directories(dir / "stopped");
  Set stopped = make(3);
  io::MetricsLog stopped_log(dir / "stopped", "train");
  const auto outcome = io::train_set_and_record(
      stopped, sampler, run_in(dir / "stopped", options), &stopped_log, before, {},
      [&](const LoopPosition& at) { return prepared.back() != "platipus@0" || at.step < 11; });
  REQUIRE(outcome.stopped);
  CHECK(outcome.stopped->learner == "platipus");
  CHECK(outcome.stopped->loop.step == 11);

  prepared.clear();
  Set resumed = make(99);
  io::MetricsLog resumed_log(dir / "stopped", "train");
  auto run = run_in(dir / "stopped", {{"kl_weight", 1}, {"threads", 1}});  // threads: no bit
  run.resume = true;
  CHECK_FALSE(io::train_set_and_record(resumed, sampler, run, &resumed_log, before).stopped);
  CHECK(prepared == std::vector<std::string>{"platipus@11"});  // MAML is not trained again
  whole.for_each([&](const std::string& name, const auto& learner) {
    const auto a = learner.training_state();
    resumed.visit(name, [&](const auto& other) {
      const auto b = other.training_state();
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        CHECK(a[i].second->to_vector() == b[i].second->to_vector());
    });
  });
  CHECK(rows_without_seconds(dir / "whole" / "train.jsonl") ==
        rows_without_seconds(dir / "stopped" / "train.jsonl"));
  CHECK(io::load(dir / "stopped" / "run.safetensors", resumed)["note"] == "set");

  SECTION("a resume with another setting is refused, naming it") {
    Set other = make(3);
    auto changed = run_in(dir / "stopped", {{"kl_weight", 2}});
    changed.resume = true;
    CHECK_THROWS_WITH(io::train_set_and_record(other, sampler, changed, nullptr, before),
                      Catch::Contains("kl_weight: 1 in the checkpoint, 2 now") &&
                          Catch::Contains("run.safetensors"));
    changed.file = dir / "none.safetensors";
    CHECK_THROWS_WITH(io::train_set_and_record(other, sampler, changed, nullptr, before),
                      Catch::Contains("none.safetensors does not exist"));
  }
  fs::remove_all(dir);
}

TEST_CASE("a loop refuses a position it cannot go on from", "[training][errors]") {
  Generator init(3), gen(4);
  Maml<nn::Sequential, MseLoss> maml(small_network(), MseLoss{}, {.driver = {.threads = 1}}, init);
  const Sampler sampler({.support = 5, .query = 5});
  const TrainingLoop loop{.steps = 10, .meta_batch = 2, .record_every = 4, .name = "late"};
  CHECK_THROWS_WITH(meta_train(maml, sampler, gen, loop, {}, {.from = {.step = 11}}),
                    Catch::Contains("late") && Catch::Contains("step 11"));
  CHECK_THROWS_WITH(
      meta_train(maml, sampler, gen, loop, {}, {.from = {.step = 5, .interval_steps = 4}}),
      Catch::Contains("record interval of 4"));
  CHECK(maml.steps() == 0);
}

TEST_CASE("learners refuse class labels outside the model's classes, once per batch",
          "[maml][errors]") {
  using Catch::Contains;
  Generator init(1), gen(2);
  Maml<nn::Sequential, SoftmaxCrossEntropyLoss, double> maml(
      nn::mlp({.inputs = 2, .hidden = {4}, .outputs = 3}), SoftmaxCrossEntropyLoss{},
      {.driver = {.threads = 1}}, init);
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
