// Every differentiable op and loss gives the same values, first and second
// derivatives on the CUDA backend as on the CPU backend, in float and double.
#include "parity.hpp"

using namespace platipus;
using parity::away_from_zero;
using parity::backend_of;
using parity::check_op;
using parity::list;
using parity::normal;
using parity::positive;

TEMPLATE_TEST_CASE("arithmetic ops with broadcasting match the CPU backend", "[cuda][ops]", float,
                   double) {
  using T = TestType;
  SECTION("add") {
    check_op<T>([](auto x) { return x[0] * x[0] + x[1]; },
                list(normal<T>({2, 3}, 1), normal<T>({3}, 2)));
  }
  SECTION("sub") {
    check_op<T>([](auto x) { return (x[0] - x[1]) * x[1]; },
                list(normal<T>({2, 1}, 3), normal<T>({1, 3}, 4)));
  }
  SECTION("mul") {
    check_op<T>([](auto x) { return x[0] * x[1]; },
                list(normal<T>({2, 3}, 5), normal<T>({2, 1}, 6)));
  }
  SECTION("div") {
    check_op<T>([](auto x) { return x[0] / x[1]; },
                list(normal<T>({2, 3}, 7), positive<T>({3}, 8)));
  }
  SECTION("neg") {
    check_op<T>([](auto x) { return -(x[0] * x[0]); }, list(normal<T>({3}, 9)));
  }
  SECTION("add_scaled") {
    check_op<T>([](auto x) { return add_scaled(x[0] * x[1], x[1], T(-0.3)); },
                list(normal<T>({2, 3}, 10), normal<T>({2, 3}, 11)));
  }
  SECTION("a value with three gradients (add_n in a sweep that records nothing)") {
    check_op<T>([](auto x) { return x[0] * x[1] + exp(x[0]) * x[0]; },
                list(normal<T>({2, 3}, 92), normal<T>({2, 3}, 93)));
  }
  SECTION("a value with a broadcast gradient among three (add_n repeating it)") {
    check_op<T>(
        [](auto x) {
          return sum_to(x[0], Shape{2, 1, 3}) * x[1] + x[0] * exp(x[0]);
        },
        list(normal<T>({2, 4, 3}, 98), normal<T>({2, 1, 3}, 99)));
  }
  SECTION("a value with a per-channel gradient among three (add_n repeating it along two runs)") {
    check_op<T>(
        [](auto x) {
          return sum_to(x[0], Shape{2, 1, 3, 1, 1}) * x[1] + x[0] * exp(x[0]);
        },
        list(normal<T>({2, 4, 3, 2, 2}, 100), normal<T>({2, 1, 3, 1, 1}, 101)));
  }
  SECTION("values with negated gradients (add_n negating in a sweep that records nothing)") {
    check_op<T>([](auto x) { return (x[0] * x[1] - x[0]) - x[1] * x[1] + -(x[0] / x[1]); },
                list(normal<T>({2, 3}, 94), positive<T>({2, 3}, 95)));
  }
  SECTION("scale and shift") {
    check_op<T>([](auto x) { return (2.5 * x[0] - 1.0) * (x[0] / 4.0 + 3.0) * (1.0 - x[0]); },
                list(normal<T>({4}, 12)));
  }
}

