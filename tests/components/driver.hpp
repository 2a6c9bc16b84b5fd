// Tests of include/platipus/meta/driver/'s parts: task noise, the thread
// pool and the task split, predict, and the multi-threaded meta-gradient
// against its single-thread form.
// Part of components_test.cpp, which includes it once after helpers.hpp: the
// components' tests are one translation unit (build time).
#pragma once

TEST_CASE("TaskNoise gives each task the same numbers however the batch is cut",
          "[components][random]") {
  Generator gen(70);
  const TaskNoise noise(gen);
  TaskNoise whole = noise;
  const auto first = whole.normal<double, cpu>({4, 3}), second = whole.normal<double, cpu>({4, 2});
  TaskNoise front = noise.from_task(0), back = noise.from_task(2);
  const auto a = front.normal<double, cpu>({2, 3}), b = back.normal<double, cpu>({2, 3});
  const auto a2 = front.normal<double, cpu>({2, 2}), b2 = back.normal<double, cpu>({2, 2});
  auto joined = a.to_vector(), tail = b.to_vector();
  joined.insert(joined.end(), tail.begin(), tail.end());
  CHECK(first.to_vector() == joined);
  auto joined2 = a2.to_vector(), tail2 = b2.to_vector();
  joined2.insert(joined2.end(), tail2.begin(), tail2.end());
  CHECK(second.to_vector() == joined2);
  // Rows differ from each other and from the next draw; another step's key differs too.
  const auto v = first.to_vector();
  CHECK(v[0] != v[3]);
  CHECK(second.to_vector()[0] != v[0]);
  TaskNoise next(gen);
  CHECK(next.normal<double, cpu>({1, 3}).to_vector()[0] != v[0]);
}

TEMPLATE_TEST_CASE("TaskNoise draws a list of shapes by one call, each as its own draw",
                   "[components][random]", float, double) {
  using T = TestType;
  using counted = CountingBackend<cpu>;
  Generator gen(71);
  const TaskNoise noise(gen);
  // More pieces than one call takes, one of them empty, partial Philox blocks.
  std::vector<Shape> shapes;
  for (int i = 0; i < NormalRowsLayout<T>::capacity + 2; ++i)
    shapes.push_back(i == 5 ? Shape{3, 0} : Shape{3, 1 + i % 7, 2});
  TaskNoise one_by_one = noise, listed = noise;
  std::vector<std::vector<T>> expected;
  for (const Shape& shape : shapes)
    expected.push_back(one_by_one.normal<T, cpu>(shape).to_vector());
  counted::reset();
  const auto draws = listed.normal<T, counted>(std::span<const Shape>(shapes));
  CHECK(counted::calls().total() == 2);
  CHECK(counted::calls()["foreach_fill_normal_rows"] == 2);
  REQUIRE(draws.size() == shapes.size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    CHECK(draws[i].shape() == shapes[i]);
    CHECK(draws[i].to_vector() == expected[i]);
  }
  // The next draw goes on where a draw each would have left it.
  CHECK(listed.normal<T, cpu>({3, 4}).to_vector() == one_by_one.normal<T, cpu>({3, 4}).to_vector());
  const std::array<Shape, 2> uneven{Shape{3, 2}, Shape{4, 2}};
  CHECK_THROWS_WITH(
      (listed.normal<T, cpu>(std::span<const Shape>(uneven))),
      Catch::Contains("TaskNoise::normal") && Catch::Contains("4 tasks where the first has 3"));
}

TEMPLATE_TEST_CASE("a row fill is one fill per row, row r under its task's stream",
                   "[components][random]", float, double) {
  using T = TestType;
  const TaskStreams streams{.key = 0x1234abcd, .first = 3};
  const std::int64_t rows = 5, n = 7;  // 7 values: a partial Philox block per row
  std::vector<T> together(rows * n), apart(rows * n);
  cpu::fill_normal_rows(together.data(), rows, n, 11, streams, 2);
  for (std::int64_t r = 0; r < rows; ++r)
    cpu::fill_normal(apart.data() + r * n, n, 11, task_stream(streams, r), 2);
  CHECK(together == apart);
  // The stream is the task's, wherever its row sits.
  CHECK(task_stream(streams, 2) == task_stream({.key = streams.key, .first = 0}, 5));
  CHECK(task_stream(streams, 2) != task_stream(streams, 3));
}

