// The components under the meta-learners, each against its definition:
// networks against a forward pass computed by hand from the named pieces of
// the parameters, initialisers against their distributions, the optimisers
// against their update formulas, the samplers against the task families they
// describe, checkpoints and metrics files against what was written, the
// thread pool and the task split against their contracts, and predict and
// the multi-threaded meta-gradient against their single-task, single-thread
// forms.
#include "catch.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "derivative_checks.hpp"
#include "platipus/io/checkpoint.hpp"
#include "platipus/io/metrics.hpp"
#include "platipus/io/settings_json.hpp"
#include "platipus/platipus.hpp"
#include "temporary_directory.hpp"

using namespace platipus;
using Catch::Contains;
using platipus::testing::check_derivatives;
using V = Var<double>;
using Inputs = std::vector<Tensor<double>>;

namespace {

// ---------------------------------------------------------------- helpers

template <class... Ts>
Inputs tensors(Ts... ts) {
  Inputs v;
  (v.push_back(std::move(ts)), ...);
  return v;
}

Tensor<double> normal(const Shape& shape, std::uint64_t seed, double scale = 1) {
  Generator gen(seed);
  return raw::map(UnaryOp::scale, raw::normal<double>(shape, gen), scale);
}

double largest_difference(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

double apply(nn::Activation a, double z) {
  switch (a) {
    case nn::Activation::relu:
      return z > 0 ? z : 0;
    case nn::Activation::tanh:
      return std::tanh(z);
    case nn::Activation::sigmoid:
      return 1 / (1 + std::exp(-z));
    case nn::Activation::none:
      break;
  }
  return z;
}

// The network nn::mlp builds, evaluated by hand one input row at a time from
// the pieces of parameter row `task` read through ParamLayout::piece: a bias
// transformation appends its vector to the row; each Linear computes
// h W + b; the activation follows every Linear but the last.
std::vector<double> by_hand(const nn::ParamLayout& layout, const Tensor<double>& params,
                            std::int64_t task, const std::vector<double>& x, std::int64_t inputs,
                            nn::Activation activation) {
  const auto specs = layout.specs();
  std::size_t last_weight = 0;
  for (std::size_t k = 0; k < specs.size(); ++k)
    if (specs[k].name.ends_with(".weight")) last_weight = k;
  std::vector<double> out;
  for (std::size_t row = 0; row * static_cast<std::size_t>(inputs) < x.size(); ++row) {
    std::vector<double> h(x.begin() + static_cast<std::ptrdiff_t>(row * inputs),
                          x.begin() + static_cast<std::ptrdiff_t>((row + 1) * inputs));
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const auto& s = specs[k];
      if (s.name.ends_with(".vector")) {
        const auto v = layout.piece(params, s.name, task).to_vector();
        h.insert(h.end(), v.begin(), v.end());
      } else if (s.name.ends_with(".weight")) {
        const std::string prefix = s.name.substr(0, s.name.size() - std::string(".weight").size());
        const auto w = layout.piece(params, s.name, task).to_vector();
        const auto b = layout.piece(params, prefix + ".bias", task).to_vector();
        const auto in = static_cast<std::size_t>(s.shape[0]),
                   width = static_cast<std::size_t>(s.shape[1]);
        REQUIRE(h.size() == in);
        std::vector<double> next(width);
        for (std::size_t j = 0; j < width; ++j) {
          double z = b[j];
          for (std::size_t i = 0; i < in; ++i) z += h[i] * w[i * width + j];
          next[j] = k == last_weight ? z : apply(activation, z);
        }
        h = std::move(next);
      }
    }
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

// Rows [start, start + count) of axis 0 of x, as a host vector.
std::vector<double> rows_of(const Tensor<double>& x, std::int64_t start, std::int64_t count = 1) {
  return raw::slice(x, 0, start, count).to_vector();
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The cells of one CSV line (RFC 4180: a quoted cell may hold commas, and
// "" inside it is one quote).
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      cells.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

// A safetensors file's header and the bytes after it, and the file again
// from a (modified) header.
std::pair<nlohmann::json, std::string> split_checkpoint(const std::string& bytes) {
  std::uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  return {nlohmann::json::parse(bytes.substr(8, length)), bytes.substr(8 + length)};
}

std::string length_prefix(std::uint64_t length) {
  std::string prefix(8, '\0');
  std::memcpy(prefix.data(), &length, 8);
  return prefix;
}

std::string join_checkpoint(const nlohmann::json& header, const std::string& data) {
  const std::string json = header.dump();
  return length_prefix(json.size()) + json + data;
}

}  // namespace

// ------------------------------------------------------------------- nn

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

struct Moments {
  double mean = 0, variance = 0, min = 0, max = 0;
};

Moments moments_of(const std::vector<double>& v) {
  Moments m{0, 0, v.at(0), v.at(0)};
  for (double x : v) {
    m.mean += x / static_cast<double>(v.size());
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  for (double x : v) m.variance += (x - m.mean) * (x - m.mean) / static_cast<double>(v.size());
  return m;
}

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
  Maml<Network, MseLoss, double> maml(sinusoid, MseLoss{}, {.threads = 1}, init);
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

// --------------------------------------------------------------- autodiff

TEST_CASE("unflatten cuts a flat vector into its pieces and flatten puts them back",
          "[components][ops][flatten]") {
  const std::vector<Shape> shapes{{2, 3}, {4}, {1, 2}};
  Tape<double> tape;
  SECTION("unbatched [P]") {
    const auto flat = normal({12}, 22);
    const auto values = flat.to_vector();
    const auto pieces = unflatten(tape.constant(flat), shapes);
    REQUIRE(pieces.size() == 3);
    CHECK(pieces[0].shape() == Shape{2, 3});
    CHECK(pieces[1].shape() == Shape{4});
    CHECK(pieces[2].shape() == Shape{1, 2});
    CHECK(pieces[0].to_vector() == std::vector<double>(values.begin(), values.begin() + 6));
    CHECK(pieces[1].to_vector() == std::vector<double>(values.begin() + 6, values.begin() + 10));
    CHECK(pieces[2].to_vector() == std::vector<double>(values.begin() + 10, values.end()));
    const auto back = flatten(std::span<const V>(pieces), Shape{}, shapes);
    CHECK(back.shape() == Shape{12});
    CHECK(back.to_vector() == values);
  }
  SECTION("batched [T, P]") {
    const auto flat = normal({3, 12}, 23);
    const auto values = flat.to_vector();
    const auto pieces = unflatten(tape.constant(flat), shapes);
    REQUIRE(pieces.size() == 3);
    CHECK(pieces[0].shape() == Shape{3, 2, 3});
    CHECK(pieces[1].shape() == Shape{3, 4});
    CHECK(pieces[2].shape() == Shape{3, 1, 2});
    for (std::size_t t = 0; t < 3; ++t) {
      const auto row = values.begin() + static_cast<std::ptrdiff_t>(t * 12);
      CHECK(rows_of(pieces[0].value(), static_cast<std::int64_t>(t)) ==
            std::vector<double>(row, row + 6));
      CHECK(rows_of(pieces[1].value(), static_cast<std::int64_t>(t)) ==
            std::vector<double>(row + 6, row + 10));
      CHECK(rows_of(pieces[2].value(), static_cast<std::int64_t>(t)) ==
            std::vector<double>(row + 10, row + 12));
    }
    const auto back = flatten(std::span<const V>(pieces), Shape{3}, shapes);
    CHECK(back.shape() == Shape{3, 12});
    CHECK(back.to_vector() == values);
  }
  SECTION("an undefined piece flattens to zeros") {
    const auto a = tape.constant(normal({2, 3}, 24)), c = tape.constant(normal({1, 2}, 25));
    const std::vector<V> pieces{a, V{}, c};
    const auto flat = flatten(std::span<const V>(pieces), Shape{}, shapes).to_vector();
    std::vector<double> expected = a.to_vector();
    expected.insert(expected.end(), 4, 0.0);
    for (double v : c.to_vector()) expected.push_back(v);
    CHECK(flat == expected);
  }
  SECTION("sizes that do not add up are rejected, naming the shapes") {
    CHECK_THROWS_WITH(unflatten(tape.constant(Tensor<double>::zeros({11})), shapes),
                      Contains("unflatten") && Contains("[11]") && Contains("12"));
    const std::vector<V> wrong{tape.constant(Tensor<double>::zeros({3, 2})), V{}, V{}};
    CHECK_THROWS_WITH(flatten(std::span<const V>(wrong), Shape{}, shapes),
                      Contains("flatten") && Contains("[3, 2]") && Contains("[2, 3]"));
  }
}

TEST_CASE("unflatten and flatten pass first and second order checks, with a piece left unused",
          "[components][ops][flatten][grad]") {
  const std::vector<Shape> shapes{{2, 3}, {4}, {3}};
  SECTION("unflatten [P], piece 1 unused") {
    check_derivatives(
        [&](std::span<const V> x) {
          const auto p = unflatten(x[0], shapes);
          return tanh(p[0]) * p[2];
        },
        tensors(normal({13}, 26)));
  }
  SECTION("unflatten [T, P], piece 1 unused") {
    check_derivatives(
        [&](std::span<const V> x) {
          const auto p = unflatten(x[0], shapes);
          return tanh(p[0]) * reshape(p[2], {2, 1, 3});
        },
        tensors(normal({2, 13}, 27)));
  }
  SECTION("flatten [P] with an undefined piece") {
    check_derivatives(
        [&](std::span<const V> x) {
          const std::vector<V> pieces{square(x[0]), V{}, x[1] * x[1] * x[1]};
          return flatten(std::span<const V>(pieces), Shape{}, shapes);
        },
        tensors(normal({2, 3}, 28), normal({3}, 29)));
  }
  SECTION("flatten [T, P] with an undefined piece") {
    check_derivatives(
        [&](std::span<const V> x) {
          const std::vector<V> pieces{tanh(x[0]), V{}, square(x[1])};
          return flatten(std::span<const V>(pieces), Shape{2}, shapes);
        },
        tensors(normal({2, 2, 3}, 30), normal({2, 3}, 31)));
  }
  SECTION("flatten of unflatten, squared") {
    check_derivatives(
        [&](std::span<const V> x) {
          const auto p = unflatten(x[0], shapes);
          return square(flatten(std::span<const V>(p), Shape{2}, shapes));
        },
        tensors(normal({2, 13}, 32)));
  }
}

TEST_CASE("foreach_add_scaled computes a_i + s b_i for every pair", "[components][ops][foreach]") {
  Tape<double> tape;
  const auto a0 = tape.constant(normal({2, 3}, 33)), a1 = tape.constant(normal({4}, 34));
  const auto b0 = tape.constant(normal({2, 3}, 35)), b1 = tape.constant(normal({4}, 36));
  const std::vector<V> a{a0, a1}, b{b0, b1};
  const double s = -0.37;
  const auto out = foreach_add_scaled(std::span<const V>(a), std::span<const V>(b), s);
  REQUIRE(out.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(out[i].shape() == a[i].shape());
    const auto av = a[i].to_vector(), bv = b[i].to_vector(), ov = out[i].to_vector();
    std::vector<double> expected(av.size());
    for (std::size_t e = 0; e < av.size(); ++e) expected[e] = av[e] + s * bv[e];
    CHECK(largest_difference(ov, expected) < 1e-15);
  }
  const std::vector<V> one{a0};
  CHECK_THROWS_WITH(foreach_add_scaled(std::span<const V>(a), std::span<const V>(one), s),
                    Contains("foreach_add_scaled"));
}

TEST_CASE("foreach_add_scaled passes first and second order checks, with an output left unused",
          "[components][ops][foreach][grad]") {
  const Inputs inputs =
      tensors(normal({2, 3}, 37), normal({4}, 38), normal({2, 3}, 39), normal({4}, 40));
  SECTION("both outputs used") {
    check_derivatives(
        [](std::span<const V> x) {
          const auto out = foreach_add_scaled(x.first(2), x.subspan(2, 2), 0.6);
          return concat({reshape(square(out[0]), {-1}), tanh(out[1]) * x[1]}, 0);
        },
        inputs);
  }
  SECTION("second output unused") {
    check_derivatives(
        [](std::span<const V> x) {
          const auto out = foreach_add_scaled(x.first(2), x.subspan(2, 2), -1.3);
          return out[0] * x[2];
        },
        inputs);
  }
}

TEST_CASE(
    "clip_task_norms scales each task's gradient to the bound and leaves small ones as they are",
    "[components][ops][grad]") {
  Tape<double> tape;
  // Three tasks, two pieces: task norms 5 (3, 4 | 0), 1 (0.6, 0 | 0.8) and 13 (5, 0 | 12).
  const std::vector<Var<double>> g{
      tape.constant(Tensor<double>::from_host({3, 2}, {3, 4, 0.6, 0, 5, 0})),
      tape.constant(Tensor<double>::from_host({3, 1, 1}, {0, 0.8, 12}))};
  const auto clipped = clip_task_norms(g, 2.0);
  const auto a = clipped[0].value().to_vector(), b = clipped[1].value().to_vector();
  const std::vector<double> expected_a{1.2, 1.6, 0.6, 0, 10.0 / 13, 0},
      expected_b{0, 0.8, 24.0 / 13};
  CHECK(largest_difference(a, expected_a) < 1e-15);
  CHECK(largest_difference(b, expected_b) < 1e-15);
  // A task within the bound is multiplied by exactly 1.
  CHECK((a[2] == 0.6 && a[3] == 0.0 && b[1] == 0.8));
  // A zero gradient stays zero, and its derivatives stay finite.
  const std::vector<Var<double>> zero{tape.variable(Tensor<double>::zeros({2, 3}))};
  const auto z = clip_task_norms(zero, 1.0)[0];
  CHECK(z.value().to_vector() == std::vector<double>(6, 0.0));
  const auto dz = grad(sum(z), std::span<const Var<double>>(zero))[0].value().to_vector();
  CHECK(dz == std::vector<double>(6, 1.0));
  CHECK_THROWS_WITH(clip_task_norms(g, 0.0), Contains("clip_task_norms") && Contains("positive"));
}

TEST_CASE("clip_task_norms passes first and second order checks on both sides of the bound",
          "[components][ops][grad]") {
  // Task 0's norm is below 1.5 and task 1's above: both branches are checked.
  const Inputs inputs = tensors(Tensor<double>::from_host({2, 3}, {0.2, -0.4, 0.3, 1.5, -2.0, 0.7}),
                                Tensor<double>::from_host({2, 2}, {0.1, 0.5, -1.1, 0.9}));
  check_derivatives(
      [](std::span<const V> x) {
        const auto out = clip_task_norms(std::vector<V>(x.begin(), x.end()), 1.5);
        return concat({reshape(out[0] * x[0], {-1}), reshape(tanh(out[1]), {-1})}, 0);
      },
      inputs);
}

// ------------------------------------------------------------------ optim

TEST_CASE("Adam's first three steps follow the bias-corrected formulas", "[components][optim]") {
  // Non-default settings so that each constant matters.
  const optim::AdamSettings s{.learning_rate = 0.1, .beta1 = 0.8, .beta2 = 0.95, .epsilon = 1e-2};
  optim::Adam<double> adam(s);
  Tensor<double> p0 = Tensor<double>::from_host({3}, {0.5, -1.0, 2.0});
  Tensor<double> p1 = Tensor<double>::from_host({2}, {0.0, 3.0});
  const std::vector<std::vector<std::vector<double>>> grads{{{0.3, -2.0, 0.01}, {1.0, -0.5}},
                                                            {{-0.1, -1.5, 0.02}, {0.0, 4.0}},
                                                            {{0.7, 0.5, -0.03}, {-2.0, 0.1}}};
  std::vector<std::vector<double>> p{p0.to_vector(), p1.to_vector()}, m{{0, 0, 0}, {0, 0}}, v = m;
  for (int t = 1; t <= 3; ++t) {
    const auto& g = grads[static_cast<std::size_t>(t - 1)];
    const Tensor<double> g0 = Tensor<double>::from_host({3}, g[0]),
                         g1 = Tensor<double>::from_host({2}, g[1]);
    Tensor<double>* params[] = {&p0, &p1};
    const Tensor<double>* gs[] = {&g0, &g1};
    adam.step(params, gs);
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t e = 0; e < p[i].size(); ++e) {
        m[i][e] = s.beta1 * m[i][e] + (1 - s.beta1) * g[i][e];
        v[i][e] = s.beta2 * v[i][e] + (1 - s.beta2) * g[i][e] * g[i][e];
        const double m_hat = m[i][e] / (1 - std::pow(s.beta1, t)),
                     v_hat = v[i][e] / (1 - std::pow(s.beta2, t));
        p[i][e] -= s.learning_rate * m_hat / (std::sqrt(v_hat) + s.epsilon);
      }
    INFO("step " << t);
    CHECK(adam.steps() == t);
    CHECK(largest_difference(p0.to_vector(), p[0]) < 1e-13);
    CHECK(largest_difference(p1.to_vector(), p[1]) < 1e-13);
  }
}

TEST_CASE("AdamSettings::learning_rate_at follows a cosine to final_learning_rate, then stays",
          "[components][optim]") {
  const optim::AdamSettings cosine{
      .learning_rate = 1e-3, .annealing_steps = 100, .final_learning_rate = 1e-5};
  CHECK(cosine.learning_rate_at(0) == 1e-3);
  CHECK(cosine.learning_rate_at(25) == Approx(1e-5 + (1e-3 - 1e-5) * (1 + std::sqrt(0.5)) / 2));
  CHECK(cosine.learning_rate_at(50) == Approx((1e-3 + 1e-5) / 2));
  CHECK(cosine.learning_rate_at(100) == Approx(1e-5));
  CHECK(cosine.learning_rate_at(5000) == Approx(1e-5));
  const optim::AdamSettings constant{.learning_rate = 1e-3, .final_learning_rate = 1e-5};
  CHECK(constant.learning_rate_at(5000) == 1e-3);
}

TEST_CASE("Sgd steps p - learning_rate * g", "[components][optim]") {
  optim::Sgd<double> sgd({.learning_rate = 0.25});
  Tensor<double> p = Tensor<double>::from_host({3}, {1.0, -2.0, 0.5});
  for (int step = 0; step < 2; ++step) {
    const auto before = p.to_vector();
    const Tensor<double> g = Tensor<double>::from_host({3}, {0.4 * (step + 1), -1.0, 8.0});
    const auto gv = g.to_vector();
    Tensor<double>* params[] = {&p};
    const Tensor<double>* gs[] = {&g};
    sgd.step(params, gs);
    std::vector<double> expected(3);
    for (std::size_t e = 0; e < 3; ++e) expected[e] = before[e] - 0.25 * gv[e];
    CHECK(largest_difference(p.to_vector(), expected) < 1e-15);
  }
}

TEST_CASE("optimisers reject gradients that do not match their parameters",
          "[components][optim][errors]") {
  Tensor<float> p = Tensor<float>::zeros({3}), q = Tensor<float>::zeros({2});
  const Tensor<float> g_wrong = Tensor<float>::zeros({4}), g_q = Tensor<float>::zeros({2});
  Tensor<float>* one[] = {&p};
  Tensor<float>* two[] = {&p, &q};
  const Tensor<float>* wrong[] = {&g_wrong};
  const Tensor<float>* too_few[] = {&g_q};
  SECTION("Sgd") {
    optim::Sgd<float> sgd;
    CHECK_THROWS_WITH(sgd.step(one, wrong),
                      Contains("Sgd::step") && Contains("[3]") && Contains("[4]"));
    CHECK_THROWS_WITH(sgd.step(two, too_few),
                      Contains("Sgd::step") && Contains("2 parameters but 1 gradients"));
    CHECK(p.to_vector() == std::vector<float>(3, 0.0f));
  }
  SECTION("Adam") {
    optim::Adam<float> adam;
    CHECK_THROWS_WITH(adam.step(one, wrong),
                      Contains("Adam::step") && Contains("[3]") && Contains("[4]"));
    CHECK_THROWS_WITH(adam.step(two, too_few),
                      Contains("Adam::step") && Contains("2 parameters but 1 gradients"));
  }
  SECTION("Adam called with another set of parameters after its first step") {
    optim::Adam<float> adam;
    const Tensor<float> g_p = Tensor<float>::zeros({3});
    const Tensor<float>* right[] = {&g_p};
    adam.step(one, right);
    const Tensor<float>* both[] = {&g_p, &g_q};
    CHECK_THROWS_WITH(adam.step(two, both), Contains("Adam::step") && Contains("2"));
  }
}

// ------------------------------------------------------------------- data

TEST_CASE("SinusoidLineSampler draws [tasks, K, 1] inputs within [x_min, x_max]",
          "[components][data][sinusoid]") {
  const data::SinusoidLineSampler<float> sampler(
      {.support = 7, .query = 13, .x_min = -2, .x_max = 3});
  Generator gen(41);
  const auto batch = sampler.sample(9, gen);
  CHECK(batch.tasks() == 9);
  CHECK(batch.support_x.shape() == Shape{9, 7, 1});
  CHECK(batch.support_y.shape() == Shape{9, 7, 1});
  CHECK(batch.query_x.shape() == Shape{9, 13, 1});
  CHECK(batch.query_y.shape() == Shape{9, 13, 1});
  for (const auto* x : {&batch.support_x, &batch.query_x}) {
    const auto v = x->to_vector();
    CHECK(*std::min_element(v.begin(), v.end()) >= -2.0f);
    CHECK(*std::max_element(v.begin(), v.end()) <= 3.0f);
  }
  // Spread over the range, not stuck at one point.
  const auto q = batch.query_x.to_vector();
  CHECK(*std::min_element(q.begin(), q.end()) < -1.5f);
  CHECK(*std::max_element(q.begin(), q.end()) > 2.5f);
  CHECK_NOTHROW(batch.validate("test"));
}

TEST_CASE("without noise every label is the task's function at its input",
          "[components][data][sinusoid]") {
  const data::SinusoidLineSampler<double> sampler({.support = 6, .query = 8, .noise_std = 0});
  const std::vector<data::SineLineFunction> functions{
      {.sinusoid = true, .amplitude = 2.5, .phase = 0.7},
      {.sinusoid = false, .slope = -1.5, .intercept = 0.4},
      {.sinusoid = true, .amplitude = 0.3, .phase = 3.0},
  };
  Generator gen(42);
  const auto batch = sampler.sample(functions, gen);
  REQUIRE(batch.tasks() == 3);
  auto expected = [&](std::size_t task, double x) {
    const auto& f = functions[task];
    return f.sinusoid ? f.amplitude * std::sin(x + f.phase) : f.slope * x + f.intercept;
  };
  for (const auto& [xs, ys, n] : {std::tuple{&batch.support_x, &batch.support_y, 6},
                                  std::tuple{&batch.query_x, &batch.query_y, 8}}) {
    const auto x = xs->to_vector(), y = ys->to_vector();
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
        const std::size_t k = t * static_cast<std::size_t>(n) + i;
        CHECK(y[k] == Approx(expected(t, x[k])).margin(1e-12));
      }
  }
}

TEST_CASE("the share of sinusoid tasks is sinusoid_fraction", "[components][data][sinusoid]") {
  for (double fraction : {0.0, 0.3, 0.5, 1.0}) {
    const data::SinusoidLineSampler<float> sampler({.sinusoid_fraction = fraction});
    Generator gen(43);
    const int draws = 20000;
    int sinusoids = 0;
    for (int i = 0; i < draws; ++i) sinusoids += sampler.draw_function(gen).sinusoid ? 1 : 0;
    INFO("sinusoid_fraction " << fraction);
    CHECK(static_cast<double>(sinusoids) / draws == Approx(fraction).margin(0.015));
  }
}

TEST_CASE("amplitude, phase, slope and intercept are drawn within their ranges",
          "[components][data][sinusoid]") {
  const data::SinusoidLineSampler<float> sampler({.amplitude_min = 1,
                                                  .amplitude_max = 2,
                                                  .phase_min = 0.5,
                                                  .phase_max = 1,
                                                  .line_min = -1,
                                                  .line_max = 0.5});
  Generator gen(44);
  std::vector<double> amplitude, phase, slope, intercept;
  for (int i = 0; i < 4000; ++i) {
    const auto f = sampler.draw_function(gen);
    if (f.sinusoid) {
      amplitude.push_back(f.amplitude);
      phase.push_back(f.phase);
    } else {
      slope.push_back(f.slope);
      intercept.push_back(f.intercept);
    }
  }
  REQUIRE(amplitude.size() > 1000);
  REQUIRE(slope.size() > 1000);
  auto within = [](const std::vector<double>& v, double low, double high) {
    const auto m = moments_of(v);
    INFO("min " << m.min << " max " << m.max << " of range [" << low << ", " << high << "]");
    CHECK(m.min >= low);
    CHECK(m.max <= high);
    // Reaches both ends: the range is the one set, not a default.
    CHECK(m.min < low + 0.01 * (high - low));
    CHECK(m.max > high - 0.01 * (high - low));
  };
  within(amplitude, 1, 2);
  within(phase, 0.5, 1);
  within(slope, -1, 0.5);
  within(intercept, -1, 0.5);
}

TEST_CASE("label noise is N(0, noise_std^2) around the function", "[components][data][sinusoid]") {
  const data::SinusoidLineSampler<double> sampler({.support = 1000, .query = 1000});
  REQUIRE(sampler.settings().noise_std == 0.3);
  std::vector<data::SineLineFunction> functions;
  for (int t = 0; t < 10; ++t)
    functions.push_back(
        t % 2 ? data::SineLineFunction{.sinusoid = false, .slope = 0.2 * t, .intercept = -1}
              : data::SineLineFunction{.sinusoid = true, .amplitude = 0.5 + t, .phase = 0.1 * t});
  Generator gen(45);
  const auto batch = sampler.sample(functions, gen);
  std::vector<double> residuals;
  for (const auto& [xs, ys, n] : {std::tuple{&batch.support_x, &batch.support_y, 1000},
                                  std::tuple{&batch.query_x, &batch.query_y, 1000}}) {
    const auto x = xs->to_vector(), y = ys->to_vector();
    for (std::size_t k = 0; k < x.size(); ++k) residuals.push_back(y[k] - functions[k / n](x[k]));
  }
  const auto m = moments_of(residuals);
  CHECK(std::abs(m.mean) < 0.01);
  CHECK(std::sqrt(m.variance) == Approx(0.3).epsilon(0.03));
}

TEST_CASE("SinusoidLineSampler rejects empty sets and empty ranges",
          "[components][data][sinusoid][errors]") {
  using Sampler = data::SinusoidLineSampler<float>;
  CHECK_THROWS_AS(Sampler({.support = 0}), error);
  CHECK_THROWS_WITH(Sampler({.support = 0}),
                    Contains("SinusoidLineSampler") && Contains("support"));
  CHECK_THROWS_WITH(Sampler({.query = 0}), Contains("SinusoidLineSampler") && Contains("query"));
  CHECK_THROWS_WITH(Sampler({.x_min = 1, .x_max = 1}), Contains("SinusoidLineSampler"));
  CHECK_THROWS_WITH(Sampler({.noise_std = -0.1}),
                    Contains("SinusoidLineSampler") && Contains("noise"));
  Generator gen(46);
  CHECK_THROWS_AS(Sampler().sample(std::span<const data::SineLineFunction>(), gen), error);
}

TEST_CASE("circle tasks: support points lie in the circle, query labels say whether a point does",
          "[components][data][circles]") {
  const data::CirclesSampler<double> sampler(
      {.support = 3, .query = 40, .positive_fraction = 0.5, .domain = 5});
  // One circle in the middle, two that the domain's edges cut.
  const std::vector<data::Circle> circles{{2.5, 2.5, 1.0}, {0.4, 4.7, 1.5}, {4.9, 0.2, 0.8}};
  Generator gen(47);
  const auto batch = sampler.sample(circles, gen);
  CHECK(batch.support_x.shape() == Shape{3, 3, 2});
  CHECK(batch.support_y.shape() == Shape{3, 3, 1});
  CHECK(batch.query_x.shape() == Shape{3, 40, 2});
  CHECK(batch.query_y.shape() == Shape{3, 40, 1});
  const auto sx = batch.support_x.to_vector(), sy = batch.support_y.to_vector();
  const auto qx = batch.query_x.to_vector(), qy = batch.query_y.to_vector();
  for (std::size_t t = 0; t < circles.size(); ++t) {
    INFO("task " << t);
    for (std::size_t i = 0; i < 3; ++i) {
      const std::size_t k = t * 3 + i;
      CHECK(circles[t].contains(sx[2 * k], sx[2 * k + 1]));
      CHECK(sy[k] == 1.0);
    }
    for (std::size_t i = 0; i < 40; ++i) {
      const std::size_t k = t * 40 + i;
      CHECK((qy[k] == 1.0) == circles[t].contains(qx[2 * k], qx[2 * k + 1]));
      CHECK((qy[k] == 0.0 || qy[k] == 1.0));
    }
  }
  for (const auto* points : {&sx, &qx})
    for (double c : *points) {
      CHECK(c >= 0.0);
      CHECK(c <= 5.0);
    }
}

TEST_CASE("the query sets hold positive_fraction positives", "[components][data][circles]") {
  for (const double fraction : {0.0, 0.25, 0.5, 1.0}) {
    const data::CirclesSampler<float> sampler({.query = 20, .positive_fraction = fraction});
    Generator gen(48);
    const auto batch = sampler.sample(10, gen);
    const auto y = batch.query_y.to_vector();
    const auto expected = static_cast<std::size_t>(std::round(fraction * 20));
    INFO("positive_fraction " << fraction);
    for (std::size_t t = 0; t < 10; ++t)
      CHECK(static_cast<std::size_t>(std::count(
                y.begin() + static_cast<std::ptrdiff_t>(t * 20),
                y.begin() + static_cast<std::ptrdiff_t>((t + 1) * 20), 1.0f)) == expected);
  }
}

TEST_CASE("sampled circles have centres and radii within their ranges, points within [0, domain]^2",
          "[components][data][circles]") {
  const data::CirclesSampler<double> sampler({.query = 10,
                                              .domain = 4,
                                              .centre_min = 1.5,
                                              .centre_max = 2.5,
                                              .radius_min = 0.3,
                                              .radius_max = 1.2});
  Generator gen(49);
  for (int i = 0; i < 500; ++i) {
    const auto c = sampler.draw_circle(gen);
    CHECK((c.cx >= 1.5 && c.cx <= 2.5 && c.cy >= 1.5 && c.cy <= 2.5));
    CHECK((c.radius >= 0.3 && c.radius <= 1.2));
  }
  const auto batch = sampler.sample(20, gen);
  for (const auto* x : {&batch.support_x, &batch.query_x}) {
    const auto v = x->to_vector();
    CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
    CHECK(*std::max_element(v.begin(), v.end()) <= 4.0);
  }
}

TEST_CASE("CirclesSampler rejects empty sets and a positive fraction outside [0, 1]",
          "[components][data][circles][errors]") {
  using Sampler = data::CirclesSampler<float>;
  CHECK_THROWS_WITH(Sampler({.support = 0}), Contains("CirclesSampler") && Contains("support"));
  CHECK_THROWS_WITH(Sampler({.query = 0}), Contains("CirclesSampler") && Contains("query"));
  CHECK_THROWS_WITH(Sampler({.positive_fraction = 1.5}), Contains("positive_fraction"));
  CHECK_THROWS_WITH(Sampler({.positive_fraction = -0.1}), Contains("positive_fraction"));
  Generator gen(50);
  CHECK_THROWS_AS(Sampler().sample(std::span<const data::Circle>(), gen), error);
}

// A domain in which no point can be drawn inside (or outside) a circle would
// make CirclesSampler::inside / outside loop forever, so such settings are
// refused when the sampler is made.
TEST_CASE("CirclesSampler rejects settings under which no point can be drawn",
          "[components][data][circles][errors]") {
  using Sampler = data::CirclesSampler<float>;
  CHECK_THROWS_AS(Sampler({.domain = 0}), error);
  CHECK_THROWS_AS(Sampler({.domain = -1}), error);
  CHECK_THROWS_AS(Sampler({.centre_min = 6, .centre_max = 7, .radius_max = 0.5}),
                  error);                                               // circles off the domain
  CHECK_THROWS_AS(Sampler({.radius_min = 8, .radius_max = 9}), error);  // circles cover the domain
  CHECK_THROWS_AS(Sampler({.radius_min = -1, .radius_max = -0.5}), error);
}

// --------------------------------------------------------------------- io

namespace {

using FloatMaml = Maml<nn::Sequential, MseLoss>;
using FloatPlatipus = Platipus<nn::Sequential, MseLoss>;

nn::Sequential tiny(std::int64_t hidden = 8) {
  return nn::mlp({.inputs = 1, .hidden = {hidden}, .outputs = 1});
}

bool same(const Tensor<float>& a, const Tensor<float>& b) {
  return a.shape() == b.shape() && a.to_vector() == b.to_vector();
}

}  // namespace

TEST_CASE("a MAML checkpoint restores exactly the same meta-parameters and metadata",
          "[components][io][checkpoint]") {
  TemporaryDirectory dir;
  const auto path = dir / "maml.ckpt";
  Generator init(51), data_gen(52);
  FloatMaml maml(tiny(), MseLoss{}, {.inner_loop = {.steps = 1}, .threads = 1}, init);
  maml.meta_train_step(data::SinusoidLineSampler<float>().sample(2, data_gen), data_gen);
  const nlohmann::json metadata{
      {"step", 1}, {"experiment", "sinusoid"}, {"settings", {{"alpha", 0.01}}}};
  io::save(path, maml, metadata);

  Generator other_init(53);
  FloatMaml restored(tiny(), MseLoss{}, {.threads = 1}, other_init);
  REQUIRE_FALSE(same(restored.parameters(), maml.parameters()));
  const auto loaded = io::load(path, restored);
  CHECK(same(restored.parameters(), maml.parameters()));
  CHECK(loaded == metadata);
  CHECK(dir.entries() == std::vector<std::string>{"maml.ckpt"});
}

TEST_CASE("a PLATIPUS checkpoint restores all five meta-parameters exactly",
          "[components][io][checkpoint]") {
  TemporaryDirectory dir;
  const auto path = dir / "platipus.ckpt";
  Generator init(54), data_gen(55);
  FloatPlatipus model(tiny(), MseLoss{}, {.inner_loop = {.steps = 1}, .threads = 1}, init);
  model.meta_train_step(data::SinusoidLineSampler<float>().sample(2, data_gen), data_gen);
  io::save(path, model, {{"steps", model.steps()}});

  Generator other_init(56);
  FloatPlatipus restored(tiny(), MseLoss{},
                         {.initial_prior_variance = 0.5,
                          .initial_posterior_variance = 0.2,
                          .initial_gamma_p = 0.3,
                          .initial_gamma_q = 0.4,
                          .threads = 1},
                         other_init);
  for (int p = 0; p < FloatPlatipus::part_count; ++p) {
    const auto part = static_cast<FloatPlatipus::Part>(p);
    REQUIRE_FALSE(same(restored.part(part), model.part(part)));
  }
  const auto metadata = io::load(path, restored);
  for (int p = 0; p < FloatPlatipus::part_count; ++p) {
    const auto part = static_cast<FloatPlatipus::Part>(p);
    INFO(FloatPlatipus::part_names[static_cast<std::size_t>(p)]);
    CHECK(same(restored.part(part), model.part(part)));
  }
  CHECK(metadata == nlohmann::json{{"steps", 1}});
}

TEST_CASE(
    "loading a checkpoint into another architecture fails naming the file and leaves the learner "
    "as it was",
    "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "eight.ckpt";
  Generator init(57);
  FloatMaml eight(tiny(8), MseLoss{}, {.threads = 1}, init);
  io::save(path, eight);
  FloatMaml nine(tiny(9), MseLoss{}, {.threads = 1}, init);
  const auto before = nine.parameters().clone();
  CHECK_THROWS_AS(io::load(path, nine), error);
  CHECK_THROWS_WITH(io::load(path, nine), Contains(path.string()) && Contains("architecture"));
  CHECK(same(nine.parameters(), before));
  SECTION("a PLATIPUS checkpoint has no MAML theta") {
    const auto platipus_path = dir / "platipus.ckpt";
    FloatPlatipus platipus(tiny(8), MseLoss{}, {.threads = 1}, init);
    io::save(platipus_path, platipus);
    CHECK_THROWS_WITH(io::load(platipus_path, eight),
                      Contains(platipus_path.string()) && Contains("theta"));
  }
}

TEST_CASE("a set of learners saves in one checkpoint under their names and loads all or none",
          "[components][io][checkpoint]") {
  using Set = LearnerSet<FloatMaml, FloatPlatipus>;
  TemporaryDirectory dir;
  const auto path = dir / "set.safetensors";
  auto make = [](std::uint64_t seed) {
    Set set;
    Generator maml_init(seed), noise_init(seed + 1), platipus_init(seed + 2);
    set.add("maml", FloatMaml(tiny(), MseLoss{}, {.threads = 1}, maml_init));
    set.add("maml_noise", FloatMaml(tiny(), MseLoss{}, {.threads = 1}, noise_init));
    set.add("platipus", FloatPlatipus(tiny(), MseLoss{}, {.threads = 1}, platipus_init));
    return set;
  };
  Set trained = make(60);
  Generator data_gen(61);
  trained.for_each([&](const std::string&, auto& learner) {
    learner.meta_train_step(data::SinusoidLineSampler<float>().sample(2, data_gen), data_gen);
  });
  io::save(path, trained, {{"run", "set"}});
  CHECK(trained.names() == std::vector<std::string>{"maml", "maml_noise", "platipus"});
  const auto stored = io::load_checkpoint<float>(path);
  CHECK(stored.tensors.contains("maml/theta"));
  CHECK(stored.tensors.contains("maml_noise/theta"));
  CHECK(stored.tensors.contains("platipus/mu_theta"));
  CHECK(stored.tensors.size() == 2 + FloatPlatipus::part_count);

  Set restored = make(70);
  REQUIRE_FALSE(same(restored.get<FloatMaml>("maml").parameters(),
                     trained.get<FloatMaml>("maml").parameters()));
  CHECK(io::load(path, restored) == nlohmann::json{{"run", "set"}});
  for (const char* name : {"maml", "maml_noise"})
    CHECK(same(restored.get<FloatMaml>(name).parameters(),
               trained.get<FloatMaml>(name).parameters()));
  for (int p = 0; p < FloatPlatipus::part_count; ++p) {
    const auto part = static_cast<FloatPlatipus::Part>(p);
    CHECK(same(restored.get<FloatPlatipus>("platipus").part(part),
               trained.get<FloatPlatipus>("platipus").part(part)));
  }

  SECTION("a learner the checkpoint lacks fails naming it, and no learner changes") {
    Set more = make(80);
    Generator init(81);
    more.add("platipus_kl0.15", FloatPlatipus(tiny(), MseLoss{}, {.threads = 1}, init));
    const auto before = more.get<FloatMaml>("maml").parameters().clone();
    CHECK_THROWS_WITH(io::load(path, more),
                      Contains(path.string()) && Contains("platipus_kl0.15/mu_theta"));
    CHECK(same(more.get<FloatMaml>("maml").parameters(), before));
  }
  SECTION("a subset loads from it") {
    Set one;
    Generator init(90);
    one.add("platipus", FloatPlatipus(tiny(), MseLoss{}, {.threads = 1}, init));
    io::load(path, one);
    CHECK(same(one.get<FloatPlatipus>("platipus").part(FloatPlatipus::Part::mu_theta),
               trained.get<FloatPlatipus>("platipus").part(FloatPlatipus::Part::mu_theta)));
  }
  SECTION("learners of two architectures are refused on saving, naming the second") {
    Set mixed = make(100);
    Generator init(101);
    mixed.add("wide", FloatMaml(tiny(16), MseLoss{}, {.threads = 1}, init));
    CHECK_THROWS_WITH(io::save(dir / "mixed.safetensors", mixed),
                      Contains("'wide'") && Contains("architecture"));
    CHECK_THROWS_WITH(io::save(dir / "empty.safetensors", Set{}), Contains("empty"));
    CHECK(dir.entries() == std::vector<std::string>{"set.safetensors"});
  }
}

TEST_CASE("a set of learners refuses bad names and asks for a learner by name and type",
          "[components][meta][errors]") {
  LearnerSet<FloatMaml, FloatPlatipus> set;
  Generator init(110);
  auto& maml = set.add("maml", FloatMaml(tiny(), MseLoss{}, {.threads = 1}, init));
  CHECK(&set.get<FloatMaml>("maml") == &maml);
  CHECK(set.contains("maml"));
  CHECK_FALSE(set.contains("platipus"));
  CHECK_THROWS_WITH(set.add("maml", FloatMaml(tiny(), MseLoss{}, {.threads = 1}, init)),
                    Contains("already a learner named 'maml'"));
  for (const char* bad : {"", "maml/noise"}) {
    INFO(bad);
    CHECK_THROWS_AS(set.add(bad, FloatMaml(tiny(), MseLoss{}, {.threads = 1}, init)), error);
  }
  CHECK_THROWS_WITH(set.get<FloatMaml>("platipus"),
                    Contains("no learner named 'platipus'") && Contains("maml"));
  CHECK_THROWS_WITH(set.get<FloatPlatipus>("maml"), Contains("another type"));
  CHECK(set.size() == 1);
  CHECK(set.erase("maml"));
  CHECK_FALSE(set.erase("maml"));
  CHECK(set.empty());
}

TEST_CASE("every settings struct goes to JSON and back, keeping the defaults of absent keys",
          "[components][io][settings]") {
  const PlatipusSettings platipus{.inner_loop = {.steps = 3, .evaluation_steps = 7},
                                  .mean_steps = 2,
                                  .kl_weight = 0.25,
                                  .query_reduction = Reduction::mean,
                                  .kl_anneal_steps = 100,
                                  .prior_likelihood_weight = 0.5,
                                  .posterior_data = PosteriorData::support_and_query,
                                  .initial_prior_variance = 0.02,
                                  .initial_posterior_variance = 0.03,
                                  .initial_gamma_p = 0.04,
                                  .initial_gamma_q = 0.05,
                                  .meta_optimizer = {.learning_rate = 1e-2, .annealing_steps = 9},
                                  .threads = 2,
                                  .task_chunks = 3};
  const nlohmann::json j = platipus;
  CHECK(j["posterior_data"] == "support_and_query");
  CHECK(j["query_reduction"] == "mean");
  CHECK(j["inner_loop"]["learning_rate"] == 1e-3);  // PLATIPUS's own default
  CHECK(j["meta_optimizer"]["annealing_steps"] == 9);
  CHECK(nlohmann::json(j.get<PlatipusSettings>()) == j);
  CHECK(nlohmann::json(PlatipusSettings{})["inner_loop"]["evaluation_steps"].is_null());

  const MamlSettings maml{.inner_loop = {.steps = 1, .learning_rate = 0.5, .gradient_noise = 2},
                          .first_order = true};
  const MetaSgdSettings metasgd{.inner_loop = {.max_gradient_norm = 10}, .task_chunks = -1};
  const AnilSettings anil{.head = {"layer4.weight", "layer4.bias"}, .first_order = true};
  const ReptileSettings reptile{.inner_loop = {.steps = 8}, .threads = 4};
  const MamlPlusPlusSettings mamlpp{.multi_step_loss_steps = 5, .first_order_steps = 6};
  CHECK(nlohmann::json(nlohmann::json(maml).get<MamlSettings>()) == nlohmann::json(maml));
  CHECK(nlohmann::json(nlohmann::json(metasgd).get<MetaSgdSettings>()) == nlohmann::json(metasgd));
  CHECK(nlohmann::json(anil).get<AnilSettings>().head == anil.head);
  CHECK(nlohmann::json(reptile).get<ReptileSettings>().threads == 4);
  CHECK(nlohmann::json(nlohmann::json(mamlpp).get<MamlPlusPlusSettings>()) ==
        nlohmann::json(mamlpp));
  CHECK(nlohmann::json(maml).get<MamlSettings>().inner_loop.gradient_noise == 2);

  // Absent keys keep the struct's defaults, nested ones too: PLATIPUS's
  // inner rate stays 1e-3 and Meta-SGD keeps one step.
  const auto partial =
      nlohmann::json{{"kl_weight", 0.5}, {"inner_loop", {{"steps", 10}}}}.get<PlatipusSettings>();
  CHECK(partial.kl_weight == 0.5);
  CHECK(partial.inner_loop.steps == 10);
  CHECK(partial.inner_loop.learning_rate == 1e-3);
  CHECK(partial.initial_gamma_p == PlatipusSettings{}.initial_gamma_p);
  CHECK(nlohmann::json{{"inner_loop", {{"learning_rate", 0.1}}}}
            .get<MetaSgdSettings>()
            .inner_loop.steps == 1);
}

TEST_CASE("reading settings from JSON refuses unknown keys and values of another type, naming them",
          "[components][io][settings][errors]") {
  auto refused = [](const nlohmann::json& j) {
    try {
      (void)j.get<PlatipusSettings>();
    } catch (const error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(refused({{"kl_weigth", 1}}), Contains("unknown setting \"kl_weigth\""));
  CHECK_THAT(refused({{"inner_loop", {{"steps", 1.5}}}}),
             Contains("\"inner_loop\"") && Contains("\"steps\"") && Contains("integer"));
  CHECK_THAT(refused({{"inner_loop", {{"stepz", 1}}}}), Contains("unknown setting \"stepz\""));
  CHECK_THAT(refused({{"query_reduction", "avg"}}),
             Contains("\"query_reduction\"") && Contains("none of mean, sum"));
  CHECK_THAT(refused({{"kl_weight", "1.5"}}), Contains("\"kl_weight\"") && Contains("number"));
  CHECK_THAT(refused({{"threads", 10000000000}}), Contains("\"threads\"") && Contains("range"));
  CHECK_THAT(refused({{"threads", -1}}), Contains("accepted"));  // the learner refuses it
  CHECK_THAT(refused(nlohmann::json::array()), Contains("expected an object"));
  CHECK_THROWS_WITH(nlohmann::json({{"first_order", 1}}).get<MamlSettings>(),
                    Contains("\"first_order\"") && Contains("true or false"));
  CHECK_THROWS_WITH(nlohmann::json({{"head", {1, 2}}}).get<AnilSettings>(), Contains("\"head\""));
}

TEST_CASE("a truncated, corrupt or missing checkpoint fails naming the file",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "good.safetensors";
  Generator init(58);
  FloatMaml maml(tiny(), MseLoss{}, {.threads = 1}, init);
  io::save(path, maml);
  const auto before = maml.parameters().clone();
  const std::string bytes = slurp(path);
  auto fails_naming_file = [&](const std::string& name, const std::string& contents,
                               const std::string& why) {
    const auto bad = dir / name;
    write_bytes(bad, contents);
    INFO(name);
    CHECK_THROWS_AS(io::load(bad, maml), error);
    CHECK_THROWS_WITH(io::load(bad, maml), Contains(bad.string()) && Contains(why));
  };
  fails_naming_file("data-cut.safetensors", bytes.substr(0, bytes.size() - 4), "outside");
  fails_naming_file("header-cut.safetensors", bytes.substr(0, 18), "header length");
  fails_naming_file("length-only.safetensors", bytes.substr(0, 8), "header length");
  fails_naming_file("empty.safetensors", "", "too short");
  fails_naming_file("huge-length.safetensors", length_prefix(std::uint64_t{1} << 63) + "{}",
                    "header length");
  std::string broken_json = bytes;
  broken_json[8] = '#';  // the header's opening brace
  fails_naming_file("broken-json.safetensors", broken_json, "JSON");
  fails_naming_file("old-format.bin", std::string(io::old_checkpoint_magic) + "2\n{}",
                    "convert_checkpoint.py");
  const auto missing = dir / "missing.safetensors";
  CHECK_THROWS_WITH(io::load(missing, maml), Contains(missing.string()));
  CHECK(same(maml.parameters(), before));
}

TEST_CASE("a checkpoint whose header was tampered with fails naming the file",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "good.safetensors";
  Generator init(60);
  FloatPlatipus platipus(tiny(), MseLoss{}, {.threads = 1}, init);
  io::save(path, platipus);
  const auto [header, data] = split_checkpoint(slurp(path));
  REQUIRE(header.size() == 6);  // five parts and __metadata__
  const auto first = header["mu_theta"]["data_offsets"];
  REQUIRE(first == nlohmann::json{0, data.size() / 5});
  const auto before = platipus.part(FloatPlatipus::mu_theta).clone();
  auto fails_naming_file = [&](const std::string& name, const std::string& bytes,
                               const std::string& why) {
    const auto bad = dir / name;
    write_bytes(bad, bytes);
    INFO(name);
    CHECK_THROWS_AS(io::load(bad, platipus), error);
    CHECK_THROWS_WITH(io::load(bad, platipus), Contains(bad.string()) && Contains(why));
  };
  auto changed = [&](auto&& change) {
    auto h = header;
    change(h);
    return join_checkpoint(h, data);
  };
  fails_naming_file("offset-past-end.safetensors", changed([&](auto& h) {
                      h["log_gamma_q"]["data_offsets"] = {data.size(), data.size() + 4};
                    }),
                    "outside");
  // The reproducer of the issue: one offset moved by 1000 bytes loaded shifted values.
  fails_naming_file("offset-shifted.safetensors", changed([&](auto& h) {
                      h["log_v_q"]["data_offsets"][0] =
                          h["log_v_q"]["data_offsets"][0].template get<std::uint64_t>() + 1000;
                    }),
                    "bytes of data");
  fails_naming_file("all-offsets-zero.safetensors", changed([&](auto& h) {
                      for (auto& [name, spec] : h.items())
                        if (name != "__metadata__") spec["data_offsets"] = first;
                    }),
                    "overlap or leave a gap");
  fails_naming_file("fractional-offset.safetensors",
                    changed([&](auto& h) { h["mu_theta"]["data_offsets"][0] = 0.5; }),
                    "non-negative integers");
  fails_naming_file("unaligned-offset.safetensors", changed([&](auto& h) {
                      h["mu_theta"]["data_offsets"] = {1, 1};
                      h["mu_theta"]["shape"] = {0};
                    }),
                    "aligned");
  fails_naming_file("shape-too-large.safetensors",
                    changed([&](auto& h) { h["mu_theta"]["shape"] = {1000}; }), "needs");
  fails_naming_file("shape-not-a-list.safetensors",
                    changed([&](auto& h) { h["mu_theta"]["shape"] = "twenty-five"; }), "shape");
  fails_naming_file("negative-dimension.safetensors",
                    changed([&](auto& h) { h["mu_theta"]["shape"] = {-1}; }), "non-negative");
  // numel * 4 wrapped past 2^64 here, passed the bounds check and aborted in
  // std::vector's constructor; 2^32 x 2^32 overflowed Shape::numel.
  for (const auto& shape : {nlohmann::json{std::uint64_t{1} << 62},
                            nlohmann::json{std::uint64_t{1} << 31, std::uint64_t{1} << 31},
                            nlohmann::json{std::uint64_t{1} << 32, std::uint64_t{1} << 32}})
    fails_naming_file("shape-overflows.safetensors",
                      changed([&](auto& h) { h["mu_theta"]["shape"] = shape; }), "overflows");
  fails_naming_file("no-tensors.safetensors", changed([&](auto& h) {
                      for (const char* part : {"mu_theta", "log_sigma2_theta", "log_v_q",
                                               "log_gamma_p", "log_gamma_q"})
                        h.erase(part);
                    }),
                    "cover");
  fails_naming_file("dtype-a-number.safetensors",
                    changed([&](auto& h) { h["mu_theta"]["dtype"] = 32; }), "dtype");
  fails_naming_file("trailing-garbage.safetensors", slurp(path) + "garbage!", "cover");
  fails_naming_file("no-checksum.safetensors",
                    changed([&](auto& h) { h["__metadata__"].erase("platipus.checksum"); }),
                    "platipus.checksum");
  fails_naming_file("deep-metadata.safetensors", changed([&](auto& h) {
                      h["__metadata__"]["platipus.metadata"] =
                          std::string(200000, '[') + std::string(200000, ']');
                    }),
                    "nested deeper");
  std::string deep_header = header.dump();
  deep_header.insert(1, "\"deep\":" + std::string(200000, '[') + std::string(200000, ']') + ",");
  fails_naming_file("deep-header.safetensors",
                    length_prefix(deep_header.size()) + deep_header + data, "nested deeper");
  // JSON keeps the last of two equal keys; a checkpoint must not mean two things.
  std::string twice = header.dump();
  twice.insert(1, "\"mu_theta\":" + header["log_v_q"].dump() + ",");
  fails_naming_file("duplicate-tensor.safetensors", length_prefix(twice.size()) + twice + data,
                    "duplicate key");
  // The untouched header, rebuilt, loads: the helpers above change only what they say.
  const auto good = dir / "rebuilt.safetensors";
  write_bytes(good, join_checkpoint(header, data));
  CHECK_NOTHROW(io::load(good, platipus));
  CHECK(same(platipus.part(FloatPlatipus::mu_theta), before));
}

TEST_CASE("a checkpoint with flipped data bytes fails its checksum, naming the file",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "good.safetensors";
  Generator init(61);
  FloatMaml maml(tiny(), MseLoss{}, {.threads = 1}, init);
  io::save(path, maml);
  const std::string bytes = slurp(path);
  const auto [header, data] = split_checkpoint(bytes);
  const std::size_t data_start = bytes.size() - data.size();
  Generator gen(62);
  const auto positions = raw::uniform<double, cpu>(Shape{150}, gen).to_vector();
  const auto flips = raw::uniform<double, cpu>(Shape{150}, gen).to_vector();
  int refused = 0;
  for (std::size_t i = 0; i < positions.size(); ++i) {
    std::string corrupt = bytes;
    const auto at = data_start + static_cast<std::size_t>(positions[i] * double(data.size()));
    corrupt[at] = static_cast<char>(corrupt[at] ^ (1 + static_cast<int>(flips[i] * 255)));
    const auto bad = dir / "flipped.safetensors";
    write_bytes(bad, corrupt);
    try {
      io::load(bad, maml);
    } catch (const error& e) {
      refused += std::string(e.what()).find("checksum") != std::string::npos;
    }
  }
  CHECK(refused == 150);
}

TEST_CASE("a checkpoint holding NaN or Inf is refused unless the caller allows it",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  Generator init(63);
  FloatMaml maml(tiny(), MseLoss{}, {.threads = 1}, init);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto values = maml.parameters().to_vector();
    values[3] = bad;
    const auto tensor = Tensor<float>::from_host(maml.parameters().shape(), values);
    const auto path = dir / "non-finite.safetensors";
    io::save_checkpoint<float, cpu>(path, maml.model().layout(), {{"theta", &tensor}});
    INFO(bad);
    CHECK_THROWS_WITH(io::load(path, maml),
                      Contains(path.string()) && Contains("non-finite") && Contains("element 3"));
    const auto loaded = io::load_checkpoint<float>(path, {.allow_non_finite = true});
    CHECK_FALSE(std::isfinite(loaded.tensors.at("theta").to_vector()[3]));  // loaded as it is
  }
}

TEST_CASE("only regular files are read as checkpoints or replaced by writes",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  Generator init(64);
  FloatMaml maml(tiny(), MseLoss{}, {.threads = 1}, init);
  const auto fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Read: a FIFO blocked for ever and /dev/zero read until memory ran out.
  for (const std::filesystem::path& path : {fifo, std::filesystem::path("/dev/zero"), dir.path()}) {
    INFO(path);
    CHECK_THROWS_WITH(io::load(path, maml),
                      Contains(path.string()) && Contains("not a regular file"));
  }
  // Write: renaming over a FIFO, a device or a directory would replace it.
  for (const std::filesystem::path& path : {fifo, dir.path()}) {
    INFO(path);
    CHECK_THROWS_WITH(io::save(path, maml), Contains(path.string()) && Contains("not a regular"));
  }
  CHECK(std::filesystem::is_fifo(fifo));
  // A symlink is written through: the file it points to is replaced, the link stays.
  const auto target = dir / "target.safetensors", link = dir / "latest.safetensors";
  write_bytes(target, "old");
  std::filesystem::create_symlink("target.safetensors", link);
  io::save(link, maml);
  CHECK(std::filesystem::is_symlink(link));
  CHECK(slurp(target) == slurp(link));
  CHECK_NOTHROW(io::load(target, maml));
  const auto to_fifo = dir / "to-fifo";
  std::filesystem::create_symlink(fifo, to_fifo);
  CHECK_THROWS_WITH(io::save(to_fifo, maml), Contains(fifo.string()) && Contains("a FIFO"));
}

// safetensors is a format other tools read: a few lines of Python with json
// and struct (tests/read_checkpoint.py, no platipus code) must find the same
// names, shapes, values and metadata that were saved.
TEST_CASE("an independent Python reader reads a checkpoint's tensors and metadata back",
          "[components][io][checkpoint]") {
  if (std::string(PLATIPUS_PYTHON3).empty()) {
    WARN("python3 was not found when configuring: the independent reader is not run");
    return;
  }
  TemporaryDirectory dir;
  const auto path = dir / "platipus.safetensors";
  Generator init(65), data_gen(66);
  FloatPlatipus model(tiny(), MseLoss{}, {.inner_loop = {.steps = 1}, .threads = 1}, init);
  model.meta_train_step(data::SinusoidLineSampler<float>().sample(2, data_gen), data_gen);
  const nlohmann::json metadata{{"steps", 1}, {"note", "read by Python"}};
  io::save(path, model, metadata);
  const auto output = dir / "read.json";
  const std::string command =
      fmt::format("'{}' '{}/read_checkpoint.py' '{}' > '{}'", PLATIPUS_PYTHON3, PLATIPUS_TESTS_DIR,
                  path.string(), output.string());
  REQUIRE(std::system(command.c_str()) == 0);
  const auto read = nlohmann::json::parse(slurp(output));
  CHECK(nlohmann::json::parse(read["metadata"]["platipus.metadata"].get<std::string>()) ==
        metadata);
  CHECK(nlohmann::json::parse(read["metadata"]["platipus.layout"].get<std::string>()) ==
        io::describe_layout(model.model().layout()));
  CHECK(read["tensors"].size() == FloatPlatipus::part_count);
  for (int p = 0; p < FloatPlatipus::part_count; ++p) {
    const auto part = static_cast<FloatPlatipus::Part>(p);
    const std::string name(FloatPlatipus::part_names[static_cast<std::size_t>(p)]);
    INFO(name);
    const auto& tensor = read["tensors"].at(name);
    CHECK(tensor["shape"] == std::vector<std::int64_t>{model.part(part).numel()});
    const auto values = model.part(part).to_vector();
    REQUIRE(tensor["values"].size() == values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
      CHECK(tensor["values"][i].get<double>() == static_cast<double>(values[i]));
  }
  // A flipped data byte fails the reader's own checksum check too.
  std::string bytes = slurp(path);
  bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 0x10);
  write_bytes(path, bytes);
  CHECK(std::system(command.c_str()) != 0);
}

TEST_CASE("a float checkpoint loaded as double fails, naming both dtypes and the file",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "float.safetensors";
  Generator init(59);
  FloatMaml single(tiny(), MseLoss{}, {.threads = 1}, init);
  io::save(path, single);
  Maml<nn::Sequential, MseLoss, double> twice(tiny(), MseLoss{}, {.threads = 1}, init);
  CHECK_THROWS_AS(io::load(path, twice), error);
  CHECK_THROWS_WITH(io::load(path, twice),
                    Contains(path.string()) && Contains("float32") && Contains("float64"));
}

TEST_CASE("write_file_atomically replaces the content and leaves no temporary file",
          "[components][io][atomic]") {
  TemporaryDirectory dir;
  const auto path = dir / "nested" / "file.txt";
  write_file_atomically(path, "the first, longer content\n");
  CHECK(slurp(path) == "the first, longer content\n");
  write_file_atomically(path, "second");
  CHECK(slurp(path) == "second");
  CHECK(read_file(path) == "second");
  std::string binary("a\0b\nc", 5);
  write_file_atomically(path, binary);
  CHECK(read_file(path) == binary);
  CHECK(dir.entries() == std::vector<std::string>{"nested"});
  std::vector<std::string> nested;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "nested"))
    nested.push_back(e.path().filename().string());
  CHECK(nested == std::vector<std::string>{"file.txt"});
  CHECK_THROWS_WITH(read_file(dir / "absent.txt"), Contains((dir / "absent.txt").string()));
}

TEST_CASE(
    "write_file_atomically keeps a replaced file's mode and gives a new one 0666 less the "
    "umask",
    "[components][io][atomic]") {
  TemporaryDirectory dir;
  const auto mode_of = [](const std::filesystem::path& p) {
    struct ::stat info;
    REQUIRE(::stat(p.c_str(), &info) == 0);
    return info.st_mode & 07777;
  };
  const ::mode_t mask = ::umask(022);
  const auto fresh = dir / "fresh.txt";
  write_file_atomically(fresh, "new");
  CHECK(mode_of(fresh) == 0644);
  const auto kept = dir / "kept.txt";
  write_file_atomically(kept, "old");
  REQUIRE(::chmod(kept.c_str(), 0664) == 0);  // a mode the umask would cut down
  write_file_atomically(kept, "replaced");
  CHECK(mode_of(kept) == 0664);
  CHECK(slurp(kept) == "replaced");
  ::umask(mask);
}

TEST_CASE("MetricsLog writes each row as a JSON line and as a CSV row over the union of columns",
          "[components][io][metrics]") {
  TemporaryDirectory dir;
  io::MetricsLog log(dir.path(), "train");
  const std::vector<nlohmann::json> rows{
      {{"step", 1}, {"loss", 0.5}},
      {{"step", 2}, {"loss", 0.25}, {"accuracy", 0.875}},
      {{"step", 3}, {"phase", "test"}},
  };
  for (const auto& r : rows) log.record(r);
  CHECK(log.rows() == rows);
  CHECK(dir.entries() == std::vector<std::string>{"train.csv", "train.jsonl"});

  const auto jsonl = lines_of(slurp(dir / "train.jsonl"));
  REQUIRE(jsonl.size() == rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) CHECK(nlohmann::json::parse(jsonl[i]) == rows[i]);

  const auto csv = lines_of(slurp(dir / "train.csv"));
  REQUIRE(csv.size() == rows.size() + 1);
  auto header = cells_of(csv[0]);
  auto sorted = header;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::string>{"accuracy", "loss", "phase", "step"});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto cells = cells_of(csv[i + 1]);
    REQUIRE(cells.size() == header.size());
    for (std::size_t c = 0; c < header.size(); ++c) {
      INFO("row " << i << " column " << header[c]);
      if (!rows[i].contains(header[c]))
        CHECK(cells[c].empty());
      else if (rows[i][header[c]].is_string())
        CHECK(cells[c] == rows[i][header[c]].get<std::string>());
      else
        CHECK(std::stod(cells[c]) == rows[i][header[c]].get<double>());
    }
  }
  SECTION("a later row is appended to both files as it is recorded") {
    log.record({{"step", 4}, {"loss", 0.125}});
    CHECK(lines_of(slurp(dir / "train.jsonl")).size() == 4);
    CHECK(lines_of(slurp(dir / "train.csv")).size() == 5);
    CHECK(dir.entries() == std::vector<std::string>{"train.csv", "train.jsonl"});
  }
  CHECK_THROWS_WITH(log.record(nlohmann::json::array({1, 2})), Contains("MetricsLog::record"));
}

