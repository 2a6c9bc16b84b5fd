// Tests of include/platipus/nn/: networks against forward passes by hand,
// parameter layouts, initialisers against their distributions, batch norm
// and user layers.
// Part of components_test.cpp, which includes it once after helpers.hpp: the
// components' tests are one translation unit (build time).
#pragma once

TEST_CASE("an mlp with one parameter vector computes relu(x W1 + b1) W2 + b2 ... by hand",
          "[components][nn]") {
  const auto model = nn::mlp({.inputs = 2, .hidden = {5, 4}, .outputs = 3});
  const auto params =
      normal({model.layout().size()}, 1, 0.7);  // biases non-zero, unlike initialize()
  const auto x = normal({6, 2}, 2);
  Tape<double> tape;
  const auto y = model.forward(tape.constant(params), tape.constant(x));
  CHECK(y.shape() == Shape{6, 3});
  CHECK(largest_difference(y.to_vector(), by_hand(model.layout(), params, 0, x.to_vector(), 2,
                                                  nn::Activation::relu)) < 1e-12);
}

TEST_CASE("Sequential runs a linear layer and its activation as one op, with the bits of the two",
          "[components][nn]") {
  const auto model = nn::mlp({.inputs = 2, .hidden = {5, 4}, .outputs = 3});
  Generator gen(8);
  const auto params = raw::normal<float>({3, model.layout().size()}, gen);
  const auto x = raw::normal<float>({3, 6, 2}, gen);
  // The output, its values on the tape and the gradient in the parameters.
  const auto run = [&](bool fused) {
    Tape<float> tape;
    const auto p = tape.variable(params.clone());
    const auto input = tape.constant(x.clone());
    const std::size_t before = tape.values();
    Var<float> y;
    if (fused) {
      y = model.forward(p, input);
    } else {
      const auto w = unflatten(p, model.layout().shapes());
      y = input;
      for (std::size_t layer = 0; layer < 3; ++layer) {
        y = linear(y, w[2 * layer], w[2 * layer + 1]);
        if (layer < 2) y = relu(y);
      }
    }
    const std::size_t made = tape.values() - before;
    const auto g = grad(sum(square(y)), std::span<const Var<float>>(&p, 1))[0];
    return std::tuple{y.to_vector(), g.to_vector(), made};
  };
  const auto [y, g, made] = run(true);
  const auto [y_apart, g_apart, made_apart] = run(false);
  CHECK(y == y_apart);
  CHECK(g == g_apart);
  CHECK(made + 2 == made_apart);  // no value for either hidden layer's pre-activation
}

TEST_CASE("an mlp with per-task parameters [T, P] gives each task the output of its own row",
          "[components][nn]") {
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {6, 6}, .outputs = 1, .activation = nn::Activation::sigmoid});
  const std::int64_t tasks = 3, points = 4;
  const auto params = normal({tasks, model.layout().size()}, 3, 0.7);
  const auto x = normal({tasks, points, 1}, 4);
  Tape<double> tape;
  const auto y = model.forward(tape.constant(params), tape.constant(x)).value().clone();
  REQUIRE(y.shape() == Shape{tasks, points, 1});
  for (std::int64_t t = 0; t < tasks; ++t) {
    INFO("task " << t);
    CHECK(largest_difference(rows_of(y, t), by_hand(model.layout(), params, t, rows_of(x, t), 1,
                                                    nn::Activation::sigmoid)) < 1e-12);
  }
  SECTION("inputs shared by every task") {
    const auto shared = normal({points, 1}, 5);
    const auto ys = model.forward(tape.constant(params), tape.constant(shared)).value().clone();
    REQUIRE(ys.shape() == Shape{tasks, points, 1});
    for (std::int64_t t = 0; t < tasks; ++t)
      CHECK(
          largest_difference(rows_of(ys, t), by_hand(model.layout(), params, t, shared.to_vector(),
                                                     1, nn::Activation::sigmoid)) < 1e-12);
  }
}

