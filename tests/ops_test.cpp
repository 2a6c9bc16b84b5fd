// Every differentiable op and loss against central finite differences, first
// and second order, in double precision, with inputs kept away from kinks.
#include "catch.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "derivative_checks.hpp"
#include "platipus/backend/counting.hpp"
#include "platipus/platipus.hpp"

using namespace platipus;
using Catch::Contains;
using platipus::testing::check_derivatives;
using V = Var<double>;
using Inputs = std::vector<Tensor<double>>;
using Fn = std::function<V(std::span<const V>)>;

namespace {

Tensor<double> normal(const Shape& shape, std::uint64_t seed, double offset = 0, double scale = 1) {
  Generator gen(seed);
  auto z = raw::normal<double>(shape, gen);
  return raw::map(UnaryOp::add_scalar, raw::map(UnaryOp::scale, z, scale), offset);
}

// A tensor's elements as bits, whose == sees signed zeros.
template <class T, class B>
auto bits(const Tensor<T, B>& t) {
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  std::vector<U> out;
  for (const T x : t.to_vector()) out.push_back(std::bit_cast<U>(x));
  return out;
}

// Values of magnitude in [0.2, 1.2] with random signs: away from relu's kink.
Tensor<double> away_from_zero(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  auto u = raw::uniform<double>(shape, gen).to_vector();
  auto s = raw::uniform<double>(shape, gen).to_vector();
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = (s[i] < 0.5 ? -1 : 1) * (0.2 + u[i]);
  return Tensor<double>::from_host(shape, u);
}

Tensor<double> positive(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  return raw::map(UnaryOp::add_scalar, raw::uniform<double>(shape, gen), 0.5);
}

// f's gradients at the inputs by a sweep that records nothing equal those
// by one that records (create_graph), where rules may fuse their passes.
void check_unrecorded_sweep(const Fn& f, const Inputs& inputs) {
  const auto sweep = [&](bool create_graph) {
    Tape<double> tape;
    std::vector<V> v;
    for (const auto& t : inputs) v.push_back(tape.variable(t.clone()));
    std::vector<std::vector<double>> values;
    for (const auto& g : grad(f(v), std::span<const V>(v), {.create_graph = create_graph}))
      values.push_back(g.to_vector());
    return values;
  };
  const auto unrecorded = sweep(false), recorded = sweep(true);
  for (std::size_t i = 0; i < unrecorded.size(); ++i)
    for (std::size_t j = 0; j < unrecorded[i].size(); ++j)
      CHECK(unrecorded[i][j] == Approx(recorded[i][j]).margin(1e-12));
}

Inputs list(Tensor<double> a) {
  Inputs v;
  v.push_back(std::move(a));
  return v;
}
Inputs list(Tensor<double> a, Tensor<double> b) {
  Inputs v = list(std::move(a));
  v.push_back(std::move(b));
  return v;
}
Inputs list(Tensor<double> a, Tensor<double> b, Tensor<double> c) {
  Inputs v = list(std::move(a), std::move(b));
  v.push_back(std::move(c));
  return v;
}
Inputs list(Tensor<double> a, Tensor<double> b, Tensor<double> c, Tensor<double> d) {
  Inputs v = list(std::move(a), std::move(b), std::move(c));
  v.push_back(std::move(d));
  return v;
}

}  // namespace

TEST_CASE("arithmetic ops with broadcasting pass first and second order checks", "[ops]") {
  SECTION("add") {
    check_derivatives([](auto x) { return x[0] * x[0] + x[1]; },
                      list(normal({2, 3}, 1), normal({3}, 2)));
  }
  SECTION("sub") {
    check_derivatives([](auto x) { return (x[0] - x[1]) * x[1]; },
                      list(normal({2, 1}, 3), normal({1, 3}, 4)));
  }
  SECTION("mul") {
    check_derivatives([](auto x) { return x[0] * x[1]; },
                      list(normal({2, 3}, 5), normal({2, 1}, 6)));
  }
  SECTION("div") {
    check_derivatives([](auto x) { return x[0] / x[1]; },
                      list(normal({2, 3}, 7), positive({3}, 8)));
  }
  SECTION("neg") {
    check_derivatives([](auto x) { return -(x[0] * x[0]); }, list(normal({3}, 9)));
  }
  SECTION("negated gradients added to others, broadcast ones first and last") {
    // neg's rule gives x[0] a [1, 3] gradient to subtract, sub's rule x[1]
    // one: before and after the others, in either order of recording.
    check_derivatives(
        [](auto x) {
          return sum_to(-x[0], Shape{1, 3}) * x[1] + x[0] * x[0] - x[1] * x[1] +
                 sum_to(-(x[0] * x[1]), Shape{1, 3});
        },
        list(normal({2, 3}, 63), normal({1, 3}, 64)));
  }
  SECTION("add_scaled") {
    check_derivatives([](auto x) { return add_scaled(x[0] * x[1], x[1], -0.3); },
                      list(normal({2, 3}, 59), normal({2, 3}, 60)));
  }
  SECTION("scale and shift") {
    check_derivatives([](auto x) { return (2.5 * x[0] - 1.0) * (x[0] / 4.0 + 3.0) * (1.0 - x[0]); },
                      list(normal({4}, 10)));
  }
  SECTION("foreach_add_scaled and foreach_scale") {
    check_derivatives(
        [](auto x) {
          const std::array<V, 2> a{x[0], x[1]}, b{x[0] * x[0], x[1] * x[0]};
          const auto sums = foreach_add_scaled(std::span<const V>(a), std::span<const V>(b), -0.5);
          const auto scaled = foreach_scale(std::span<const V>(sums), 1.5);
          return scaled[0] * sums[1];
        },
        list(normal({2, 3}, 61), normal({2, 3}, 62)));
  }
  SECTION("foreach_sub_mul and foreach_add_mul") {
    // A rate per parameter shared by the tasks, one per piece, and one per
    // element; each factor a function of the inputs, so every rule is used.
    check_derivatives(
        [](auto x) {
          const std::array<V, 3> a{x[0], x[1] * x[0], x[0]},
              r{x[2], reshape(sum(x[2]), {1, 1}), x[0] * x[1]}, g{x[1], x[0], x[1] * x[1]};
          const auto y =
              foreach_sub_mul(std::span<const V>(a), std::span<const V>(r), std::span<const V>(g));
          const auto z =
              foreach_add_mul(std::span<const V>(y), std::span<const V>(r), std::span<const V>(a));
          return z[0] * y[1] + z[2] * z[1];
        },
        list(normal({2, 3}, 63), normal({2, 3}, 64), normal({3}, 65)));
  }
  SECTION("foreach_expand and foreach_sum_to") {
    // Second order: each op's rule records the other.
    check_derivatives(
        [](auto x) {
          const std::array<V, 2> pieces{x[0], x[1]};
          const auto copies = foreach_expand(std::span<const V>(pieces), 3);
          const std::array<V, 2> products{copies[0] * copies[0] * x[2], copies[1] * copies[1]};
          const auto sums = foreach_sum_to(std::span<const V>(products));
          return sums[0] * sums[1] + copies[0] * x[1];
        },
        list(normal({2, 3}, 65), normal({3}, 66), normal({3, 2, 3}, 67)));
  }
}

// PiecesLayout's capacity and 6 more tensors on CountingBackend<cpu> of a
// few shapes, after a leading axis of `lead` where given; piece 3 has no
// elements. 29 pieces with elements: a foreach call of 24 and one of 5.
std::vector<Tensor<double, CountingBackend<cpu>>> foreach_pieces(
    std::uint64_t seed, std::optional<std::int64_t> lead = std::nullopt) {
  std::vector<Tensor<double, CountingBackend<cpu>>> pieces;
  for (int i = 0; i < PiecesLayout<double>::capacity + 6; ++i) {
    Shape shape;
    if (lead) shape.push_back(*lead);
    for (std::int64_t d :
         i == 3 ? std::vector<std::int64_t>{0} : std::vector<std::int64_t>{i % 4 + 1, 3})
      shape.push_back(d);
    pieces.push_back(
        normal(shape, seed + static_cast<std::uint64_t>(i)).to<CountingBackend<cpu>>());
  }
  return pieces;
}

template <class X>
std::vector<const X*> pointers(const std::vector<X>& x) {
  std::vector<const X*> p;
  for (const auto& xi : x) p.push_back(&xi);
  return p;
}

TEST_CASE("foreach_expand and foreach_sum_to: a call per capacity, the bits of expand and sum_to",
          "[ops]") {
  using counted = CountingBackend<cpu>;
  constexpr std::int64_t tasks = 5;
  const auto a = foreach_pieces(300), b = foreach_pieces(400, tasks);
  const auto pa = pointers(a), pb = pointers(b);
  counted::reset();
  const auto copies = raw::foreach_expand(pa, tasks);
  const auto sums = raw::foreach_sum_to(pb);
  const KernelCalls calls = counted::calls();
  CHECK(calls["foreach_expand"] == 2);
  CHECK(calls["foreach_sum_to"] == 2);
  CHECK(calls.total() == 4);
  REQUIRE(copies.size() == a.size());
  REQUIRE(sums.size() == a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(copies[i].shape() == b[i].shape());
    CHECK(copies[i].to<cpu>().to_vector() == raw::expand(a[i], b[i].shape()).to<cpu>().to_vector());
    CHECK(sums[i].shape() == a[i].shape());
    CHECK(sums[i].to<cpu>().to_vector() == raw::sum_to(b[i], a[i].shape()).to<cpu>().to_vector());
  }
  auto mixed = pb;
  mixed.push_back(&a[0]);
  CHECK_THROWS_WITH(
      raw::foreach_sum_to(mixed),
      Contains("piece 30 is [1, 3]") && Contains("piece 0 has 5 along its leading axis"));
  const Tensor<double, CountingBackend<cpu>> zero_rank(Shape{});
  auto with_scalar = pb;
  with_scalar[2] = &zero_rank;
  CHECK_THROWS_WITH(raw::foreach_sum_to(with_scalar),
                    Contains("piece 2 is a scalar, with no leading axis to sum"));
  CHECK_THROWS_WITH(raw::foreach_expand(pa, 0), Contains("0 copies"));
}

TEST_CASE("foreach kernels take any number of pieces, a call per capacity, each piece's bits",
          "[ops]") {
  using counted = CountingBackend<cpu>;
  const auto a = foreach_pieces(100), b = foreach_pieces(200);
  auto pa = pointers(a), pb = pointers(b);
  counted::reset();
  const auto sums = raw::foreach_axpy(pa, pb, -0.7);
  const auto scaled = raw::foreach_map(UnaryOp::scale, pa, 1.3);
  const KernelCalls calls = counted::calls();
  // 29 pieces with elements: 24 in the first call, 5 in the second.
  CHECK(calls["foreach_axpy"] == 2);
  CHECK(calls["foreach_unary scale"] == 2);
  CHECK(calls.total() == 4);
  REQUIRE(sums.size() == a.size());
  REQUIRE(scaled.size() == a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(sums[i].shape() == a[i].shape());
    CHECK(sums[i].to<cpu>().to_vector() == raw::axpy(a[i], b[i], -0.7).to<cpu>().to_vector());
    CHECK(scaled[i].to<cpu>().to_vector() ==
          raw::map(UnaryOp::scale, a[i], 1.3).to<cpu>().to_vector());
  }
  pb.pop_back();
  CHECK_THROWS_WITH(raw::foreach_axpy(pa, pb, 1.0), Contains("30 and 29 tensors"));
  pb.push_back(&a[0]);
  CHECK_THROWS_WITH(raw::foreach_axpy(pa, pb, 1.0),
                    Contains("piece 29") && Contains("[2, 3]") && Contains("[1, 3]"));
}

TEST_CASE("foreach_map_into writes foreach_map's pieces into tensors that exist", "[ops]") {
  using counted = CountingBackend<cpu>;
  const auto a = foreach_pieces(100);
  const auto pa = pointers(a);
  // Every piece into its own stretch of one buffer, through views.
  std::int64_t total = 0;
  for (const auto& piece : a) total += piece.numel();
  Tensor<double, counted> buffer({total});
  std::vector<Tensor<double, counted>> views;
  std::int64_t offset = 0;
  for (const auto& piece : a) {
    views.push_back(Tensor<double, counted>::view(buffer.data() + offset, piece.shape()));
    offset += piece.numel();
  }
  std::vector<Tensor<double, counted>*> into;
  for (auto& view : views) into.push_back(&view);
  counted::reset();
  raw::foreach_map_into(UnaryOp::scale, pa, into, 1.3);
  CHECK(counted::calls()["foreach_unary scale"] == 2);  // 29 pieces with elements
  CHECK(counted::calls().total() == 2);
  const auto expected = raw::foreach_map(UnaryOp::scale, pa, 1.3);
  for (std::size_t i = 0; i < a.size(); ++i)
    CHECK(views[i].to<cpu>().to_vector() == expected[i].to<cpu>().to_vector());
  into.pop_back();
  CHECK_THROWS_WITH(raw::foreach_map_into(UnaryOp::scale, pa, into, 1.3),
                    Contains("30 inputs and 29 outputs"));
  into.push_back(&views[0]);
  CHECK_THROWS_WITH(raw::foreach_map_into(UnaryOp::scale, pa, into, 1.3),
                    Contains("piece 29") && Contains("differ"));
}

TEST_CASE(
    "foreach_sub_mul (foreach_add_mul) is mul then sub (add) on every piece in one call, "
    "with their bits",
    "[ops][grad]") {
  const bool add = GENERATE(false, true);
  CAPTURE(add);
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  // Rates per parameter shared by the tasks, one per piece, and per element.
  const std::vector<Shape> shapes{{4, 3}, {4, 2, 5}, {4, 7}}, rate_shapes{{3}, {1, 1}, {4, 7}};
  Generator gen(420);
  std::vector<Tensor<float>> a0, r0, g0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    a0.push_back(raw::normal<float>(shapes[i], gen));
    r0.push_back(raw::normal<float>(rate_shapes[i], gen));
    g0.push_back(raw::normal<float>(shapes[i], gen));
  }
  std::vector<float> results[2];
  std::uint64_t calls[2];
  KernelCalls backward_calls[2];
  for (const bool fused : {false, true}) {
    Tape<float, counted> tape;
    std::vector<CountedVar> a, r, g, all;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      a.push_back(tape.variable(a0[i].to<counted>()));
      r.push_back(tape.variable(r0[i].to<counted>()));
      g.push_back(tape.variable(g0[i].to<counted>()));
    }
    for (const auto* part : {&a, &r, &g}) all.insert(all.end(), part->begin(), part->end());
    counted::reset();
    std::vector<CountedVar> y;
    if (fused && add)
      y = foreach_add_mul(std::span<const CountedVar>(a), std::span<const CountedVar>(r),
                          std::span<const CountedVar>(g));
    else if (fused)
      y = foreach_sub_mul(std::span<const CountedVar>(a), std::span<const CountedVar>(r),
                          std::span<const CountedVar>(g));
    else
      for (std::size_t i = 0; i < shapes.size(); ++i)
        y.push_back(add ? a[i] + r[i] * g[i] : a[i] - r[i] * g[i]);
    calls[fused] = counted::calls().total();
    // Piece 1's gradient arrives negated (sub's), the others' as they are.
    CountedVar loss = sum(square(y[0])) + sum(square(g[1] - y[1])) + sum(square(y[2]));
    counted::reset();
    const std::vector<CountedVar> plain = grad(loss, std::span<const CountedVar>(all));
    backward_calls[fused] = counted::calls();
    const std::vector<CountedVar> first =
        grad(loss, std::span<const CountedVar>(all), {.create_graph = true});
    // A sweep that records nothing takes the foreach rule, one that records
    // the per-piece one: the same bits.
    for (std::size_t i = 0; i < all.size(); ++i)
      CHECK(plain[i].to_vector() == first[i].to_vector());
    CountedVar norm;
    for (const auto& d : first) norm = norm.defined() ? norm + sum(mul(d, d)) : sum(mul(d, d));
    const std::vector<CountedVar> second = grad(norm, std::span<const CountedVar>(all));
    for (const auto* values : std::array<const std::vector<CountedVar>*, 3>{&y, &first, &second})
      for (const auto& v : *values)
        for (const float e : v.value().to<cpu>().to_vector()) results[fused].push_back(e);
  }
  CHECK(results[0] == results[1]);
  CHECK(calls[0] == 6u);
  CHECK(calls[1] == 1u);
  // The products for all r_i and g_i in one call, the sums over the tasks
  // in one call per count of copies (4 for piece 0's rates, 10 for piece
  // 1's; piece 2's are per element), where the per-piece rules took a mul
  // each.
  CHECK(backward_calls[1]["foreach_mul"] == 1);
  CHECK(backward_calls[1]["foreach_sum_to"] == 2);
  CHECK(backward_calls[0]["binary mul"] - backward_calls[1]["binary mul"] == 6);

  CHECK(raw::repeats_along_leading_axes({3}, {4, 3}));
  CHECK(raw::repeats_along_leading_axes({1, 1}, {4, 2, 5}));
  CHECK(raw::repeats_along_leading_axes({}, {4, 2}));
  CHECK_FALSE(raw::repeats_along_leading_axes({3, 1}, {4, 3, 2}));
  CHECK_FALSE(raw::repeats_along_leading_axes({1, 1, 1}, {3}));
  const auto pointers_of = [](const std::vector<Tensor<float>>& x) {
    std::vector<const Tensor<float>*> p;
    for (const auto& xi : x) p.push_back(&xi);
    return p;
  };
  const auto pa = pointers_of(a0), pg = pointers_of(g0);
  auto pr = pointers_of(r0);
  const Tensor<float> row = raw::normal<float>({2, 1}, gen);
  pr[1] = &row;  // [2, 1] for a [4, 2, 5]: a broadcast, not a repetition
  CHECK_THROWS_WITH(raw::foreach_sub_mul(pa, pr, pg),
                    Contains("foreach_sub_mul") && Contains("piece 1") && Contains("[2, 1]") &&
                        Contains("[4, 2, 5]"));
  pr.pop_back();
  CHECK_THROWS_WITH(raw::foreach_sub_mul(pa, pr, pg), Contains("3, 2 and 3 tensors"));

  // foreach_mul: mul (then neg) on each piece, to the bit.
  const std::vector<bool> negate{true, false, true};
  const auto products = raw::foreach_mul(pointers_of(r0), pg, negate);
  REQUIRE(products.size() == shapes.size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    auto expected = raw::map(BinaryOp::mul, r0[i], g0[i], "mul");
    if (negate[i]) expected = raw::map(UnaryOp::neg, expected);
    CHECK(products[i].shape() == shapes[i]);
    CHECK(products[i].to_vector() == expected.to_vector());
  }
  CHECK_THROWS_WITH(raw::foreach_mul(pr, pg, negate), Contains("2 and 3 tensors and 3 negate"));
  pr[1] = &r0[1];
  pr.push_back(&row);  // [2, 1] for a [4, 7]
  CHECK_THROWS_WITH(raw::foreach_mul(pr, pg, negate), Contains("foreach_mul") &&
                                                          Contains("piece 2") &&
                                                          Contains("[2, 1]") && Contains("[4, 7]"));
}

TEST_CASE("flatten copies unbatched pieces with a foreach call per capacity, batched ones apart",
          "[ops][flatten]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<double, counted>;
  constexpr int count = PiecesLayout<double>::capacity + 6;
  std::vector<Shape> shapes;
  for (int i = 0; i < count; ++i) shapes.push_back(i == 3 ? Shape{0} : Shape{i % 4 + 1, 2});
  for (const std::int64_t tasks : {1, 2}) {
    const Shape batch = tasks == 1 ? Shape{} : Shape{tasks};
    Tape<double, counted> tape;
    std::vector<CountedVar> pieces;
    std::vector<std::vector<double>> values;
    for (int i = 0; i < count; ++i) {
      const auto value = normal(detail::with_batch(batch, shapes[static_cast<std::size_t>(i)]),
                                300 + static_cast<std::uint64_t>(i));
      values.push_back(value.to_vector());
      pieces.push_back(i == 7 ? CountedVar{} : tape.constant(value.to<counted>()));
    }
    counted::reset();
    const auto flat = flatten(std::span<const CountedVar>(pieces), batch, shapes);
    const KernelCalls calls = counted::calls();
    // 28 pieces with elements (one is empty, one undefined and left zero).
    if (tasks == 1) {
      CHECK(calls["foreach_unary copy"] == 2);
      CHECK(calls["strided_copy"] == 0);
    } else {
      CHECK(calls["foreach_unary copy"] == 0);
      CHECK(calls["strided_copy"] == 28);
    }
    const auto got = flat.value().to<cpu>().to_vector();
    std::size_t at = 0;
    for (std::int64_t t = 0; t < tasks; ++t)
      for (int i = 0; i < count; ++i) {
        const auto n = static_cast<std::size_t>(shapes[static_cast<std::size_t>(i)].numel());
        for (std::size_t j = 0; j < n; ++j, ++at)
          CHECK(got[at] ==
                (i == 7
                     ? 0.0
                     : values[static_cast<std::size_t>(i)][static_cast<std::size_t>(t) * n + j]));
      }
    CHECK(at == got.size());
  }
}

// y's gradient with respect to x seeded by a tensor of ones: the one-value
// gradients below are tensors, not the host value grad's own seed would be
// (Backward::uniform_grad).
template <class T, class B>
Var<T, B> tensor_seeded_grad(const Var<T, B>& y, const Var<T, B>& x, bool create_graph) {
  const Var<T, B> seed = y.tape().constant(Tensor<T, B>::ones(y.shape()));
  return grad(std::span<const Var<T, B>>(&y, 1), std::span<const Var<T, B>>(&x, 1),
              std::span<const Var<T, B>>(&seed, 1), {.create_graph = create_graph})[0];
}