// A value holding a comma or a quote, written as it is, would split into
// extra cells and shift every column after it; RFC 4180 quotes such a cell.
TEST_CASE("MetricsLog quotes CSV cells that hold a comma or a quote", "[components][io][metrics]") {
  TemporaryDirectory dir;
  io::MetricsLog log(dir.path(), "notes");
  const nlohmann::json row{{"a_note", "omniglot, 5-way \"hard\""}, {"step", 7}};
  log.record(row);
  const auto csv = lines_of(slurp(dir / "notes.csv"));
  REQUIRE(csv.size() == 2);
  const auto header = cells_of(csv[0]), cells = cells_of(csv[1]);
  REQUIRE(header.size() == 2);
  CHECK(cells.size() == 2);
  for (std::size_t c = 0; c < std::min(header.size(), cells.size()); ++c) {
    INFO("column " << header[c]);
    if (header[c] == "step")
      CHECK(cells[c] == "7");
    else
      CHECK(cells[c] == row["a_note"].get<std::string>());
  }
}

TEST_CASE("MetricsLog puts each row on disk as it is recorded, so a run that stops keeps them",
          "[components][io][metrics]") {
  TemporaryDirectory dir;
  io::MetricsLog log(dir.path(), "train");
  for (int step = 1; step <= 3; ++step) {
    log.record({{"learner", "platipus"}, {"step", step}, {"query_loss", 1.0 / step}});
    // Read back with no flush and while the log is alive: what a crash leaves.
    const auto jsonl = lines_of(slurp(dir / "train.jsonl"));
    REQUIRE(jsonl.size() == static_cast<std::size_t>(step));
    CHECK(nlohmann::json::parse(jsonl.back())["step"] == step);
    CHECK(lines_of(slurp(dir / "train.csv")).size() == static_cast<std::size_t>(step + 1));
  }
  // A row with a new column rewrites the CSV under the wider header.
  log.record({{"learner", "platipus"}, {"step", 4}, {"kl", 0.5}});
  const auto csv = lines_of(slurp(dir / "train.csv"));
  REQUIRE(csv.size() == 5);
  CHECK(cells_of(csv[0]).size() == 4);
  CHECK(cells_of(csv[1]).size() == 4);
  SECTION("a new log over the same files starts them afresh") {
    io::MetricsLog again(dir.path(), "train");
    again.record({{"step", 1}});
    CHECK(lines_of(slurp(dir / "train.jsonl")).size() == 1);
  }
}