TEST_CASE("an mlp with shared parameters applies the same network to every task of batched inputs",
          "[components][nn]") {
  const auto model =
      nn::mlp({.inputs = 2, .hidden = {5}, .outputs = 2, .activation = nn::Activation::tanh});
  const auto params = normal({model.layout().size()}, 6, 0.7);
  const std::int64_t tasks = 3, points = 5;
  const auto x = normal({tasks, points, 2}, 7);
  Tape<double> tape;
  const auto y = model.forward(tape.constant(params), tape.constant(x)).value().clone();
  REQUIRE(y.shape() == Shape{tasks, points, 2});
  for (std::int64_t t = 0; t < tasks; ++t)
    CHECK(largest_difference(rows_of(y, t), by_hand(model.layout(), params, 0, rows_of(x, t), 2,
                                                    nn::Activation::tanh)) < 1e-12);
}

TEST_CASE("a bias transformation concatenates its learned vector to every input row",
          "[components][nn][bias]") {
  nn::Sequential model(2);
  model.bias_transform(3);
  CHECK(model.outputs() == 5);
  const std::int64_t points = 4;
  const auto x = normal({points, 2}, 8);
  Tape<double> tape;
  SECTION("one vector for all inputs") {
    const auto params = normal({3}, 9);
    const auto v = model.layout().piece(params, "layer0.vector").to_vector();
    const auto y = model.forward(tape.constant(params), tape.constant(x)).value().clone();
    REQUIRE(y.shape() == Shape{points, 5});
    const auto yv = y.to_vector(), xv = x.to_vector();
    for (std::size_t i = 0; i < static_cast<std::size_t>(points); ++i) {
      CHECK(yv[i * 5 + 0] == xv[i * 2 + 0]);
      CHECK(yv[i * 5 + 1] == xv[i * 2 + 1]);
      for (std::size_t d = 0; d < 3; ++d) CHECK(yv[i * 5 + 2 + d] == v[d]);
    }
  }
  SECTION("one vector per task, inputs shared") {
    const std::int64_t tasks = 2;
    const auto params = normal({tasks, 3}, 10);
    const auto y = model.forward(tape.constant(params), tape.constant(x)).value().clone();
    REQUIRE(y.shape() == Shape{tasks, points, 5});
    const auto yv = y.to_vector(), xv = x.to_vector();
    for (std::int64_t t = 0; t < tasks; ++t) {
      const auto v = model.layout().piece(params, "layer0.vector", t).to_vector();
      for (std::size_t i = 0; i < static_cast<std::size_t>(points); ++i) {
        const std::size_t row = (static_cast<std::size_t>(t) * points + i) * 5;
        CHECK(yv[row + 0] == xv[i * 2 + 0]);
        CHECK(yv[row + 1] == xv[i * 2 + 1]);
        for (std::size_t d = 0; d < 3; ++d) CHECK(yv[row + 2 + d] == v[d]);
      }
    }
  }
}

TEST_CASE("after a bias transformation the first layer computes x W[:in] + v W[in:] + b",
          "[components][nn][bias]") {
  const std::int64_t in = 2, dims = 3, width = 4, points = 5;
  // No hidden layers: the output is the first layer's pre-activation.
  const auto model =
      nn::mlp({.inputs = in, .hidden = {}, .outputs = width, .bias_transform = dims});
  const auto& layout = model.layout();
  CHECK(layout.find("layer1.weight").shape == Shape{in + dims, width});
  const auto params = normal({layout.size()}, 11);
  const auto x = normal({points, in}, 12);
  const auto w = layout.piece(params, "layer1.weight").to_vector();
  const auto b = layout.piece(params, "layer1.bias").to_vector();
  const auto v = layout.piece(params, "layer0.vector").to_vector();
  const auto xv = x.to_vector();
  std::vector<double> expected;
  for (std::int64_t n = 0; n < points; ++n)
    for (std::int64_t j = 0; j < width; ++j) {
      double z = b[static_cast<std::size_t>(j)];
      for (std::int64_t i = 0; i < in; ++i)
        z += xv[static_cast<std::size_t>(n * in + i)] * w[static_cast<std::size_t>(i * width + j)];
      for (std::int64_t d = 0; d < dims; ++d)
        z += v[static_cast<std::size_t>(d)] * w[static_cast<std::size_t>((in + d) * width + j)];
      expected.push_back(z);
    }
  Tape<double> tape;
  const auto y = model.forward(tape.constant(params), tape.constant(x));
  REQUIRE(y.shape() == Shape{points, width});
  CHECK(largest_difference(y.to_vector(), expected) < 1e-12);
}