TEST_CASE("rules that map their gradient elementwise read it unexpanded unless the sweep records",
          "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<double, counted>;
  // sum's gradient reaches each rule below as [1, 1]: without create_graph
  // no rule copies it to [5, 4], with it each recorded rule reads the
  // expanded gradient as before; the two give the same bits.
  const auto x0 = normal({5, 4}, 400);
  std::vector<double> rows(20, 0.0);
  for (std::size_t r = 0; r < 5; ++r) rows[r * 4 + (r * 3) % 4] = 1.0;  // one-hot
  const auto targets = Tensor<double>::from_host({5, 4}, rows);
  for (const bool logits : {false, true}) {
    std::vector<double> results[2];
    for (const bool create_graph : {false, true}) {
      Tape<double, counted> tape;
      const CountedVar x = tape.variable(x0.to<counted>());
      const CountedVar y =
          logits ? sum(scale(cross_entropy_with_logits(x, targets.to<counted>()), 0.3))
                 : sum(scale(neg(square(shift(x, 0.5))), 0.3));
      counted::reset();
      const auto g = tensor_seeded_grad(y, x, create_graph);
      CHECK((counted::calls()["strided_copy"] == 0) == !create_graph);
      results[create_graph] = g.value().to<cpu>().to_vector();
    }
    CHECK(results[0] == results[1]);
  }
}

TEST_CASE("slice's rule pads an unexpanded gradient and expands it in one call, same bits",
          "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<double, counted>;
  // The bias transformation's v in the outer sweep: the gradient of x's
  // slice arrives from sum_to's rule as [3, 1, 4], for a [3, 5, 4] slice of
  // a [3, 5, 6] x. Without create_graph the pad reads it with stride 0 over
  // the points (one call, no expand), with it the pad of the expanded
  // gradient is recorded; x's gradient has the same bits both ways.
  const auto x0 = normal({3, 5, 6}, 401), w0 = normal({3, 1, 4}, 402);
  std::vector<std::uint64_t> results[2];
  for (const bool create_graph : {false, true}) {
    Tape<double, counted> tape;
    const CountedVar x = tape.variable(x0.to<counted>()), w = tape.constant(w0.to<counted>());
    const CountedVar y = sum(mul(sum_to(slice(x, -1, 1, 4), {3, 1, 4}), w));
    counted::reset();
    const auto g = grad(y, std::span<const CountedVar>(&x, 1), {.create_graph = create_graph})[0];
    const KernelCalls calls = counted::calls();
    CHECK((calls["strided_copy"] == 0) == !create_graph);
    CHECK(calls["foreach_strided_copy"] == 1);
    REQUIRE(g.shape() == x.shape());
    results[create_graph] = bits(g.value());
  }
  CHECK(results[0] == results[1]);
  std::vector<double> expected(90, 0.0);  // w over the points, +0 outside the slice
  const auto w = w0.to_vector();
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t p = 0; p < 5; ++p)
      for (std::size_t j = 0; j < 4; ++j) expected[(t * 5 + p) * 6 + 1 + j] = w[t * 4 + j];
  CHECK(results[0] == bits(Tensor<double>::from_host({3, 5, 6}, expected)));
}

