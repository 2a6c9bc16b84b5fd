// The backward engine: grad's contract and errors, higher-order derivatives,
// Hessian-vector products and MAML meta-gradients of an MLP, and tape memory;
// and the named argument checks every error message goes through.
#include "catch.hpp"
#include "resident_memory.hpp"

#include <unistd.h>

#include <array>
#include <bit>
#include <cmath>
#include <fstream>
#include <limits>

#include "platipus/backend/counting.hpp"
#include "platipus/platipus.hpp"

using namespace platipus;
using Catch::Contains;
using V = Var<double>;

TEST_CASE("the named checks word every range error alike, and NaN fails each", "[errors]") {
  using Catch::Matchers::Equals;
  CHECK_NOTHROW(check_positive("op", "rate", 0.5));
  CHECK_THROWS_WITH(check_positive("op", "rate", 0), Equals("op: rate must be positive, got 0"));
  CHECK_THROWS_WITH(check_non_negative("op", "norm", -1.5, "0: no clip"),
                    Equals("op: norm must be non-negative (0: no clip), got -1.5"));
  CHECK_NOTHROW(check_non_negative("op", "norm", 0));
  CHECK_THROWS_WITH(check_at_least("op", "classes", 1, 2),
                    Equals("op: classes must be at least 2, got 1"));
  const double nan = std::nan("");
  CHECK_THROWS_AS(check_positive("op", "x", nan), error);
  CHECK_THROWS_AS(check_non_negative("op", "x", nan), error);
  CHECK_THROWS_AS(check_at_least("op", "x", nan, 0.0), error);
  CHECK_THROWS_WITH(check_finite("op", "x", nan), Equals("op: x must be finite, got nan"));
  CHECK_THROWS_AS(check_finite("op", "x", std::numeric_limits<double>::infinity()), error);
}

TEST_CASE("grad of a scalar gives the gradient, as constants without create_graph", "[grad]") {
  Tape<double> tape;
  const auto x = tape.variable(Tensor<double>::from_host({3}, {1.0, -2.0, 0.5}));
  const auto y = sum(x * x * x);
  const auto g = grad(y, x);
  CHECK(g.to_vector() == std::vector<double>{3.0, 12.0, 0.75});
  CHECK_FALSE(g.requires_grad());
  const auto g2 = grad(y, x, {.create_graph = true});
  CHECK(g2.requires_grad());
  // d/dx sum(3 x^2 * v) = 6 x v with v = (1, 1, 1)
  CHECK(grad(sum(g2), x).to_vector() == std::vector<double>{6.0, -12.0, 3.0});
}

TEST_CASE("grad accumulates over every path and over several outputs with seeds", "[grad]") {
  Tape<double> tape;
  const auto x = tape.variable(Tensor<double>::from_host({2}, {2.0, 3.0}));
  const auto a = x * 2.0, b = x * x;
  const std::array<V, 2> outputs{a, b};
  const std::array<V, 2> seeds{tape.constant(Tensor<double>::ones({2})),
                               tape.constant(Tensor<double>::from_host({2}, {1.0, -1.0}))};
  const std::array<V, 1> inputs{x};
  const auto g =
      grad(std::span<const V>(outputs), std::span<const V>(inputs), std::span<const V>(seeds));
  CHECK(g[0].to_vector() == std::vector<double>{2.0 + 4.0, 2.0 - 6.0});
}

TEST_CASE("grad with respect to an intermediate value stops there", "[grad]") {
  Tape<double> tape;
  const auto x = tape.variable(Tensor<double>::scalar(3.0));
  const auto h = x * x;
  const auto y = h * h;  // dy/dh = 2h = 18
  CHECK(grad(y, h).item() == Approx(18.0));
  CHECK(grad(y, x).item() == Approx(4 * 27.0));
}

TEST_CASE("grad from a first output of an op with several reaches its inputs", "[grad]") {
  // The node's later outputs lie after the output asked for: the sweep's
  // range holds them too (it wrote past its end where it stopped at the
  // output asked for; the sanitizer build saw it).
  Tape<double> tape;
  const auto x = tape.variable(Tensor<double>::from_host({4}, {1.0, 2.0, 3.0, 4.0}));
  const std::array<std::int64_t, 2> sizes{1, 3};
  const auto pieces = split(x, 0, std::span<const std::int64_t>(sizes));
  CHECK(grad(pieces[0], x).to_vector() == std::vector<double>{1.0, 0.0, 0.0, 0.0});
  // A loss's first output, its second the differences it keeps.
  const auto p = tape.variable(Tensor<double>::from_host({2}, {0.5, -1.0}));
  const auto t = tape.constant(Tensor<double>::from_host({2}, {1.5, 1.0}));
  CHECK(grad(squared_error(p, t, 0, true), p).to_vector() == std::vector<double>{-1.0, -2.0});
}

TEST_CASE("grad refuses what it cannot differentiate, naming shapes", "[grad][errors]") {
  Tape<double> tape;
  const auto x = tape.variable(Tensor<double>::ones({2, 3}));
  const auto unused = tape.variable(Tensor<double>::ones({4}));
  const auto data = tape.constant(Tensor<double>::ones({2, 3}));
  const auto y = x * data;
  CHECK_THROWS_WITH(grad(y, x), Contains("grad") && Contains("[2, 3]") && Contains("grad_outputs"));
  CHECK_THROWS_WITH(grad(sum(y), data), Contains("constant") && Contains("[2, 3]"));
  CHECK_THROWS_WITH(grad(sum(y), unused), Contains("does not influence") && Contains("[4]"));
  CHECK(grad(sum(y), unused, {.allow_unused = true}).to_vector() == std::vector<double>(4, 0.0));
  Tape<double> other;
  const auto stranger = other.variable(Tensor<double>::ones({1}));
  CHECK_THROWS_WITH(grad(sum(y), stranger), Contains("different tape"));
}