// ------------------------------------------------------- uncertainty scores

TEST_CASE("score_regression: one model is one Gaussian, by hand", "[components][uncertainty]") {
  const double sigma = 0.5;
  // Targets 0, 0.5, 1, 2 against predictions 0: z = 0, 1, 2, 4.
  const std::vector<double> prediction{0, 0, 0, 0}, target{0, 0.5, 1, 2};
  const auto s = score_regression(prediction, target, sigma);
  const double log_norm = std::log(sigma) + 0.5 * std::log(2 * M_PI);
  CHECK(s.mse == Approx((0 + 0.25 + 1 + 4) / 4.0));
  CHECK(s.nll == Approx(log_norm + (0 + 0.5 + 2 + 8) / 4.0));
  // The central 90% interval is +-1.645 sigma: z = 0 and 1 lie inside, 2 and 4 outside.
  CHECK(s.coverage == Approx(0.5));
  CHECK(score_regression(prediction, target, sigma, 0.99).coverage == Approx(0.75));
}

TEST_CASE("score_regression: S models form an equal-weight mixture, by hand",
          "[components][uncertainty]") {
  const double sigma = 1.0;
  // Two models predicting -3 and 3 for one point; targets 0 and 3.
  const std::vector<double> predictions{-3, -3, 3, 3}, target{0, 3};
  const auto s = score_regression(predictions, target, sigma);
  auto density = [&](double y, double mean) {
    return std::exp(-0.5 * (y - mean) * (y - mean)) / std::sqrt(2 * M_PI);
  };
  const double nll0 = -std::log(0.5 * density(0, -3) + 0.5 * density(0, 3)),
               nll1 = -std::log(0.5 * density(3, -3) + 0.5 * density(3, 3));
  CHECK(s.nll == Approx((nll0 + nll1) / 2));
  CHECK(s.mse == Approx((0 + 9) / 2.0));  // the mixture's mean is 0
  // The mixture's 5% and 95% quantiles are about -4.28 and 4.28: both targets lie inside.
  CHECK(s.coverage == Approx(1.0));
  // A target far from every component does not underflow to an infinite NLL.
  const auto far = score_regression(std::vector<double>{0, 0}, std::vector<double>{100}, 0.1);
  CHECK(std::isfinite(far.nll));
  CHECK(far.nll == Approx(std::log(0.1) + 0.5 * std::log(2 * M_PI) + 0.5 * 1e6));
  CHECK(far.coverage == 0.0);
}