TEST_CASE(
    "a product's two gradients are one gemms call, recorded as two matmul ops where the sweep "
    "records, with the bits of two matmul calls",
    "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<double, counted>;
  struct Product {
    Shape a, b;       // op(a) [..., m, k], op(b) [..., k, n] before transposes
    bool one_layout;  // false: mixed batch broadcasts, a matmul call each
  };
  // Two matrices; a batch on both sides; one shared matrix times a batch (the
  // weight gradient's rows folded); a batch of one against a batch (its
  // gradient summed); a shared left factor; batch axes broadcast both ways.
  for (const Product& product :
       {Product{{4, 3}, {3, 5}, true}, Product{{2, 4, 3}, {2, 3, 5}, true},
        Product{{2, 4, 3}, {3, 5}, true}, Product{{2, 4, 3}, {1, 3, 5}, true},
        Product{{4, 3}, {2, 3, 5}, true}, Product{{2, 1, 4, 3}, {1, 3, 3, 5}, false}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        CAPTURE(product.a, product.b, ta, tb);
        const auto transposed = [](Shape s, bool t) {
          if (t) std::swap(s[s.rank() - 2], s[s.rank() - 1]);
          return s;
        };
        const auto a0 = normal(transposed(product.a, ta), 430),
                   b0 = normal(transposed(product.b, tb), 431);
        const Shape out = raw::matmul_shape(a0.shape(), b0.shape(), ta, tb);
        const auto r0 = normal(out, 432);
        std::vector<std::uint64_t> results[2];
        for (const bool create_graph : {false, true}) {
          Tape<double, counted> tape;
          const std::array<CountedVar, 2> inputs{tape.variable(a0.to<counted>()),
                                                 tape.variable(b0.to<counted>())};
          const CountedVar y =
              sum(mul(matmul(inputs[0], inputs[1], ta, tb), tape.constant(r0.to<counted>())));
          counted::reset();
          const auto g =
              grad(y, std::span<const CountedVar>(inputs), {.create_graph = create_graph});
          KernelCalls calls = counted::calls();
          CHECK(calls["gemms"] == (product.one_layout ? 1u : 0u));
          CHECK((calls["gemm"] == 0) == product.one_layout);
          for (const auto& gi : g)
            for (const auto b : bits(gi.value())) results[create_graph].push_back(b);
        }
        CHECK(results[0] == results[1]);
        // Two matmul calls on the gradient r0 (the rule's formulas, a shared
        // matrix's rows folded), summed to the factors' shapes.
        const bool fold = b0.rank() == 2 && a0.rank() > 2 && !ta;
        const auto rows = [fold](const Tensor<double>& t) {
          return Tensor<double>::view(t,
                                      fold ? Shape{t.numel() / t.dim(-1), t.dim(-1)} : t.shape());
        };
        const auto a2 = rows(a0), g2 = rows(r0);
        std::vector<std::uint64_t> expected;
        for (const auto b : bits(raw::sum_to(
                 ta ? raw::matmul(b0, r0, tb, true) : raw::matmul(r0, b0, false, !tb), a0.shape())))
          expected.push_back(b);
        for (const auto b : bits(raw::sum_to(
                 tb ? raw::matmul(g2, a2, true, ta) : raw::matmul(a2, g2, !ta, false), b0.shape())))
          expected.push_back(b);
        CHECK(results[0] == expected);
      }

  // The raw call against two matmul calls, an empty product among them.
  const auto a = normal({2, 4, 3}, 433), b = normal({3, 5}, 434), empty = normal({0, 4}, 435);
  const std::array<raw::Factors<double, cpu>, 2> factors{raw::Factors<double, cpu>{a, b},
                                                         raw::Factors<double, cpu>{empty, a}};
  const auto products = raw::matmul_gradients<double, cpu>(factors).products;
  CHECK(bits(products[0]) == bits(raw::matmul(a, b)));
  CHECK(products[1].shape() == Shape{2, 0, 3});
}

TEST_CASE(
    "a linear layer's product and bias gradients are one gemms call, recorded as matmul and "
    "sum_to ops where the sweep records, with the bits of the separate calls",
    "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<double, counted>;
  struct Calls {
    std::uint64_t gemms, gemm, reduce_sums;
  };
  struct Layer {
    Shape x, w, b;
    Calls with_x, without_x;  // the sweep's calls where x needs a gradient, and where not
  };
  // A layer shared by the tasks, a layer per task (the inner loop's), one
  // output unit per task, a batch of one (its weight's gradient summed), one
  // point per task (the bias's gradient is g itself: one product alone is a
  // matmul call), and batch axes broadcast both ways that the bias does not
  // group (x's gradient two matmul calls, the bias's a sum_to call).
  for (const Layer& layer : {Layer{{3, 4, 2}, {2, 5}, {5}, {1, 0, 0}, {1, 0, 0}},
                             Layer{{3, 4, 2}, {3, 2, 5}, {3, 5}, {1, 0, 0}, {1, 0, 0}},
                             Layer{{3, 4, 2}, {3, 2, 1}, {3, 1}, {1, 0, 0}, {1, 0, 0}},
                             Layer{{3, 4, 2}, {1, 2, 5}, {1, 5}, {1, 0, 1}, {1, 0, 1}},
                             Layer{{3, 1, 2}, {3, 2, 5}, {3, 5}, {1, 0, 0}, {0, 1, 0}},
                             Layer{{2, 3, 4, 2}, {3, 2, 5}, {3, 5}, {0, 2, 2}, {1, 0, 2}}})
    for (const bool x_needs : {true, false})
      for (const Activation activation : {Activation::none, Activation::tanh}) {
        CAPTURE(layer.x, layer.w, x_needs, activation == Activation::none);
        const auto x0 = normal(layer.x, 440), w0 = normal(layer.w, 441), b0 = normal(layer.b, 442);
        const Shape out = raw::matmul_shape(x0.shape(), w0.shape(), false, false);
        const auto r0 = normal(out, 443);
        std::vector<std::uint64_t> results[2];
        Tensor<double> routed;  // the gradient reaching the product, g
        for (const bool create_graph : {false, true}) {
          Tape<double, counted> tape;
          const CountedVar x =
              x_needs ? tape.variable(x0.to<counted>()) : tape.constant(x0.to<counted>());
          const std::array<CountedVar, 2> params{tape.variable(w0.to<counted>()),
                                                 tape.variable(b0.to<counted>())};
          const CountedVar h = linear(x, params[0], params[1], activation);
          const CountedVar r = tape.constant(r0.to<counted>());
          const CountedVar y = sum(mul(h, r));
          {
            GradModeGuard off(false);  // the rule's own ops, unrecorded
            routed = activation_backward(activation, r, h).value().to<cpu>();
          }
          std::vector<CountedVar> inputs;
          if (x_needs) inputs.push_back(x);
          inputs.insert(inputs.end(), params.begin(), params.end());
          counted::reset();
          const auto g =
              grad(y, std::span<const CountedVar>(inputs), {.create_graph = create_graph});
          KernelCalls calls = counted::calls();
          const Calls& expected = x_needs ? layer.with_x : layer.without_x;
          CHECK(calls["gemms"] == expected.gemms);
          CHECK(calls["gemm"] == expected.gemm);
          CHECK(calls["reduce sum"] == expected.reduce_sums);
          for (const auto& gi : g)
            for (const auto b : bits(gi.value())) results[create_graph].push_back(b);
        }
        CHECK(results[0] == results[1]);
        // The rule's formulas as separate calls: dx = g w^T, dw = x^T g with a
        // shared weight's rows folded, db = g's rows summed.
        const bool fold = w0.rank() == 2 && x0.rank() > 2;
        const auto rows = [fold](const Tensor<double>& t) {
          return Tensor<double>::view(t,
                                      fold ? Shape{t.numel() / t.dim(-1), t.dim(-1)} : t.shape());
        };
        Shape row = b0.shape().take_front(b0.rank() - 1);
        row.push_back(1);
        row.push_back(b0.dim(-1));
        std::vector<std::uint64_t> expected;
        if (x_needs)
          for (const auto b : bits(raw::sum_to(raw::matmul(routed, w0, false, true), x0.shape())))
            expected.push_back(b);
        for (const auto b :
             bits(raw::sum_to(raw::matmul(rows(x0), rows(routed), true, false), w0.shape())))
          expected.push_back(b);
        for (const auto b : bits(raw::sum_to(routed, row))) expected.push_back(b);
        CHECK(results[0] == expected);
      }
}

TEST_CASE("matmul_gradients' row sums have sum_to's bits, signed zeros included", "[raw]") {
  // Rows of -0 sum to +0 as reduce's do (its sums start from +0); a bias [n]
  // sums every row of every task, one per task its task's rows.
  const auto w = normal({3, 5}, 450), a = normal({6, 4, 3}, 451);
  std::vector<double> zeros(6 * 4 * 5, -0.0);
  for (std::size_t i = 0; i < zeros.size(); i += 3) zeros[i] = normal({1}, 452 + i).to_vector()[0];
  const auto g = Tensor<double>::from_host({6, 4, 5}, zeros);
  for (const Shape& to : {Shape{1, 5}, Shape{6, 1, 5}, Shape{1, 1, 5}}) {
    CAPTURE(to);
    const std::array<raw::Factors<double, cpu>, 1> factors{raw::Factors<double, cpu>{a, w}};
    const auto [products, sums] =
        raw::matmul_gradients<double, cpu>(factors, raw::RowSums<double, cpu>{g, to});
    CHECK(bits(products[0]) == bits(raw::matmul(a, w)));
    CHECK(sums.shape() == to);
    CHECK(bits(sums) == bits(raw::sum_to(g, to)));
  }
  // A shape g does not broadcast from, an empty batch axis among them, is
  // sum_to's error.
  for (const Shape& to : {Shape{4, 1, 5}, Shape{0, 1, 5}})
    CHECK_THROWS_WITH((raw::matmul_gradients<double, cpu>({}, raw::RowSums<double, cpu>{g, to})),
                      Contains("sum_to"));
}

TEST_CASE(
    "a ReLU layer's routed gradient and its bias's are one call in a sweep that records nothing, "
    "with the bits of the recorded rules",
    "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<double, counted>;
  struct Layer {
    Shape x, w, b;
    std::uint64_t fused;  // relu_bias_backward calls without create_graph
  };
  // A layer shared by the tasks, a layer per task (the inner loop's), one
  // output unit per task, a batch of one, and a bias whose batch axis g's
  // rows are not grouped by (the recorded rules then).
  for (const Layer& layer :
       {Layer{{3, 4, 2}, {2, 5}, {5}, 1}, Layer{{3, 4, 2}, {3, 2, 5}, {3, 5}, 1},
        Layer{{3, 4, 2}, {3, 2, 1}, {3, 1}, 1}, Layer{{3, 4, 2}, {1, 2, 5}, {1, 5}, 1},
        Layer{{2, 3, 4, 2}, {3, 2, 5}, {3, 5}, 0}}) {
    const auto x0 = normal(layer.x, 420), w0 = normal(layer.w, 421), b0 = normal(layer.b, 422);
    std::vector<std::vector<double>> results[2];
    for (const bool create_graph : {false, true}) {
      Tape<double, counted> tape;
      const std::array<CountedVar, 3> inputs{tape.variable(x0.to<counted>()),
                                             tape.variable(w0.to<counted>()),
                                             tape.variable(b0.to<counted>())};
      const CountedVar h = linear(inputs[0], inputs[1], inputs[2], Activation::relu);
      // h's gradient one tensor (square's), then in two parts (mul's), which
      // the rule adds in its call, or first where the rows are not grouped.
      const CountedVar y = sum(square(h)), z = sum(mul(h, h));
      counted::reset();
      const auto g = grad(y, std::span<const CountedVar>(inputs), {.create_graph = create_graph});
      const KernelCalls calls = counted::calls();
      CHECK(calls["relu_bias_backward"] == (create_graph ? 0 : layer.fused));
      CHECK(calls["binary relu_backward"] == (create_graph ? 1 : 1 - layer.fused));
      counted::reset();
      const auto g2 = grad(z, std::span<const CountedVar>(inputs), {.create_graph = create_graph});
      const KernelCalls calls2 = counted::calls();
      CHECK(calls2["relu_bias_backward"] == 0);
      CHECK(calls2["binary relu_backward"] == (create_graph ? 1 : 1 - layer.fused));
      if (!create_graph) CHECK(calls2["add_n"] == 1);
      for (const auto& gi : g) results[create_graph].push_back(gi.value().to<cpu>().to_vector());
      for (const auto& gi : g2) results[create_graph].push_back(gi.value().to<cpu>().to_vector());
    }
    CHECK(results[0] == results[1]);
  }
}

TEST_CASE(
    "a task-summed mean loss's gradient stays one value through reshape and sum_to unless the "
    "sweep records",
    "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<double, counted>;
  // sum over tasks of each task's mean squared error, as the inner loop's
  // loss: the one-value gradient of the outer sum reaches square's rule as
  // [1, 1, 1] (negated where the losses are), so nothing spreads it over the
  // tasks and points without create_graph; with it the recorded rules read it
  // expanded, as before. Both give the same bits.
  const auto x0 = normal({5, 4, 1}, 401), t0 = normal({5, 4, 1}, 402);
  for (const bool negated : {false, true}) {
    std::vector<double> results[2];
    for (const bool create_graph : {false, true}) {
      Tape<double, counted> tape;
      const CountedVar x = tape.variable(x0.to<counted>()), t = tape.constant(t0.to<counted>());
      const CountedVar losses = mean(square(sub(x, t)), {1, 2});
      const CountedVar y = sum(negated ? neg(losses) : losses);
      counted::reset();
      const auto g = tensor_seeded_grad(y, x, create_graph);
      CHECK((counted::calls()["strided_copy"] == 0) == !create_graph);
      results[create_graph] = g.value().to<cpu>().to_vector();
    }
    CHECK(results[0] == results[1]);
    const double sign = negated ? -1 : 1;
    const auto x = x0.to_vector(), t = t0.to_vector();
    for (std::size_t i = 0; i < x.size(); ++i)
      CHECK(results[0][i] == Approx(sign * 2 * (x[i] - t[i]) / 4).epsilon(1e-14));
  }
}

TEST_CASE("mean is one reduce with the bits of a sum and then a scale, its derivatives too",
          "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  Generator gen(93);
  const auto x0 = raw::normal<float>({3, 7, 5}, gen), w0 = raw::normal<float>({3, 7, 5}, gen);
  // Over the middle axis, the last two (a loss's points), all (kept or
  // dropped), and none.
  const std::vector<std::pair<std::vector<int>, bool>> cases{
      {{1}, false}, {{1, 2}, false}, {{0, 1, 2}, true}, {{}, false}, {{-1}, true}};
  for (const auto& [axes, keep_dims] : cases) {
    std::string named = "axes";
    for (const int axis : axes) named += fmt::format(" {}", axis);
    INFO(named << (keep_dims ? ", kept" : ""));
    std::int64_t count = 1;
    for (const int axis : axes) count *= x0.shape()[x0.shape().normalize_axis(axis, "test")];
    const auto summed = [&](const CountedVar& x) {
      return scale(sum(x, std::span<const int>(axes), keep_dims), 1.f / static_cast<float>(count));
    };
    // The mean itself the loss: its gradient known on the host, times 1 / n.
    for (const bool create_graph : {false, true}) {
      std::vector<std::uint32_t> gradients[2];
      for (const bool fused : {true, false}) {
        Tape<float, counted> tape;
        const CountedVar x = tape.variable(x0.to<counted>());
        const CountedVar y = fused ? mean(x, std::span<const int>(axes), keep_dims) : summed(x);
        gradients[fused] =
            bits(grad(sum(y), std::span<const CountedVar>(&x, 1), {.create_graph = create_graph})[0]
                     .value());
      }
      CHECK(gradients[true] == gradients[false]);
    }
    for (const bool create_graph : {false, true}) {
      std::vector<std::uint32_t> results[2][3];  // fused, then sum and scale: y, dy/dx, d2
      for (const bool fused : {true, false}) {
        Tape<float, counted> tape;
        const CountedVar x = tape.variable(x0.to<counted>()), w = tape.constant(w0.to<counted>());
        counted::reset();
        const CountedVar y = fused ? mean(x, std::span<const int>(axes), keep_dims) : summed(x);
        if (fused && !axes.empty()) {
          CHECK(counted::calls()["reduce mean"] == 1);
          CHECK(counted::calls().total() == 1);
        }
        // Through a square, so that the second derivative reaches mean's rule again.
        const CountedVar loss =
            sum(mul(square(y), sum(mul(x, w), std::span<const int>(axes), keep_dims)));
        const auto g =
            grad(loss, std::span<const CountedVar>(&x, 1), {.create_graph = create_graph})[0];
        results[fused][0] = bits(y.value());
        results[fused][1] = bits(g.value());
        if (create_graph) {
          const auto h = grad(sum(mul(g, w)), std::span<const CountedVar>(&x, 1))[0];
          results[fused][2] = bits(h.value());
        }
      }
      for (int k = 0; k < 3; ++k) CHECK(results[true][k] == results[false][k]);
    }
  }
  // Raw: its values against sum_to's scaled; the empty-axis error.
  const auto raw_mean = raw::mean_to(x0, {3, 1, 5});
  CHECK(raw_mean.to_vector() ==
        raw::map(UnaryOp::scale, raw::sum_to(x0, {3, 1, 5}), 1.f / 7).to_vector());
  CHECK_THROWS_WITH(raw::mean_to(Tensor<float>(Shape{3, 0}), {3, 1}),
                    Contains("mean over an empty axis of [3, 0]"));
  CHECK(raw::mean_to(Tensor<float>(Shape{0, 3}), {0, 1}).numel() == 0);
}

TEST_CASE("add_n adds its summands in order, with the bits of a chain of adds", "[ops]") {
  // Float summands of very different sizes, where another order would round
  // differently.
  Generator gen(79);
  const auto a = raw::normal<float>({4, 33}, gen), b = raw::map(UnaryOp::scale, a, -1e7f),
             c = raw::normal<float>({4, 33}, gen);
  const auto chain = [](std::vector<const Tensor<float>*> x) {
    Tensor<float> s = raw::map(BinaryOp::add, *x[0], *x[1], "add");
    for (std::size_t k = 2; k < x.size(); ++k) s = raw::map(BinaryOp::add, s, *x[k], "add");
    return s.to_vector();
  };
  for (const std::vector<const Tensor<float>*>& x :
       {std::vector{&a, &b}, std::vector{&b, &c}, std::vector{&a, &b, &c}, std::vector{&c, &b, &a}})
    CHECK(raw::add_n(std::span<const Tensor<float>* const>(x)).to_vector() == chain(x));
  const auto d = raw::normal<float>({4, 32}, gen);
  const std::vector<const Tensor<float>*> one{&a}, four{&a, &b, &c, &a}, unlike{&a, &d};
  CHECK_THROWS_WITH(raw::add_n(std::span<const Tensor<float>* const>(one)),
                    Contains("1 summands given; it takes 2 to 3"));
  CHECK_THROWS_WITH(raw::add_n(std::span<const Tensor<float>* const>(four)),
                    Contains("4 summands given"));
  CHECK_THROWS_WITH(raw::add_n(std::span<const Tensor<float>* const>(unlike)),
                    Contains("add_n") && Contains("shapes [4, 33] and [4, 32] do not broadcast"));
}

TEST_CASE("add_n routes its sum as relu_backward would, with its bits, where given a route",
          "[ops]") {
  Generator gen(81);
  const auto a = raw::normal<double>({4, 3}, gen), b = raw::normal<double>({4, 1}, gen),
             route = raw::normal<double>({4, 3}, gen);
  const std::vector<const Tensor<double>*> x{&a, &b, &a};
  const std::array<bool, 3> negate{false, true, false};
  const auto sum = raw::add_n(std::span<const Tensor<double>* const>(x), std::span(negate));
  const auto routed =
      raw::add_n(std::span<const Tensor<double>* const>(x), std::span(negate), &route);
  CHECK(bits(routed) == bits(raw::map(BinaryOp::relu_backward, sum, route, "relu_backward")));
  const auto narrow = raw::normal<double>({4, 1}, gen);
  CHECK_THROWS_WITH(
      raw::add_n(std::span<const Tensor<double>* const>(x), std::span(negate), &narrow),
      Contains("add_n") && Contains("route [4, 1] for a sum [4, 3]"));
}

TEST_CASE(
    "a ReLU's gradient in parts is added and routed by one add_n call in a sweep that records "
    "nothing, with the bits of add_n and relu_backward",
    "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  const auto x0 = normal({3, 4, 5}, 460), a0 = normal({3, 4, 5}, 461), b0 = normal({3, 4, 5}, 462),
             w0 = normal({3, 1, 5}, 463);
  // relu's and relu_backward's nodes, their outputs read two, three and four
  // ways (four: three added, then the sum and the fourth routed), one part
  // negated (neg's) and one a broadcast gradient [3, 1, 5]; and h's own
  // gradient asked for too, where the sweep must leave h's parts alone.
  const auto build = [&]<class Backend>(Tape<double, Backend>& tape, bool backward_op, int ways) {
    const Var<double, Backend> x = tape.variable(x0.to<Backend>()),
                               a = tape.constant(a0.to<Backend>()),
                               b = tape.constant(b0.to<Backend>()),
                               w = tape.constant(w0.to<Backend>());
    const Var<double, Backend> h = backward_op ? relu_backward(x, a) : relu(x);
    Var<double, Backend> y = add(sum(mul(h, a)), sum(mul(neg(h), b)));
    if (ways >= 3) y = add(y, sum(mul(sum_to(h, {3, 1, 5}), w)));
    if (ways >= 4) y = add(y, sum(square(h)));
    return std::array<Var<double, Backend>, 3>{x, h, y};
  };
  for (const bool backward_op : {false, true})
    for (const int ways : {2, 3, 4})
      for (const bool h_wanted : {false, true}) {
        CAPTURE(backward_op, ways, h_wanted);
        std::vector<std::uint64_t> results[2];
        for (const bool create_graph : {false, true}) {
          Tape<double, counted> tape;
          const auto [x, h, y] = build(tape, backward_op, ways);
          counted::reset();
          const auto g = h_wanted ? grad(y, {x, h}, {.create_graph = create_graph})
                                  : grad(y, {x}, {.create_graph = create_graph});
          KernelCalls calls = counted::calls();
          const bool routed = !create_graph && !h_wanted;
          CHECK(calls["binary relu_backward"] == (routed ? 0u : 1u));
          if (!create_graph) CHECK(calls["add_n"] == (ways == 4 ? 2u : 1u));
          results[create_graph] = bits(g[0].value());
        }
        CHECK(results[0] == results[1]);
        // The CPU backend, which adds each gradient as it comes and runs the rule.
        Tape<double, cpu> tape;
        const auto [x, h, y] = build(tape, backward_op, ways);
        CHECK(results[0] == bits(grad(y, {x})[0].value()));
      }
}

TEST_CASE(
    "a ReLU layer's gradient in parts is added, routed and summed for its bias by one add_n call "
    "in a sweep that records nothing, with the bits of add_n and relu_bias_backward",
    "[ops][grad]") {
  Generator gen(83);
  // Raw: the bits of add_n then relu_bias_backward; the shape error; nothing
  // where the bias's batch does not group the rows.
  const auto a = raw::normal<double>({3, 4, 5}, gen), b = raw::normal<double>({3, 1, 5}, gen),
             y = raw::map(UnaryOp::relu, raw::normal<double>({3, 4, 5}, gen));
  const std::vector<const Tensor<double>*> parts{&a, &b, &a};
  const std::array<bool, 3> negate{false, true, false};
  const auto summands = std::span<const Tensor<double>* const>(parts);
  const auto fused = raw::relu_bias_backward(summands, std::span(negate), y, {3, 5});
  const auto apart = raw::relu_bias_backward(raw::add_n(summands, std::span(negate)), y, {3, 5});
  REQUIRE(fused);
  REQUIRE(apart);
  CHECK(bits(fused->first) == bits(apart->first));
  CHECK(bits(fused->second) == bits(apart->second));
  CHECK_FALSE(raw::relu_bias_backward(summands, std::span(negate), y, {4, 5}).has_value());
  const auto narrow = raw::normal<double>({3, 4, 1}, gen);
  CHECK_THROWS_WITH(
      raw::relu_bias_backward(summands, std::span(negate), narrow, {3, 5}),
      Contains("relu_bias_backward") && Contains("gradient [3, 4, 5] for an output [3, 4, 1]"));
  CHECK_THROWS_WITH(
      raw::relu_bias_backward(std::span<const Tensor<double>* const>(), {}, y, {3, 5}),
      Contains("relu_bias_backward") && Contains("no summands given"));

  // A hidden layer's output read two, three and four ways (as in the outer
  // sweep of second-order MAML), one part negated and one broadcast; and h's
  // own gradient asked for too, where the rule gets h's gradient summed.
  using counted = CountingBackend<cpu>;
  const auto x0 = normal({3, 4, 6}, 470), w0 = normal({3, 6, 5}, 471), b0 = normal({3, 5}, 472),
             c0 = normal({3, 4, 5}, 473), d0 = normal({3, 4, 5}, 474), e0 = normal({3, 1, 5}, 475);
  const auto build = [&]<class Backend>(Tape<double, Backend>& tape, int ways) {
    const Var<double, Backend> x = tape.constant(x0.to<Backend>()),
                               w = tape.variable(w0.to<Backend>()),
                               bias = tape.variable(b0.to<Backend>()),
                               c = tape.constant(c0.to<Backend>()),
                               d = tape.constant(d0.to<Backend>()),
                               e = tape.constant(e0.to<Backend>());
    const Var<double, Backend> h = linear(x, w, bias, Activation::relu);
    // ways 0: h read only through two sums over its rows, whose broadcast
    // gradients the rule reads expanded (no parts offered).
    Var<double, Backend> out =
        ways == 0 ? add(sum(mul(sum_to(h, {3, 1, 5}), e)), sum(mul(sum_to(h, {3, 1, 5}), neg(e))))
                  : add(sum(mul(h, c)), sum(mul(neg(h), d)));
    if (ways >= 3) out = add(out, sum(mul(sum_to(h, {3, 1, 5}), e)));
    if (ways >= 4) out = add(out, sum(square(h)));
    return std::array<Var<double, Backend>, 4>{w, bias, h, out};
  };
  for (const int ways : {0, 2, 3, 4})
    for (const bool h_wanted : {false, true}) {
      CAPTURE(ways, h_wanted);
      // create_graph; w's, the bias's, h's where wanted
      std::vector<std::uint64_t> results[2][3];
      for (const bool create_graph : {false, true}) {
        Tape<double, counted> tape;
        const auto [w, bias, h, out] = build(tape, ways);
        counted::reset();
        const auto g = h_wanted ? grad(out, {w, bias, h}, {.create_graph = create_graph})
                                : grad(out, {w, bias}, {.create_graph = create_graph});
        KernelCalls calls = counted::calls();
        if (!create_graph) {
          CHECK(calls["relu_bias_backward"] == (h_wanted || ways == 0 ? 1u : 0u));
          CHECK(calls["binary relu_backward"] == 0);
          CHECK(calls["add_n"] == (ways == 4 ? 2u : 1u));
        }
        for (std::size_t k = 0; k < g.size(); ++k) results[create_graph][k] = bits(g[k].value());
      }
      for (std::size_t k = 0; k < 3; ++k) CHECK(results[0][k] == results[1][k]);
      // The CPU backend, which adds each gradient as it comes and runs the rule.
      Tape<double, cpu> tape;
      const auto [w, bias, h, out] = build(tape, ways);
      const auto g = h_wanted ? grad(out, {w, bias, h}) : grad(out, {w, bias});
      for (std::size_t k = 0; k < g.size(); ++k) CHECK(results[0][k] == bits(g[k].value()));
    }
}

TEST_CASE(
    "a scaled value's gradient in parts is added and scaled by one add_n call in a sweep that "
    "records nothing, with the bits of add_n and scale",
    "[ops][grad]") {
  Generator gen(84);
  // Raw: the bits of add_n then scale, a part negated and one broadcast.
  const auto a = raw::normal<float>({3, 4, 5}, gen), b = raw::normal<float>({3, 1, 5}, gen);
  const std::vector<const Tensor<float>*> parts{&a, &b, &a};
  const std::array<bool, 3> negate{false, true, false};
  const auto summands = std::span<const Tensor<float>* const>(parts);
  for (const float s : {0.3f, -1.7f, 1.f})
    CHECK(bits(raw::scaled_add_n(summands, std::span(negate), s)) ==
          bits(raw::map(UnaryOp::scale, raw::add_n(summands, std::span(negate)), s)));

  // h = 0.3 x read two, three and four ways, one part negated and one
  // broadcast, or only through two sums over its rows (broadcast parts,
  // which the rule reads expanded); h's own gradient asked for too. The
  // calls are those of the same reads of x itself, with no scale where the
  // rule takes the parts.
  using counted = CountingBackend<cpu>;
  const auto x0 = normal({3, 4, 5}, 480), c0 = normal({3, 4, 5}, 481), d0 = normal({3, 4, 5}, 482),
             e0 = normal({3, 1, 5}, 483);
  const auto build = [&]<class Backend>(Tape<double, Backend>& tape, int ways, bool scaled) {
    const Var<double, Backend> x = tape.variable(x0.to<Backend>()),
                               c = tape.constant(c0.to<Backend>()),
                               d = tape.constant(d0.to<Backend>()),
                               e = tape.constant(e0.to<Backend>());
    const Var<double, Backend> h = scaled ? scale(x, 0.3) : x;
    Var<double, Backend> out =
        ways == 0 ? add(sum(mul(sum_to(h, {3, 1, 5}), e)), sum(mul(sum_to(h, {3, 1, 5}), neg(e))))
                  : add(sum(mul(h, c)), sum(mul(neg(h), d)));
    if (ways >= 3) out = add(out, sum(mul(sum_to(h, {3, 1, 5}), e)));
    if (ways >= 4) out = add(out, sum(square(h)));
    return std::array<Var<double, Backend>, 3>{x, h, out};
  };
  for (const int ways : {0, 2, 3, 4}) {
    KernelCalls plain;
    {
      Tape<double, counted> tape;
      const auto [x, h, out] = build(tape, ways, false);
      counted::reset();
      grad(out, x);
      plain = counted::calls();
    }
    for (const bool h_wanted : {false, true}) {
      CAPTURE(ways, h_wanted);
      std::vector<std::uint64_t> results[2][2];  // create_graph; x's, h's where wanted
      for (const bool create_graph : {false, true}) {
        Tape<double, counted> tape;
        const auto [x, h, out] = build(tape, ways, true);
        counted::reset();
        const auto g = h_wanted ? grad(out, {x, h}, {.create_graph = create_graph})
                                : grad(out, {x}, {.create_graph = create_graph});
        const KernelCalls calls = counted::calls();
        if (!create_graph) {
          const bool fused = ways > 0 && !h_wanted;
          CHECK(calls["add_n"] == plain["add_n"]);
          CHECK(calls["unary scale"] == plain["unary scale"] + (fused ? 0u : 1u));
          // h's own gradient from broadcast parts is expanded to h's shape, as x's is.
          const std::uint64_t expanded = ways == 0 && h_wanted ? 1u : 0u;
          CHECK(calls["strided_copy"] == plain["strided_copy"] + expanded);
          CHECK(calls.total() == plain.total() + (fused ? 0u : 1u) + expanded);
        }
        for (std::size_t k = 0; k < g.size(); ++k) results[create_graph][k] = bits(g[k].value());
      }
      for (std::size_t k = 0; k < 2; ++k) CHECK(results[0][k] == results[1][k]);
      // The CPU backend, which adds each gradient as it comes and runs the rule.
      Tape<double, cpu> tape;
      const auto [x, h, out] = build(tape, ways, true);
      const auto g = h_wanted ? grad(out, {x, h}) : grad(out, {x});
      for (std::size_t k = 0; k < g.size(); ++k) CHECK(results[0][k] == bits(g[k].value()));
    }
  }
}

TEST_CASE(
    "a cross-entropy's recorded gradient in parts is added and scaled by one add_n call in the "
    "outer sweep of a second-order step, with the plain CPU's bits",
    "[ops][grad]") {
  // One recorded inner step of a linear classifier on a mean cross-entropy
  // and the query loss after it, differentiated (MAML's outer sweep): the
  // recorded u (p - y) is read by the two ops of the step's backward (w's
  // product and b's sum), whose gradients one add_n adds and scales by u.
  using counted = CountingBackend<cpu>;
  const auto x0 = normal({4, 3}, 490), q0 = normal({4, 3}, 491), w0 = normal({3, 5}, 492),
             b0 = normal({5}, 493);
  std::vector<double> rows(20, 0.0);
  for (std::size_t r = 0; r < 4; ++r) rows[r * 5 + (r * 2) % 5] = 1.0;  // one-hot
  const auto one_hot = Tensor<double>::from_host({4, 5}, rows);
  const auto step = [&]<class Backend>(Tape<double, Backend>& tape) {
    const Var<double, Backend> w = tape.variable(w0.to<Backend>()),
                               b = tape.variable(b0.to<Backend>());
    const auto loss = [&](const Tensor<double>& x, const Var<double, Backend>& wx,
                          const Var<double, Backend>& bx) {
      const auto logits = linear(tape.constant(x.to<Backend>()), wx, bx);
      return mean(cross_entropy_with_logits(logits, one_hot.to<Backend>()));
    };
    const auto g = grad(loss(x0, w, b), {w, b}, {.create_graph = true});
    const auto query = loss(q0, sub(w, scale(g[0], 0.1)), sub(b, scale(g[1], 0.1)));
    return std::array<Var<double, Backend>, 3>{w, b, query};
  };
  Tape<double, counted> tape;
  const auto [w, b, query] = step(tape);
  counted::reset();
  const auto g = grad(query, {w, b});
  // The steps' two scales, each of a gradient that came whole; none for u (p - y).
  CHECK(counted::calls()["unary scale"] == 2u);
  Tape<double, cpu> plain;
  const auto [w_cpu, b_cpu, query_cpu] = step(plain);
  const auto g_cpu = grad(query_cpu, {w_cpu, b_cpu});
  for (std::size_t k = 0; k < 2; ++k) CHECK(bits(g[k].value()) == bits(g_cpu[k].value()));
}

TEST_CASE(
    "add_n adds summands that repeat along up to two runs of axes, with a broadcasting "
    "add's bits",
    "[ops]") {
  Generator gen(91);
  const auto full = raw::normal<float>({2, 5, 3, 4}, gen),
             other = raw::normal<float>({2, 5, 3, 4}, gen);
  // One run: along axis 1, the leading two (also missing), the last one,
  // all of them. Two runs: axes 1 and 3 (a per-channel gradient beside
  // conv4's [tasks, n, c, h, w]), axes 0-1 (missing) and 3, axes 0 (missing
  // or not) and 2, axes 0 (not missing or missing) and 2-3.
  const std::vector<Shape> shapes{{2, 1, 3, 4}, {1, 1, 3, 4}, {3, 4},   {2, 5, 3, 1},
                                  {1},          {2, 1, 3, 1}, {3, 1},   {5, 1, 4},
                                  {1, 5, 1, 4}, {1, 5, 1, 1}, {5, 1, 1}};
  for (const Shape& shape : shapes) {
    const auto part = raw::map(UnaryOp::scale, raw::normal<float>(shape, gen), 1e4f);
    // The repeated summand first, in the middle and last, each summand
    // negated or not (a repeated first one meets a plain or a negated second).
    for (int order = 0; order < 3; ++order)
      for (int mask = 0; mask < 8; ++mask) {
        std::vector<const Tensor<float>*> x{&full, &other};
        x.insert(x.begin() + order, &part);
        const std::array<bool, 3> negate{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
        Tensor<float> chain = negate[0] ? raw::map(UnaryOp::neg, *x[0]) : x[0]->clone();
        for (std::size_t k = 1; k < 3; ++k)
          chain = raw::map(negate[k] ? BinaryOp::sub : BinaryOp::add, chain, *x[k], "add");
        INFO("summand " << fmt::format("{}", shape) << " at " << order << ", negate mask " << mask);
        const auto summands = std::span<const Tensor<float>* const>(x);
        CHECK(raw::add_n_takes(summands) == full.shape());
        const auto sum = raw::add_n(summands, std::span<const bool>(negate));
        CHECK(sum.shape() == full.shape());
        CHECK(bits(sum) == bits(chain));
      }
  }
  // Scalars, and an empty sum (no backend call).
  const auto u = raw::normal<float>({}, gen), v = raw::normal<float>({}, gen);
  const std::vector<const Tensor<float>*> scalars{&u, &v};
  CHECK(bits(raw::add_n(std::span<const Tensor<float>* const>(scalars))) ==
        bits(raw::map(BinaryOp::add, u, v, "add")));
  const Tensor<float> none({0, 4}), row4({1, 4});
  const std::vector<const Tensor<float>*> empty{&row4, &none};
  CHECK(raw::add_n(std::span<const Tensor<float>* const>(empty)).shape() == Shape{0, 4});
  // All summands repeated: the sum keeps their broadcast shape.
  const auto row = raw::normal<float>({2, 1, 3}, gen), column = raw::normal<float>({1, 1, 3}, gen);
  const std::vector<const Tensor<float>*> small{&row, &column};
  const auto small_sum = raw::add_n(std::span<const Tensor<float>* const>(small));
  CHECK(small_sum.shape() == Shape{2, 1, 3});
  CHECK(bits(small_sum) == bits(raw::map(BinaryOp::add, row, column, "add")));
  // Repeated along three runs (axes 0, 2 and 4): a broadcasting add's, not add_n's.
  const auto wide = raw::normal<float>({2, 5, 3, 4, 2}, gen),
             split = raw::normal<float>({1, 5, 1, 4, 1}, gen);
  const std::vector<const Tensor<float>*> three_runs{&wide, &split};
  CHECK_FALSE(raw::add_n_takes(std::span<const Tensor<float>* const>(three_runs)).has_value());
  CHECK_THROWS_WITH(raw::add_n(std::span<const Tensor<float>* const>(three_runs)),
                    Contains("summand 1 is [1, 5, 1, 4, 1], which repeats over [2, 5, 3, 4, 2] "
                             "along more than two runs of axes"));
  const auto repetition = [](const Shape& x, const Shape& out) {
    const auto r = raw::repetition_over(x, out);
    REQUIRE(r.has_value());
    return std::array{r->outer_repeat, r->middle, r->inner_repeat, r->inner};
  };
  CHECK(repetition({2, 1, 3}, {2, 5, 3}) == std::array<std::int64_t, 4>{1, 1, 5, 3});
  CHECK(repetition({3}, {2, 5, 3}) == std::array<std::int64_t, 4>{1, 1, 10, 3});
  CHECK(repetition({2, 5, 3}, {2, 5, 3}) == std::array<std::int64_t, 4>{1, 1, 1, 1});
  CHECK(repetition({4, 1, 6, 1, 1}, {4, 5, 6, 7, 7}) == std::array<std::int64_t, 4>{5, 6, 49, 1});
  CHECK(repetition({5, 1, 2}, {3, 1, 5, 4, 2}) == std::array<std::int64_t, 4>{3, 5, 4, 2});
  // An axis of extent 1 inside a run leaves it one run.
  CHECK(repetition({2, 1, 1, 1, 3}, {2, 4, 1, 5, 3}) == std::array<std::int64_t, 4>{1, 1, 20, 3});
  CHECK_FALSE(raw::repetition_over({2, 2, 3}, {2, 5, 3}).has_value());
  CHECK_FALSE(raw::repetition_over({1, 2, 5, 3}, {2, 5, 3}).has_value());
  CHECK_FALSE(raw::repetition_over({1, 5, 1, 4, 1}, {2, 5, 3, 4, 2}).has_value());
  // Repetition::source (the CUDA kernel's index) is the broadcast's: the
  // element's index along each axis, 0 where the summand has 1.
  const Shape& out = full.shape();
  for (const Shape& shape : shapes) {
    const auto r = raw::repetition_over(shape, out);
    REQUIRE(r.has_value());
    INFO("summand " << fmt::format("{}", shape));
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      std::int64_t rest = i, j = 0, stride = 1;
      for (int a = out.rank() - 1, xa = shape.rank() - 1; a >= 0; --a, --xa) {
        const std::int64_t at = rest % out[a];
        rest /= out[a];
        if (xa < 0) continue;
        j += (shape[xa] == 1 ? 0 : at) * stride;
        stride *= shape[xa];
      }
      REQUIRE(r->source(i) == j);
    }
  }
}

TEST_CASE("a sweep adds a value's broadcast gradient and its others with one add_n, same bits",
          "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  Generator gen(92);
  // A bias's gradient (one run of repeated axes), a per-channel one in
  // conv4's [tasks, n, c, h, w] (two runs).
  for (const auto& [shape, part] : {std::pair{Shape{2, 5, 3}, Shape{2, 1, 3}},
                                    std::pair{Shape{2, 5, 3, 2, 2}, Shape{2, 1, 3, 1, 1}}}) {
    INFO(fmt::format("a {} gradient of a {} value", part, shape));
    const auto x0 = raw::normal<float>(shape, gen), w0 = raw::normal<float>(part, gen),
               u0 = raw::normal<float>(shape, gen);
    std::vector<float> gradients[2];
    for (const bool create_graph : {false, true}) {
      Tape<float, counted> tape;
      const CountedVar x = tape.variable(x0.to<counted>());
      const CountedVar w = tape.constant(w0.to<counted>()), u = tape.constant(u0.to<counted>());
      // sum_to's rule gives x a gradient of the part's shape, unexpanded
      // where the sweep records nothing; the products give it two full ones.
      const CountedVar loss =
          sum(mul(sum_to(x, part), w)) + sum(mul(x, u)) + sum(mul(square(x), u));
      counted::reset();
      const auto g =
          grad(loss, std::span<const CountedVar>(&x, 1), {.create_graph = create_graph})[0];
      const KernelCalls calls = counted::calls();
      if (!create_graph) {
        CHECK(calls["add_n"] == 1);
        CHECK(calls["binary add"] == 0);
      }
      gradients[create_graph] = g.value().to<cpu>().to_vector();
    }
    // The recording sweep adds them with broadcasting adds: the same bits.
    CHECK(gradients[0] == gradients[1]);
  }
}

TEST_CASE("add_n negates the summands it is told to with the bits of negating them first",
          "[ops]") {
  // Zeros of both signs and opposite values, where -(a + b) and -a - b (or
  // a sum that carried a sign) would give zeros of another sign.
  const auto a = Tensor<float>::from_host({6}, {0.f, -0.f, 0.f, 1.5f, 1e7f, 3.f});
  const auto b = Tensor<float>::from_host({6}, {0.f, 0.f, -0.f, -1.5f, 1.f, 2.f});
  const auto c = Tensor<float>::from_host({6}, {-0.f, 0.f, 0.f, 0.f, -1e7f, 0.25f});
  const std::vector<const Tensor<float>*> x{&a, &b, &c};
  for (int mask = 0; mask < 8; ++mask) {
    const std::array<bool, 3> negate{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    const auto signed_summand = [&](std::size_t k) {
      return negate[k] ? raw::map(UnaryOp::neg, *x[k]) : x[k]->clone();
    };
    Tensor<float> chain = signed_summand(0);
    for (std::size_t k = 1; k < 3; ++k)
      chain = raw::map(BinaryOp::add, chain, signed_summand(k), "add");
    INFO("negate mask " << mask);
    CHECK(bits(raw::add_n(std::span<const Tensor<float>* const>(x),
                          std::span<const bool>(negate))) == bits(chain));
  }
  const std::array<bool, 2> two{true, false};
  CHECK_THROWS_WITH(
      raw::add_n(std::span<const Tensor<float>* const>(x), std::span<const bool>(two)),
      Contains("2 negate flags given for 3 summands"));
}

TEST_CASE("foreach_add_n gives each sum add_n's bits, by one backend call per capacity of sums",
          "[ops]") {
  using counted = CountingBackend<cpu>;
  using CountedTensor = Tensor<float, counted>;
  Generator gen(94);
  // More sums than one call takes: 2 and 3 summands, of different sizes, some
  // repeated (a bias's gradient beside a full one) and some negated, and an
  // empty sum among them (no work).
  constexpr int capacity = SumsLayout<float>::capacity;
  const int count = capacity + 6;
  std::vector<CountedTensor> summands;
  summands.reserve(3 * static_cast<std::size_t>(count));
  std::vector<std::vector<const CountedTensor*>> x(static_cast<std::size_t>(count));
  std::vector<std::vector<bool>> negate_lists(static_cast<std::size_t>(count));
  std::vector<std::array<bool, 3>> negate_storage(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const auto at = static_cast<std::size_t>(i);
    const Shape full = i == 5 ? Shape{0, 3} : Shape{2, 3 + i % 7, 4};
    const Shape part = i % 3 == 1 ? Shape{2, 1, 4} : full;
    const int n = 2 + i % 2;
    for (int k = 0; k < n; ++k) {
      summands.push_back(raw::map(UnaryOp::scale, raw::normal<float>(k == 1 ? part : full, gen),
                                  k == 2 ? 1e6f : 1.f)
                             .to<counted>());
      x[at].push_back(&summands.back());
      negate_storage[at][static_cast<std::size_t>(k)] = (i + k) % 4 == 0;
    }
  }
  std::vector<std::span<const CountedTensor* const>> sums;
  std::vector<std::span<const bool>> negate;
  for (int i = 0; i < count; ++i) {
    const auto at = static_cast<std::size_t>(i);
    sums.emplace_back(x[at]);
    negate.emplace_back(negate_storage[at].data(), x[at].size());
  }
  counted::reset();
  const auto y = raw::foreach_add_n(std::span<const std::span<const CountedTensor* const>>(sums),
                                    std::span<const std::span<const bool>>(negate));
  const KernelCalls calls = counted::calls();
  CHECK(calls["foreach_add_n"] == 2u);
  CHECK(calls.total() == 2u);
  REQUIRE(y.size() == sums.size());
  for (std::size_t i = 0; i < sums.size(); ++i) {
    INFO("sum " << i);
    const auto one = raw::add_n(sums[i], negate[i]);
    CHECK(y[i].shape() == one.shape());
    CHECK(bits(y[i]) == bits(one));
  }
  // No negate lists: nothing negated.
  const auto plain =
      raw::foreach_add_n(std::span<const std::span<const CountedTensor* const>>(sums).first(2));
  CHECK(bits(plain[1]) == bits(raw::add_n(sums[1])));
  // Errors name foreach_add_n and the sum's fault.
  const std::vector<const CountedTensor*> one{&summands[0]};
  const std::array<std::span<const CountedTensor* const>, 2> with_one{sums[0], one};
  CHECK_THROWS_WITH(
      raw::foreach_add_n(std::span<const std::span<const CountedTensor* const>>(with_one)),
      Contains("foreach_add_n") && Contains("1 summands given; it takes 2 to 3"));
  CHECK_THROWS_WITH(raw::foreach_add_n(std::span<const std::span<const CountedTensor* const>>(sums),
                                       std::span<const std::span<const bool>>(negate).first(3)),
                    Contains("foreach_add_n") &&
                        Contains(fmt::format("3 lists of negate flags given for {} sums", count)));
}

TEST_CASE("exp_scaled is exp(scale(x, s)) in one call, with its bits to the second derivative",
          "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  Generator gen(410);
  const auto x0 = raw::normal<float>({4, 3}, gen), w0 = raw::normal<float>({4, 3}, gen);
  for (const float s : {0.5f, -1.f}) {
    std::vector<float> results[2];
    std::uint64_t backward_calls[2];
    for (const bool fused : {false, true}) {
      Tape<float, counted> tape;
      const CountedVar x = tape.variable(x0.to<counted>()), w = tape.constant(w0.to<counted>());
      counted::reset();
      const CountedVar e = fused ? exp_scaled(x, s) : exp(s == -1.f ? neg(x) : scale(x, s));
      CHECK(counted::calls().total() == (fused ? 1u : 2u));
      // x reaches the loss twice, so that exp_scaled(x, -1)'s negated
      // gradient is subtracted where x's two gradients meet.
      const CountedVar loss = sum(add(mul(e, w), square(x)));
      counted::reset();
      const auto g = grad(loss, std::span<const CountedVar>(&x, 1))[0];
      backward_calls[fused] = counted::calls().total();
      const auto g2 = grad(loss, std::span<const CountedVar>(&x, 1), {.create_graph = true})[0];
      const auto h = grad(sum(mul(g2, g2)), std::span<const CountedVar>(&x, 1))[0];
      results[fused] = g.value().to<cpu>().to_vector();
      for (const float v : h.value().to<cpu>().to_vector()) results[fused].push_back(v);
    }
    CHECK(results[0] == results[1]);
    CHECK(backward_calls[0] == backward_calls[1]);  // -1's sign costs no kernel
  }
}

TEST_CASE("div by a scalar has the bits of div by a tensor of it, to the second derivative",
          "[ops][grad]") {
  check_derivatives([](auto x) { return div(x[0], 0.7); }, list(normal({2, 3}, 61)));
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  Generator gen(411);
  const auto x0 = raw::normal<float>({4, 3}, gen), w0 = raw::normal<float>({4, 3}, gen);
  for (const float s : {0.09f, -3.f})
    for (const bool uniform : {false, true}) {
      std::vector<std::uint32_t> results[2];
      for (const bool scalar : {false, true}) {
        Tape<float, counted> tape;
        const CountedVar x = tape.variable(x0.to<counted>()), w = tape.constant(w0.to<counted>());
        const auto divided = [&](const CountedVar& a) {
          return scalar ? div(a, s) : div(a, tape.constant(Tensor<float, counted>::full({}, s)));
        };
        // The quotient's gradient one host value (a mean's, divided on the
        // host), or a tensor, negated by sub.
        const CountedVar loss =
            uniform ? mean(divided(square(x))) : sum(sub(square(x), mul(divided(x), w)));
        const auto g = grad(loss, std::span<const CountedVar>(&x, 1))[0];
        const auto g2 = grad(loss, std::span<const CountedVar>(&x, 1), {.create_graph = true})[0];
        const auto h = grad(sum(mul(g2, g2)), std::span<const CountedVar>(&x, 1))[0];
        for (const auto& v : {loss, g, g2, h})
          for (const auto b : bits(v.value())) results[scalar].push_back(b);
      }
      CHECK(results[0] == results[1]);
    }
}

TEST_CASE(
    "gaussian_nll_loss at a host variance has the bits of a tensor of it, to the second "
    "derivative, in fewer kernels",
    "[ops][loss]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  Generator gen(412);
  const auto p0 = raw::normal<float>({2, 5, 1}, gen), y0 = raw::normal<float>({2, 5, 1}, gen);
  for (const double noise_std : {0.3, 1.7})
    for (const auto reduction : {Reduction::mean, Reduction::sum}) {
      std::vector<std::uint32_t> results[2];
      KernelCalls forward[2], backward[2];
      for (const bool host : {false, true}) {
        Tape<float, counted> tape;
        const CountedVar p = tape.variable(p0.to<counted>()), y = tape.constant(y0.to<counted>());
        const auto variance = static_cast<float>(noise_std * noise_std);
        const auto v = tape.constant(Tensor<float, counted>::full({}, variance));
        counted::reset();
        const CountedVar per_task =
            host ? GaussianNllLoss{.noise_std = noise_std, .reduction = reduction}(p, y, 1)
                 : gaussian_nll_loss(p, v, y, 1, reduction);
        forward[host] = counted::calls();
        const CountedVar loss = sum(per_task);
        counted::reset();
        const auto g = grad(loss, std::span<const CountedVar>(&p, 1))[0];
        backward[host] = counted::calls();
        const auto g2 = grad(loss, std::span<const CountedVar>(&p, 1), {.create_graph = true})[0];
        const auto h = grad(sum(mul(g2, g2)), std::span<const CountedVar>(&p, 1))[0];
        for (const auto& r : {per_task, g, g2, h})
          for (const auto b : bits(r.value())) results[host].push_back(b);
      }
      CHECK(results[0] == results[1]);
      // One op, squared_error, where the tensor's were eight.
      CHECK(forward[0].total() == 8);
      CHECK(forward[1].total() == 1);
      CHECK(forward[1]["squared_error"] == 1);
      // The gradient stays one host value down to square's one scale.
      CHECK(backward[1].total() == 1);
      CHECK(backward[1]["unary scale"] == 1);
    }
  Tape<double> tape;
  const auto p = tape.variable(Tensor<double>::zeros({3}));
  for (const double bad : {0.0, -1.0, std::nan("")})
    CHECK_THROWS_WITH(gaussian_nll_loss(p, bad, p),
                      Contains("gaussian_nll_loss") && Contains("variance"));
}

TEST_CASE(
    "squared_error has the bits of sub, square, the NLL's maps and the reduction, to the second "
    "derivative, in one call",
    "[ops][loss]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  using Span = std::span<const CountedVar>;
  Generator gen(413);
  const auto p0 = raw::normal<float>({2, 5, 3}, gen), y0 = raw::normal<float>({2, 5, 3}, gen);
  const float variance = 0.09f;
  // No reduction (batch_dims 3), a mean or sum per task, one over all; the
  // loss's gradient one value (a sum's) or a tensor; mse or the NLL.
  for (const int batch_dims : {0, 1, 3})
    for (const auto reduction : {Reduction::mean, Reduction::sum})
      for (const bool tensor_gradient : {false, true})
        for (const bool gaussian : {false, true}) {
          CAPTURE(batch_dims, reduction == Reduction::mean, tensor_gradient, gaussian);
          std::vector<std::uint32_t> results[2];
          KernelCalls forward[2];
          for (const bool fused : {false, true}) {
            Tape<float, counted> tape;
            const std::array<CountedVar, 2> v{tape.variable(p0.to<counted>()),
                                              tape.variable(y0.to<counted>())};
            counted::reset();
            CountedVar loss;
            if (fused) {
              loss = squared_error(v[0], v[1], batch_dims, reduction == Reduction::mean,
                                   gaussian ? std::optional<float>(variance) : std::nullopt);
            } else {
              auto q = square(sub(v[0], v[1]));
              if (gaussian)
                q = scale(
                    shift(shift(div(q, variance), std::log(variance)), detail::log_two_pi<float>()),
                    0.5f);
              loss = detail::reduce_after(q, batch_dims, reduction, "composite");
            }
            forward[fused] = counted::calls();
            const CountedVar total = tensor_gradient ? sum(square(loss)) : sum(loss);
            const auto g = grad(total, Span(v));
            const auto g2 = grad(total, Span(v), {.create_graph = true});
            const auto h = grad(sum(mul(g2[0], g2[0])) + sum(mul(g2[1], g2[0])), Span(v));
            for (const auto& r : {loss, g[0], g[1], g2[0], g2[1], h[0], h[1]})
              for (const auto b : bits(r.value())) results[fused].push_back(b);
          }
          CHECK(results[0] == results[1]);
          CHECK(forward[1].total() == 1);
          CHECK(forward[1]["squared_error"] == 1);
          CHECK(forward[0].total() == (gaussian ? 6u : 2u) + (batch_dims < 3 ? 1u : 0u));
        }
  Tape<float> tape;
  const auto a = tape.variable(Tensor<float>::zeros({2, 3}));
  const auto b = tape.variable(Tensor<float>::zeros({3, 2}));
  CHECK_THROWS_WITH(squared_error(a, b, 1, true),
                    Contains("squared_error") && Contains("[2, 3]") && Contains("[3, 2]"));
  CHECK_THROWS_WITH(squared_error(a, a, 3, true),
                    Contains("squared_error") && Contains("batch_dims 3 is out of range"));
}

TEST_CASE("foreach_exp_scaled is exp_scaled on every piece in one call, with its bits",
          "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  const std::vector<Shape> shapes{{4, 3}, {2, 5}, {7}, {3}};
  Generator gen(430);
  std::vector<Tensor<float>> x0, w0;
  for (const Shape& shape : shapes) {
    x0.push_back(raw::normal<float>(shape, gen));
    w0.push_back(raw::normal<float>(shape, gen));
  }
  for (const float s : {0.5f, -1.f}) {
    CAPTURE(s);
    std::vector<float> results[2];
    std::uint64_t calls[2];
    KernelCalls backward_calls[2];
    for (const bool fused : {false, true}) {
      Tape<float, counted> tape;
      // Piece 3 is a constant, whose gradient no one wants.
      std::vector<CountedVar> x{
          tape.variable(x0[0].to<counted>()), tape.variable(x0[1].to<counted>()),
          tape.variable(x0[2].to<counted>()), tape.constant(x0[3].to<counted>())};
      const std::span<const CountedVar> variables(x.data(), 3);
      counted::reset();
      std::vector<CountedVar> e;
      if (fused)
        e = foreach_exp_scaled(std::span<const CountedVar>(x), s);
      else
        for (const auto& xi : x) e.push_back(exp_scaled(xi, s));
      calls[fused] = counted::calls().total();
      // Piece 1's gradient arrives negated (sub's), piece 2 receives none,
      // piece 3 one known on the host (no kernel).
      const auto w = [&](std::size_t i) {
        return tape.constant(w0[i].to<counted>());
      };
      const CountedVar loss =
          sum(mul(e[0], w(0))) + sum(square(w(1) - e[1])) + sum(e[3]) + sum(square(x[2]));
      counted::reset();
      const auto plain = grad(loss, variables);
      backward_calls[fused] = counted::calls();
      const auto first = grad(loss, variables, {.create_graph = true});
      // A sweep that records nothing takes the foreach rule, one that records
      // the per-piece one: the same bits.
      for (std::size_t i = 0; i < first.size(); ++i)
        CHECK(plain[i].to_vector() == first[i].to_vector());
      CountedVar norm;
      for (const auto& d : first) norm = norm.defined() ? norm + sum(mul(d, d)) : sum(mul(d, d));
      const auto second = grad(norm, variables);
      for (const auto* values : std::array<const std::vector<CountedVar>*, 3>{&e, &first, &second})
        for (const auto& v : *values)
          for (const float f : v.value().to<cpu>().to_vector()) results[fused].push_back(f);
    }
    CHECK(results[0] == results[1]);
    CHECK(calls[0] == shapes.size());
    CHECK(calls[1] == 1u);
    // The two pieces with gradients: their products in one call, scaled by
    // one call unless s = -1 passes the sign on, where each took a mul and a
    // scale; and piece 1's negated gradient passed on, where the per-piece
    // rule negated it, and for s = -1 its result too.
    CHECK(backward_calls[1]["foreach_mul"] == 1);
    CHECK(backward_calls[1]["foreach_unary scale"] == (s == -1.f ? 0u : 1u));
    CHECK(backward_calls[0]["binary mul"] - backward_calls[1]["binary mul"] == 2);
    CHECK(backward_calls[0]["unary scale"] - backward_calls[1]["unary scale"] ==
          (s == -1.f ? 0u : 2u));
    CHECK(backward_calls[0]["unary neg"] - backward_calls[1]["unary neg"] == (s == -1.f ? 2u : 0u));
  }
  CHECK_THROWS_WITH(foreach_exp_scaled(std::span<const Var<float>>(), 0.5f),
                    Contains("foreach_exp_scaled") && Contains("no tensors given"));
}

// foreach_square's rule against square's on each piece: a tensor gradient,
// one repeated along the leading axis (a [D] factor's), a negated one and a
// one-value one, where nothing records and where it records, and the
// derivatives of the recorded gradients.
TEST_CASE("foreach_square has the bits of square on each piece, and so have its derivatives",
          "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<double, counted>;
  using Span = std::span<const CountedVar>;
  Generator gen(441);
  const std::vector<Shape> shapes{{3, 4}, {3, 2}, {3, 5}, {3, 1}};
  std::vector<Tensor<double>> x0, r0;
  for (const Shape& shape : shapes) {
    x0.push_back(raw::normal<double>(shape, gen));
    r0.push_back(raw::normal<double>(Shape{shape[1]}, gen));
  }
  std::vector<double> results[2];
  KernelCalls calls[2];
  for (const bool fused : {false, true}) {
    Tape<double, counted> tape;
    std::vector<CountedVar> x, r;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      x.push_back(tape.variable(x0[i].to<counted>()));
      r.push_back(tape.variable(r0[i].to<counted>()));
    }
    std::vector<CountedVar> y;
    if (fused) {
      y = foreach_square(Span(x));
    } else {
      for (const auto& xi : x) y.push_back(square(xi));
    }
    // y_0 r_0 (a tensor gradient), y_1 summed over its leading axis (the
    // gradient [1, D], unexpanded), (-y_2) r_2 (negated), sum(y_3) (one
    // value).
    const CountedVar loss = sum(mul(y[0], r[0])) + sum(mul(sum(y[1], {0}, true), r[1])) +
                            sum(mul(neg(y[2]), r[2])) + sum(y[3]);
    std::vector<CountedVar> all = x;
    all.insert(all.end(), r.begin(), r.end() - 1);  // r_3 is not used
    counted::reset();
    const auto plain = grad(loss, Span(all));
    calls[fused] = counted::calls();
    const auto first = grad(loss, Span(all), {.create_graph = true});
    CountedVar norm;
    for (const auto& d : first) norm = norm.defined() ? norm + sum(mul(d, d)) : sum(mul(d, d));
    const auto second = grad(norm, Span(all));
    for (const auto* grads : {&plain, &first, &second})
      for (const auto& d : *grads)
        for (const double v : d.value().to<cpu>().to_vector()) results[fused].push_back(v);
  }
  CHECK(results[0] == results[1]);
  // Where nothing records: the three tensor gradients' products and
  // doublings in two calls for all, the one-value one a scale.
  CHECK(calls[1]["foreach_mul"] == 1);
  CHECK(calls[1]["foreach_unary scale"] == 1);
  CHECK(calls[0].total() - calls[1].total() == 4);
}

TEST_CASE("kl_diagonal_gaussians over pieces is the sum of each piece's, with its bits",
          "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  using Span = std::span<const CountedVar>;
  constexpr std::int64_t tasks = 3;
  const std::vector<std::int64_t> sizes{4, 7, 1};
  Generator gen(440);
  // Where a log-variance broadcasts (piece 1's log_var_q one value), the
  // differences of the log-variances are a sub a piece.
  for (const bool broadcast : {false, true}) {
    CAPTURE(broadcast);
    std::vector<Tensor<float>> values;  // each piece's mean_q, log_var_q, mean_p, log_var_p
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::int64_t d = sizes[i];
      const Shape log_var_q = broadcast && i == 1 ? Shape{1} : Shape{d};
      for (const Shape& shape : {Shape{tasks, d}, log_var_q, Shape{tasks, d}, Shape{d}})
        values.push_back(raw::normal<float>(shape, gen));
    }
    std::vector<float> results[2];
    KernelCalls calls[2];
    for (const bool pieces : {false, true}) {
      Tape<float, counted> tape;
      std::vector<CountedVar> v;
      for (const auto& t : values) v.push_back(tape.variable(t.to<counted>()));
      const auto argument = [&](std::size_t k) {  // the k-th argument of every piece
        std::vector<CountedVar> a;
        for (std::size_t i = 0; i < sizes.size(); ++i) a.push_back(v[4 * i + k]);
        return a;
      };
      counted::reset();
      CountedVar kl;
      if (pieces) {
        const auto mean_q = argument(0), log_var_q = argument(1), mean_p = argument(2),
                   log_var_p = argument(3);
        kl = kl_diagonal_gaussians(Span(mean_q), Span(log_var_q), Span(mean_p), Span(log_var_p));
      } else {
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          const auto term =
              kl_diagonal_gaussians(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
          kl = kl.defined() ? kl + term : term;
        }
      }
      calls[pieces] = counted::calls();
      const CountedVar loss = sum(square(kl));
      const auto plain = grad(loss, Span(v));
      const auto first = grad(loss, Span(v), {.create_graph = true});
      CountedVar norm;
      for (const auto& d : first) norm = norm.defined() ? norm + sum(mul(d, d)) : sum(mul(d, d));
      const auto second = grad(norm, Span(v));
      results[pieces] = kl.value().to<cpu>().to_vector();
      for (const auto* grads : {&plain, &first, &second})
        for (const auto& d : *grads)
          for (const float f : d.value().to<cpu>().to_vector()) results[pieces].push_back(f);
    }
    CHECK(results[0] == results[1]);
    // Two exp_scaled a piece, two foreach calls for all; two subs and an add
    // a piece, three foreach calls (two and a sub a piece where one
    // broadcasts); a square a piece, one foreach call; and the terms' mul,
    // add, shift, sum and scale a piece and the adds between pieces one
    // kl_from_ratios call (the one-element piece has no sum, the first no
    // add).
    CHECK(calls[0]["unary exp_scaled"] == 2 * sizes.size());
    CHECK(calls[1]["unary exp_scaled"] == 0);
    CHECK(calls[1]["foreach_unary exp_scaled"] == 2);
    CHECK(calls[1]["binary sub"] == (broadcast ? sizes.size() : 0));
    CHECK(calls[1]["foreach_axpy"] == (broadcast ? 2 : 3));
    CHECK(calls[1]["unary square"] == 0);
    CHECK(calls[1]["foreach_unary square"] == 1);
    CHECK(calls[1]["kl_from_ratios"] == 1);
    CHECK(calls[0].total() - calls[1].total() ==
          (broadcast ? 5 : 6) * sizes.size() - (broadcast ? 5 : 6) + 6 * sizes.size() - 3);
  }

  Tape<float> tape;
  const auto mean = tape.constant(raw::normal<float>({tasks, 4}, gen)),
             other = tape.constant(raw::normal<float>({tasks, 2}, gen)),
             log_var = tape.constant(raw::normal<float>({4}, gen));
  const std::array<Var<float>, 2> means{mean, mean}, log_vars{log_var, log_var};
  const std::array<Var<float>, 2> mismatched{mean, other};
  using FloatSpan = std::span<const Var<float>>;
  CHECK_THROWS_WITH(kl_diagonal_gaussians(FloatSpan(means), FloatSpan(log_vars).first(1),
                                          FloatSpan(means), FloatSpan(log_vars)),
                    Contains("kl_diagonal_gaussians") && Contains("2, 1, 2 and 2 pieces given"));
  CHECK_THROWS_WITH(kl_diagonal_gaussians(FloatSpan(means), FloatSpan(log_vars),
                                          FloatSpan(mismatched), FloatSpan(log_vars)),
                    Contains("means [3, 4] and [3, 2] differ in shape"));
}