TEST_CASE("a sum's gradient is broadcast by the add that meets it, and copied only when alone",
          "[grad][backend]") {
  using counted = CountingBackend<cpu>;
  using C = Var<double, counted>;
  Tape<double, counted> tape;
  const auto x = tape.variable(Tensor<double, counted>::from_host({2, 3}, {1, -2, 3, 0.5, 4, -1}));
  const auto w = tape.constant(Tensor<double, counted>::from_host({1, 3}, {10, 20, 30}));
  const C rows = mul(sum_to(x, Shape{1, 3}), w), squares = mul(x, x);
  const auto seed = [&](const C& y) {
    return tape.constant(Tensor<double, counted>::ones(y.shape()));
  };
  const std::array<C, 1> inputs{x};
  const std::array<C, 2> both{rows, squares}, seeds{seed(rows), seed(squares)};
  counted::reset();
  const C g =
      grad(std::span<const C>(both), std::span<const C>(inputs), std::span<const C>(seeds))[0];
  CHECK(g.shape() == Shape{2, 3});
  CHECK(g.value().to<cpu>().to_vector() == std::vector<double>{12, 16, 36, 11, 28, 28});
  CHECK(counted::calls()["strided_copy"] == 0);  // w's rows added by a broadcast

  const std::array<C, 1> alone{rows}, alone_seed{seed(rows)};
  counted::reset();
  const C h = grad(std::span<const C>(alone), std::span<const C>(inputs),
                   std::span<const C>(alone_seed))[0];
  CHECK(h.shape() == Shape{2, 3});
  CHECK(h.value().to<cpu>().to_vector() == std::vector<double>{10, 20, 30, 10, 20, 30});
  CHECK(counted::calls()["strided_copy"] == 1);  // expanded once, for the caller
}

namespace {

using counted = CountingBackend<cpu>;
using C = Var<float, counted>;

// Two float variables [3, 4] on a counted tape.
std::array<C, 2> two_variables(Tape<float, counted>& tape, std::uint64_t seed) {
  Generator gen(seed);
  const auto x = tape.variable(raw::normal<float>({3, 4}, gen).to<counted>());
  return {x, tape.variable(raw::normal<float>({3, 4}, gen).to<counted>())};
}

// out's gradients with respect to both, and the backend calls of the sweep:
// seeded by a tensor of ones, or, where uniform_seed, by grad's own seed,
// which the sweep knows to be 1 (Backward::uniform_grad).
struct CountedSweep {
  std::array<std::vector<float>, 2> grads;
  KernelCalls calls;
};
CountedSweep counted_sweep(const C& out, const std::array<C, 2>& inputs, bool create_graph,
                           bool uniform_seed = false) {
  const C seed = out.tape().constant(Tensor<float, counted>::ones(out.shape()));
  counted::reset();
  const auto g = uniform_seed
                     ? grad(out, std::span<const C>(inputs), {.create_graph = create_graph})
                     : grad(std::span<const C>(&out, 1), std::span<const C>(inputs),
                            std::span<const C>(&seed, 1), {.create_graph = create_graph});
  const KernelCalls calls = counted::calls();
  return {{g[0].value().to<cpu>().to_vector(), g[1].value().to<cpu>().to_vector()}, calls};
}

}  // namespace

TEST_CASE("a value's gradients are added by one add_n in a sweep that records nothing",
          "[grad][backend]") {
  // x and y each reach the output three ways. A recording sweep adds each
  // gradient as it comes; one that records nothing holds up to three and adds
  // them with one call, in the same order (float: the same bits).
  Tape<float, counted> tape;
  const auto inputs = two_variables(tape, 80);
  const auto& [x, y] = inputs;
  const C out = sum(add(add(mul(x, y), mul(exp(x), x)), mul(y, y)));
  const CountedSweep held = counted_sweep(out, inputs, false);
  const CountedSweep recorded = counted_sweep(out, inputs, true);
  CHECK(held.calls["add_n"] == 2u);
  CHECK(held.calls["binary add"] == 0u);
  CHECK(recorded.calls["add_n"] == 0u);
  CHECK(recorded.calls["binary add"] == 4u);
  CHECK(held.grads == recorded.grads);
}

TEST_CASE("a foreach op's outputs' gradients are added by one foreach_add_n, the same bits",
          "[grad][backend]") {
  // p and q, one foreach_scale's pieces, reach the output three ways and two:
  // a sweep that records nothing holds their gradients until it reaches that
  // op and adds both sums with one call; y's four are added three and then
  // two by add_n (held until a fourth comes, then until read). A recording
  // sweep adds each as it comes: the same bits.
  Tape<float, counted> tape;
  const auto inputs = two_variables(tape, 85);
  const auto& [x, y] = inputs;
  const auto pieces = foreach_scale(std::span<const C>(inputs), 0.5f);
  const C &p = pieces[0], &q = pieces[1];
  const C out = sum(add(add(add(mul(p, y), mul(exp(p), p)), mul(q, q)), mul(y, y)));
  const CountedSweep held = counted_sweep(out, inputs, false);
  const CountedSweep recorded = counted_sweep(out, inputs, true);
  CHECK(held.calls["foreach_add_n"] == 1u);
  CHECK(held.calls["add_n"] == 2u);
  CHECK(held.calls["binary add"] == 0u);
  CHECK(recorded.calls["foreach_add_n"] + recorded.calls["add_n"] == 0u);
  CHECK(held.grads == recorded.grads);
  const auto xs = x.value().to<cpu>().to_vector(), ys = y.value().to<cpu>().to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float ps = 0.5f * xs[i];
    CHECK(held.grads[0][i] == Approx(0.5f * (ys[i] + std::exp(ps) * (1 + ps))));
    CHECK(held.grads[1][i] == Approx(ps + 2 * ys[i] + 0.5f * ys[i]));
  }
}