TEST_CASE("score_binary_classification: accuracy, NLL and ECE by hand",
          "[components][uncertainty]") {
  const std::vector<double> p{0.9, 0.8, 0.3, 0.6}, labels{1, 0, 0, 1};
  const auto s = score_binary_classification(p, labels, 10);
  CHECK(s.accuracy == Approx(0.75));
  CHECK(s.nll == Approx(-(std::log(0.9) + std::log(0.2) + std::log(0.7) + std::log(0.6)) / 4));
  // Confidences 0.9, 0.8, 0.7, 0.6 fall in bins 9, 8, 7, 6, one point each:
  // |1 - 0.9| + |0 - 0.8| + |1 - 0.7| + |1 - 0.6|, over 4 points.
  CHECK(s.ece == Approx((0.1 + 0.8 + 0.3 + 0.4) / 4));
  // One bin: |accuracy - mean confidence|.
  CHECK(score_binary_classification(p, labels, 1).ece == Approx(0.0).margin(1e-12));
}

TEST_CASE("score_classification: K-way accuracy, NLL and ECE by hand",
          "[components][uncertainty]") {
  // Three points of three classes: correct (0.7), wrong (0.5 on class 0
  // for label 2), correct by the first of two equal maxima (0.4, 0.4).
  const std::vector<double> p{0.7, 0.2, 0.1, 0.5, 0.2, 0.3, 0.4, 0.4, 0.2}, labels{0, 2, 0};
  const auto s = score_classification(p, labels, 3, 10);
  CHECK(s.accuracy == Approx(2.0 / 3));
  CHECK(s.nll == Approx(-(std::log(0.7) + std::log(0.3) + std::log(0.4)) / 3));
  // Confidences 0.7, 0.5, 0.4 in bins 7, 5, 4: |1 - 0.7| + |0 - 0.5| + |1 - 0.4|, over 3.
  CHECK(s.ece == Approx((0.3 + 0.5 + 0.6) / 3));
  // Binary scores are the K = 2 case.
  const std::vector<double> q{0.9, 0.2}, binary_labels{1, 1};
  const auto b = score_binary_classification(q, binary_labels);
  const auto k = score_classification(std::vector<double>{0.1, 0.9, 0.8, 0.2}, binary_labels, 2);
  CHECK((b.accuracy == k.accuracy && b.nll == k.nll && b.ece == k.ece));
  CHECK_THROWS_WITH(score_classification(p, labels, 2), Contains("9 probabilities for 3 labels"));
  CHECK_THROWS_WITH(score_classification(p, std::vector<double>{0, 3, 1}, 3),
                    Contains("label 3 is not a class in [0, 3)"));
}