TEST_CASE("kl_from_ratios has its ops' bits, values and derivatives, by one call each way",
          "[ops][grad]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  using Span = std::span<const CountedVar>;
  // More pieces than one call takes, one of a single element, on rows [2, 3].
  const Shape rows{2, 3};
  std::vector<std::int64_t> sizes;
  for (int i = 0; i < KlLayout<float>::capacity + 2; ++i) sizes.push_back(i == 3 ? 1 : 2 + i % 5);
  Generator gen(441);
  std::vector<Tensor<float>> values;  // each piece's r, s, w
  for (const std::int64_t n : sizes) {
    Shape s = rows;
    s.push_back(n);
    values.push_back(raw::normal<float>({n}, gen));
    values.push_back(raw::uniform<float>(s, gen));
    values.push_back(raw::map(UnaryOp::exp, raw::normal<float>({n}, gen)));
  }
  const auto other = raw::normal<float>(rows, gen);
  // How the KL's gradient arrives: one value in every element (a sum's,
  // scaled), a tensor, a tensor whose sign is passed on.
  enum class Arrival { uniform, tensor, negated };
  for (const Arrival arrival : {Arrival::uniform, Arrival::tensor, Arrival::negated}) {
    CAPTURE(static_cast<int>(arrival));
    std::vector<std::uint32_t> results[2];
    KernelCalls forward[2], backward[2];
    for (const bool fused : {false, true}) {
      Tape<float, counted> tape;
      std::vector<CountedVar> v;
      for (const auto& t : values) v.push_back(tape.variable(t.to<counted>()));
      std::vector<CountedVar> r, s, w;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        r.push_back(v[3 * i]);
        s.push_back(v[3 * i + 1]);
        w.push_back(v[3 * i + 2]);
      }
      counted::reset();
      CountedVar kl;
      if (fused) {
        kl = kl_from_ratios(Span(r), Span(s), Span(w));
      } else {
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          const auto term = detail::kl_from_ratios(r[i], s[i], w[i]);
          kl = kl.defined() ? kl + term : term;
        }
      }
      forward[fused] = counted::calls();
      CountedVar loss;
      if (arrival == Arrival::uniform)
        loss = sum(1.5f * kl);
      else if (arrival == Arrival::tensor)
        loss = sum(square(kl));
      else  // sub's rule passes kl's gradient on with its sign
        loss = sum(square(tape.constant(other.to<counted>()) - kl));
      counted::reset();
      const auto plain = grad(loss, Span(v));
      backward[fused] = counted::calls();
      const auto first = grad(loss, Span(v), {.create_graph = true});
      CountedVar norm;
      for (const auto& d : first) norm = norm.defined() ? norm + sum(mul(d, d)) : sum(mul(d, d));
      // (Where the KL's gradient is one value, r's is too, and the norm's
      // gradient in r is zero.)
      const auto second = grad(norm, Span(v), {.allow_unused = true});
      results[fused] = bits(kl.value().to<cpu>());
      for (const auto* grads : {&plain, &first, &second})
        for (const auto& d : *grads)
          for (const auto b : bits(d.value().to<cpu>())) results[fused].push_back(b);
    }
    CHECK(results[0] == results[1]);
    // One call each way for up to 24 pieces: two for 26.
    CHECK(forward[1].total() == 2);
    CHECK(forward[1]["kl_from_ratios"] == 2);
    CHECK(backward[1]["kl_from_ratios_backward"] == 2);
    CHECK(forward[0].total() > 5 * sizes.size());
    CHECK(backward[0].total() > backward[1].total() + 3 * sizes.size());
  }

  // Pieces it does not take name the op and what it takes.
  Tape<float> tape;
  const auto r = tape.constant(raw::normal<float>({4}, gen)),
             s = tape.constant(raw::normal<float>({3, 4}, gen)),
             wrong = tape.constant(raw::normal<float>({3, 5}, gen));
  using FloatSpan = std::span<const Var<float>>;
  const std::array<Var<float>, 2> rs{r, r}, ss{s, wrong}, ws{r, r};
  CHECK_THROWS_WITH(kl_from_ratios(FloatSpan(rs), FloatSpan(ss), FloatSpan(ws)),
                    Contains("kl_from_ratios") && Contains("2, 2 and 2 pieces given") &&
                        Contains("squared differences [rows..., n_i] with the same rows"));
  CHECK_THROWS_WITH(kl_from_ratios(FloatSpan(rs), FloatSpan(ss).first(1), FloatSpan(ws)),
                    Contains("2, 1 and 2 pieces given"));
  CHECK_THROWS_WITH(kl_from_ratios(FloatSpan(), FloatSpan(), FloatSpan()),
                    Contains("0, 0 and 0 pieces given"));
}