// conv4 pools before its ReLU (nn/sequential.hpp): the two commute, so the
// network is its definition, [conv, batch norm, ReLU, pool] blocks, to the
// bit; with random images about a quarter of the windows after batch norm
// hold no positive value, the case where the order could show.
TEST_CASE(
    "conv4 pools before ReLU and gives the outputs, gradients and second derivatives of ReLU "
    "before pooling, to the bit",
    "[components][nn][conv]") {
  const auto net = nn::conv4({.channels = 2, .size = 10, .filters = 4, .blocks = 2, .outputs = 3});
  nn::Sequential definition(Shape{2, 10, 10});
  for (int b = 0; b < 2; ++b)
    definition.conv2d(4).batch_norm().activation(nn::Activation::relu).max_pool2d();
  definition.flatten().linear(3);
  REQUIRE(definition.layout().size() == net.layout().size());
  Generator gen(4);
  const auto params = net.initialize<float>(gen);
  const auto images = raw::normal<float>({2, 5, 2, 10, 10}, gen);
  const auto direction = raw::normal<float>(params.shape(), gen);
  const auto run = [&](const nn::Sequential& network) {
    Tape<float> tape;
    const auto theta = tape.variable(params.clone());
    const auto y = network.forward(theta, tape.constant(images.clone()));
    const auto g = grad(sum(square(y)), theta, {.create_graph = true});
    const auto hv = grad(sum(g * tape.constant(direction.clone())), theta);
    return std::vector{y.value().to_vector(), g.value().to_vector(), hv.value().to_vector()};
  };
  CHECK(run(net) == run(definition));
}

TEST_CASE("ParamLayout places pieces back to back in declaration order and finds them by name",
          "[components][nn][layout]") {
  nn::ParamLayout layout;
  CHECK(layout.size() == 0);
  CHECK(layout.add("a", {2, 3}, nn::Init::zeros) == 0);
  CHECK(layout.add("b", {4}, nn::Init::he_normal) == 1);
  CHECK(layout.add("c", {1, 2, 2}, nn::Init::glorot_uniform) == 2);
  CHECK(layout.size() == 6 + 4 + 4);
  REQUIRE(layout.specs().size() == 3);
  CHECK(layout.shapes()[2] == Shape{1, 2, 2});
  CHECK(layout.find("a").offset == 0);
  CHECK(layout.find("b").offset == 6);
  CHECK(layout.find("c").offset == 10);
  CHECK(layout.find("b").shape == Shape{4});
  CHECK(layout.find("c").init == nn::Init::glorot_uniform);
  std::vector<double> values(14);
  std::iota(values.begin(), values.end(), 0.0);
  const auto flat = Tensor<double>::from_host({14}, values);
  CHECK(layout.piece(flat, "b").to_vector() == std::vector<double>{6, 7, 8, 9});
  CHECK(layout.piece(flat, "c").shape() == Shape{1, 2, 2});
  SECTION("an mlp's pieces are its layers' weights and biases") {
    const auto model = nn::mlp({.inputs = 3, .hidden = {7}, .outputs = 2});
    const auto& l = model.layout();
    CHECK(l.find("layer0.weight").shape == Shape{3, 7});
    CHECK(l.find("layer0.bias").offset == 21);
    CHECK(l.find("layer2.weight").offset == 28);
    CHECK(l.find("layer2.bias").offset == 28 + 14);
    CHECK(l.size() == 3 * 7 + 7 + 7 * 2 + 2);
  }
}

TEST_CASE("ParamLayout rejects a duplicate name and an unknown name, naming it",
          "[components][nn][layout][errors]") {
  nn::ParamLayout layout;
  layout.add("weight", {2, 2}, nn::Init::zeros);
  CHECK_THROWS_AS(layout.add("weight", {3}, nn::Init::zeros), error);
  CHECK_THROWS_WITH(layout.add("weight", {3}, nn::Init::zeros),
                    Contains("duplicate") && Contains("'weight'"));
  CHECK(layout.size() == 4);  // the rejected piece was not added
  CHECK_THROWS_AS(layout.find("bias"), error);
  CHECK_THROWS_WITH(layout.find("bias"), Contains("'bias'"));
  CHECK_THROWS_WITH(layout.piece(Tensor<double>::zeros({5}), "weight"),
                    Contains("[5]") && Contains("4"));
}