TEST_CASE("add_softmax: weighted softmax rows by hand, stable for large logits",
          "[components][uncertainty]") {
  // Rows (0, log 3) and (1000, 1000): softmax (1/4, 3/4) and (1/2, 1/2); exp
  // of 1000 overflows, so the row's largest logit must come off first.
  const std::vector<float> logits{0, static_cast<float>(std::log(3.0)), 1000, 1000};
  std::vector<double> into{1, 0, 0, 0};
  add_softmax(std::span<const float>(logits), 2, 0.5, std::span(into));
  CHECK(into[0] == Approx(1 + 0.125));
  CHECK(into[1] == Approx(0.375));
  CHECK(into[2] == Approx(0.25));
  CHECK(into[3] == Approx(0.25));
  std::vector<double> three(3);
  CHECK_THROWS_WITH(add_softmax(std::span<const float>(logits), 2, 1.0, std::span(three)),
                    Contains("4 logits of 2 classes do not match 3 outputs"));
}

TEST_CASE("add_binary: weighted rows (1 - p, p) of the sigmoid, both tails to the last digit",
          "[components][uncertainty]") {
  // Logits 0, log 3 and -40: p = 1/2, 3/4 and e^-40 / (1 + e^-40); 1 - p of
  // a logit of 40 is e^-40, which 1 - sigmoid(40) would round to 0.
  const std::vector<float> logits{0, static_cast<float>(std::log(3.0)), 40};
  std::vector<double> into(6);
  into[0] = 1;
  add_binary(std::span<const float>(logits), 0.5, std::span(into));
  CHECK(into[0] == Approx(1 + 0.25));
  CHECK(into[1] == Approx(0.25));
  CHECK(into[2] == Approx(0.125));
  CHECK(into[3] == Approx(0.375));
  CHECK(into[4] == Approx(0.5 * std::exp(-40.0)));
  CHECK(into[5] == Approx(0.5));
  std::vector<double> five(5);
  CHECK_THROWS_WITH(add_binary(std::span<const float>(logits), 1.0, std::span(five)),
                    Contains("3 logits do not match 5 outputs"));
}