TEMPLATE_TEST_CASE("power, exponential and activation ops match the CPU backend", "[cuda][ops]",
                   float, double) {
  using T = TestType;
  SECTION("pow") {
    check_op<T>([](auto x) { return pow(x[0], T(3.5)); }, list(positive<T>({5}, 13)));
  }
  SECTION("square") {
    check_op<T>([](auto x) { return square(x[0]) * x[0]; }, list(normal<T>({5}, 14)));
  }
  SECTION("sqrt") {
    check_op<T>([](auto x) { return sqrt(x[0]); }, list(positive<T>({5}, 15)));
  }
  SECTION("exp") {
    check_op<T>([](auto x) { return exp(x[0]); }, list(normal<T>({5}, 16)));
  }
  SECTION("exp_scaled") {
    check_op<T>([](auto x) { return exp_scaled(x[0], T(0.5)) * exp_scaled(x[0], T(-1)); },
                list(normal<T>({5}, 18)));
  }
  SECTION("foreach_exp_scaled (its gradient: foreach_mul, foreach_unary scale)") {
    check_op<T>(
        [](auto x) {
          using V = std::decay_t<decltype(x[0])>;
          const std::array<V, 2> a{x[0], x[1] * x[0]};
          const auto half = foreach_exp_scaled(std::span<const V>(a), T(0.5));
          const auto inverse = foreach_exp_scaled(std::span<const V>(a), T(-1));
          return half[0] * inverse[1] - inverse[0] * half[1];
        },
        list(normal<T>({5}, 96), normal<T>({5}, 97)));
  }
  SECTION("log") {
    check_op<T>([](auto x) { return log(x[0]); }, list(positive<T>({5}, 17)));
  }
  SECTION("relu") {
    check_op<T>([](auto x) { return relu(x[0]) * x[0]; }, list(away_from_zero<T>({6}, 18)));
  }
  SECTION("relu_backward") {
    check_op<T>([](auto x) { return relu_backward(x[0] * x[0], x[1]); },
                list(normal<T>({6}, 19), away_from_zero<T>({6}, 20)));
  }
  SECTION("sigmoid") {
    check_op<T>([](auto x) { return sigmoid(x[0]) * x[0]; }, list(normal<T>({5}, 21, 0, 2)));
  }
  SECTION("tanh") {
    check_op<T>([](auto x) { return tanh(x[0]); }, list(normal<T>({5}, 22)));
  }
  SECTION("softplus") {
    check_op<T>([](auto x) { return softplus(x[0]) * x[0]; }, list(normal<T>({5}, 23, 0, 2)));
  }
}

TEMPLATE_TEST_CASE("matmul and linear match the CPU backend batched, broadcast and transposed",
                   "[cuda][ops]", float, double) {
  using T = TestType;
  // A batch times a shared matrix, a shared matrix times a batch, and batch
  // axes broadcast on both sides, under every pair of transposes.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const auto product = [ta, tb](auto x) {
        return tanh(matmul(x[0], x[1], ta, tb));
      };
      const Shape a = ta ? Shape{3, 2} : Shape{2, 3}, b = tb ? Shape{4, 3} : Shape{3, 4};
      const auto with_batch = [](Shape batch, const Shape& matrix) {
        for (auto d : matrix.dims()) batch.push_back(d);
        return batch;
      };
      const std::array<std::pair<Shape, Shape>, 3> cases{
          {{with_batch({2}, a), b},
           {a, with_batch({2}, b)},
           {with_batch({2, 1}, a), with_batch({3}, b)}}};
      for (const auto& [sa, sb] : cases) {
        INFO("trans_a " << ta << ", trans_b " << tb << ": " << sa.to_string() << " times "
                        << sb.to_string());
        check_op<T>(product, list(normal<T>(sa, 24), normal<T>(sb, 25)));
      }
    }
  SECTION("linear with a shared weight") {
    check_op<T>([](auto x) { return tanh(linear(x[0], x[1], x[2])); },
                list(normal<T>({2, 3, 2}, 30), normal<T>({2, 4}, 31), normal<T>({4}, 32)));
  }
  SECTION("linear with per-task weights") {
    check_op<T>([](auto x) { return tanh(linear(x[0], x[1], x[2])); },
                list(normal<T>({2, 3, 2}, 33), normal<T>({2, 2, 4}, 34), normal<T>({2, 4}, 35)));
  }
  SECTION("linear with shared inputs and per-task weights") {
    check_op<T>([](auto x) { return tanh(linear(x[0], x[1], x[2])); },
                list(normal<T>({3, 2}, 36), normal<T>({2, 2, 4}, 37), normal<T>({2, 4}, 38)));
  }
  SECTION("linear with each activation, as one cuBLASLt call or its parts") {
    for (auto a : {Activation::relu, Activation::tanh, Activation::sigmoid}) {
      INFO("activation " << static_cast<int>(a));
      const auto layer = [a](auto x) {
        return linear(x[0], x[1], x[2], a) * x[0];
      };
      check_op<T>(layer, list(normal<T>({2, 3, 3}, 80), normal<T>({3, 3}, 81), normal<T>({3}, 82)));
      check_op<T>(layer,
                  list(normal<T>({2, 3, 3}, 83), normal<T>({2, 3, 3}, 84), normal<T>({2, 3}, 85)));
      check_op<T>(layer,
                  list(normal<T>({3, 3}, 86), normal<T>({2, 3, 3}, 87), normal<T>({1, 3}, 88)));
    }
  }
  SECTION("linear on the paper network's widths, with a bias per task") {
    check_op<T>([](auto x) { return tanh(linear(x[0], x[1], x[2], Activation::relu)); },
                list(normal<T>({5, 10, 100}, 89, 0, 0.2), normal<T>({5, 100, 100}, 90, 0, 0.2),
                     normal<T>({5, 100}, 91)));
  }
  SECTION("products larger than one cuBLAS tile") {
    check_op<T>([](auto x) { return tanh(matmul(x[0], x[1], false, true)); },
                list(normal<T>({3, 70, 45}, 39, 0, 0.2), normal<T>({3, 66, 45}, 40, 0, 0.2)));
  }
}