// The meta-parameters after a few steps of a learner on backend B, as bits.
template <class Learner, class Batch>
std::vector<std::vector<std::uint32_t>> trained_bits(Learner learner, const Batch& batch) {
  Generator gen(87);
  for (int step = 0; step < 3; ++step) learner.meta_train_step(batch, gen);
  std::vector<std::vector<std::uint32_t>> bits;
  for (const auto& [name, tensor] : learner.state()) {
    bits.emplace_back();
    for (const float v : tensor->to_vector())
      bits.back().push_back(std::bit_cast<std::uint32_t>(v));
  }
  return bits;
}

TEST_CASE(
    "meta-steps that add gradients three a call, a foreach op's pieces together, train the CPU's "
    "bits",
    "[grad][backend]") {
  // CountingBackend adds up to three gradients a call, as CUDA does, and a
  // foreach op's pieces wait for one foreach_add_n; the CPU adds two at a
  // time as they come. The order is the same: so are the bits, through
  // PLATIPUS's pieces and KL and the bias transformation's split, and
  // through conv4's batch norm. Both take the meta-batch as one chunk of
  // tasks, as CountingBackend does (how a batch is cut moves conv4's bits).
  SECTION("PLATIPUS on an MLP with a bias transformation") {
    const auto network =
        nn::mlp({.inputs = 1, .hidden = {12, 12}, .outputs = 1, .bias_transform = 4});
    const PlatipusSettings settings{.inner_loop = {.steps = 2, .learning_rate = 0.02},
                                    .driver = {.threads = 1, .task_chunks = 1}};
    Generator data(88);
    const auto batch = data::SinusoidLineSampler<float>({.support = 5, .query = 5}).sample(4, data);
    const TaskBatch<float, counted> counted_batch{
        batch.support_x.to<counted>(), batch.support_y.to<counted>(), batch.query_x.to<counted>(),
        batch.query_y.to<counted>()};
    Generator init(89), same_init(89);
    counted::reset();
    const auto on_counted = trained_bits(
        Platipus<nn::Sequential, MseLoss, float, counted>(network, MseLoss{}, settings, init),
        counted_batch);
    CHECK(counted::calls()["foreach_add_n"] > 0u);
    CHECK(on_counted == trained_bits(Platipus<nn::Sequential, MseLoss, float>(network, MseLoss{},
                                                                              settings, same_init),
                                     batch));
  }
  SECTION("second-order MAML on conv4 with batch norm") {
    const auto network = nn::conv4({.channels = 1, .size = 16, .filters = 4, .outputs = 3});
    const MamlSettings settings{.inner_loop = {.steps = 2, .learning_rate = 0.1},
                                .driver = {.threads = 1, .task_chunks = 1}};
    Generator data(90);
    const auto images = [&](std::int64_t n) {
      return raw::normal<float>({2, n, 1, 16, 16}, data);
    };
    const auto labels = [](std::int64_t n) {
      std::vector<float> v(static_cast<std::size_t>(2 * n));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 3);
      return Tensor<float>::from_host({2, n, 1}, v);
    };
    const TaskBatch<float> batch{images(3), labels(3), images(6), labels(6)};
    const TaskBatch<float, counted> counted_batch{
        batch.support_x.to<counted>(), batch.support_y.to<counted>(), batch.query_x.to<counted>(),
        batch.query_y.to<counted>()};
    using Loss = SoftmaxCrossEntropyLoss;
    Generator init(91), same_init(91);
    counted::reset();
    const auto on_counted = trained_bits(
        Maml<nn::Sequential, Loss, float, counted>(network, Loss{}, settings, init), counted_batch);
    CHECK(counted::calls()["foreach_add_n"] > 0u);
    CHECK(on_counted ==
          trained_bits(Maml<nn::Sequential, Loss, float>(network, Loss{}, settings, same_init),
                       batch));
  }
}

// sub's rule gives both inputs one gradient (here expanded from one value,
// a temporary of the rule); a, which already holds a gradient, adds it in
// first, and adding up may let go of it: b must still get it.
TEST_CASE("a gradient a rule gives two inputs reaches both when the first adds it up",
          "[grad][memory]") {
  for (const bool create_graph : {false, true}) {
    CAPTURE(create_graph);
    Generator gen(81);
    Tape<double> tape;
    const Var<double> a = tape.variable(raw::normal<double>({4}, gen)),
                      b = tape.variable(raw::normal<double>({4}, gen)),
                      c = tape.constant(raw::normal<double>({4}, gen)),
                      w = tape.constant(raw::normal<double>({}, gen));
    const Var<double> through_sub = mul(sum(sub(a, b)), w);  // swept after a * c
    const Var<double> through_mul = sum(mul(a, c));
    const std::array<Var<double>, 2> inputs{a, b};
    const auto g = grad(add(through_sub, through_mul), std::span<const Var<double>>(inputs),
                        {.create_graph = create_graph});
    const double weight = w.value().to_vector()[0];
    const auto cs = c.value().to_vector(), ga = g[0].value().to_vector(),
               gb = g[1].value().to_vector();
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(ga[i] == weight + cs[i]);
      CHECK(gb[i] == -weight);
    }
  }
}