TEST_CASE("score_regression's per-sample MSE averages each model's own error",
          "[components][uncertainty]") {
  // Models -3 and 3 at targets 0 and 3: errors 9, 36 (model 0) and 9, 0 (model 1).
  const std::vector<double> predictions{-3, -3, 3, 3}, target{0, 3};
  const auto s = score_regression(predictions, target, 1.0);
  CHECK(s.mse_per_sample == Approx((9 + 36 + 9 + 0) / 4.0));
  CHECK(s.mse == Approx((0 + 9) / 2.0));
}

TEST_CASE("the scores refuse input that makes no sense, naming it", "[components][uncertainty]") {
  const std::vector<double> three{1, 2, 3}, two{1, 2};
  CHECK_THROWS_WITH(score_regression(three, two, 1.0), Contains("score_regression"));
  CHECK_THROWS_WITH(score_regression(two, two, 0.0), Contains("noise_std"));
  CHECK_THROWS_WITH(score_regression(two, two, 1.0, 1.5), Contains("interval"));
  CHECK_THROWS_WITH(score_binary_classification(two, three), Contains("3 labels"));
  CHECK_THROWS_WITH(score_binary_classification(std::vector<double>{1.5}, std::vector<double>{1}),
                    Contains("probability 1.5"));
}

TEST_CASE(
    "score_ambiguity: assignment by likelihood, coverage, accuracy and the mixture's NLL, "
    "by hand",
    "[components][uncertainty]") {
  // Two candidates of two binary points each, labels (1, 1) and (0, 1); two
  // samples. Sample 0 favours class 1 everywhere (fits candidate 0), sample
  // 1 class 0 at each candidate's first point (fits candidate 1).
  const std::vector<double> labels{1, 1, 0, 1};
  const std::vector<double> p{
      0.2, 0.8, 0.3, 0.7, 0.2, 0.8, 0.3, 0.7,   // sample 0: candidate 0, candidate 1
      0.6, 0.4, 0.4, 0.6, 0.9, 0.1, 0.4, 0.6};  // sample 1
  const auto s = score_ambiguity(p, labels, 2, 2, 2);
  // Sample 0: log 0.8 + log 0.7 on candidate 0 > log 0.2 + log 0.7 on 1.
  // Sample 1: log 0.4 + log 0.6 on 0 < log 0.9 + log 0.6 on 1.
  CHECK(s.coverage == 2);
  // Sample 0 is right on both points of candidate 0, sample 1 on both of candidate 1.
  CHECK(s.accuracy == Approx(1.0));
  const double nll = -(std::log(0.6) + std::log(0.65) + std::log(0.55) + std::log(0.65)) / 4;
  CHECK(s.nll == Approx(nll));
  // Samples that agree cover one candidate, whatever they are.
  const std::vector<double> same{0.2, 0.8, 0.3, 0.7, 0.2, 0.8, 0.3, 0.7,
                                 0.2, 0.8, 0.3, 0.7, 0.2, 0.8, 0.3, 0.7};
  const auto agreeing = score_ambiguity(same, labels, 2, 2, 2);
  CHECK(agreeing.coverage == 1);
  CHECK(agreeing.accuracy == Approx(1.0));
  // Equal likelihoods (0.5 x 0.8 and 0.8 x 0.5) go to the first candidate,
  // where the model is right on both points; on the second it is wrong on
  // one (a tie of 0.5 and 0.5 predicts the first class, 0, for label 1).
  const std::vector<double> tie{0.5, 0.3, 0.2, 0.1, 0.8, 0.1,   // candidate 0, labels 0, 1
                                0.1, 0.8, 0.1, 0.5, 0.5, 0.0};  // candidate 1, labels 1, 1
  const auto tied = score_ambiguity(tie, std::vector<double>{0, 1, 1, 1}, 1, 2, 3);
  CHECK(tied.accuracy == 1.0);
  CHECK(tied.coverage == 1);
  CHECK_THROWS_WITH(score_ambiguity(p, labels, 3, 2, 2), Contains("16 probabilities for 3"));
  CHECK_THROWS_WITH(score_ambiguity(p, std::vector<double>{1, 2, 0, 1}, 2, 2, 2),
                    Contains("not a class in [0, 2)"));
}