namespace {

// A layout of one [fan_in, fan_out] piece with `init` and a zero-initialised
// piece after it, initialised; returns the first piece's values.
std::vector<double> initialised(nn::Init init, std::int64_t fan_in, std::int64_t fan_out,
                                std::uint64_t seed, std::vector<double>* zeros = nullptr) {
  nn::ParamLayout layout;
  layout.add("w", {fan_in, fan_out}, init);
  layout.add("z", {fan_out}, nn::Init::zeros);
  Generator gen(seed);
  const auto params = layout.initialize<double>(gen);
  if (zeros) *zeros = layout.piece(params, "z").to_vector();
  return layout.piece(params, "w").to_vector();
}

}  // namespace

TEST_CASE("zero-initialised pieces are zero", "[components][nn][init]") {
  std::vector<double> zeros;
  initialised(nn::Init::he_normal, 30, 40, 13, &zeros);
  CHECK(zeros.size() == 40);
  CHECK(std::all_of(zeros.begin(), zeros.end(), [](double z) { return z == 0; }));
  const auto model = nn::mlp({.inputs = 2, .hidden = {8}, .outputs = 1, .bias_transform = 3});
  Generator gen(14);
  const auto params = model.initialize<double>(gen);
  for (const char* name : {"layer0.vector", "layer1.bias", "layer3.bias"}) {
    const auto v = model.layout().piece(params, name).to_vector();
    INFO(name);
    CHECK(std::all_of(v.begin(), v.end(), [](double z) { return z == 0; }));
  }
  const auto w = model.layout().piece(params, "layer1.weight").to_vector();
  CHECK(std::any_of(w.begin(), w.end(), [](double z) { return z != 0; }));
}

TEST_CASE("uniform_fan_in draws U(-1/sqrt(fan_in), 1/sqrt(fan_in))", "[components][nn][init]") {
  // fan_in != fan_out so that a bound from the wrong fan would show.
  const std::int64_t fan_in = 50, fan_out = 400;
  const auto w = initialised(nn::Init::uniform_fan_in, fan_in, fan_out, 15);
  const double bound = 1 / std::sqrt(static_cast<double>(fan_in));
  const auto m = moments_of(w);
  CHECK(m.min >= -bound);
  CHECK(m.max <= bound);
  CHECK(m.min < -0.99 * bound);
  CHECK(m.max > 0.99 * bound);
  CHECK(std::abs(m.mean) < 0.02 * bound);
  CHECK(m.variance == Approx(bound * bound / 3).epsilon(0.03));
}

TEST_CASE("he_normal draws N(0, 2 / fan_in)", "[components][nn][init]") {
  const std::int64_t fan_in = 40, fan_out = 500;
  const auto w = initialised(nn::Init::he_normal, fan_in, fan_out, 16);
  const auto m = moments_of(w);
  const double variance = 2.0 / static_cast<double>(fan_in);
  CHECK(std::abs(m.mean) < 0.03 * std::sqrt(variance));
  CHECK(m.variance == Approx(variance).epsilon(0.04));
}

TEST_CASE("glorot_uniform draws U(-a, a) with a = sqrt(6 / (fan_in + fan_out))",
          "[components][nn][init]") {
  const std::int64_t fan_in = 40, fan_out = 400;
  const auto w = initialised(nn::Init::glorot_uniform, fan_in, fan_out, 17);
  const double bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  const auto m = moments_of(w);
  CHECK(m.min >= -bound);
  CHECK(m.max <= bound);
  CHECK(m.min < -0.99 * bound);
  CHECK(m.max > 0.99 * bound);
  CHECK(m.variance == Approx(bound * bound / 3).epsilon(0.03));
}

TEST_CASE(
    "a whole tanh mlp passes first and second order checks with respect to its flat parameters",
    "[components][nn][grad]") {
  const auto model = nn::mlp({.inputs = 2,
                              .hidden = {3, 3},
                              .outputs = 1,
                              .activation = nn::Activation::tanh,
                              .bias_transform = 2});
  const Tensor<double> x = normal({3, 2}, 18);
  const Tensor<double> batched_x = normal({2, 3, 2}, 19);
  SECTION("one parameter vector [P]") {
    check_derivatives(
        [&](std::span<const V> p) { return model.forward(p[0], p[0].tape().constant(x)); },
        tensors(normal({model.layout().size()}, 20, 0.6)));
  }
  SECTION("per-task parameters [T, P]") {
    check_derivatives(
        [&](std::span<const V> p) { return model.forward(p[0], p[0].tape().constant(batched_x)); },
        tensors(normal({2, model.layout().size()}, 21, 0.6)));
  }
}