TEMPLATE_TEST_CASE("shape and index ops match the CPU backend", "[cuda][ops]", float, double) {
  using T = TestType;
  SECTION("transpose") {
    check_op<T>([](auto x) { return transpose(x[0] * x[0], 0, 2); },
                list(normal<T>({2, 3, 2}, 41)));
  }
  SECTION("reshape") {
    check_op<T>([](auto x) { return reshape(x[0] * x[0], {3, -1}); }, list(normal<T>({2, 3}, 42)));
  }
  SECTION("expand") {
    check_op<T>([](auto x) { return expand(x[0], {4, 2, 3}) * x[0]; }, list(normal<T>({2, 1}, 43)));
  }
  SECTION("sum_to") {
    check_op<T>(
        [](auto x) {
          return square(sum_to(x[0], {3, 1}));
        },
        list(normal<T>({2, 3, 4}, 44)));
  }
  SECTION("concat") {
    check_op<T>(
        [](auto x) {
          return concat({x[0], x[1] * x[1]}, 1);
        },
        list(normal<T>({2, 2}, 45), normal<T>({2, 3}, 46)));
  }
  SECTION("split, with a piece left unused") {
    check_op<T>(
        [](auto x) {
          const std::array<std::int64_t, 3> sizes{1, 2, 2};
          auto parts = split(x[0], 1, sizes);
          return parts[0] * parts[2];
        },
        list(normal<T>({2, 5}, 47)));
  }
  SECTION("slice") {
    check_op<T>([](auto x) { return slice(square(x[0]), 0, 1, 2); }, list(normal<T>({4, 2}, 48)));
  }
  SECTION("pad") {
    check_op<T>([](auto x) { return pad(square(x[0]), 1, 1, 4); }, list(normal<T>({2, 2}, 49)));
  }
  SECTION("flatten and unflatten, with a task axis and without (one foreach copy)") {
    for (const Shape& batch : {Shape{3}, Shape{}}) {
      check_op<T>(
          [&batch](auto x) {
            using V = std::decay_t<decltype(x[0])>;
            const std::array<Shape, 2> shapes{Shape{2, 2}, Shape{3}};
            const auto pieces = unflatten(x[0] * x[0], shapes);
            const std::array<V, 2> scaled{pieces[0] * pieces[0], pieces[1]};
            return flatten(std::span<const V>(scaled), batch, shapes);
          },
          list(normal<T>(detail::with_batch(batch, Shape{7}), 50)));
    }
  }
  SECTION("foreach_add_scaled") {
    check_op<T>(
        [](auto x) {
          using V = std::decay_t<decltype(x[0])>;
          const std::array<V, 2> a{x[0], x[1]}, b{x[0] * x[0], x[1] * x[0]};
          const auto sums =
              foreach_add_scaled(std::span<const V>(a), std::span<const V>(b), T(-0.5));
          return sums[0] * sums[1];
        },
        list(normal<T>({2, 3}, 51), normal<T>({2, 3}, 52)));
  }
  SECTION("foreach_sub_mul and foreach_add_mul (their gradients: foreach_mul, foreach_sum_to)") {
    check_op<T>(
        [](auto x) {
          using V = std::decay_t<decltype(x[0])>;
          const std::array<V, 3> a{x[0], x[1] * x[0], x[0]},
              r{x[2], reshape(sum(x[2]), {1, 1}), x[0] * x[1]}, g{x[1], x[0], x[1] * x[1]};
          const auto y =
              foreach_sub_mul(std::span<const V>(a), std::span<const V>(r), std::span<const V>(g));
          const auto z =
              foreach_add_mul(std::span<const V>(y), std::span<const V>(r), std::span<const V>(a));
          return z[0] * y[1] + z[2] * z[1];
        },
        list(normal<T>({2, 3}, 53), normal<T>({2, 3}, 54), normal<T>({3}, 55)));
  }
  SECTION("foreach ops over more pieces than one call takes") {
    check_op<T>(
        [](auto x) {
          using V = std::decay_t<decltype(x[0])>;
          std::vector<V> a, b;
          for (std::int64_t i = 0; i < PiecesLayout<T>::capacity + 2; ++i) {
            a.push_back(slice(x[0], 0, i, 1));
            b.push_back(a.back() * a.back());
          }
          const auto sums =
              foreach_add_scaled(std::span<const V>(a), std::span<const V>(b), T(0.3));
          const auto scaled = foreach_scale(std::span<const V>(sums), T(-1.5));
          V total = scaled[0] * sums[0];
          for (std::size_t i = 1; i < sums.size(); ++i) total = total + scaled[i] * sums[i];
          return total;
        },
        list(normal<T>({PiecesLayout<T>::capacity + 2, 3}, 54)));
  }
  SECTION("foreach_expand and foreach_sum_to (a task axis for every piece, and back)") {
    check_op<T>(
        [](auto x) {
          using V = std::decay_t<decltype(x[0])>;
          const std::array<V, 2> pieces{x[0], x[1] * x[1]};
          const auto copies = foreach_expand(std::span<const V>(pieces), 3);
          const std::array<V, 2> products{copies[0] * copies[0], copies[1] * x[2]};
          const auto sums = foreach_sum_to(std::span<const V>(products));
          return sums[0] * sums[1];
        },
        list(normal<T>({2, 3}, 55), normal<T>({3}, 56), normal<T>({3, 3}, 57)));
  }
  SECTION("index_select with repeated indices") {
    check_op<T>(
        [](auto x) {
          using B = backend_of<decltype(x)>;
          return square(index_select(x[0], 0, Index<B>::from_host({4}, {2, 0, 2, 1})));
        },
        list(normal<T>({3, 2}, 53)));
  }
  SECTION("index_add with repeated indices") {
    check_op<T>(
        [](auto x) {
          using B = backend_of<decltype(x)>;
          return square(index_add(x[0], 1, Index<B>::from_host({3}, {1, 1, 0}), 2));
        },
        list(normal<T>({2, 3}, 54)));
  }
}