TEST_CASE("power, exponential and activation ops pass first and second order checks", "[ops]") {
  SECTION("pow") {
    check_derivatives([](auto x) { return pow(x[0], 3.5); }, list(positive({5}, 11)));
  }
  SECTION("square") {
    check_derivatives([](auto x) { return square(x[0]) * x[0]; }, list(normal({5}, 12)));
  }
  SECTION("sqrt") {
    check_derivatives([](auto x) { return sqrt(x[0]); }, list(positive({5}, 13)));
  }
  SECTION("exp") {
    check_derivatives([](auto x) { return exp(x[0]); }, list(normal({5}, 14)));
  }
  SECTION("exp_scaled") {
    check_derivatives([](auto x) { return exp_scaled(x[0], 0.5) * exp_scaled(x[0], -1.0); },
                      list(normal({5}, 16)));
  }
  SECTION("kl_diagonal_gaussians over pieces") {
    check_derivatives(
        [](auto x) {
          const std::array<V, 2> mean_q{x[0], x[0] * x[1]}, log_var_q{x[2], x[2] * x[3]},
              mean_p{x[1], x[0]}, log_var_p{x[3], x[2] - x[3]};
          using Span = std::span<const V>;
          return kl_diagonal_gaussians(Span(mean_q), Span(log_var_q), Span(mean_p),
                                       Span(log_var_p));
        },
        list(normal({2, 3}, 87), normal({2, 3}, 88), normal({3}, 89, 0, 0.5),
             normal({3}, 90, 0, 0.5)));
  }
  SECTION("foreach_square") {
    check_derivatives(
        [](auto x) {
          const std::array<V, 2> a{x[0], x[1] * x[0]};
          const auto y = foreach_square(std::span<const V>(a));
          return concat({reshape(y[0] * x[1], {-1}), reshape(sum(y[1]), {1})}, 0);
        },
        list(normal({2, 3}, 91), normal({2, 3}, 92)));
  }
  SECTION("foreach_exp_scaled") {
    check_derivatives(
        [](auto x) {
          const std::array<V, 2> a{x[0], x[1] * x[0]};
          const auto half = foreach_exp_scaled(std::span<const V>(a), 0.5);
          const auto inverse = foreach_exp_scaled(std::span<const V>(a), -1.0);
          return half[0] * inverse[1] - inverse[0] * half[1];
        },
        list(normal({5}, 85), normal({5}, 86)));
  }
  SECTION("log") {
    check_derivatives([](auto x) { return log(x[0]); }, list(positive({5}, 15)));
  }
  SECTION("relu") {
    check_derivatives([](auto x) { return relu(x[0]) * x[0]; }, list(away_from_zero({6}, 16)));
  }
  SECTION("relu_backward") {
    check_derivatives([](auto x) { return relu_backward(x[0] * x[0], x[1]); },
                      list(normal({6}, 66), away_from_zero({6}, 67)));
  }
  SECTION("sigmoid") {
    check_derivatives([](auto x) { return sigmoid(x[0]); }, list(normal({5}, 17, 0, 2)));
  }
  SECTION("tanh") {
    check_derivatives([](auto x) { return tanh(x[0]); }, list(normal({5}, 18)));
  }
  SECTION("softplus") {
    check_derivatives([](auto x) { return softplus(x[0]); }, list(normal({5}, 19, 0, 2)));
  }
}

TEST_CASE("matmul passes checks batched, broadcast and transposed", "[ops]") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      INFO("trans_a " << ta << " trans_b " << tb);
      const Shape a = ta ? Shape{2, 3, 2} : Shape{2, 2, 3};
      const Shape b = tb ? Shape{4, 3} : Shape{3, 4};
      check_derivatives([ta, tb](auto x) { return matmul(x[0], x[1], ta, tb); },
                        list(normal(a, 20), normal(b, 21)));
    }
  SECTION("linear with a shared weight") {
    check_derivatives([](auto x) { return linear(x[0], x[1], x[2]); },
                      list(normal({2, 3, 2}, 26), normal({2, 4}, 27), normal({4}, 28)));
  }
  SECTION("linear with per-task weights") {
    check_derivatives([](auto x) { return linear(x[0], x[1], x[2]); },
                      list(normal({2, 3, 2}, 29), normal({2, 2, 4}, 61), normal({2, 4}, 62)));
  }
  SECTION("linear with shared inputs and per-task weights") {
    check_derivatives([](auto x) { return tanh(linear(x[0], x[1], x[2])); },
                      list(normal({3, 2}, 63), normal({2, 2, 4}, 64), normal({2, 4}, 65)));
  }
  SECTION("linear with an activation, as one op") {
    for (auto a : {Activation::relu, Activation::tanh, Activation::sigmoid}) {
      INFO("activation " << static_cast<int>(a));
      // relu's kink kept away: inputs and weights of one sign, a negative bias.
      const bool kink = a == Activation::relu;
      check_derivatives([a](auto x) { return linear(x[0], x[1], x[2], a) * x[0]; },
                        list(kink ? positive({2, 3, 3}, 68) : normal({2, 3, 3}, 68),
                             kink ? positive({2, 3, 3}, 69) : normal({2, 3, 3}, 69),
                             normal({2, 3}, 70, kink ? -2.0 : 0.0)));
    }
  }
  SECTION("linear with batch axes broadcast on both sides and a shared bias row") {
    check_derivatives([](auto x) { return linear(x[0], x[1], x[2], Activation::tanh); },
                      list(normal({2, 1, 3, 2}, 72), normal({3, 2, 4}, 73), normal({3, 4}, 74)));
    check_derivatives([](auto x) { return linear(x[0], x[1], x[2], Activation::sigmoid); },
                      list(normal({2, 3, 2}, 75), normal({2, 2, 4}, 76), normal({1, 4}, 77)));
  }
  SECTION("batch broadcast on both sides") {
    check_derivatives([](auto x) { return matmul(x[0], x[1]); },
                      list(normal({2, 1, 2, 3}, 22), normal({3, 3, 2}, 23)));
  }
  SECTION("second order through a product of the op with itself") {
    check_derivatives([](auto x) { return matmul(tanh(matmul(x[0], x[1])), x[1], false, true); },
                      list(normal({2, 3}, 24), normal({3, 3}, 25)));
  }
}

TEST_CASE(
    "the linear call computes the bits of its parts: bias rows, the product onto them, "
    "the activation",
    "[ops]") {
  // The examples' results are these bits (the CPU's order of the sums).
  Generator gen(78);
  const auto parts = [](const Tensor<float>& x, const Tensor<float>& w, const Tensor<float>& b,
                        UnaryOp activation) {
    Shape row = b.shape().take_front(b.rank() - 1);
    row.push_back(1);
    row.push_back(b.dim(-1));
    Tensor<float> y = raw::expand(Tensor<float>::view(b, row),
                                  raw::matmul_shape(x.shape(), w.shape(), false, false));
    raw::detail::matmul_into(x, w, y, false, false, 1.0f);
    return raw::map(activation, y);
  };
  const std::array<std::array<Shape, 3>, 5> cases{{
      {Shape{2, 5, 40}, Shape{40, 40}, Shape{40}},          // shared weight: one taller GEMM
      {Shape{2, 5, 40}, Shape{2, 40, 40}, Shape{2, 40}},    // per-task weights
      {Shape{5, 40}, Shape{2, 40, 40}, Shape{2, 40}},       // shared inputs
      {Shape{2, 1, 5, 7}, Shape{3, 7, 9}, Shape{3, 9}},     // a mixed broadcast
      {Shape{2, 5, 300}, Shape{2, 300, 70}, Shape{1, 70}},  // Eigen's blocked product
  }};
  for (const auto& [xs, ws, bs] : cases)
    for (auto a : {UnaryOp::copy, UnaryOp::relu, UnaryOp::tanh, UnaryOp::sigmoid}) {
      INFO(xs.to_string() << " times " << ws.to_string() << " plus " << bs.to_string() << ", "
                          << op_name(a));
      const auto x = raw::normal<float>(xs, gen), w = raw::normal<float>(ws, gen),
                 b = raw::normal<float>(bs, gen);
      CHECK(raw::linear(x, w, b, a).to_vector() == parts(x, w, b, a).to_vector());
    }
  CHECK_THROWS_WITH(
      raw::linear(raw::normal<float>({2, 5, 4}, gen), raw::normal<float>({2, 4, 6}, gen),
                  raw::normal<float>({2, 5}, gen)),
      Contains("does not match weight"));
}

TEST_CASE("linear with an activation computes the bits of linear and the activation apart",
          "[ops]") {
  // Values, gradients and the gradients of a function of the gradients (a
  // second-order sweep), in float, where a different order of the same sums
  // would show.
  using F = Var<float>;
  Generator gen(71);
  const auto x0 = raw::normal<float>({2, 5, 4}, gen), w0 = raw::normal<float>({2, 4, 6}, gen),
             b0 = raw::normal<float>({2, 6}, gen), r0 = raw::normal<float>({2, 5, 6}, gen);
  for (auto a : {Activation::none, Activation::relu, Activation::tanh, Activation::sigmoid}) {
    INFO("activation " << static_cast<int>(a));
    const auto sweep = [&](bool fused) {
      Tape<float> tape;
      const F x = tape.variable(x0.clone()), w = tape.variable(w0.clone()),
              b = tape.variable(b0.clone()), r = tape.constant(r0.clone());
      const F y = fused ? linear(x, w, b, a) : activate(a, linear(x, w, b));
      const std::vector<F> inputs{x, w, b};
      const auto g = grad(sum(mul(y, r)), std::span<const F>(inputs), {.create_graph = true});
      F h = sum(square(g[0]));
      for (std::size_t i = 1; i < g.size(); ++i) h = add(h, sum(square(g[i])));
      std::vector<std::vector<float>> values{y.value().to_vector()};
      for (const auto& v : g) values.push_back(v.value().to_vector());
      // (The bias leaves no second derivative where the activation's is zero.)
      for (const auto& v : grad(h, std::span<const F>(inputs), {.allow_unused = true}))
        values.push_back(v.to_vector());
      return values;
    };
    CHECK(sweep(true) == sweep(false));
  }
}

TEST_CASE("shape ops pass first and second order checks", "[ops]") {
  SECTION("transpose") {
    check_derivatives([](auto x) { return transpose(x[0] * x[0], 0, 2); },
                      list(normal({2, 3, 2}, 30)));
  }
  SECTION("reshape") {
    check_derivatives(
        [](auto x) {
          return reshape(x[0], {3, -1}) * 2.0;
        },
        list(normal({2, 3}, 31)));
  }
  SECTION("expand") {
    check_derivatives([](auto x) { return expand(x[0], {2, 3}) * x[0]; }, list(normal({1, 3}, 32)));
  }
  SECTION("sum_to") {
    check_derivatives([](auto x) { return square(sum_to(x[0], {3})); }, list(normal({2, 3}, 33)));
  }
  SECTION("concat") {
    check_derivatives(
        [](auto x) {
          return concat({x[0], x[1] * x[1]}, 1);
        },
        list(normal({2, 2}, 34), normal({2, 3}, 35)));
  }
  SECTION("concat with a part no gradient flows to") {
    check_derivatives(
        [](auto x) {
          const V data = x[0].tape().constant(Tensor<double>::full({2, 1}, 0.5));
          return concat({data, x[0] * x[0]}, 1);
        },
        list(normal({2, 3}, 134)));
  }
  SECTION("expand_concat, each part broadcast along an axis") {
    check_derivatives(
        [](auto x) {
          return expand_concat({x[0] * x[1], x[1] * x[1]}, -1);
        },
        list(normal({2, 3, 1}, 135), normal({2, 1, 2}, 136)));
  }
  SECTION("expand_concat with a broadcast part no gradient flows to") {
    check_derivatives(
        [](auto x) {
          const V data = x[0].tape().constant(normal({1, 3, 1}, 137));
          return expand_concat({data, x[0] * x[0]}, 2);
        },
        list(normal({2, 1, 2}, 138)));
  }
  SECTION("split, with a piece left unused") {
    check_derivatives(
        [](auto x) {
          const std::array<std::int64_t, 3> sizes{1, 2, 2};
          auto parts = split(x[0], 1, sizes);
          return parts[0] * parts[2];
        },
        list(normal({2, 5}, 36)));
  }
  SECTION("slice") {
    check_derivatives([](auto x) { return slice(square(x[0]), 0, 1, 2); },
                      list(normal({4, 2}, 37)));
  }
  SECTION("pad") {
    check_derivatives([](auto x) { return pad(square(x[0]), 1, 1, 4); }, list(normal({2, 2}, 38)));
  }
  SECTION("index_select with repeated indices") {
    check_derivatives(
        [](auto x) {
          return square(index_select(x[0], 0, Index<>::from_host({4}, {2, 0, 2, 1})));
        },
        list(normal({3, 2}, 39)));
  }
  SECTION("index_add") {
    check_derivatives(
        [](auto x) {
          return square(index_add(x[0], 1, Index<>::from_host({3}, {1, 1, 0}), 2));
        },
        list(normal({2, 3}, 40)));
  }
}

// The bias transformation's [x, v] (nn/layers.hpp), fused and not.
TEST_CASE("expand_concat has the bits of expand then concat, and so have its derivatives",
          "[ops]") {
  Generator gen(139);
  const auto x0 = raw::normal<float>({3, 4, 1}, gen), v0 = raw::normal<float>({3, 1, 5}, gen),
             r0 = raw::normal<float>({3, 4, 6}, gen);
  // x data (one part wants a gradient: a slice) or a variable (both: a
  // split); the gradients' norm or their plain sum (a one-value gradient
  // into the recorded rule's own rule); a second sweep that records, and a
  // third over it.
  const auto sweep = [&](bool fused, bool x_variable, bool plain, bool third) {
    Tape<float> tape;
    const Var<float> x = x_variable ? tape.variable(x0.clone()) : tape.constant(x0.clone()),
                     v = tape.variable(v0.clone()), r = tape.constant(r0.clone());
    const Var<float> y = fused ? expand_concat({x, v}, -1)
                               : concat({expand(x, {3, 4, 1}), expand(v, {3, 4, 5})}, -1);
    const std::vector<Var<float>> inputs =
        x_variable ? std::vector<Var<float>>{x, v} : std::vector<Var<float>>{v};
    const std::span<const Var<float>> wrt(inputs);
    const auto g = grad(sum(square(mul(y, r))), wrt, {.create_graph = true});
    const auto measure = [plain](const Var<float>& gi) {
      return plain ? sum(gi) : sum(square(gi));
    };
    Var<float> norm = measure(g[0]);
    for (std::size_t i = 1; i < g.size(); ++i) norm = add(norm, measure(g[i]));
    std::vector<std::vector<float>> values{y.value().to_vector()};
    for (const auto& gi : g) values.push_back(gi.value().to_vector());
    const auto h = grad(norm, wrt, {.create_graph = third});
    for (const auto& hi : h) values.push_back(hi.value().to_vector());
    if (third)
      for (const auto& k : grad(sum(square(mul(h[0], h[0]))), wrt))
        values.push_back(k.value().to_vector());
    return values;
  };
  for (const bool x_variable : {false, true})
    for (const bool plain : {false, true})
      for (const bool third : {false, true}) {
        if (plain && third) continue;  // the plain sum's gradient is y's constant r r
        CAPTURE(x_variable, plain, third);
        CHECK(sweep(true, x_variable, plain, third) == sweep(false, x_variable, plain, third));
      }
}