namespace {

// A learner whose n-th sampled model of every task is parameters[n % 3]:
// samples that differ, in a known order.
struct CyclingLearner {
  nn::Sequential network = nn::mlp({.inputs = 2, .hidden = {4}, .outputs = 2});
  std::vector<Tensor<double>> parameters;
  mutable std::int64_t drawn = 0;

  const nn::Sequential& model() const { return network; }
  Tensor<double> sample(const Tensor<double>& support_x, const Tensor<double>&, std::int64_t n,
                        Generator&) const {
    const std::int64_t p = network.layout().size();
    std::vector<double> values;
    for (std::int64_t t = 0; t < support_x.dim(0); ++t)
      for (std::int64_t m = 0; m < n; ++m) {
        const auto v = parameters[static_cast<std::size_t>((drawn + m) % 3)].to_vector();
        values.insert(values.end(), v.begin(), v.end());
      }
    drawn += n;
    return Tensor<double>::from_host({support_x.dim(0), n, p}, values);
  }
  Tensor<double> predict(const Tensor<double>& params, const Tensor<double>& x) const {
    return platipus::predict(network, params, x);
  }
};

}  // namespace

TEST_CASE(
    "evaluate_ambiguity: models drawn in groups, the first `assignment` assigned and the "
    "first `likelihood` in the NLL",
    "[components][uncertainty]") {
  Generator gen(33);
  CyclingLearner learner;
  for (int k = 0; k < 3; ++k)
    learner.parameters.push_back(raw::normal<double>({learner.network.layout().size()}, gen));
  AmbiguousTasks<double> tasks;
  tasks.support_x = raw::normal<double>({1, 2, 2}, gen);
  tasks.support_y = Tensor<double>::from_host({1, 2, 1}, {0, 1});
  for (int c = 0; c < 3; ++c) {
    tasks.candidate_x.push_back(raw::normal<double>({1, 4, 2}, gen));
    tasks.candidate_y.push_back(Tensor<double>::from_host({1, 4, 1}, {0, 1, 1, 0}));
  }
  // Models 0..4 are parameters 0, 1, 2, 0, 1: assignment uses 0, 1; the NLL all five.
  const auto scores =
      evaluate_ambiguity(learner, tasks, {.assignment = 2, .likelihood = 5, .at_once = 2}, gen);
  CHECK(learner.drawn == 5);  // groups of 2, 2 and 1
  // By hand: each parameter vector's softmax probabilities on each candidate's points.
  std::vector<double> probabilities, labels;
  for (const int k : {0, 1, 2, 0, 1})
    for (std::size_t c = 0; c < 3; ++c) {
      const auto logits =
          platipus::predict(learner.network, learner.parameters[static_cast<std::size_t>(k)],
                            tasks.candidate_x[c])
              .to_vector();
      for (std::size_t n = 0; n < 4; ++n) {
        const double z = std::exp(logits[2 * n]) + std::exp(logits[2 * n + 1]);
        probabilities.insert(probabilities.end(),
                             {std::exp(logits[2 * n]) / z, std::exp(logits[2 * n + 1]) / z});
      }
    }
  for (int c = 0; c < 3; ++c) labels.insert(labels.end(), {0, 1, 1, 0});
  const std::span<const double> all(probabilities);
  const auto assigned = score_ambiguity(all.first(2 * 24), labels, 2, 3, 2);
  const auto marginal = score_ambiguity(all, labels, 5, 3, 2);
  REQUIRE(scores.size() == 1);
  CHECK(scores[0].coverage == assigned.coverage);
  CHECK(scores[0].accuracy == Approx(assigned.accuracy));
  CHECK(scores[0].nll == Approx(marginal.nll));
  // The NLL of five models differs from that of the first two.
  CHECK(marginal.nll != Approx(assigned.nll));
}