// ---------------------------------------------------------- thread pool

TEST_CASE("ThreadPool::run calls every index exactly once", "[components][threads]") {
  for (const int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (const int count : {0, 1, 2, 3, 4, 5, 17, 100, 1000}) {
      std::vector<std::atomic<int>> calls(static_cast<std::size_t>(count));
      pool.run(count, [&](int i) { calls[static_cast<std::size_t>(i)].fetch_add(1); });
      INFO("pool of " << threads << ", " << count << " indices");
      CHECK(std::all_of(calls.begin(), calls.end(),
                        [](const std::atomic<int>& c) { return c.load() == 1; }));
    }
  }
}

// Back-to-back jobs meet workers still spinning on the last one, jobs after a
// pause meet them asleep (thread_pool.hpp spins 200 us, then sleeps): each
// job's calls all finish before run returns, whichever way the workers wait.
TEST_CASE("ThreadPool::run finishes every call of back-to-back and spaced-out jobs",
          "[components][threads]") {
  for (const int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int job = 0; job < 3000; ++job) {
      if (job % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const int count = 1 + job % 7;
      std::vector<int> done(static_cast<std::size_t>(count), 0);
      pool.run(count, [&](int i) { done[static_cast<std::size_t>(i)] = job + 1; });
      INFO("pool of " << threads << ", job " << job);
      REQUIRE(std::all_of(done.begin(), done.end(), [&](int d) { return d == job + 1; }));
    }
  }
}

TEST_CASE("an exception in one call is rethrown by ThreadPool::run and the pool stays usable",
          "[components][threads][errors]") {
  for (const int threads : {1, 2, 4}) {
    INFO("pool of " << threads);
    ThreadPool pool(threads);
    CHECK_THROWS_WITH(pool.run(20,
                               [](int i) {
                                 if (i == 7) throw error("index 7 failed");
                               }),
                      Contains("index 7 failed"));
    std::vector<std::atomic<int>> calls(50);
    pool.run(50, [&](int i) { calls[static_cast<std::size_t>(i)].fetch_add(1); });
    CHECK(std::all_of(calls.begin(), calls.end(),
                      [](const std::atomic<int>& c) { return c.load() == 1; }));
  }
}

TEST_CASE("split_tasks covers the tasks with near-equal non-empty contiguous ranges",
          "[components][threads][split]") {
  for (std::int64_t tasks = 1; tasks <= 40; ++tasks)
    for (int parts = 1; parts <= 9; ++parts) {
      INFO(tasks << " tasks in " << parts << " parts");
      const auto ranges = split_tasks(tasks, parts);
      CHECK(static_cast<std::int64_t>(ranges.size()) == std::min<std::int64_t>(parts, tasks));
      std::int64_t next = 0, smallest = tasks, largest = 0;
      for (const auto& r : ranges) {
        CHECK(r.start == next);
        CHECK(r.count > 0);
        next = r.start + r.count;
        smallest = std::min(smallest, r.count);
        largest = std::max(largest, r.count);
      }
      CHECK(next == tasks);
      CHECK(largest - smallest <= 1);
    }
}

TEST_CASE("chunks_of: a fixed cut, the backend's (one chunk per task on the CPU) or one per thread",
          "[components][threads][split]") {
  ThreadPool pool(3);
  CHECK(chunks_of<cpu>(7, 0, pool).size() == 7);
  CHECK(chunks_of<cpu>(7, 2, pool).size() == 2);
  CHECK(chunks_of<cpu>(7, 20, pool).size() == 7);
  CHECK(chunks_of<cpu>(7, one_chunk_per_thread, pool).size() == 3);
  // The backend's cut does not change with the thread count.
  ThreadPool one(1);
  CHECK(chunks_of<cpu>(7, 0, one).size() == 7);
  CHECK(chunks_of<cpu>(7, one_chunk_per_thread, one).size() == 1);
}