// v's gradient is its slice of the gradient summed where it lies: one
// reduction, no copy of the slice, whether the sweep records or not (a
// recording sweep with two parts wanted splits).
TEST_CASE("expand_concat's rule sums an expanded part's slice in place", "[ops]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<double, counted>;
  Generator gen(140);
  const auto x0 = raw::normal<double>({3, 4, 2}, gen), r0 = raw::normal<double>({3, 4, 7}, gen);
  for (const Shape& v_shape : {Shape{3, 1, 5}, Shape{1, 1, 5}})
    for (const bool x_variable : {false, true})
      for (const bool records : {false, true}) {
        CAPTURE(v_shape, x_variable, records);
        const auto v0 = raw::normal<double>(v_shape, gen);
        KernelCalls calls;
        const auto sweep = [&](bool fused) {
          Tape<double, counted> tape;
          const CountedVar x = x_variable ? tape.variable(x0.to<counted>())
                                          : tape.constant(x0.to<counted>()),
                           v = tape.variable(v0.to<counted>()), r = tape.constant(r0.to<counted>());
          const CountedVar y = fused ? expand_concat({x, v}, -1)
                                     : concat({expand(x, {3, 4, 2}), expand(v, {3, 4, 5})}, -1);
          const std::vector<CountedVar> inputs =
              x_variable ? std::vector<CountedVar>{x, v} : std::vector<CountedVar>{v};
          const CountedVar loss = sum(mul(y, r));
          counted::reset();
          std::vector<std::vector<double>> values;
          for (const auto& g :
               grad(loss, std::span<const CountedVar>(inputs), {.create_graph = records}))
            values.push_back(g.value().to_vector());
          calls = counted::calls();
          return values;
        };
        const auto expected = sweep(false);
        CHECK(sweep(true) == expected);
        CHECK(calls["reduce sum"] == 1);
        CHECK(calls["strided_copy"] == (x_variable ? (records ? 2 : 1) : 0));
        CHECK(calls["foreach_strided_copy"] == 0);
      }
}

TEST_CASE("reductions and softmax pass first and second order checks", "[ops]") {
  SECTION("sum over all") {
    check_derivatives([](auto x) { return sum(x[0] * x[0]); }, list(normal({2, 3}, 41)));
  }
  SECTION("sum over axes") {
    check_derivatives(
        [](auto x) {
          return square(sum(x[0], {0, 2}));
        },
        list(normal({2, 3, 2}, 42)));
  }
  SECTION("mean keeping dims") {
    check_derivatives([](auto x) { return x[0] * mean(x[0], {1}, true); },
                      list(normal({2, 3}, 43)));
  }
  SECTION("mean over axes and over all") {
    check_derivatives(
        [](auto x) {
          return square(mean(x[0], {0, 2})) * mean(x[0] * x[0]);
        },
        list(normal({2, 3, 2}, 46)));
  }
  SECTION("logsumexp") {
    check_derivatives([](auto x) { return logsumexp(x[0], 1); }, list(normal({2, 4}, 44, 0, 3)));
  }
  SECTION("softmax") {
    check_derivatives([](auto x) { return softmax(x[0], 0); }, list(normal({3, 2}, 45)));
  }
  SECTION("log_softmax") {
    check_derivatives([](auto x) { return log_softmax(x[0]); }, list(normal({2, 3}, 46)));
  }
  SECTION("where") {
    check_derivatives(
        [](auto x) {
          const auto mask = greater(x[0], x[1]);
          return where(mask, x[0] * x[1], square(x[1]));
        },
        list(normal({2, 3}, 47), normal({3}, 48)));
  }
}

TEST_CASE("losses pass first and second order checks", "[ops][loss]") {
  SECTION("mse") {
    check_derivatives([](auto x) { return mse_loss(x[0], x[1]); },
                      list(normal({4, 1}, 50), normal({4, 1}, 51)));
  }
  SECTION("mse per task") {
    check_derivatives([](auto x) { return mse_loss(x[0], x[1], 1); },
                      list(normal({2, 3, 1}, 52), normal({2, 3, 1}, 53)));
  }
  SECTION("binary cross-entropy with logits") {
    Generator gen(54);
    auto labels = raw::map(UnaryOp::greater_scalar, raw::uniform<double>({5}, gen), 0.5);
    check_derivatives([](auto x) { return bce_with_logits_loss(x[0], x[1]); },
                      list(normal({5}, 55, 0, 2), std::move(labels)));
  }
  SECTION("softmax cross-entropy with integer labels") {
    check_derivatives(
        [](auto x) {
          return softmax_cross_entropy(x[0], Index<>::from_host({2, 2}, {0, 2, 1, 1}), 1);
        },
        list(normal({2, 2, 3}, 56)));
  }
  SECTION("softmax cross-entropy with class labels as values (one-hot made on the backend)") {
    const auto labels = Tensor<double>::from_host({2, 2, 1}, {0, 2, 1, 1});
    check_derivatives([&](auto x) { return SoftmaxCrossEntropyLoss{}(x[0], x[1], 1); },
                      list(normal({2, 2, 3}, 56), labels.clone()));
    Tape<double> tape;
    const auto logits = tape.constant(normal({2, 2, 3}, 56));
    const auto by_value = SoftmaxCrossEntropyLoss{}(logits, tape.constant(labels.clone()), 1);
    const auto by_index =
        softmax_cross_entropy(logits, Index<>::from_host({2, 2}, {0, 2, 1, 1}), 1);
    CHECK(by_value.value().to_vector() == by_index.value().to_vector());
  }
  SECTION("gaussian nll") {
    check_derivatives([](auto x) { return gaussian_nll_loss(x[0], exp(x[1]), square(x[0]) * 0.5); },
                      list(normal({4}, 57), normal({4}, 58, 0, 0.3)));
  }
  SECTION("gaussian nll at a host variance") {
    check_derivatives([](auto x) { return gaussian_nll_loss(x[0], 0.4, square(x[0]) * 0.5); },
                      list(normal({4}, 57)));
  }
}

TEST_CASE(
    "cross_entropy_with_logits is log-softmax's negative log-likelihood in one op, and its "
    "derivatives match finite differences to the third order",
    "[ops][loss][gradcheck]") {
  const Shape shape{2, 3, 4};
  Generator gen(90);
  // Target rows that sum to one: one-hot rows and a soft row.
  std::vector<double> rows(24, 0.0);
  for (std::size_t r = 0; r < 5; ++r) rows[r * 4 + (r * 3) % 4] = 1.0;
  rows[20] = 0.1, rows[21] = 0.2, rows[22] = 0.3, rows[23] = 0.4;
  const auto targets = Tensor<double>::from_host(shape, rows);
  const auto logits = normal(shape, 91, 0.5, 3);
  {
    Tape<double> tape;
    const auto z = tape.constant(logits.clone());
    const auto want =
        neg(sum(tape.constant(targets.clone()) * log_softmax(z, -1), {-1})).to_vector();
    const auto got = cross_entropy_with_logits(z, targets.clone());
    REQUIRE(got.shape() == Shape{2, 3});
    const auto values = got.to_vector();
    for (std::size_t i = 0; i < values.size(); ++i)
      CHECK(values[i] == Approx(want[i]).margin(1e-12));
  }
  const auto weighted = [&](std::span<const V> v) {
    return sum(square(cross_entropy_with_logits(v[0] * v[0], targets.clone())));
  };
  check_derivatives(weighted, list(logits.clone()));
  // Third order: F = <dL/dz, u>, whose first and second derivatives are L's
  // second and third (gradients then flow into softmax(z), the op's second
  // result), for a loss whose rows' gradients differ and for a sum (u (p -
  // y), one op of its own).
  const auto u = normal(shape, 92);
  const Fn summed = [&](std::span<const V> v) {
    return sum(cross_entropy_with_logits(v[0] * v[0], targets.clone()));
  };
  for (const Fn& loss : {Fn(weighted), summed})
    check_derivatives(
        [&](std::span<const V> v) {
          const auto g = grad(loss(v), v, {.create_graph = true});
          return sum(g[0] * v[0].tape().constant(u.clone()));
        },
        list(logits.clone()));
  Tape<double> tape;
  CHECK_THROWS_WITH(
      cross_entropy_with_logits(tape.constant(logits.clone()), Tensor<double>::zeros({2, 3, 5})),
      Contains("cross_entropy_with_logits") && Contains("[2, 3, 5]") && Contains("[2, 3, 4]"));
}

// The kernels raw::cross_entropy replaced: one-hot rows by equal against
// arange, then log-softmax's, the product and the row sums, as the op was
// written before (a composite of raw ops).
template <class T, class B>
raw::CrossEntropy<T, B> composite_cross_entropy(const Tensor<T, B>& z, const Tensor<T, B>& y,
                                                bool class_indices) {
  const std::array<int, 1> last{z.rank() - 1};
  const Shape kept = raw::reduced_shape(z.shape(), last, "test");
  Tensor<T, B> one_hot;
  if (class_indices)
    one_hot = raw::map(BinaryOp::equal, y, Tensor<T, B>::arange(z.dim(-1)), "test");
  const Tensor<T, B>& rows = class_indices ? one_hot : y;
  const auto m = raw::reduce_to(ReduceOp::max, z, kept);
  const auto e = raw::map(UnaryOp::exp, raw::map(BinaryOp::sub, z, m, "test"));
  const auto sum_exp = raw::sum_to(e, kept);
  const auto lse = raw::map(BinaryOp::add, raw::map(UnaryOp::log, sum_exp), m, "test");
  const auto target_logit = raw::sum_to(raw::map(BinaryOp::mul, rows, z, "test"), kept);
  return {raw::map(BinaryOp::sub, lse, target_logit, "test")
              .reshaped(raw::squeezed_shape(z.shape(), last, "test")),
          raw::map(BinaryOp::div, e, sum_exp, "test"), std::move(one_hot)};
}

TEMPLATE_TEST_CASE(
    "cross_entropy's losses, softmax and one-hot rows have the bits of the ops it replaced, in "
    "one call",
    "[ops][loss]", float, double) {
  using T = TestType;
  using counted = CountingBackend<cpu>;
  Generator gen(414);
  // Rows long enough for Eigen's packet loops and a tail; one class; a row
  // whose maximum is shared; an infinite logit's row is NaN in both.
  for (const Shape& shape : {Shape{3, 7, 10}, Shape{5, 1}, Shape{4, 3}}) {
    CAPTURE(shape);
    auto z_values = raw::map(UnaryOp::scale, raw::normal<T>(shape, gen), T(3)).to_vector();
    if (shape.rank() == 2 && shape[1] == 3) {
      z_values[0] = z_values[2] = T(2);
      z_values[4] = std::numeric_limits<T>::infinity();
    }
    const auto z = Tensor<T, counted>::from_host(shape, z_values);
    const std::int64_t rows = z.numel() / z.dim(-1), classes = z.dim(-1);
    std::vector<T> labels(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r)
      labels[static_cast<std::size_t>(r)] = static_cast<T>((r * 7) % classes);
    Shape label_shape = shape;
    label_shape[shape.rank() - 1] = 1;
    const auto indices = Tensor<T, counted>::from_host(label_shape, labels);
    const auto soft = raw::map(UnaryOp::exp, raw::normal<T>(shape, gen).template to<counted>());
    const auto soft_rows = raw::map(BinaryOp::div, soft, raw::sum_to(soft, label_shape), "test");
    for (const bool class_indices : {false, true}) {
      CAPTURE(class_indices);
      const auto& targets = class_indices ? indices : soft_rows;
      const auto want = composite_cross_entropy(z, targets, class_indices);
      counted::reset();
      const auto got = raw::cross_entropy(z, targets, class_indices);
      CHECK(counted::calls().total() == 1);
      CHECK(counted::calls()["cross_entropy"] == 1);
      REQUIRE(got.loss.shape() == want.loss.shape());
      CHECK(bits(got.loss) == bits(want.loss));
      CHECK(bits(got.softmax) == bits(want.softmax));
      if (class_indices) CHECK(bits(got.one_hot) == bits(want.one_hot));
    }
  }
  Tensor<T> z({2, 3, 4});
  CHECK_THROWS_WITH((raw::cross_entropy(z, Tensor<T>({2, 3, 4}), true)),
                    Contains("sparse_cross_entropy_with_logits") && Contains("[2, 3, 4]") &&
                        Contains("[2, 3, 1]"));
  CHECK_THROWS_WITH((raw::cross_entropy(Tensor<T>(Shape{}), Tensor<T>(Shape{}), false)),
                    Contains("cross_entropy_with_logits") && Contains("class axis"));
}

TEMPLATE_TEST_CASE(
    "cross_entropy_with_logits's gradient where nothing records is one call with the bits of the "
    "rule's ops",
    "[ops][loss]", float, double) {
  using T = TestType;
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<T, counted>;
  Generator gen(416);
  // Rows long enough for Eigen's packet loops and a tail, soft target rows.
  const Shape shape{3, 7, 10}, losses{3, 7};
  const auto z0 = raw::map(UnaryOp::scale, raw::normal<T>(shape, gen), T(3));
  const auto soft = raw::map(UnaryOp::exp, raw::normal<T>(shape, gen));
  const auto rows = raw::map(BinaryOp::div, soft, raw::sum_to(soft, Shape{3, 7, 1}), "test");
  const auto w = raw::normal<T>(losses, gen), w_tasks = raw::normal<T>({3, 1}, gen),
             v = raw::normal<T>(shape, gen);
  // z's gradient from f(tape, z) by a sweep that records nothing and by one
  // that records: its bits and the calls of each.
  struct Sweeps {
    std::vector<std::uint64_t> results[2];
    KernelCalls calls[2];
  };
  const auto sweeps = [](const Tensor<T>& z0, const auto& f_of) {
    Sweeps out;
    for (const bool create_graph : {false, true}) {
      Tape<T, counted> tape;
      const std::array<CountedVar, 1> z{tape.variable(z0.template to<counted>())};
      const CountedVar f = f_of(tape, z);
      counted::reset();
      const auto g = grad(f, std::span<const CountedVar>(z), {.create_graph = create_graph});
      out.calls[create_graph] = counted::calls();
      for (const auto b : bits(g[0].value())) out.results[create_graph].push_back(b);
    }
    return out;
  };
  // The gradients flowing into the op: the losses' uniform (a sum's), per
  // row, per row broadcast (a row sum's), negated; the softmax's alone (the
  // outer sweep of a gradient through the op, from per-row and from uniform
  // losses' gradients, the latter's own rule given a tensor and a uniform
  // gradient); the softmax's and the losses'.
  enum class Flow {
    uniform,
    rows,
    broadcast_rows,
    negated_rows,
    softmax,
    uniform_softmax,
    uniform_softmax_sum,
    both
  };
  for (const Flow flow :
       {Flow::uniform, Flow::rows, Flow::broadcast_rows, Flow::negated_rows, Flow::softmax,
        Flow::uniform_softmax, Flow::uniform_softmax_sum, Flow::both}) {
    CAPTURE(static_cast<int>(flow));
    const auto [results, calls] =
        sweeps(z0, [&](Tape<T, counted>& tape, const std::array<CountedVar, 1>& z) {
          const auto constant = [&](const Tensor<T>& t) {
            return tape.constant(t.template to<counted>());
          };
          const auto loss = [&] {
            return cross_entropy_with_logits(z[0], rows.template to<counted>());
          };
          CountedVar f;
          if (flow == Flow::uniform) f = sum(scale(loss(), T(0.3)));
          if (flow == Flow::rows) f = sum(loss() * constant(w));
          if (flow == Flow::broadcast_rows) f = sum(sum(loss(), {-1}, true) * constant(w_tasks));
          if (flow == Flow::negated_rows) f = sum(neg(loss()) * constant(w));
          if (flow == Flow::softmax || flow == Flow::uniform_softmax ||
              flow == Flow::uniform_softmax_sum || flow == Flow::both) {
            const CountedVar losses_of_z =
                loss();  // one op, both of whose results f reads in `both`
            const bool uniform_inner =
                flow == Flow::uniform_softmax || flow == Flow::uniform_softmax_sum;
            const auto inner = uniform_inner ? sum(losses_of_z) : sum(losses_of_z * constant(w));
            const auto g = grad(inner, std::span<const CountedVar>(z), {.create_graph = true});
            f = flow == Flow::uniform_softmax_sum ? sum(g[0]) : sum(g[0] * constant(v));
            if (flow == Flow::both) f = f + sum(losses_of_z);
          }
          return f;
        });
    CHECK(results[0] == results[1]);
    CHECK(calls[0]["cross_entropy_backward"] == 1);
    if (flow == Flow::uniform) {
      // A sweep that records takes u (p - y) as one op too.
      CHECK(calls[0].total() == 1);
      CHECK(calls[1].total() == 1);
    } else {
      CHECK(calls[0].total() < calls[1].total());
    }
  }

  // Against the rule's ops themselves (scale or mul of p - y; mul, the sum
  // over the class axis, where an axis of one is not summed, mul, sub; add),
  // on rows of ten classes and of one: every form of the losses' gradient
  // (uniform, per row, repeated over tasks, points or both), the softmax's
  // with signed zeros, a row whose target is its softmax (p - y = 0).
  for (const std::int64_t classes : {10, 1}) {
    CAPTURE(classes);
    const Shape s{3, 7, classes}, kept{3, 7, 1};
    const auto e = raw::map(UnaryOp::exp, raw::normal<T>(s, gen));
    const auto p = raw::map(BinaryOp::div, e, raw::sum_to(e, kept), "test");
    const auto f = raw::map(UnaryOp::exp, raw::normal<T>(s, gen));
    auto y_values = raw::map(BinaryOp::div, f, raw::sum_to(f, kept), "test").to_vector();
    const auto p_values = p.to_vector();
    std::copy_n(p_values.begin(), classes, y_values.begin());
    auto q_values = raw::normal<T>(s, gen).to_vector();
    q_values[0] = -T(0), q_values.back() = -T(0), q_values[q_values.size() / 2] = T(0);
    const auto y = Tensor<T>::from_host(s, y_values), q = Tensor<T>::from_host(s, q_values);
    const auto composite = [&](std::optional<T> u, const Tensor<T>* gl, const Tensor<T>* gp) {
      Tape<T> tape;
      const auto pv = tape.constant(p.clone()), yv = tape.constant(y.clone());
      Var<T> dz;
      if (u) {
        dz = scale(sub(pv, yv), *u);
      } else if (gl) {
        Shape with_class = gl->shape();
        with_class.push_back(1);
        dz = mul(reshape(tape.constant(gl->clone()), with_class), sub(pv, yv));
      }
      if (gp) {
        const auto pg = mul(pv, tape.constant(gp->clone()));
        const auto jacobian_product = sub(pg, mul(pv, sum(pg, {-1}, true)));
        dz = dz.defined() ? add(dz, jacobian_product) : jacobian_product;
      }
      return bits(dz.value());
    };
    const auto fused = [&](std::optional<T> u, const Tensor<T>* gl, const Tensor<T>* gp) {
      return bits(raw::cross_entropy_backward(p, y, gl, u, gp));
    };
    for (const std::optional<T> u : {std::optional<T>(T(0.3)), std::optional<T>(T(-0.3))}) {
      CHECK(fused(u, nullptr, nullptr) == composite(u, nullptr, nullptr));
      CHECK(fused(u, nullptr, &q) == composite(u, nullptr, &q));
    }
    CHECK(fused(std::nullopt, nullptr, &q) == composite(std::nullopt, nullptr, &q));
    for (const Shape& repeated : {Shape{3, 7}, Shape{3, 1}, Shape{1, 7}, Shape{1, 1}}) {
      CAPTURE(repeated);
      const auto gl = raw::normal<T>(repeated, gen);
      CHECK(fused(std::nullopt, &gl, nullptr) == composite(std::nullopt, &gl, nullptr));
      CHECK(fused(std::nullopt, &gl, &q) == composite(std::nullopt, &gl, &q));
    }
  }

  // A losses' gradient that repeats along three runs of axes is expanded
  // (one copy), then read by the same call: the bits of the sweep that records.
  {
    const Shape wide{2, 3, 2, 3, 2, 4};
    const auto z_wide = raw::normal<T>(wide, gen), e = raw::map(UnaryOp::exp, z_wide);
    const auto y_wide = raw::map(BinaryOp::div, e, raw::sum_to(e, Shape{2, 3, 2, 3, 2, 1}), "test");
    const auto w_runs = raw::normal<T>({1, 3, 1, 3, 1}, gen);
    const auto [results, calls] =
        sweeps(z_wide, [&](Tape<T, counted>& tape, const std::array<CountedVar, 1>& z) {
          const auto loss = cross_entropy_with_logits(z[0], y_wide.template to<counted>());
          return sum(sum(loss, {0, 2, 4}, true) * tape.constant(w_runs.template to<counted>()));
        });
    CHECK(results[0] == results[1]);
    CHECK(calls[0]["cross_entropy_backward"] == 1);
    CHECK(calls[0]["strided_copy"] == 1);
    // The raw call expands it itself: the bits of the expanded gradient's.
    const auto expanded = raw::expand(w_runs, Shape{2, 3, 2, 3, 2});
    CHECK(bits(raw::cross_entropy_backward(y_wide, y_wide, &w_runs, std::nullopt, nullptr)) ==
          bits(raw::cross_entropy_backward(y_wide, y_wide, &expanded, std::nullopt, nullptr)));
  }
  // Gradients of the wrong shapes, or none, named.
  const Tensor<T> p({2, 3}), wrong({3});
  CHECK_THROWS_WITH((raw::cross_entropy_backward(p, Tensor<T>({2, 4}), nullptr, T(1), nullptr)),
                    Contains("cross_entropy_backward") && Contains("[2, 4]") && Contains("[2, 3]"));
  CHECK_THROWS_WITH((raw::cross_entropy_backward(p, p, &wrong, std::nullopt, nullptr)),
                    Contains("cross_entropy_backward") && Contains("[3]") && Contains("[2]"));
  CHECK_THROWS_WITH((raw::cross_entropy_backward(p, p, nullptr, std::nullopt, &wrong)),
                    Contains("cross_entropy_backward") && Contains("[3]") && Contains("[2, 3]"));
  const Tensor<T> per_row({2});
  CHECK_THROWS_WITH((raw::cross_entropy_backward(p, p, &per_row, T(1), nullptr)),
                    Contains("cross_entropy_backward") && Contains("both"));
  CHECK_THROWS_WITH((raw::cross_entropy_backward(p, p, nullptr, std::nullopt, nullptr)),
                    Contains("cross_entropy_backward") && Contains("no gradient"));
}