TEMPLATE_TEST_CASE("reductions, softmax and where match the CPU backend", "[cuda][ops]", float,
                   double) {
  using T = TestType;
  SECTION("sum over all") {
    check_op<T>([](auto x) { return sum(x[0] * x[0]); }, list(normal<T>({2, 3}, 55)));
  }
  SECTION("sum over axes") {
    check_op<T>([](auto x) { return square(sum(x[0], {0, 2})); }, list(normal<T>({2, 3, 2}, 56)));
  }
  SECTION("sum over many elements") {
    check_op<T>([](auto x) { return sum(x[0] * x[0]); }, list(normal<T>({3, 2000}, 57)));
  }
  SECTION("mean keeping dims") {
    check_op<T>([](auto x) { return x[0] * mean(x[0], {1}, true); }, list(normal<T>({2, 3}, 58)));
  }
  SECTION("logsumexp") {
    check_op<T>([](auto x) { return logsumexp(x[0], 1); }, list(normal<T>({2, 4}, 59, 0, 3)));
  }
  SECTION("softmax") {
    check_op<T>([](auto x) { return softmax(x[0], 0); }, list(normal<T>({3, 2}, 60)));
  }
  SECTION("log_softmax") {
    check_op<T>([](auto x) { return log_softmax(x[0]); }, list(normal<T>({2, 3}, 61)));
  }
  SECTION("where") {
    check_op<T>(
        [](auto x) {
          const auto mask = greater(x[0], x[1]);
          return where(mask, x[0] * x[1], square(x[1]));
        },
        list(normal<T>({2, 3}, 62), normal<T>({3}, 63)));
  }
}