// One task's batch norm by hand: x [N, F, S] (S positions per feature, 1
// for vectors), statistics per feature over N and S, the biased variance.
std::vector<double> batch_norm_by_hand(const std::vector<double>& x, std::int64_t n, std::int64_t f,
                                       std::int64_t s, const std::vector<double>& scale,
                                       const std::vector<double>& shift, double epsilon) {
  std::vector<double> y(x.size());
  for (std::int64_t c = 0; c < f; ++c) {
    auto at = [&](std::int64_t i, std::int64_t p) {
      return static_cast<std::size_t>((i * f + c) * s + p);
    };
    double mean = 0, variance = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t p = 0; p < s; ++p) mean += x[at(i, p)] / static_cast<double>(n * s);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t p = 0; p < s; ++p)
        variance += std::pow(x[at(i, p)] - mean, 2) / static_cast<double>(n * s);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t p = 0; p < s; ++p)
        y[at(i, p)] = (x[at(i, p)] - mean) / std::sqrt(variance + epsilon) *
                          scale[static_cast<std::size_t>(c)] +
                      shift[static_cast<std::size_t>(c)];
  }
  return y;
}

TEST_CASE("batch_norm normalises each task's batch per channel with that batch's statistics",
          "[components][nn][batchnorm]") {
  const std::int64_t tasks = 2, n = 3;
  Tape<double> tape;
  for (const bool images : {false, true}) {
    INFO((images ? "images [2, 2, 2]" : "vectors [4]"));
    const Shape sample = images ? Shape{2, 2, 2} : Shape{4};
    const std::int64_t f = sample[0], s = sample.numel() / f;
    auto model = nn::Sequential(sample);
    model.batch_norm(1e-3);
    REQUIRE(model.layout().size() == 2 * f);
    // The initial scale is one and the shift zero.
    Generator gen(5);
    const auto initial = model.initialize<double>(gen).to_vector();
    CHECK(std::vector<double>(initial.begin(), initial.begin() + f) == std::vector<double>(f, 1));
    CHECK(std::vector<double>(initial.begin() + f, initial.end()) == std::vector<double>(f, 0));
    // Per-task scale and shift, inputs of different means and spreads per task.
    const auto params = normal({tasks, 2 * f}, 30);
    Shape x_shape{tasks, n};
    for (auto d : sample.dims()) x_shape.push_back(d);
    auto x = normal(x_shape, 31, 3.0);
    const auto y = model.forward(tape.constant(params), tape.constant(x)).to_vector();
    REQUIRE(y.size() == static_cast<std::size_t>(x.numel()));
    const auto xs = x.to_vector(), ps = params.to_vector();
    const auto per_task = static_cast<std::ptrdiff_t>(n * f * s);
    for (std::int64_t t = 0; t < tasks; ++t) {
      const auto row = ps.begin() + static_cast<std::ptrdiff_t>(t * 2 * f);
      const auto expected = batch_norm_by_hand(
          std::vector<double>(xs.begin() + t * per_task, xs.begin() + (t + 1) * per_task), n, f, s,
          std::vector<double>(row, row + f), std::vector<double>(row + f, row + 2 * f), 1e-3);
      const std::vector<double> got(y.begin() + t * per_task, y.begin() + (t + 1) * per_task);
      CHECK(largest_difference(got, expected) < 1e-12);
    }
  }
}

TEST_CASE("batch_norm passes first and second order checks in its inputs and its pieces",
          "[components][nn][batchnorm][grad]") {
  auto model = nn::Sequential(Shape{2, 2, 3});
  model.batch_norm().activation(nn::Activation::tanh).flatten().linear(1);
  check_derivatives(
      [&](std::span<const V> p) { return model.forward(p[0], p[1]); },
      tensors(normal({2, model.layout().size()}, 33, 0.6), normal({2, 3, 2, 2, 3}, 32)));
}

TEST_CASE("batch_norm refuses an epsilon that is not positive and inputs of other features",
          "[components][nn][batchnorm][errors]") {
  using Catch::Contains;
  CHECK_THROWS_WITH(nn::Sequential(3).batch_norm(0), Contains("batch_norm") && Contains("epsilon"));
  auto model = nn::Sequential(3);
  model.batch_norm();
  Tape<double> tape;
  CHECK_THROWS_WITH(model.forward(tape.constant(Tensor<double>::zeros({6})),
                                  tape.constant(Tensor<double>::zeros({2, 4}))),
                    Contains("BatchNorm") && Contains("[2, 4]"));
}