TEST_CASE(
    "evaluate_ambiguity: MAML's copies of one solution cover one candidate, scored as "
    "its own predictions are",
    "[components][uncertainty]") {
  Generator init(31), gen(32);
  const Maml<nn::Sequential, SoftmaxCrossEntropyLoss, double> maml(
      nn::mlp({.inputs = 2, .hidden = {6}, .outputs = 2}), SoftmaxCrossEntropyLoss{},
      {.inner_loop = {.steps = 2, .learning_rate = 0.5}, .threads = 1}, init);
  AmbiguousTasks<double> tasks;
  const auto points = [&](std::int64_t n) {
    return raw::normal<double>({3, n, 2}, gen);
  };
  const auto labels = [&](std::int64_t n) {
    std::vector<double> y;
    for (std::int64_t i = 0; i < 3 * n; ++i) y.push_back(static_cast<double>(gen.index(2)));
    return Tensor<double>::from_host({3, n, 1}, y);
  };
  tasks.support_x = points(4);
  tasks.support_y = labels(4);
  for (int c = 0; c < 3; ++c) {
    tasks.candidate_x.push_back(points(5));
    tasks.candidate_y.push_back(labels(5));
  }
  const auto scores = evaluate_ambiguity(maml, tasks, {.assignment = 4, .likelihood = 6}, gen);
  REQUIRE(scores.size() == 3);
  // By hand from MAML's one adapted model per task.
  const auto adapted = maml.adapt_to(tasks.support_x, tasks.support_y, gen);
  for (std::int64_t t = 0; t < 3; ++t) {
    double best = -INFINITY, accuracy = 0, nll = 0;
    for (int c = 0; c < 3; ++c) {
      const auto logits = maml.predict(adapted, tasks.candidate_x[c]).to_vector();
      const auto y = tasks.candidate_y[c].to_vector();
      double log_likelihood = 0, correct = 0;
      for (std::int64_t n = 0; n < 5; ++n) {
        const auto i = static_cast<std::size_t>(t * 5 + n);
        const double l0 = logits[2 * i], l1 = logits[2 * i + 1];
        const double p1 = 1 / (1 + std::exp(l0 - l1));
        const double p = y[i] == 1 ? p1 : 1 - p1;
        log_likelihood += std::log(p);
        nll -= std::log(p) / 15;
        correct += (l1 > l0) == (y[i] == 1);
      }
      if (log_likelihood > best) best = log_likelihood, accuracy = correct / 5;
    }
    const auto& s = scores[static_cast<std::size_t>(t)];
    CHECK(s.coverage == 1);
    CHECK(s.accuracy == Approx(accuracy));
    CHECK(s.nll == Approx(nll).epsilon(1e-9));
  }
  tasks.candidate_x.pop_back();
  CHECK_THROWS_WITH(evaluate_ambiguity(maml, tasks, {}, gen),
                    Contains("2 candidate inputs and 3 candidate label sets"));
}

// ------------------------------------------------------------ task noise

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
        model, MseLoss{}, {.inner_loop = {.steps = 3, .learning_rate = 0.05}, .threads = threads},
        init);
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