TEST_CASE(
    "sparse_cross_entropy_with_logits is cross_entropy_with_logits at the indices' one-hot rows, "
    "to the bit and to the second derivative, and matches finite differences",
    "[ops][loss][gradcheck]") {
  const Shape shape{2, 3, 4};
  const auto indices = Tensor<double>::from_host({2, 3, 1}, {0, 3, 1, 2, 2, 0});
  std::vector<double> one_hot(24, 0.0);
  for (std::size_t r = 0; r < 6; ++r)
    one_hot[r * 4 + static_cast<std::size_t>(indices.to_vector()[r])] = 1.0;
  const auto rows = Tensor<double>::from_host(shape, one_hot);
  const auto logits = normal(shape, 93, 0.5, 3);
  std::vector<std::uint64_t> results[2];
  for (const bool sparse : {false, true}) {
    Tape<double> tape;
    const std::array<V, 1> z{tape.variable(logits.clone())};
    const auto loss = sparse ? sparse_cross_entropy_with_logits(z[0] * z[0], indices)
                             : cross_entropy_with_logits(z[0] * z[0], rows.clone());
    const auto total = sum(square(loss));
    const auto g = grad(total, std::span<const V>(z), {.create_graph = true});
    const auto h = grad(sum(g[0] * g[0]), std::span<const V>(z));
    for (const auto& r : {loss, g[0], h[0]})
      for (const auto b : bits(r.value())) results[sparse].push_back(b);
  }
  CHECK(results[0] == results[1]);
  check_derivatives(
      [&](std::span<const V> v) {
        return sum(square(sparse_cross_entropy_with_logits(v[0] * v[0], indices)));
      },
      list(logits.clone()));
  Tape<double> tape;
  CHECK_THROWS_WITH(sparse_cross_entropy_with_logits(tape.constant(logits.clone()), rows),
                    Contains("sparse_cross_entropy_with_logits") && Contains("[2, 3, 1]"));
}

TEST_CASE("losses have the values of their definitions", "[loss]") {
  Tape<double> tape;
  const auto p = tape.constant(Tensor<double>::from_host({2}, {1.0, 3.0}));
  const auto y = tape.constant(Tensor<double>::from_host({2}, {0.0, 1.0}));
  CHECK(mse_loss(p, y).item() == Approx((1.0 + 4.0) / 2));
  CHECK(bce_with_logits_loss(p, y).item() ==
        Approx((std::log1p(std::exp(1.0)) + std::log1p(std::exp(-3.0))) / 2));
  const auto logits = tape.constant(Tensor<double>::from_host({1, 3}, {0.0, 1.0, 2.0}));
  const double lse = std::log(1 + std::exp(1.0) + std::exp(2.0));
  CHECK(softmax_cross_entropy(logits, Index<>::from_host({1}, {1})).item() == Approx(lse - 1.0));
  const auto var = tape.constant(Tensor<double>::from_host({2}, {0.5, 2.0}));
  const double nll0 = 0.5 * (std::log(2 * M_PI * 0.5) + 1.0 / 0.5),
               nll1 = 0.5 * (std::log(2 * M_PI * 2.0) + 4.0 / 2.0);
  CHECK(gaussian_nll_loss(p, var, y).item() == Approx((nll0 + nll1) / 2));
}

TEST_CASE("a loss's reduction over a task's points is their mean or their sum", "[loss]") {
  Tape<double> tape;
  // Two tasks of two points: errors 1, 2 and 0, 3.
  const auto p = tape.constant(Tensor<double>::from_host({2, 2, 1}, {1.0, 2.0, 0.0, 3.0}));
  const auto y = tape.constant(Tensor<double>::zeros({2, 2, 1}));
  CHECK(mse_loss(p, y, 1).to_vector() == std::vector<double>{2.5, 4.5});
  CHECK(mse_loss(p, y, 1, Reduction::sum).to_vector() == std::vector<double>{5.0, 9.0});
  CHECK(MseLoss{.reduction = Reduction::sum}(p, y, 1).to_vector() == std::vector<double>{5, 9});
  const auto labels = tape.constant(Tensor<double>::from_host({2, 2, 1}, {1, 0, 0, 1}));
  const auto mean_bce = BceWithLogitsLoss{}(p, labels, 1).to_vector(),
             summed_bce = BceWithLogitsLoss{.reduction = Reduction::sum}(p, labels, 1).to_vector();
  CHECK(summed_bce[0] == Approx(2 * mean_bce[0]));
  CHECK(summed_bce[1] == Approx(2 * mean_bce[1]));
}

TEST_CASE("GaussianNllLoss is -log N(y | f, sigma^2), summed or averaged over a task's points",
          "[loss]") {
  Tape<double> tape;
  const auto p = tape.constant(Tensor<double>::from_host({2, 2, 1}, {1.0, 2.0, 0.0, 3.0}));
  const auto y = tape.constant(Tensor<double>::from_host({2, 2, 1}, {0.5, 2.0, 0.3, 2.0}));
  const double sigma = 0.3;
  auto nll = [&](double f, double target) {
    return 0.5 * std::log(2 * M_PI * sigma * sigma) +
           (target - f) * (target - f) / (2 * sigma * sigma);
  };
  const auto summed =
      GaussianNllLoss{.noise_std = sigma, .reduction = Reduction::sum}(p, y, 1).to_vector();
  CHECK(summed[0] == Approx(nll(1.0, 0.5) + nll(2.0, 2.0)));
  CHECK(summed[1] == Approx(nll(0.0, 0.3) + nll(3.0, 2.0)));
  const auto mean = GaussianNllLoss{.noise_std = sigma}(p, y, 1);  // the default
  CHECK(mean.to_vector()[1] == Approx(summed[1] / 2));
  for (double bad : {0.0, -1.0, std::nan("")})
    CHECK_THROWS_WITH(GaussianNllLoss{.noise_std = bad}(p, y, 1),
                      Contains("GaussianNllLoss") && Contains("noise_std"));
}

TEST_CASE("GaussianNllLoss passes first and second order checks", "[ops][loss]") {
  check_derivatives([](auto x) { return GaussianNllLoss{.noise_std = 0.7}(x[0], x[1], 1); },
                    list(normal({2, 3, 1}, 59), normal({2, 3, 1}, 60)));
}

TEST_CASE("ops name themselves and the shapes when given bad input", "[ops][errors]") {
  Tape<double> tape;
  const auto a = tape.variable(Tensor<double>::zeros({2, 3}));
  const auto b = tape.variable(Tensor<double>::zeros({4, 3}));
  CHECK_THROWS_AS(a + b, error);
  CHECK_THROWS_WITH(a * b, Contains("mul") && Contains("[2, 3]") && Contains("[4, 3]"));
  CHECK_THROWS_WITH(matmul(a, b), Contains("matmul") && Contains("[2, 3]") && Contains("[4, 3]"));
  CHECK_THROWS_WITH(reshape(a, {4, 2}), Contains("reshape") && Contains("[2, 3]"));
  CHECK_THROWS_WITH(concat({a, b}, 1), Contains("concat") && Contains("[4, 3]"));
  CHECK_THROWS_WITH(expand_concat({a, b}, 1),
                    Contains("expand_concat") && Contains("broadcast") && Contains("[4, 3]"));
  const std::array<std::int64_t, 2> sizes{1, 1};
  CHECK_THROWS_WITH(split(a, 1, sizes), Contains("split") && Contains("[2, 3]"));
  CHECK_THROWS_WITH(sum(a, {2}), Contains("sum") && Contains("axis 2"));
  CHECK_THROWS_WITH(mse_loss(a, b),
                    Contains("mse_loss") && Contains("[2, 3]") && Contains("[4, 3]"));
  CHECK_THROWS_WITH(softmax_cross_entropy(a, Index<>::from_host({2}, {0, 3})), Contains("label 3"));
  Tape<double> other;
  CHECK_THROWS_WITH(a + other.variable(Tensor<double>::zeros({2, 3})), Contains("different tapes"));
}

TEST_CASE("with the NaN check on, a NaN loss throws naming the loss and shapes", "[loss][errors]") {
  Tape<double> tape;
  const auto p =
      log(tape.variable(Tensor<double>::from_host({2, 1}, {-1.0, 1.0})));  // log(-1) = NaN
  const auto y = tape.constant(Tensor<double>::zeros({2, 1}));
  CHECK_NOTHROW(mse_loss(p, y));
  NanCheckGuard nan_check;
  CHECK_THROWS_WITH(mse_loss(p, y), Contains("mse_loss") && Contains("nan") && Contains("[2, 1]"));
}

namespace {

// conv2d by its definition, loop by loop: x [T, N, C, H, W], w [T, Co, C, k, k], b [T, Co].
std::vector<double> direct_convolution(const Tensor<double>& x, const Tensor<double>& w,
                                       const Tensor<double>& b, const Window& window) {
  const auto xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  const std::int64_t tasks = x.dim(0), n = x.dim(1), c = x.dim(2), h = x.dim(3), wd = x.dim(4);
  const std::int64_t co = w.dim(1), k = window.kernel, s = window.stride, p = window.padding;
  const std::int64_t ho = (h + 2 * p - k) / s + 1, wo = (wd + 2 * p - k) / s + 1;
  std::vector<double> y;
  for (std::int64_t t = 0; t < tasks; ++t)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t o = 0; o < co; ++o)
        for (std::int64_t r = 0; r < ho; ++r)
          for (std::int64_t q = 0; q < wo; ++q) {
            double sum = bv[static_cast<std::size_t>(t * co + o)];
            for (std::int64_t ch = 0; ch < c; ++ch)
              for (std::int64_t a = 0; a < k; ++a)
                for (std::int64_t e = 0; e < k; ++e) {
                  const std::int64_t row = r * s + a - p, col = q * s + e - p;
                  if (row < 0 || row >= h || col < 0 || col >= wd) continue;
                  sum +=
                      xv[static_cast<std::size_t>((((t * n + i) * c + ch) * h + row) * wd + col)] *
                      wv[static_cast<std::size_t>((((t * co + o) * c + ch) * k + a) * k + e)];
                }
            y.push_back(sum);
          }
  return y;
}

// y equals the direct convolution. Each output is a sum of products in
// another order than the direct loop's: its rounding error scales with the
// outputs' size, not its own (an output near zero differs by 1e-11 relative
// with AVX-512 FMAs).
void check_direct_convolution(const Tensor<double>& y, const Tensor<double>& x,
                              const Tensor<double>& w, const Tensor<double>& b,
                              const Window& window) {
  const auto expected = direct_convolution(x, w, b, window), got = y.to_vector();
  REQUIRE(got.size() == expected.size());
  double scale = 0;
  for (const double e : expected) scale = std::max(scale, std::abs(e));
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == Approx(expected[i]).epsilon(1e-12).margin(1e-13 * scale));
}

}  // namespace

TEST_CASE("conv2d with per-task filters equals the direct convolution, with stride and padding",
          "[ops][conv]") {
  const Window window{.kernel = 3, .stride = 2, .padding = 1};
  const auto x = normal({2, 3, 2, 7, 6}, 1), w = normal({2, 4, 2, 3, 3}, 2), b = normal({2, 4}, 3);
  Tape<double> tape;
  const auto y = conv2d(tape.constant(x), tape.constant(w), tape.constant(b), window);
  CHECK(y.shape() == Shape{2, 3, 4, 4, 3});
  check_direct_convolution(y.value(), x, w, b, window);
  // Filters shared by the tasks: the same as each task's copy of them.
  const auto shared =
      conv2d(tape.constant(x), tape.constant(raw::slice(w, 0, 0, 1).reshaped(Shape{4, 2, 3, 3})),
             V{}, window);
  const auto first_task = conv2d(tape.constant(raw::slice(x, 0, 0, 1)),
                                 tape.constant(raw::slice(w, 0, 0, 1)), V{}, window);
  const auto s = shared.value().to_vector(), f = first_task.value().to_vector();
  for (std::size_t i = 0; i < f.size(); ++i) CHECK(s[i] == Approx(f[i]).epsilon(1e-12));
  // The grouped call equals a loop over the tasks, one convolution each.
  for (std::int64_t t = 0; t < 2; ++t) {
    const auto alone =
        conv2d(tape.constant(raw::slice(x, 0, t, 1)), tape.constant(raw::slice(w, 0, t, 1)),
               tape.constant(raw::slice(b, 0, t, 1)), window)
            .value()
            .to_vector();
    const auto grouped = raw::slice(y.value(), 0, t, 1).to_vector();
    for (std::size_t i = 0; i < alone.size(); ++i)
      CHECK(grouped[i] == Approx(alone[i]).epsilon(1e-12));
  }
}

// conv2d(x, w) equals the direct convolution, and its two adjoints agree:
// <dy, w * x> = <conv2d_input_grad(dy, w), x> = <conv2d_weight_grad(x, dy), w>.
void check_convolution_and_adjoints(const Window& window, const Shape& x_shape,
                                    const Shape& w_shape) {
  INFO(fmt::format("x {}, w {}, kernel {}, stride {}", x_shape, w_shape, window.kernel,
                   window.stride));
  const auto x = normal(x_shape, 11), w = normal(w_shape, 12),
             b = normal({w_shape[0], w_shape[1]}, 13);
  Tape<double> tape;
  const auto X = tape.constant(x), W = tape.constant(w);
  const auto y = conv2d(X, W, tape.constant(b), window);
  check_direct_convolution(y.value(), x, w, b, window);
  const auto DY = tape.constant(normal(y.shape(), 14));
  const double form = sum(DY * conv2d(X, W, V{}, window)).item();
  CHECK(sum(conv2d_input_grad(DY, W, x_shape, window) * X).item() == Approx(form).epsilon(1e-12));
  CHECK(sum(conv2d_weight_grad(X, DY, w_shape, window) * W).item() == Approx(form).epsilon(1e-12));
}

// Stride 1 with an output as wide as the input (conv4's 3 x 3 with padding 1)
// takes the CPU's shifted-plane im2col; its borders, on images narrower and
// shorter than the kernel too.
TEST_CASE(
    "conv2d of stride 1 and same padding equals the direct convolution, and its adjoints "
    "agree, on non-square and tiny images",
    "[ops][conv]") {
  check_convolution_and_adjoints({.kernel = 3, .stride = 1, .padding = 1}, {2, 3, 2, 7, 6},
                                 {2, 4, 2, 3, 3});
  check_convolution_and_adjoints({.kernel = 5, .stride = 1, .padding = 2}, {1, 2, 3, 4, 9},
                                 {1, 2, 3, 5, 5});
  check_convolution_and_adjoints({.kernel = 3, .stride = 1, .padding = 1}, {1, 2, 2, 1, 1},
                                 {1, 3, 2, 3, 3});
  check_convolution_and_adjoints({.kernel = 3, .stride = 1, .padding = 1}, {1, 1, 1, 2, 1},
                                 {1, 2, 1, 3, 3});
}

// Images with few output pixels go through the CPU's GEMMs several at a time
// (backend/cpu/convolution.hpp, images_per_gemm: 25 of 5 x 4, 56 of 3 x 3):
// the last GEMM of each task takes the remainder.
TEST_CASE(
    "conv2d of many small images, several per product, equals the direct convolution, and its "
    "adjoints agree",
    "[ops][conv]") {
  check_convolution_and_adjoints({.kernel = 3, .stride = 1, .padding = 1}, {2, 30, 2, 5, 4},
                                 {2, 3, 2, 3, 3});
  check_convolution_and_adjoints({.kernel = 3, .stride = 2, .padding = 1}, {2, 60, 1, 5, 5},
                                 {2, 4, 1, 3, 3});
}

// With 16 channels or more on both sides and images of 8 x 8 or more, the
// CPU computes 3 x 3 convolutions of stride 1 and padding 1 by Winograd's
// F(2x2, 3x3) (backend/cpu/winograd.hpp): odd sizes leave tiles half past the
// edges, and 35 images of 8 x 8 (16 tiles, 32 to a round of products) and 11
// of 14 x 14 (49 tiles, 10 to a round) leave remainders. Rows of 4, 7, 6 and
// 19 tiles take one vector, two overlapping ones and three (lanes.hpp).
TEST_CASE(
    "conv2d by Winograd's minimal filtering equals the direct convolution, and its adjoints "
    "agree",
    "[ops][conv]") {
  const Window same{.kernel = 3, .stride = 1, .padding = 1};
  check_convolution_and_adjoints(same, {2, 35, 16, 8, 8}, {2, 17, 16, 3, 3});
  check_convolution_and_adjoints(same, {1, 11, 17, 14, 14}, {1, 16, 17, 3, 3});
  check_convolution_and_adjoints(same, {2, 3, 16, 9, 11}, {2, 18, 16, 3, 3});
  check_convolution_and_adjoints(same, {1, 2, 16, 12, 37}, {1, 16, 16, 3, 3});
}

TEST_CASE("conv2d equals the filters times the unfolded windows (unfold, im2col)", "[ops][conv]") {
  const Window window{.kernel = 2, .stride = 2, .padding = 1};
  const auto x = normal({3, 2, 2, 5, 4}, 21), w = normal({3, 4, 2, 2, 2}, 22);
  Tape<double> tape;
  const auto y = conv2d(tape.constant(x), tape.constant(w), V{}, window);
  // [T, 1, Co, C k k] x [T, N, C k k, Ho Wo] -> [T, N, Co, Ho Wo]
  const auto product =
      matmul(reshape(tape.constant(w), {3, 1, 4, 8}), unfold(tape.constant(x), window));
  REQUIRE(y.numel() == product.numel());
  const auto a = y.value().to_vector(), b = product.value().to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-12));
}

TEST_CASE(
    "conv2d_input_grad and conv2d_weight_grad are conv2d's adjoints and match finite "
    "differences, first and second order",
    "[ops][conv][gradcheck]") {
  const Window window{.kernel = 3, .stride = 2, .padding = 1};
  const Shape x_shape{2, 2, 2, 5, 5}, w_shape{2, 3, 2, 3, 3}, shared_w{3, 2, 3, 3};
  const auto x = normal(x_shape, 31), w = normal(w_shape, 32), dy = normal({2, 2, 3, 3, 3}, 33);
  // <dy, w * x> = <conv2d_input_grad(dy, w), x> = <conv2d_weight_grad(x, dy), w>.
  Tape<double> tape;
  const auto X = tape.constant(x.clone()), W = tape.constant(w.clone()),
             DY = tape.constant(dy.clone());
  const double form = sum(DY * conv2d(X, W, V{}, window)).item();
  CHECK(sum(conv2d_input_grad(DY, W, x_shape, window) * X).item() == Approx(form).epsilon(1e-12));
  CHECK(sum(conv2d_weight_grad(X, DY, w_shape, window) * W).item() == Approx(form).epsilon(1e-12));
  // Each op's derivatives, per-task and shared filters.
  check_derivatives(
      [&](std::span<const V> v) {
        return sum(square(conv2d_input_grad(v[0], v[1], x_shape, window)));
      },
      list(dy.clone(), w.clone()));
  check_derivatives(
      [&](std::span<const V> v) {
        return sum(square(conv2d_weight_grad(v[0], v[1], w_shape, window)));
      },
      list(x.clone(), dy.clone()));
  check_derivatives(
      [&](std::span<const V> v) {
        return sum(square(conv2d_weight_grad(v[0], v[1], shared_w, window)));
      },
      list(x.clone(), dy.clone()));
  check_derivatives(
      [&](std::span<const V> v) { return sum(square(conv2d(v[0], v[1], V{}, window))); },
      list(x.clone(), normal(shared_w, 34)));
}

TEST_CASE("a tiny conv net's third derivatives match finite differences",
          "[ops][conv][gradcheck]") {
  // F(x, w) = <d/dw L(x, w), u> for a fixed direction u: F's first and
  // second derivatives are L's second and third.
  const auto u = normal({2, 1, 2, 2}, 43);
  check_derivatives(
      [&](std::span<const V> v) {
        const auto h = tanh(conv2d(v[0], v[1], V{}, {.kernel = 2, .padding = 1}));
        const auto loss = sum(square(max_pool2d(h, {.kernel = 2, .stride = 2})));
        const auto g = grad(loss, std::span<const V>(&v[1], 1), {.create_graph = true});
        return sum(g[0] * v[1].tape().constant(u.clone()));
      },
      list(normal({1, 2, 1, 3, 3}, 41), normal({2, 1, 2, 2}, 42)));
}

TEST_CASE(
    "conv2d's derivatives in x, the filters and the bias match finite differences, first "
    "and second order",
    "[ops][conv][gradcheck]") {
  const Window window{.kernel = 2, .stride = 1, .padding = 1};
  check_derivatives(
      [&](std::span<const V> v) { return sum(square(conv2d(v[0], v[1], v[2], window))); },
      list(normal({2, 2, 2, 3, 3}, 4), normal({2, 3, 2, 2, 2}, 5), normal({2, 3}, 6)));
  // Through a nonlinearity and a second layer, as in conv4.
  check_derivatives(
      [&](std::span<const V> v) {
        const auto h = tanh(conv2d(v[0], v[1], V{}, {.kernel = 2, .stride = 2}));
        return sum(conv2d(h, v[2], V{}, {.kernel = 1}));
      },
      list(normal({1, 2, 1, 4, 4}, 7), normal({1, 2, 1, 2, 2}, 8), normal({1, 3, 2, 1, 1}, 9)));
}