TEMPLATE_TEST_CASE("losses and the KL term match the CPU backend", "[cuda][ops][loss]", float,
                   double) {
  using T = TestType;
  SECTION("mse per task") {
    check_op<T>([](auto x) { return mse_loss(x[0] * x[0], x[1], 1); },
                list(normal<T>({2, 3, 1}, 64), normal<T>({2, 3, 1}, 65)));
  }
  SECTION("binary cross-entropy with logits") {
    Generator gen(66);
    auto labels = raw::map(UnaryOp::greater_scalar, raw::uniform<T>({5}, gen), T(0.5));
    check_op<T>([](auto x) { return bce_with_logits_loss(x[0] * x[0], x[1]); },
                list(normal<T>({5}, 67, 0, 2), std::move(labels)));
  }
  SECTION("softmax cross-entropy with integer labels") {
    check_op<T>(
        [](auto x) {
          using B = backend_of<decltype(x)>;
          return softmax_cross_entropy(x[0] * x[0], Index<B>::from_host({2, 2}, {0, 2, 1, 1}), 1);
        },
        list(normal<T>({2, 2, 3}, 68)));
  }
  SECTION("softmax cross-entropy with class-index targets") {
    check_op<T>([](auto x) { return SoftmaxCrossEntropyLoss{}(x[0] * x[0], x[1], 1); },
                list(normal<T>({2, 2, 3}, 69), parity::from_doubles<T>({2, 2, 1}, {2, 0, 1, 1})));
  }
  SECTION("gaussian nll") {
    check_op<T>([](auto x) { return gaussian_nll_loss(x[0], exp(x[1]), square(x[0]) * 0.5); },
                list(normal<T>({4}, 70), normal<T>({4}, 71, 0, 0.3)));
  }
  SECTION("gaussian nll at a host variance (div by a scalar)") {
    check_op<T>([](auto x) { return GaussianNllLoss{.noise_std = 0.3}(x[0], square(x[1]), 0); },
                list(normal<T>({4}, 70), normal<T>({4}, 71)));
  }
  SECTION("KL divergence of diagonal Gaussians") {
    check_op<T>([](auto x) { return kl_diagonal_gaussians(x[0], x[1], x[2], x[3]); },
                list(normal<T>({2, 3}, 72), normal<T>({3}, 73, 0, 0.3), normal<T>({2, 3}, 74),
                     normal<T>({3}, 75, 0, 0.3)));
  }
}

TEMPLATE_TEST_CASE("convolution and pooling ops match the CPU backend", "[cuda][ops][conv]", float,
                   double) {
  using T = TestType;
  const parity::UsingEngine engine(parity::each_convolution_engine());
  const Window window{.kernel = 3, .stride = 2, .padding = 1};
  // Several tasks of several images: cuDNN's grouped call with transposes.
  const Shape x_shape{3, 4, 2, 7, 6}, w_shape{3, 5, 2, 3, 3}, shared_w{5, 2, 3, 3};
  SECTION("conv2d, per-task filters and bias") {
    check_op<T>([&](auto x) { return conv2d(x[0], x[1], x[2], window); },
                list(normal<T>(x_shape, 1), normal<T>(w_shape, 2), normal<T>({3, 5}, 3)));
  }
  SECTION("conv2d, shared filters, and a 1x1 convolution") {
    check_op<T>(
        [&](auto x) {
          const auto h = conv2d(x[0], x[1], decltype(x[0]){}, window);
          return conv2d(h, x[2], decltype(x[0]){}, {.kernel = 1});
        },
        list(normal<T>(x_shape, 4), normal<T>(shared_w, 5), normal<T>({3, 5, 5, 1, 1}, 6)));
  }
  SECTION("conv2d_input_grad") {
    check_op<T>([&](auto x) { return conv2d_input_grad(x[0], x[1], x_shape, window); },
                list(normal<T>({3, 4, 5, 4, 3}, 7), normal<T>(w_shape, 8)));
  }
  SECTION("conv2d_weight_grad, per-task and shared") {
    check_op<T>(
        [&](auto x) {
          return conv2d_weight_grad(x[0], x[1], w_shape, window) +
                 conv2d_weight_grad(x[0], x[1], shared_w, window);
        },
        list(normal<T>(x_shape, 9), normal<T>({3, 4, 5, 4, 3}, 10)));
  }
  SECTION("max_pool2d") {
    check_op<T>([](auto x) { return max_pool2d(x[0], {.kernel = 2, .stride = 2}); },
                list(normal<T>({3, 4, 2, 7, 6}, 11)));
  }
  SECTION("max_pool2d with a ReLU") {
    check_op<T>(
        [](auto x) { return max_pool2d(x[0], {.kernel = 2, .stride = 2}, Activation::relu); },
        list(normal<T>({3, 4, 2, 7, 6}, 12)));
  }
}
