// Tests of the parameter pieces' ops (unflatten, flatten, foreach_add_scaled)
// and of the inner loop's clip_task_norms, against their definitions and
// central differences.
// Part of components_test.cpp, which includes it once after helpers.hpp: the
// components' tests are one translation unit (build time).
#pragma once

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
  // add's and sub's rules, signs passed on; a plain sum's one-value
  // gradient into an output.
  SECTION("at 1 and -1") {
    check_derivatives(
        [](std::span<const V> x) {
          const auto sums = foreach_add_scaled(x.first(2), x.subspan(2, 2), 1.0);
          const auto differences = foreach_add_scaled(x.first(2), x.subspan(2, 2), -1.0);
          return concat({reshape(square(sums[0]) * differences[0], {-1}),
                         reshape(sum(differences[1]) + sum(sums[1] * x[1]), {1})},
                        0);
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
  // Every task within half the bound (norms 5, 1, 13 against 26): on the CPU
  // the pieces come back themselves and nothing is recorded.
  const std::vector<Var<double>> v{tape.variable(g[0].value().clone()),
                                   tape.variable(g[1].value().clone())};
  const auto nodes = tape.nodes();
  const auto same = clip_task_norms(v, 26.0);
  CHECK((same[0] == v[0] && same[1] == v[1]));
  CHECK(tape.nodes() == nodes);
  // Within the bound but not within half of it: recorded, multiplied by exactly 1.
  const auto recorded = clip_task_norms(v, 13.5);
  CHECK(tape.nodes() > nodes);
  CHECK(recorded[0].value().to_vector() == v[0].value().to_vector());
  CHECK(recorded[1].value().to_vector() == v[1].value().to_vector());
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