TEST_CASE("max_pool2d takes each window's maximum and routes the gradient to it",
          "[ops][conv][gradcheck]") {
  // Distinct values, so every window's maximum is unique.
  std::vector<double> values(2 * 3 * 4 * 6);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = std::sin(1.7 * static_cast<double>(i) + 0.3);
  const auto x = Tensor<double>::from_host({2, 3, 4, 6}, values);
  Tape<double> tape;
  const auto y = max_pool2d(tape.constant(x), {.kernel = 2, .stride = 2});
  REQUIRE(y.shape() == Shape{2, 3, 2, 3});
  const auto got = y.value().to_vector();
  std::size_t at = 0;
  for (int plane = 0; plane < 6; ++plane)
    for (int r = 0; r < 2; ++r)
      for (int q = 0; q < 3; ++q) {
        double largest = -1e9;
        for (int a = 0; a < 2; ++a)
          for (int e = 0; e < 2; ++e)
            largest = std::max(
                largest,
                values[static_cast<std::size_t>(plane * 24 + (2 * r + a) * 6 + 2 * q + e)]);
        CHECK(got[at++] == largest);
      }
  check_derivatives(
      [](std::span<const V> v) {
        return sum(square(max_pool2d(v[0], {.kernel = 2, .stride = 2})));
      },
      list(x.clone()));
  // Overlapping windows (stride 1): an input that is the maximum of several
  // windows gets each one's gradient.
  check_derivatives(
      [](std::span<const V> v) {
        return sum(square(max_pool2d(v[0], {.kernel = 3, .stride = 1})));
      },
      list(x.clone()));
  // Of equal values, the first in row-major order is the maximum.
  Tape<double> ties;
  const auto flat = ties.variable(Tensor<double>::ones({1, 2, 2}));
  const auto g = grad(sum(max_pool2d(flat, {.kernel = 2, .stride = 2})), flat);
  CHECK(g.value().to_vector() == std::vector<double>{1, 0, 0, 0});
}

TEST_CASE(
    "max_pool2d with a ReLU has the bits of max_pool2d then relu, to the third derivative, in "
    "one call each way",
    "[ops][conv]") {
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<float, counted>;
  // Values of few levels: ties in most windows, zeros and negative maxima
  // (ReLU's kink at both); the 2 x 2 loop of odd sizes, overlapping windows
  // (3 x 3 of stride 2) and gaps (2 x 2 of stride 3) by the general loop.
  const Shape shape{2, 3, 7, 9};
  std::vector<float> values(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = std::floor(3.f * std::sin(2.3f * static_cast<float>(i) + 0.1f)) * 0.5f;
  const auto x0 = Tensor<float>::from_host(shape, values);
  Generator gen(415);
  for (const Window window : {Window{.kernel = 2, .stride = 2}, Window{.kernel = 3, .stride = 2},
                              Window{.kernel = 2, .stride = 3}}) {
    CAPTURE(window.kernel, window.stride);
    const auto dy =
        raw::normal<float>({2, 3, window.output(7, "test"), window.output(9, "test")}, gen);
    std::vector<std::uint32_t> results[2];
    KernelCalls forward[2], backward[2], second[2];
    for (const bool fused : {false, true}) {
      Tape<float, counted> tape;
      const std::array<CountedVar, 1> x{tape.variable(x0.to<counted>())};
      counted::reset();
      const CountedVar y =
          fused ? max_pool2d(x[0], window, Activation::relu) : relu(max_pool2d(x[0], window));
      forward[fused] = counted::calls();
      const CountedVar total = sum(y * tape.constant(dy.to<counted>()));
      counted::reset();
      const auto g = grad(total, std::span<const CountedVar>(x));
      backward[fused] = counted::calls();
      // Second and third derivatives: through the gradient's recorded op,
      // by a sweep that records nothing and by one that records.
      const auto g2 = grad(sum(square(y)), std::span<const CountedVar>(x), {.create_graph = true});
      const CountedVar weighted = sum(g2[0] * g2[0] * tape.constant(x0.to<counted>()));
      counted::reset();
      const auto h = grad(weighted, std::span<const CountedVar>(x));
      second[fused] = counted::calls();
      const auto h2 = grad(weighted, std::span<const CountedVar>(x), {.create_graph = true});
      const auto k = grad(sum(h2[0] * h2[0]), std::span<const CountedVar>(x));
      for (const auto& r : {y, g[0], g2[0], h[0], h2[0], k[0]})
        for (const auto b : bits(r.value())) results[fused].push_back(b);
    }
    CHECK(results[0] == results[1]);
    CHECK(forward[1].total() == 1);
    CHECK(forward[1]["max_pool2d"] == 1);
    CHECK(forward[0].total() == 2);
    CHECK(backward[1]["max_pool2d_backward"] == 1);
    CHECK(backward[1].total() + 1 == backward[0].total());
    // The second sweep passes through the gradient's node (a gather and
    // relu_backward were two) and the pooling's (relu_backward and a scatter).
    CHECK(second[1]["max_pool2d_double_backward"] == 1);
    CHECK(second[1]["max_pool2d_backward"] == 1);
    CHECK(second[1].total() + 2 == second[0].total());
  }
  // Shapes that do not pool the input, named.
  const Tensor<float> wrong({2, 3, 3, 3});
  CHECK_THROWS_WITH((raw::max_pool2d_backward(wrong, wrong, Index<>(Shape{54}), shape,
                                              Window{.kernel = 2, .stride = 2}, true)),
                    Contains("max_pool2d_backward") && Contains("[2, 3, 7, 9]"));
  CHECK_THROWS_WITH((raw::max_pool2d_double_backward(x0, wrong, Index<>(Shape{54}),
                                                     Window{.kernel = 2, .stride = 2}, true)),
                    Contains("max_pool2d_double_backward") && Contains("[2, 3, 7, 9]"));
  // Other activations are the two ops, in that order.
  Tape<float> tape;
  const auto x = tape.constant(x0.clone());
  CHECK(bits(max_pool2d(x, {.kernel = 2, .stride = 2}, Activation::tanh).value()) ==
        bits(tanh(max_pool2d(x, {.kernel = 2, .stride = 2})).value()));
  // Finite differences, away from ties and the kink.
  check_derivatives(
      [](std::span<const V> v) {
        return sum(
            square(max_pool2d(v[0] * v[0] - 0.5, {.kernel = 2, .stride = 2}, Activation::relu)));
      },
      list(away_from_zero({2, 4, 6}, 416)));
}

// 2 x 2 windows of stride 2 take the CPU's own loop (backend/cpu/
// convolution.hpp, max_pool_2x2, in vectors of 2 to 16 lanes, the last one
// overlapping): odd sizes leave a row and a column out, and values of few
// levels make most windows hold ties.
TEST_CASE(
    "max_pool2d over 2 x 2 windows of odd-sized images with ties takes each maximum and routes "
    "its gradient to the first of equal values",
    "[ops][conv]") {
  const auto check_pool = []<class T>(T, std::size_t planes, std::size_t h, std::size_t w) {
    INFO(fmt::format("{} planes of {} x {}, {} bytes", planes, h, w, sizeof(T)));
    std::vector<T> values(planes * h * w);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = std::floor(T(3) * std::sin(T(2.3) * static_cast<T>(i) + T(0.1)));
    Tape<T> tape;
    const auto x = tape.variable(
        Tensor<T>::from_host({std::int64_t(planes), std::int64_t(h), std::int64_t(w)}, values));
    const auto y = max_pool2d(x, {.kernel = 2, .stride = 2});
    const std::size_t ho = h / 2, wo = w / 2;
    REQUIRE(y.shape() == Shape{std::int64_t(planes), std::int64_t(ho), std::int64_t(wo)});
    Generator gen(5);
    const auto dy = raw::normal<T>(y.shape(), gen);
    const auto g = grad(sum(y * tape.constant(dy.clone())), x).value().to_vector();
    const auto got = y.value().to_vector(), dys = dy.to_vector();
    std::vector<T> want(values.size(), T(0));
    std::size_t out = 0;
    for (std::size_t plane = 0; plane < planes; ++plane)
      for (std::size_t r = 0; r < ho; ++r)
        for (std::size_t q = 0; q < wo; ++q, ++out) {
          std::size_t best = (plane * h + 2 * r) * w + 2 * q;
          for (std::size_t a = 0; a < 2; ++a)
            for (std::size_t e = 0; e < 2; ++e) {
              const std::size_t at = (plane * h + 2 * r + a) * w + 2 * q + e;
              if (values[at] > values[best]) best = at;
            }
          CHECK(got[out] == values[best]);
          want[best] += dys[out];
        }
    CHECK(g == want);
  };
  check_pool(0.0, 3, 5, 7);    // rows of 3 windows: 2 lanes of double, overlapping
  check_pool(0.0, 2, 5, 41);   // 20: 8 lanes, overlapping
  check_pool(0.0f, 2, 4, 5);   // 2: scalars
  check_pool(0.0f, 2, 3, 21);  // 10: 8 lanes of float, overlapping
  check_pool(0.0f, 2, 4, 84);  // 42: 16 lanes, overlapping
}

// conv2d adds its bias in the backend as it writes y (Winograd's output
// transform, the GEMM's blocks): the definition is the convolution plus
// the bias broadcast, an add op, and the two agree to the bit in float.
TEST_CASE(
    "conv2d's bias, added as the convolution writes its outputs, gives the bits of adding it "
    "after, in the value and the gradients",
    "[ops][conv]") {
  using F = Var<float>;
  const auto check_bits = [](const Shape& x_shape, const Shape& w_shape, const Shape& b_shape) {
    INFO(fmt::format("x {}, w {}, b {}", x_shape, w_shape, b_shape));
    Generator gen(3);
    const auto x = raw::normal<float>(x_shape, gen), w = raw::normal<float>(w_shape, gen),
               b = raw::normal<float>(b_shape, gen);
    const Window same{.kernel = 3, .padding = 1};
    Shape per_channel = b_shape.take_front(b_shape.rank() - 1);  // [..., 1, C_out, 1, 1]
    for (auto d : {std::int64_t{1}, b_shape[b_shape.rank() - 1], std::int64_t{1}, std::int64_t{1}})
      per_channel.push_back(d);
    std::optional<Tensor<float>> dy;
    const auto run = [&](bool in_convolution) {
      Tape<float> tape;
      const std::vector<F> inputs{tape.variable(x.clone()), tape.variable(w.clone()),
                                  tape.variable(b.clone())};
      const auto y = in_convolution ? conv2d(inputs[0], inputs[1], inputs[2], same)
                                    : conv2d(inputs[0], inputs[1], F{}, same) +
                                          reshape(inputs[2], per_channel);
      if (!dy) dy = raw::normal<float>(y.shape(), gen);
      std::vector<std::vector<float>> results{y.value().to_vector()};
      for (const auto& g : grad(sum(y * tape.constant(dy->clone())), std::span<const F>(inputs)))
        results.push_back(g.value().to_vector());
      return results;
    };
    CHECK(run(true) == run(false));
  };
  check_bits({2, 3, 16, 9, 11}, {2, 16, 16, 3, 3}, {2, 16});  // Winograd, per-task filters
  check_bits({2, 3, 16, 8, 8}, {16, 16, 3, 3}, {16});         // Winograd, shared filters
  check_bits({1, 5, 16, 8, 8}, {1, 16, 16, 3, 3}, {1, 16});   // one task's chunk
  check_bits({2, 3, 3, 12, 12}, {2, 8, 3, 3, 3}, {2, 8});     // one image per GEMM
  check_bits({2, 30, 3, 5, 4}, {8, 3, 3, 3}, {8});            // several images per GEMM
  check_bits({2, 3, 3, 12, 12}, {8, 3, 3, 3}, {2, 8});  // shared filters, per-task bias: an add
}

TEST_CASE("conv2d and max_pool2d refuse shapes that do not fit, naming them",
          "[ops][conv][errors]") {
  Tape<double> tape;
  const auto x = tape.constant(normal({2, 3, 5, 5}, 1));
  CHECK_THROWS_WITH(conv2d(x, tape.constant(normal({4, 2, 3, 3}, 2)), V{}, {.kernel = 3}),
                    Contains("3 channels") && Contains("expect 2"));
  CHECK_THROWS_WITH(conv2d(x, tape.constant(normal({4, 3, 3, 3}, 2)), V{}, {.kernel = 2}),
                    Contains("square kernels"));
  CHECK_THROWS_WITH(conv2d(x, tape.constant(normal({4, 3, 7, 7}, 2)), V{}, {.kernel = 7}),
                    Contains("does not fit"));
  CHECK_THROWS_WITH(conv2d(x, tape.constant(normal({4, 3, 3, 3}, 2)), tape.constant(normal({5}, 3)),
                           {.kernel = 3}),
                    Contains("bias"));
  CHECK_THROWS_WITH(max_pool2d(x, {.kernel = 2, .stride = 0}), Contains("stride 0"));
}

TEST_CASE(
    "batch_norm normalises each task's channel over its samples and positions, scales and shifts, "
    "and its closed-form backward matches finite differences to the fourth order",
    "[ops][batch_norm][gradcheck]") {
  const Shape images{2, 3, 4, 2, 3}, groups{2, 1, 4, 1, 1};  // tasks, samples, channels, H, W
  const auto x = normal(images, 61, 0.5, 2);
  // The definition, as a chain of elementwise ops (a shift shared by the
  // tasks); rows of 6 positions take the CPU kernel's scalar loop, rows of 35
  // its vectors of 8 doubles and the remainder.
  const auto check_definition = [](const Tensor<double>& x, const Shape& groups) {
    Tape<double> tape;
    const auto X = tape.constant(x.clone()), scale = tape.constant(normal(groups, 62)),
               shift = tape.constant(normal({groups[2], 1, 1}, 63));
    const std::vector<int> axes{-4, -2, -1};
    const auto centred = X - mean(X, axes, true);
    const auto expected = centred / sqrt(mean(square(centred), axes, true) + 1e-3) * scale + shift;
    const auto got = batch_norm(X, scale, shift, 2, 1e-3).to_vector(), want = expected.to_vector();
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-12));
  };
  check_definition(x, groups);
  const Shape wide{2, 3, 2, 5, 7}, wide_groups{2, 1, 2, 1, 1};
  check_definition(normal(wide, 81, 0.5, 2), wide_groups);
  const auto inputs = [&] {
    return list(x.clone(), normal(groups, 64), normal({4, 1, 1}, 65));
  };
  // Through a nonlinearity and weighted by x again, so that no derivative is trivially zero.
  const auto weighted = [](int positions) {
    return [positions](std::span<const V> v) {
      return sum(tanh(batch_norm(v[0], v[1], v[2], positions, 1e-3)) * v[0]);
    };
  };
  check_derivatives(weighted(2), inputs());
  check_derivatives(weighted(2),
                    list(normal(wide, 82, 0.5, 2), normal(wide_groups, 83), normal({2, 1, 1}, 84)));
  check_derivatives(weighted(0),
                    list(normal({3, 5, 4}, 66), normal({4}, 67), normal({3, 1, 4}, 68)));
  // Per-task scales over images the tasks share ([N, C, H, W]).
  check_derivatives(
      [](std::span<const V> v) { return sum(tanh(batch_norm(v[0], v[1], v[2], 2, 1e-3)) * v[1]); },
      list(normal({3, 4, 2, 3}, 69), normal(groups, 70), normal({4, 1, 1}, 71)));
  // batch_norm_backward in each input, with gradients flowing into all three results.
  const auto w_scale = normal(groups, 72), w_shift = normal(groups, 73);
  check_derivatives(
      [&](std::span<const V> v) {
        Tape<double>& tape = v[0].tape();
        const auto x_hat = batch_norm(v[0], tape.constant(Tensor<double>::ones(groups)),
                                      tape.constant(Tensor<double>::zeros(groups)), 2, 1e-3);
        const auto d = batch_norm_backward(x_hat, v[1], v[2], v[3], 2);
        return sum(square(d[0])) + sum(d[1] * tape.constant(w_scale.clone())) +
               sum(square(d[2]) * tape.constant(w_shift.clone()));
      },
      list(x.clone(), positive(groups, 74), normal(groups, 75), normal(images, 76)));
  // A sweep that records nothing takes batch_norm_backward's rule in fused
  // passes.
  const auto h = normal(images, 80);
  check_unrecorded_sweep(
      [&](std::span<const V> v) {
        Tape<double>& tape = v[0].tape();
        const auto x_hat = batch_norm(v[0], tape.constant(Tensor<double>::ones(groups)),
                                      tape.constant(Tensor<double>::zeros(groups)), 2, 1e-3);
        const auto d = batch_norm_backward(x_hat, v[1], v[2], v[3], 2);
        return sum(d[0] * tape.constant(h.clone())) + sum(d[1] * tape.constant(w_scale.clone())) +
               sum(d[2] * tape.constant(w_shift.clone()));
      },
      list(x.clone(), positive(groups, 74), normal(groups, 75), normal(images, 76)));
  // Third and fourth order: F = <d/d(x, scale, shift) L, u>; F's first and
  // second derivatives are L's third and fourth. F's gradient reaches
  // batch_norm from all three of its results (y, and x_hat and inv_std
  // through batch_norm_backward's rule), which a sweep that records nothing
  // takes in one fused kernel.
  const auto u = list(normal(images, 77), normal(groups, 78), normal({4, 1, 1}, 79));
  const auto along_u = [&](std::span<const V> v) {
    const auto loss = sum(tanh(batch_norm(v[0], v[1], v[2], 2, 1e-3)) * v[0]);
    const auto g = grad(loss, v, {.create_graph = true});
    Tape<double>& tape = v[0].tape();
    return sum(g[0] * tape.constant(u[0].clone())) + sum(g[1] * tape.constant(u[1].clone())) +
           sum(g[2] * tape.constant(u[2].clone()));
  };
  check_unrecorded_sweep(along_u, inputs());
  check_derivatives(along_u, inputs());
}

TEST_CASE("batch_norm refuses a single value per channel, a non-positive epsilon and mismatches",
          "[ops][batch_norm][errors]") {
  Tape<double> tape;
  const auto ones = [&](const Shape& s) {
    return tape.constant(Tensor<double>::ones(s));
  };
  const auto one_sample = tape.variable(normal({2, 1, 3}, 80));
  CHECK_THROWS_WITH(batch_norm(one_sample, ones({3}), ones({3}), 0, 1e-5),
                    Contains("batch_norm") && Contains("[2, 1, 3]") && Contains("no variance"));
  const auto two_positions = tape.variable(normal({1, 1, 2, 2, 1}, 81));
  CHECK_NOTHROW(batch_norm(two_positions, ones({2, 1, 1}), ones({2, 1, 1}), 2, 1e-5));
  const auto x = tape.variable(normal({2, 3, 4}, 82));
  CHECK_THROWS_WITH(batch_norm(x, ones({4}), ones({4}), 0, 0.0),
                    Contains("batch_norm") && Contains("epsilon"));
  CHECK_THROWS_WITH(batch_norm(x, ones({4}), ones({4}), 2, 1e-5),
                    Contains("batch_norm") && Contains("[2, 3, 4]"));
  CHECK_THROWS_WITH(batch_norm(x, ones({3}), ones({4}), 0, 1e-5),
                    Contains("batch_norm") && Contains("[3]") && Contains("[4]"));
  const auto x_hat = batch_norm(x, ones({4}), ones({4}), 0, 1e-5);
  CHECK_THROWS_WITH(batch_norm_backward(x_hat, ones({2, 1, 3}), ones({2, 1, 3}), x_hat, 0),
                    Contains("batch_norm_backward") && Contains("[2, 1, 3]"));
  // The fused whole gradient's extra inputs must match x_hat and the statistics.
  const auto r = Tensor<double>::ones({2, 1, 4}), wrong = Tensor<double>::ones({2, 3});
  CHECK_THROWS_WITH(raw::batch_norm_backward(x_hat.value(), r, r, x_hat.value(), 0, &wrong),
                    Contains("batch_norm_backward") && Contains("[2, 3, 4]") && Contains("[2, 3]"));
  CHECK_THROWS_WITH(
      raw::batch_norm_backward(x_hat.value(), r, r, x_hat.value(), 0, nullptr, &wrong),
      Contains("batch_norm_backward") && Contains("[2, 1, 4]") && Contains("[2, 3]"));
}

TEST_CASE(
    "batch_norm_backward's rule reads a missing gradient into d_scale or d_shift as zeros, with "
    "their bits and no fill",
    "[ops][batch_norm]") {
  const Shape images{2, 3, 4, 2, 3}, groups{2, 1, 4, 1, 1};
  const auto x_hat = normal(images, 90), r = positive(groups, 91), s = normal(groups, 92),
             g = normal(images, 93), h = normal(images, 94), k = normal(groups, 95),
             u = normal(groups, 96), zeros = Tensor<double>::zeros(groups);
  const auto first = raw::batch_norm_backward(x_hat, r, s, g, 2);
  const auto second = [&](const Tensor<double>* k_in, const Tensor<double>* u_in) {
    const auto d = raw::batch_norm_double_backward(x_hat, r, s, g, first.d_scale, first.d_shift, h,
                                                   k_in, u_in, 2);
    std::vector<std::uint64_t> all;
    for (const auto* t : {&d.d_x_hat, &d.d_inv_std, &d.d_scale, &d.d_g})
      for (const auto b : bits(*t)) all.push_back(b);
    return all;
  };
  CHECK(second(nullptr, nullptr) == second(&zeros, &zeros));
  CHECK(second(&k, nullptr) == second(&k, &zeros));
  CHECK(second(nullptr, &u) == second(&zeros, &u));
  CHECK(second(&k, &u) != second(&zeros, &u));  // k is read where given
  const Tensor<double> wrong({2, 4});
  CHECK_THROWS_WITH(raw::batch_norm_double_backward(x_hat, r, s, g, first.d_scale, first.d_shift, h,
                                                    nullptr, &wrong, 2),
                    Contains("batch_norm_double_backward") && Contains("[2, 4]"));

  // A second sweep that records nothing, from dx alone (MAML's outer sweep
  // where the inner loop does not adapt the scale or shift): one call, no
  // zeros filled, and the recorded rule's values.
  using counted = CountingBackend<cpu>;
  using CountedVar = Var<double, counted>;
  Tape<double, counted> tape;
  const std::array<CountedVar, 4> v{tape.variable(x_hat.to<counted>()),
                                    tape.variable(r.to<counted>()), tape.variable(s.to<counted>()),
                                    tape.variable(g.to<counted>())};
  const auto d = batch_norm_backward(v[0], v[1], v[2], v[3], 2);
  const CountedVar along_h = sum(d[0] * tape.constant(h.to<counted>()));
  counted::reset();
  grad(along_h, std::span<const CountedVar>(v));
  CHECK(counted::calls()["batch_norm_double_backward"] == 1);
  CHECK(counted::calls()["fill"] == 0);
  check_unrecorded_sweep(
      [&](std::span<const V> w) {
        const auto dw = batch_norm_backward(w[0], w[1], w[2], w[3], 2);
        return sum(dw[0] * w[0].tape().constant(h.clone()));
      },
      list(x_hat.clone(), r.clone(), s.clone(), g.clone()));
}