TEST_CASE("a sweep that records nothing subtracts a negated gradient instead of negating it",
          "[grad][backend]") {
  // x's gradient is y from mul and -1 from sub: one add_n that subtracts.
  // exp(y)'s gradient arrives negated from neg and is read alone by exp's
  // rule: negated once, as a recording sweep negates it.
  Tape<float, counted> tape;
  const auto inputs = two_variables(tape, 81);
  const auto& [x, y] = inputs;
  const C out = sum(add(sub(mul(x, y), x), neg(exp(y))));
  const CountedSweep held = counted_sweep(out, inputs, false);
  const CountedSweep recorded = counted_sweep(out, inputs, true);
  CHECK(held.calls["unary neg"] == 1u);
  CHECK(held.calls["add_n"] == 2u);
  CHECK(recorded.calls["unary neg"] == 2u);
  CHECK(held.calls["binary sub"] + recorded.calls["binary sub"] == 0u);
  CHECK(held.grads == recorded.grads);
  const auto xs = x.value().to<cpu>().to_vector(), ys = y.value().to<cpu>().to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(held.grads[0][i] == ys[i] - 1.f);
    CHECK(held.grads[1][i] == Approx(xs[i] - std::exp(ys[i])));
  }

  // On the CPU (gradients added two at a time), u's broadcast gradients from
  // the two negs (recorded first and last, so reaching u last and first) are
  // subtracted around the one from mul: the recording sweep's bits.
  Tape<float> cpu_tape;
  const auto u = cpu_tape.variable(x.value().to<cpu>()), w = cpu_tape.variable(y.value().to<cpu>());
  const Var<float> columns = mul(sum_to(neg(u), {1, 4}), sum_to(w, {1, 4}));
  const Var<float> products = mul(u, w);
  const Var<float> rows = mul(sum_to(neg(u), {3, 1}), sum_to(w, {3, 1}));
  const Var<float> z = add(add(sum(columns), sum(products)), sum(rows));
  const std::array<Var<float>, 2> cpu_inputs{u, w};
  const auto cpu_sweep = [&](bool create_graph) {
    const auto h = grad(z, std::span<const Var<float>>(cpu_inputs), {.create_graph = create_graph});
    return std::array{h[0].to_vector(), h[1].to_vector()};
  };
  CHECK(cpu_sweep(false) == cpu_sweep(true));
}

TEST_CASE("rules pass a negated gradient's sign on where no kernel must negate it",
          "[grad][backend]") {
  // sub gives reshape(h) and reshape(q) negated gradients; reshape, mul and
  // div pass the sign on (div's divisor flips it), so x's three gradients
  // and y's two meet in add_n with no neg, where a recording sweep records
  // three: the same bits.
  Tape<float, counted> tape;
  const auto inputs = two_variables(tape, 82);
  const auto& [x, y] = inputs;
  const C h = mul(x, y), q = div(x, y);
  const C out = sum(sub(sub(reshape(x, {12}), reshape(h, {12})), reshape(q, {12})));
  const CountedSweep held = counted_sweep(out, inputs, false);
  const CountedSweep recorded = counted_sweep(out, inputs, true);
  CHECK(held.calls["unary neg"] == 0u);
  CHECK(held.calls["add_n"] == 2u);
  CHECK(recorded.calls["unary neg"] == 3u);
  CHECK(held.grads == recorded.grads);
  const auto xs = x.value().to<cpu>().to_vector(), ys = y.value().to<cpu>().to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(held.grads[0][i] == Approx(1.f - ys[i] - 1.f / ys[i]));
    CHECK(held.grads[1][i] == Approx(-xs[i] + xs[i] / (ys[i] * ys[i])));
  }
}

TEST_CASE("sum_to's rule passes a negated gradient's sign on, the gradient unexpanded",
          "[grad][backend]") {
  // y's column sums s = sum_to(y, [1, 4]) get sub's negated gradient -3 r
  // (r = x[0], the [1, 4] term added to each of 3 rows), which sum_to's rule
  // hands to y unexpanded and still negated: it meets y's own 2 x y in
  // add_n, repeated over the rows and subtracted, with no neg, where a
  // recording sweep records the neg: the same bits.
  Tape<float, counted> tape;
  const auto inputs = two_variables(tape, 84);
  const auto& [x, y] = inputs;
  const C first_row = slice(x, 0, 0, 1);
  const C out = sum(add(mul(sub(first_row, sum_to(y, {1, 4})), first_row), mul(x, square(y))));
  const CountedSweep held = counted_sweep(out, inputs, false);
  const CountedSweep recorded = counted_sweep(out, inputs, true);
  CHECK(held.calls["unary neg"] == 0u);
  CHECK(recorded.calls["unary neg"] >= 1u);
  for (std::size_t k = 0; k < 2; ++k)  // bit for bit, signed zeros included
    for (std::size_t i = 0; i < held.grads[k].size(); ++i)
      CHECK(std::bit_cast<std::uint32_t>(held.grads[k][i]) ==
            std::bit_cast<std::uint32_t>(recorded.grads[k][i]));
  const auto xs = x.value().to<cpu>().to_vector(), ys = y.value().to<cpu>().to_vector();
  for (std::size_t i = 0; i < ys.size(); ++i)
    CHECK(held.grads[1][i] == Approx(2.f * xs[i] * ys[i] - 3.f * xs[i % 4]));
}