// A user's layer, written outside the library against the Layer concept: a
// learned gain per feature, initialised to one.
struct FeatureGain {
  static constexpr std::string_view name = "feature_gain";
  std::int64_t features = 0;
  std::size_t gain = 0;

  Shape output_shape(const Shape& sample) const {
    check(sample.rank() == 1, "FeatureGain", "takes vectors, got {}", sample);
    return sample;
  }
  void declare(nn::ParamLayout& layout, const std::string& prefix, const Shape& sample) {
    features = sample[0];
    gain = layout.add(prefix + ".gain", {features}, nn::Init::ones);
  }
  template <class T, class B>
  Var<T, B> forward(std::span<const Var<T, B>> pieces, const Var<T, B>& x) const {
    const auto& g = pieces[gain];
    Shape row = g.shape().take_front(g.rank() - 1);
    row.push_back(1);
    row.push_back(features);
    return x * reshape(g, row);
  }
};
static_assert(nn::Layer<FeatureGain>);
static_assert(nn::Layer<nn::BatchNorm> && nn::Layer<nn::Conv2d> && nn::Layer<nn::Flatten>);

TEST_CASE("a user's layer joins a network through the Layer concept, and MAML trains it",
          "[components][nn][layer]") {
  using Network = nn::BasicSequential<FeatureGain>;
  Network model(2);
  model.add(FeatureGain{}).linear(1);
  CHECK(model.layout().find("layer0.gain").shape == Shape{2});
  // gain g, then y = (x * g) W + b.
  const auto params = Tensor<double>::from_host({5}, {2, -1, 0.5, 3, 0.25});
  const auto x = Tensor<double>::from_host({1, 2}, {1, 2});
  Tape<double> tape;
  const auto y = model.forward(tape.constant(params), tape.constant(x)).to_vector();
  CHECK(y[0] == Approx(1 * 2 * 0.5 + 2 * -1 * 3 + 0.25));
  check_derivatives([&](std::span<const V> p) { return model.forward(p[0], p[1]); },
                    tensors(normal({3, 5}, 34), normal({3, 4, 2}, 35)));
  CHECK_THROWS_WITH(Network(Shape{1, 2, 2}).add(FeatureGain{}), Catch::Contains("takes vectors"));
  Generator init(36), gen(37);
  Network sinusoid(1);
  sinusoid.add(FeatureGain{}).linear(8).activation(nn::Activation::relu).linear(1);
  Maml<Network, MseLoss, double> maml(sinusoid, MseLoss{}, {.driver = {.threads = 1}}, init);
  const data::SinusoidLineSampler<double> sampler({.support = 5, .query = 5});
  const auto gain_before = maml.parameters().to_vector();
  CHECK(std::isfinite(maml.meta_train_step(sampler.sample(4, gen), gen).query_loss));
  CHECK(maml.parameters().to_vector()[0] != gain_before[0]);
}

TEST_CASE("Sequential::forward rejects parameters of the wrong size, naming the shapes",
          "[components][nn][errors]") {
  const auto model = nn::mlp({.inputs = 1, .hidden = {4}, .outputs = 1});
  const std::int64_t size = model.layout().size();  // 4 + 4 + 4 + 1 = 13
  REQUIRE(size == 13);
  Tape<double> tape;
  const auto x = tape.constant(Tensor<double>::zeros({2, 1}));
  CHECK_THROWS_AS(model.forward(tape.constant(Tensor<double>::zeros({14})), x), error);
  CHECK_THROWS_WITH(model.forward(tape.constant(Tensor<double>::zeros({14})), x),
                    Contains("Sequential::forward") && Contains("[14]") && Contains("13"));
  CHECK_THROWS_WITH(model.forward(tape.constant(Tensor<double>::zeros({3, 12})), x),
                    Contains("Sequential::forward") && Contains("[3, 12]"));
  CHECK_THROWS_WITH(model.forward(tape.constant(Tensor<double>::zeros({13})),
                                  tape.constant(Tensor<double>::zeros({2, 3}))),
                    Contains("[2, 3]"));
}