// ----------------------------------------------------------------- predict

TEST_CASE(
    "predict with parameters [P], [T, P] and [T, S, P] agrees with predicting one row at a time",
    "[components][predict]") {
  const auto model = nn::mlp({.inputs = 1,
                              .hidden = {6},
                              .outputs = 1,
                              .activation = nn::Activation::tanh,
                              .bias_transform = 2});
  const std::int64_t size = model.layout().size(), tasks = 3, samples = 4, points = 5;
  const auto sampled = normal({tasks, samples, size}, 60, 0.7);
  const auto per_task = normal({tasks, size}, 61, 0.7);
  const auto x = normal({tasks, points, 1}, 62);
  const auto one = predict(model, raw::slice(per_task, 0, 0, 1).reshaped(Shape{size}),
                           raw::slice(x, 0, 0, 1).reshaped(Shape{points, 1}));
  CHECK(one.shape() == Shape{points, 1});
  CHECK(largest_difference(one.to_vector(), by_hand(model.layout(), per_task, 0, rows_of(x, 0), 1,
                                                    nn::Activation::tanh)) < 1e-12);

  const auto by_task = predict(model, per_task, x);
  REQUIRE(by_task.shape() == Shape{tasks, points, 1});
  const auto by_sample = predict(model, sampled, x);
  REQUIRE(by_sample.shape() == Shape{tasks, samples, points, 1});
  for (std::int64_t t = 0; t < tasks; ++t) {
    const auto xt = raw::slice(x, 0, t, 1).reshaped(Shape{points, 1});
    const auto row = raw::slice(per_task, 0, t, 1).reshaped(Shape{size});
    CHECK(largest_difference(rows_of(by_task, t), predict(model, row, xt).to_vector()) < 1e-12);
    const auto task_samples = raw::slice(sampled, 0, t, 1).reshaped(Shape{samples, size});
    const auto predictions = raw::slice(by_sample, 0, t, 1).reshaped(Shape{samples, points, 1});
    for (std::int64_t s = 0; s < samples; ++s) {
      INFO("task " << t << " sample " << s);
      const auto alone = raw::slice(task_samples, 0, s, 1).reshaped(Shape{size});
      CHECK(largest_difference(rows_of(predictions, s), predict(model, alone, xt).to_vector()) <
            1e-12);
    }
  }
  CHECK_THROWS_WITH(predict(model, Tensor<double>::zeros({2, samples, size}), x),
                    Contains("predict") && Contains("[3, 5, 1]"));
  CHECK_THROWS_WITH(predict(model, Tensor<double>::zeros({size + 1}), x), Contains("predict"));
}

// -------------------------------------------------------------- threads

TEST_CASE("MAML's meta-gradient is the same with one thread and with two",
          "[components][maml][threads]") {
  const auto model = nn::mlp({.inputs = 1, .hidden = {16, 16}, .outputs = 1});
  Generator data_gen(63);
  const auto batch =
      data::SinusoidLineSampler<float>({.support = 5, .query = 7}).sample(7, data_gen);
  std::vector<std::vector<float>> gradients;
  std::vector<double> losses;
  for (const int threads : {1, 2}) {
    Generator init(64), gen(65);
    const Maml<nn::Sequential, MseLoss> maml(
        model, MseLoss{},
        {.inner_loop = {.steps = 3, .learning_rate = 0.05}, .driver = {.threads = threads}}, init);
    MetaStepResult result;
    gradients.push_back(maml.meta_gradient(batch, gen, &result).to_vector());
    losses.push_back(result.query_loss);
  }
  REQUIRE(gradients[0].size() == gradients[1].size());
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < gradients[0].size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(gradients[0][i])));
    worst = std::max(worst, static_cast<double>(std::abs(gradients[0][i] - gradients[1][i])));
  }
  INFO("largest gradient " << scale << ", largest difference " << worst);
  CHECK(scale > 0);
  CHECK(worst <= 1e-5 * scale);
  CHECK(losses[0] == Approx(losses[1]).epsilon(1e-5));
}