TEST_CASE("a gradient known to be one value in every element takes no kernel until read",
          "[grad][backend]") {
  // A mean squared error: the seed, the mean's scale, its sum's broadcast and
  // the reshape stay one host value, and square's rule takes one scale. The
  // bits of a tensor seed's sweep, in a sweep that records and in one that
  // does not.
  Tape<float, counted> tape;
  const auto inputs = two_variables(tape, 83);
  const auto& [x, y] = inputs;
  const C loss = sum(mean(reshape(square(sub(x, y)), {3, 2, 2}), {1, 2}));
  for (const bool create_graph : {false, true}) {
    const CountedSweep uniform = counted_sweep(loss, inputs, create_graph, true);
    const CountedSweep seeded = counted_sweep(loss, inputs, create_graph);
    CHECK(uniform.grads == seeded.grads);
    CHECK(uniform.calls.total() == 2u);  // square's scale, and sub's sign for y
    CHECK(uniform.calls["unary scale"] == 1u);
    // A tensor seed's sweep scales the mean's gradient and multiplies it into
    // square's (and copies it over the points where it records).
    CHECK(seeded.calls.total() >= uniform.calls.total() + 2);
  }
  // Through sub, neg, scale, shift and add x's gradient from the second
  // term stays 3; uniform gradients that meet tensors, or that a rule reads,
  // become tensors of the same values: add's broadcast input sums it, mul
  // scales by it, exp reads it.
  const C b = tape.variable(Tensor<float, counted>::from_host({1, 4}, {0.5f, -1, 2, 0.25f}));
  const std::array<C, 2> xb{x, b};
  const C mixed = sum(sub(add(mul(x, y), exp(x)), neg(scale(shift(add(x, b), 0.5f), 3.f))));
  for (const bool create_graph : {false, true}) {
    const CountedSweep uniform = counted_sweep(mixed, xb, create_graph, true);
    const CountedSweep seeded = counted_sweep(mixed, xb, create_graph);
    CHECK(uniform.grads == seeded.grads);
    // exp's rule reads it, b's gradient sums it, and x's 3 meets x's others.
    CHECK(uniform.calls["fill"] == 3u);
    CHECK(uniform.calls["binary mul"] == 1u);  // exp's rule; mul's takes a scale
  }
  // A mean cross-entropy's gradient, u (p - y): one call per logits, no
  // fill of the mean's gradient and no product with it.
  std::vector<float> rows(12, 0.f);
  for (std::size_t r = 0; r < 3; ++r) rows[r * 4 + (r * 3) % 4] = 1.f;  // one-hot
  const auto one_hot = Tensor<float, counted>::from_host({3, 4}, rows);
  const C cross_entropy = add(mean(cross_entropy_with_logits(x, one_hot.clone())),
                              mean(cross_entropy_with_logits(y, one_hot.clone())));
  for (const bool create_graph : {false, true}) {
    const CountedSweep uniform = counted_sweep(cross_entropy, inputs, create_graph, true);
    const CountedSweep seeded = counted_sweep(cross_entropy, inputs, create_graph);
    CHECK(uniform.grads == seeded.grads);
    CHECK(uniform.calls.total() == 2u);
    CHECK(uniform.calls["cross_entropy_backward"] == 2u);
  }
}

TEST_CASE("gradients through uniform seeds match finite differences, first and second order",
          "[grad]") {
  // grad's own seed (uniform) through sub, add, neg, scale, shift and the
  // sums' and the mean's sum_to and reshape, into square's, mul's and
  // cross_entropy_with_logits's rules, and, for x[1], meeting its tensor
  // gradients; the recorded first derivative is differentiated again by
  // gradcheck (double).
  const auto targets = Tensor<double>::from_host({2, 3}, {0, 1, 0, 0.25, 0.25, 0.5});
  const auto loss = [&](std::span<const V> x) {
    const V d = sub(mul(x[0], x[1]), reshape(sum_to(neg(x[1]), {1, 3}), {3}));
    const V fitted = add(scale(mean(square(shift(d, 0.25))), 1.5), sum(mul(x[0], x[0])));
    const V classified =
        add(fitted, scale(mean(cross_entropy_with_logits(x[0], targets.clone())), 0.5));
    return sub(classified, neg(scale(sum(shift(x[1], -0.5)), 0.75)));
  };
  Generator gen(84);
  std::vector<Tensor<double>> at;
  for (int i = 0; i < 2; ++i) at.push_back(raw::normal<double>({2, 3}, gen));
  const DoubleFunction<cpu> first = [&](std::span<const V> x) {
    const auto g = grad(loss(x), x, {.create_graph = true});
    return concat({reshape(g[0], {-1}), reshape(g[1], {-1})}, 0);
  };
  // The loss with element e of input i moved by `by`.
  const auto loss_at = [&](std::size_t i, std::size_t e, double by) {
    Tape<double> tape;
    std::vector<V> x;
    for (std::size_t j = 0; j < at.size(); ++j) {
      auto values = at[j].to_vector();
      if (j == i) values[e] += by;
      x.push_back(tape.constant(Tensor<double>::from_host(at[j].shape(), values)));
    }
    return loss(x).to_vector()[0];
  };
  Tape<double> tape;
  std::vector<V> x;
  for (const auto& t : at) x.push_back(tape.variable(t.clone()));
  const auto values = first(x).to_vector();
  const double h = 1e-6;
  std::size_t k = 0;
  for (std::size_t i = 0; i < at.size(); ++i)
    for (std::size_t e = 0; e < static_cast<std::size_t>(at[i].numel()); ++e, ++k)
      CHECK(values[k] ==
            Approx((loss_at(i, e, h) - loss_at(i, e, -h)) / (2 * h)).epsilon(1e-6).margin(1e-8));
  const auto second = gradcheck(first, at);
  INFO(second.message);
  CHECK(second.ok);
}

TEST_CASE("sum_outputs seeds 1 in every element of an output, without the sum's kernel",
          "[grad][backend][errors]") {
  // Each row's mean squared error [3], the inner loop's loss per task: the
  // gradient of their sum, with the bits and the calls of a sweep from the
  // sum, which costs one reduction more before it; first and second order.
  Tape<float, counted> tape;
  const auto inputs = two_variables(tape, 86);
  const auto& [x, y] = inputs;
  const C rows = squared_error(x, y, 1, true);
  REQUIRE(rows.shape() == Shape{3});
  counted::reset();
  const C total = sum(rows);
  CHECK(counted::calls().total() == 1u);
  for (const bool create_graph : {false, true}) {
    const CountedSweep summed = counted_sweep(total, inputs, create_graph, true);
    counted::reset();
    const auto g = grad(std::span<const C>(&rows, 1), std::span<const C>(inputs), {},
                        {.create_graph = create_graph, .sum_outputs = true});
    CHECK(counted::calls().by_name == summed.calls.by_name);
    CHECK(g[0].value().to<cpu>().to_vector() == summed.grads[0]);
    CHECK(g[1].value().to<cpu>().to_vector() == summed.grads[1]);
    CHECK(g[0].requires_grad() == create_graph);
  }
  // Beside a scalar output, each output seeded with 1 in every element: the
  // gradient of their sums' sum.
  const C scalar = sum(mul(x, y));
  const std::array<C, 2> both{rows, scalar};
  const auto each =
      grad(std::span<const C>(both), std::span<const C>(inputs), {}, {.sum_outputs = true});
  const auto added = grad(add(total, scalar), std::span<const C>(inputs));
  for (std::size_t k = 0; k < 2; ++k)
    CHECK(each[k].value().to<cpu>().to_vector() == added[k].value().to<cpu>().to_vector());
  // Differentiated again, against central differences (double).
  Generator gen(87);
  std::vector<Tensor<double>> at;
  for (int i = 0; i < 2; ++i) at.push_back(raw::normal<double>({3, 4}, gen));
  const DoubleFunction<cpu> first = [](std::span<const V> v) {
    const V per_row = squared_error(mul(v[0], v[0]), v[1], 1, true);
    const auto g =
        grad(std::span<const V>(&per_row, 1), v, {}, {.create_graph = true, .sum_outputs = true});
    return concat({reshape(g[0], {-1}), reshape(g[1], {-1})}, 0);
  };
  const auto second = gradcheck(first, at);
  INFO(second.message);
  CHECK(second.ok);
  // Without it a non-scalar output still needs a seed; with a seed it is refused.
  CHECK_THROWS_WITH(grad(rows, x), Contains("[3]") && Contains("sum_outputs"));
  const C seed = tape.constant(Tensor<float, counted>::ones({3}));
  CHECK_THROWS_WITH(grad(std::span<const C>(&rows, 1), std::span<const C>(inputs),
                         std::span<const C>(&seed, 1), {.sum_outputs = true}),
                    Contains("grad_outputs given with sum_outputs"));
}

TEST_CASE("under a no-grad guard ops record nothing", "[grad]") {
  Tape<double> tape;
  const auto x = tape.variable(Tensor<double>::ones({2}));
  const std::size_t nodes = tape.nodes();
  V y;
  {
    NoGradGuard guard;
    y = sum(exp(x));
  }
  CHECK(tape.nodes() == nodes);
  CHECK_FALSE(y.requires_grad());
  CHECK(y.item() == Approx(2 * std::exp(1.0)));
  CHECK(sum(exp(x)).requires_grad());
}

TEST_CASE("third derivative of sum(tanh(x)^2) matches the closed form and finite differences",
          "[grad][higher-order]") {
  // f = tanh^2, f' = 2 t (1 - t^2), f'' = 2 (1 - t^2)(1 - 3 t^2), f''' = -8 t (1 - t^2)(2 - 3 t^2)
  const std::vector<double> points{-1.3, -0.4, 0.2, 0.9};
  auto derivatives = [](const std::vector<double>& at) {
    Tape<double> tape;
    const auto x = tape.variable(Tensor<double>::from_host({4}, at));
    const auto y = sum(square(tanh(x)));
    const auto d1 = grad(y, x, {.create_graph = true});
    const auto d2 = grad(sum(d1), x, {.create_graph = true});
    const auto d3 = grad(sum(d2), x);
    return std::array{d2.to_vector(), d3.to_vector()};
  };
  const auto [second, third] = derivatives(points);
  const double eps = 1e-5;
  std::vector<double> plus = points, minus = points;
  for (auto& v : plus) v += eps;
  for (auto& v : minus) v -= eps;
  const auto second_plus = derivatives(plus)[0], second_minus = derivatives(minus)[0];
  for (std::size_t i = 0; i < points.size(); ++i) {
    const double t = std::tanh(points[i]);
    CHECK(third[i] == Approx(-8 * t * (1 - t * t) * (2 - 3 * t * t)).epsilon(1e-10));
    CHECK(third[i] == Approx((second_plus[i] - second_minus[i]) / (2 * eps)).epsilon(1e-7));
  }
}

namespace {

// A 1-40-40-1 ReLU MLP over a flat parameter vector, written with raw ops
// so that this test checks the engine alone.
constexpr std::array<std::int64_t, 6> mlp_sizes{40, 40, 1600, 40, 40, 1};
constexpr std::int64_t mlp_params = 1761;

V mlp(const V& params, const V& x) {
  const auto p = split(params, 0, mlp_sizes);
  const auto h1 = relu(matmul(x, reshape(p[0], {1, 40})) + p[1]);
  const auto h2 = relu(matmul(h1, reshape(p[2], {40, 40})) + p[3]);
  return matmul(h2, reshape(p[4], {40, 1})) + p[5];
}

Tensor<double> init_params(std::uint64_t seed) {
  Generator gen(seed);
  return raw::map(UnaryOp::scale, raw::normal<double>({mlp_params}, gen), 0.3);
}

struct Sine {
  Tensor<double> x, y;
};

Sine sine_points(std::uint64_t seed, int n = 10) {
  Generator gen(seed);
  auto x = raw::map(UnaryOp::add_scalar,
                    raw::map(UnaryOp::scale, raw::uniform<double>({n, 1}, gen), 10.0), -5.0);
  auto xv = x.to_vector();
  std::vector<double> y(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) y[i] = 2.0 * std::sin(xv[i] + 0.5);
  return {std::move(x), Tensor<double>::from_host({n, 1}, y)};
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// The MAML objective: 5 SGD steps on the support set, loss on the query set.
V maml_objective(const V& theta, const Sine& support, const Sine& query, bool second_order) {
  Tape<double>& tape = theta.tape();
  const auto xs = tape.constant(support.x), ys = tape.constant(support.y);
  V phi = theta;
  for (int step = 0; step < 5; ++step) {
    const auto g = grad(mse_loss(mlp(phi, xs), ys), phi, {.create_graph = second_order});
    phi = phi - 0.01 * g;
  }
  return mse_loss(mlp(phi, tape.constant(query.x)), tape.constant(query.y));
}

}  // namespace

TEST_CASE("Hessian-vector product of a ReLU MLP equals a finite difference of gradients",
          "[grad][higher-order]") {
  const auto theta0 = init_params(1);
  const Sine data = sine_points(2);
  Generator gen(3);
  const auto v = raw::normal<double>({mlp_params}, gen);
  auto gradient = [&](const Tensor<double>& at) {
    Tape<double> tape;
    const auto theta = tape.variable(at);
    return grad(mse_loss(mlp(theta, tape.constant(data.x)), tape.constant(data.y)), theta)
        .to_vector();
  };
  Tape<double> tape;
  const auto theta = tape.variable(theta0);
  const auto g = grad(mse_loss(mlp(theta, tape.constant(data.x)), tape.constant(data.y)), theta,
                      {.create_graph = true});
  const auto hv = grad(sum(g * tape.constant(v)), theta).to_vector();

  const double eps = 1e-6;
  const auto plus =
      gradient(raw::map(BinaryOp::add, theta0, raw::map(UnaryOp::scale, v, eps), "add"));
  const auto minus =
      gradient(raw::map(BinaryOp::sub, theta0, raw::map(UnaryOp::scale, v, eps), "sub"));
  std::vector<double> diff(hv.size()), fd(hv.size());
  for (std::size_t i = 0; i < hv.size(); ++i) {
    fd[i] = (plus[i] - minus[i]) / (2 * eps);
    diff[i] = hv[i] - fd[i];
  }
  CHECK(norm(hv) > 1e-3);
  CHECK(norm(diff) / norm(fd) < 1e-6);
}

TEST_CASE("second-order MAML meta-gradient matches finite differences and differs from first-order",
          "[grad][maml]") {
  const auto theta0 = init_params(4);
  const Sine support = sine_points(5), query = sine_points(6);

  Tape<double> tape;
  const auto theta = tape.variable(theta0);
  const auto meta_grad = grad(maml_objective(theta, support, query, true), theta).to_vector();
  const auto first_order = grad(maml_objective(theta, support, query, false), theta).to_vector();

  auto objective = [&](std::vector<double> at) {
    Tape<double> t;
    return maml_objective(t.variable(Tensor<double>::from_host({mlp_params}, at)), support, query,
                          true)
        .item();
  };
  auto values = theta0.to_vector();
  std::vector<double> fd(values.size()), diff(values.size()), fo_diff(values.size());
  const double eps = 1e-6;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double original = values[i];
    values[i] = original + eps;
    const double plus = objective(values);
    values[i] = original - eps;
    const double minus = objective(values);
    values[i] = original;
    fd[i] = (plus - minus) / (2 * eps);
    diff[i] = meta_grad[i] - fd[i];
    fo_diff[i] = first_order[i] - fd[i];
  }
  INFO("|meta - fd| / |fd| = " << norm(diff) / norm(fd)
                               << ", |first-order - fd| / |fd| = " << norm(fo_diff) / norm(fd));
  CHECK(norm(diff) / norm(fd) < 1e-6);
  CHECK(norm(fo_diff) / norm(fd) > 1e-3);
}

namespace {

void meta_step_cycle(const Tensor<double>& theta0, const Sine& data) {
  Tape<double> tape;
  const auto theta = tape.variable(theta0);
  const auto xs = tape.constant(data.x), ys = tape.constant(data.y);
  const auto g = grad(mse_loss(mlp(theta, xs), ys), theta, {.create_graph = true});
  const auto phi = theta - 0.01 * g;
  grad(mse_loss(mlp(phi, xs), ys), theta);
}

}  // namespace

TEST_CASE("10,000 record / grad / tape-end cycles keep resident memory flat", "[grad][memory]") {
  const auto theta0 = init_params(7);
  const Sine data = sine_points(8);
  for (int i = 0; i < 1000; ++i) meta_step_cycle(theta0, data);
  const long before = resident_kib();
  for (int i = 0; i < 10000; ++i) meta_step_cycle(theta0, data);
  const long after = resident_kib();
  INFO("resident before " << before << " KiB, after " << after << " KiB");
  CHECK(after - before < 1024);
}

// Values that no backward rule reads are released once no one can read them
// (Tape::release): a forward pass under NoGradGuard keeps only its input and
// output, and a gradient sweep without create_graph only the gradients it
// returns (and the few per-channel tensors that views keep).
TEST_CASE("the tape keeps what a gradient can read, and no more", "[grad][memory]") {
  const auto network = nn::conv4({.channels = 2, .size = 16, .filters = 8, .outputs = 3});
  Generator gen(5);
  const auto params = network.initialize<float>(gen);
  const auto images = raw::normal<float>({2, 6, 2, 16, 16}, gen);
  Tape<float> tape;
  const auto theta = tape.variable(params.clone());
  const auto x = tape.constant(images.clone());
  const std::size_t inputs = tape.live_bytes();
  REQUIRE(inputs == params.bytes() + images.bytes());
  {
    NoGradGuard no_grad;
    const auto y = network.forward(theta, x);
    // The last block's output [2, 6, 8, 1, 1] stays too: flatten's result views it.
    const std::size_t flattened = 2 * 6 * 8 * sizeof(float);
    CHECK(tape.live_bytes() == inputs + flattened + y.value().bytes());
    // Its first block alone makes five tensors the size of its 8-channel output.
    CHECK(tape.peak_bytes() < inputs + 5 * 4 * images.bytes());
  }
  const std::size_t before = tape.live_bytes();
  const auto y = network.forward(theta, x);
  const std::size_t recorded = tape.live_bytes() - before;
  const auto g = grad(sum(square(y)), theta);
  const std::size_t left = tape.live_bytes() - before - recorded;
  CHECK(left >= g.value().bytes());
  CHECK(left < g.value().bytes() + 4096);  // a few [..., C] tensors that reshapes view
}

TEST_CASE(
    "Tape::take moves a value's buffer out where the tape owns it and no one reads it, else copies "
    "it",
    "[grad][memory]") {
  Generator gen(7);
  const auto w0 = raw::normal<double>({3, 4}, gen);
  Tape<double> tape;
  const auto w = tape.variable(w0);
  const auto g = grad(sum(square(w)), w);
  const double* buffer = g.value().data();
  const auto values = g.to_vector();
  const std::size_t before = tape.live_bytes();
  const Tensor<double> taken = tape.take(g);
  CHECK(taken.data() == buffer);
  CHECK(taken.to_vector() == values);
  CHECK(tape.live_bytes() == before - taken.bytes());
  CHECK(g.shape() == Shape{3, 4});
  CHECK_THROWS_WITH(tape.take(g),
                    Contains("Tape::take") && Contains("taken") && Contains("[3, 4]"));
  // A view, and a value that a reshape views, are copied.
  const auto data = tape.constant_view(w0);
  CHECK(tape.take(data).data() != w0.data());
  const auto y = square(w);
  const auto flat = reshape(y, {12});
  const Tensor<double> y_copy = tape.take(y);
  CHECK(y_copy.data() != y.value().data());
  CHECK(y_copy.to_vector() == flat.to_vector());
  // So is a value that a recorded rule reads (mul saves its inputs).
  const auto z = tape.variable(w0);
  const auto zz = mul(z, z);
  CHECK(tape.take(z).data() != z.value().data());
  Tape<double> other;
  CHECK_THROWS_WITH(other.take(w), Contains("another tape"));
  // One chunk whose two parts get the same gradient: one taken, one copied.
  const std::array<Shape, 2> shapes{Shape{3, 4}, Shape{3, 4}};
  ChunkResults<double, cpu> results(1, shapes, 1);
  const std::array<V, 2> same{zz, zz};
  results.store(0, tape, same, Tensor<double>::zeros({1}));
  const auto total = results.sum();
  CHECK(total.gradients[0].to_vector() == total.gradients[1].to_vector());
  CHECK(total.gradients[0].data() != total.gradients[1].data());
}

TEST_CASE(
    "a view on a tape reads its tensor where it lies, owning nothing, with a copy's "
    "gradients",
    "[grad][memory]") {
  Generator gen(6);
  const auto data = raw::normal<double>({3, 4}, gen), w0 = raw::normal<double>({3, 4}, gen);
  std::vector<double> gradients[2];
  for (const bool view : {false, true}) {
    Tape<double> tape;
    const std::size_t before = tape.live_bytes();
    const V w = view ? tape.variable_view(w0) : tape.variable(w0);
    const V x = view ? tape.constant_view(data) : tape.constant(data);
    CHECK((w.value().data() == w0.data()) == view);
    CHECK((x.value().data() == data.data()) == view);
    CHECK((tape.live_bytes() == before) == view);
    gradients[view] = grad(sum(square(mul(w, x))), w).value().to_vector();
    CHECK_FALSE(x.requires_grad());
  }
  CHECK(gradients[0] == gradients[1]);
}
