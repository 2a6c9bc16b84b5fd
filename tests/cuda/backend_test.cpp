// The CUDA backend's primitives against the CPU backend's: every elementwise
// op code, broadcast, reduction, copy, index and GEMM case; the Philox fills
// (bit for bit where the formula is exact); errors; and host threads.
#include <cmath>
#include <limits>
#include <thread>
#include <tuple>
#include <vector>

#include "parity.hpp"

using namespace platipus;
using Catch::Contains;
using parity::check_close;
using parity::from_doubles;
using parity::normal;
using parity::positive;
using parity::tolerance;

namespace {

template <class T>
Tensor<T, cuda> on_device(const Tensor<T>& t) {
  return t.template to<cuda>();
}

// |a - b| in units in the last place of max(|a|, 1): Box-Muller's error
// scales with the radius, not with the value, which may be near zero.
template <class T>
double ulps_apart(T a, T b) {
  const T magnitude = std::max(std::abs(a), T(1));
  const T ulp = std::nextafter(magnitude, std::numeric_limits<T>::infinity()) - magnitude;
  return std::abs(static_cast<double>(a) - static_cast<double>(b)) / static_cast<double>(ulp);
}

}  // namespace

TEMPLATE_TEST_CASE("every unary op code matches the CPU backend", "[cuda][backend]", float,
                   double) {
  using T = TestType;
  for (int code = 0; code <= static_cast<int>(UnaryOp::greater_scalar); ++code) {
    const auto op = static_cast<UnaryOp>(code);
    INFO("unary op code " << code);
    const bool needs_positive = op == UnaryOp::log || op == UnaryOp::sqrt ||
                                op == UnaryOp::reciprocal || op == UnaryOp::pow_scalar;
    const Tensor<T> x = needs_positive ? positive<T>({1000}, 1) : normal<T>({1000}, 2, 0, 3);
    check_close(raw::map(op, x, T(0.7)), raw::map(op, on_device(x), T(0.7)), tolerance<T>, "unary");
  }
}

TEMPLATE_TEST_CASE("elementwise kernels cover inputs larger than one grid", "[cuda][backend]",
                   float, double) {
  using T = TestType;
  const Tensor<T> x = normal<T>({3, 1 << 20}, 3);
  check_close(raw::map(UnaryOp::tanh, x), raw::map(UnaryOp::tanh, on_device(x)), tolerance<T>,
              "tanh");
  check_close(raw::axpy(x, x, T(0.5)), raw::axpy(on_device(x), on_device(x), T(0.5)), tolerance<T>,
              "axpy");
  const auto filled = Tensor<T, cuda>::full({3, 1 << 20}, T(1.5)).to_vector();
  CHECK(std::ranges::all_of(filled, [](T v) { return v == T(1.5); }));
}

TEMPLATE_TEST_CASE("the fused in-place Adam step matches the CPU backend", "[cuda][backend]", float,
                   double) {
  using T = TestType;
  const Tensor<T> g = normal<T>({5000}, 4);
  Tensor<T> p = normal<T>({5000}, 5), m = normal<T>({5000}, 6), v = positive<T>({5000}, 7);
  auto dp = on_device(p), dm = on_device(m), dv = on_device(v);
  const auto dg = on_device(g);
  const AdamStep<T> step{T(0.8), T(0.99), T(1e-6), T(0.01)};
  const Tensor<T> t = Tensor<T>::full({1}, T(3));
  // Two pieces of one call: the first 3000 elements and the last 2000.
  AdamLayout<T> host, device;
  host.count = device.count = 2;
  for (std::size_t k = 0; k < 2; ++k) {
    const std::int64_t at = k == 0 ? 0 : 3000;
    host.n[k] = device.n[k] = k == 0 ? 3000 : 2000;
    host.p[k] = p.data() + at, host.m[k] = m.data() + at, host.v[k] = v.data() + at;
    host.g[k] = g.data() + at;
    device.p[k] = dp.data() + at, device.m[k] = dm.data() + at, device.v[k] = dv.data() + at;
    device.g[k] = dg.data() + at;
  }
  cpu::adam(host, step, t.data());
  cuda::adam(device, step, on_device(t).data());
  check_close(p, dp, tolerance<T>, "adam parameter");
  check_close(m, dm, tolerance<T>, "adam first moment");
  check_close(v, dv, tolerance<T>, "adam second moment");
}

TEMPLATE_TEST_CASE("every binary op code matches the CPU backend under broadcasting",
                   "[cuda][backend]", float, double) {
  using T = TestType;
  const std::vector<std::pair<Shape, Shape>> cases{
      {{4, 5}, {4, 5}},    {{4, 5}, {5}}, {{4, 1}, {1, 5}},
      {{3, 1, 5}, {4, 1}}, {{}, {2, 3}},  {{2, 1, 3, 1, 2}, {4, 3, 1, 1}},
      {{300, 7}, {300, 1}}};
  for (int code = 0; code <= static_cast<int>(BinaryOp::relu_backward); ++code) {
    const auto op = static_cast<BinaryOp>(code);
    for (const auto& [sa, sb] : cases) {
      INFO("binary op code " << code << ", shapes " << sa.to_string() << " and " << sb.to_string());
      // Small integers for `equal`, so that some pairs are equal.
      auto integers = [](const Shape& s, int period) {
        std::vector<double> v(static_cast<std::size_t>(s.numel()));
        for (std::size_t i = 0; i < v.size(); ++i)
          v[i] = static_cast<double>((i / static_cast<std::size_t>(period)) % 3);
        return from_doubles<T>(s, v);
      };
      const Tensor<T> a = op == BinaryOp::equal ? integers(sa, 1) : normal<T>(sa, 4);
      const Tensor<T> b = op == BinaryOp::equal ? integers(sb, 2)
                          : op == BinaryOp::div ? positive<T>(sb, 5)
                                                : normal<T>(sb, 6);
      check_close(raw::map(op, a, b, "test"), raw::map(op, on_device(a), on_device(b), "test"),
                  tolerance<T>, "binary");
    }
  }
}

TEMPLATE_TEST_CASE(
    "add_n matches the CPU backend bit for bit, repeated and negated summands, routed, scaled "
    "and row-summed too",
    "[cuda][backend]", float, double) {
  using T = TestType;
  const Tensor<T> full = normal<T>({2, 5, 3, 4}, 20), other = normal<T>({2, 5, 3, 4}, 21);
  // Repeated along one run of axes or two (conv4's per-channel gradients).
  for (const Shape& shape : std::vector<Shape>{
           {2, 5, 3, 4}, {2, 1, 3, 4}, {3, 4}, {2, 5, 3, 1}, {2, 1, 3, 1}, {5, 1, 4}, {1, 5, 1, 1}})
    for (int order = 0; order < 3; ++order) {
      INFO("summand " << shape.to_string() << " at " << order);
      const Tensor<T> part = normal<T>(shape, 22);
      std::vector<const Tensor<T>*> x{&full, &other};
      x.insert(x.begin() + order, &part);
      const Tensor<T, cuda> full_d = on_device(full), other_d = on_device(other),
                            part_d = on_device(part);
      std::vector<const Tensor<T, cuda>*> x_d{&full_d, &other_d};
      x_d.insert(x_d.begin() + order, &part_d);
      const std::array<bool, 3> negate{order == 0, false, order != 0};
      const auto host = raw::add_n(std::span<const Tensor<T>* const>(x), std::span(negate));
      const auto device =
          raw::add_n(std::span<const Tensor<T, cuda>* const>(x_d), std::span(negate));
      CHECK(device.template to<cpu>().to_vector() == host.to_vector());
      // Routed by a ReLU's output (add_n's route): relu_backward's bits.
      const Tensor<T> route = normal<T>(host.shape(), 23);
      const Tensor<T, cuda> route_d = on_device(route);
      const auto routed_host =
          raw::add_n(std::span<const Tensor<T>* const>(x), std::span(negate), &route);
      const auto routed_device =
          raw::add_n(std::span<const Tensor<T, cuda>* const>(x_d), std::span(negate), &route_d);
      CHECK(routed_device.template to<cpu>().to_vector() == routed_host.to_vector());
      // Scaled (scale's gradient from its parts): the bits of add_n then scale.
      const auto scaled_host =
          raw::scaled_add_n(std::span<const Tensor<T>* const>(x), std::span(negate), T(0.3));
      const auto scaled_device = raw::scaled_add_n(std::span<const Tensor<T, cuda>* const>(x_d),
                                                   std::span(negate), T(0.3));
      CHECK(scaled_device.template to<cpu>().to_vector() == scaled_host.to_vector());
      // And its rows summed for a bias [2, 5, 4]: a ReLU layer's gradients
      // from a gradient in parts (add_n with BiasLayout's row sums).
      const auto layer_host = raw::relu_bias_backward(std::span<const Tensor<T>* const>(x),
                                                      std::span(negate), route, {2, 5, 4});
      const auto layer_device = raw::relu_bias_backward(
          std::span<const Tensor<T, cuda>* const>(x_d), std::span(negate), route_d, {2, 5, 4});
      REQUIRE(layer_host);
      REQUIRE(layer_device);
      CHECK(layer_device->first.template to<cpu>().to_vector() == layer_host->first.to_vector());
      CHECK(layer_device->second.template to<cpu>().to_vector() == layer_host->second.to_vector());
    }
}

TEMPLATE_TEST_CASE("foreach_add_n matches the CPU backend bit for bit, each sum add_n's",
                   "[cuda][backend]", float, double) {
  using T = TestType;
  // More sums than one call takes, of different lengths, 2 and 3 summands,
  // some repeated and negated, one empty.
  const int count = SumsLayout<T>::capacity + 3;
  std::vector<Tensor<T>> host;
  std::vector<Tensor<T, cuda>> device;
  host.reserve(3 * static_cast<std::size_t>(count));
  device.reserve(host.capacity());
  std::vector<std::vector<const Tensor<T>*>> x(static_cast<std::size_t>(count));
  std::vector<std::vector<const Tensor<T, cuda>*>> x_d(x.size());
  std::vector<std::array<bool, 3>> negate(x.size());
  for (int i = 0; i < count; ++i) {
    const auto at = static_cast<std::size_t>(i);
    const Shape full = i == 4 ? Shape{0, 5} : Shape{3, 40 * (1 + i % 5), 5};
    for (int k = 0; k < 2 + i % 2; ++k) {
      host.push_back(normal<T>(k == 1 && i % 3 == 0 ? Shape{3, 1, 5} : full, 30 + 3 * i + k));
      device.push_back(on_device(host.back()));
      x[at].push_back(&host.back());
      x_d[at].push_back(&device.back());
      negate[at][static_cast<std::size_t>(k)] = (i + k) % 3 == 1;
    }
  }
  std::vector<std::span<const Tensor<T>* const>> sums;
  std::vector<std::span<const Tensor<T, cuda>* const>> sums_d;
  std::vector<std::span<const bool>> negate_lists;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sums.emplace_back(x[i]);
    sums_d.emplace_back(x_d[i]);
    negate_lists.emplace_back(negate[i].data(), x[i].size());
  }
  const auto on_host = raw::foreach_add_n(std::span<const std::span<const Tensor<T>* const>>(sums),
                                          std::span<const std::span<const bool>>(negate_lists));
  const auto on_gpu =
      raw::foreach_add_n(std::span<const std::span<const Tensor<T, cuda>* const>>(sums_d),
                         std::span<const std::span<const bool>>(negate_lists));
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("sum " << i);
    CHECK(on_gpu[i].shape() == on_host[i].shape());
    CHECK(on_gpu[i].template to<cpu>().to_vector() == on_host[i].to_vector());
  }
}

TEMPLATE_TEST_CASE("kl_from_ratios matches the CPU backend, its backward bit for bit",
                   "[cuda][backend]", float, double) {
  using T = TestType;
  // More pieces than one call takes, one of a single element, one long
  // enough for many of a block's strides, on rows [2, 3].
  const Shape rows{2, 3};
  std::vector<Tensor<T>> r, s, w;
  for (int i = 0; i < KlLayout<T>::capacity + 2; ++i) {
    const std::int64_t n = i == 3 ? 1 : (i == 5 ? 5000 : 2 + i % 40);
    Shape shape = rows;
    shape.push_back(n);
    r.push_back(normal<T>({n}, 40 + 3 * i));
    s.push_back(positive<T>(shape, 41 + 3 * i));
    w.push_back(positive<T>({n}, 42 + 3 * i));
  }
  std::vector<Tensor<T, cuda>> r_d, s_d, w_d;
  std::vector<const Tensor<T>*> rp, sp, wp;
  std::vector<const Tensor<T, cuda>*> rp_d, sp_d, wp_d;
  for (std::size_t i = 0; i < r.size(); ++i) {
    r_d.push_back(on_device(r[i]));
    s_d.push_back(on_device(s[i]));
    w_d.push_back(on_device(w[i]));
  }
  for (std::size_t i = 0; i < r.size(); ++i) {
    rp.push_back(&r[i]);
    sp.push_back(&s[i]);
    wp.push_back(&w[i]);
    rp_d.push_back(&r_d[i]);
    sp_d.push_back(&s_d[i]);
    wp_d.push_back(&w_d[i]);
  }
  using Host = std::span<const Tensor<T>* const>;
  using Device = std::span<const Tensor<T, cuda>* const>;
  // The forward's sums run in the block's order.
  check_close(raw::kl_from_ratios(Host(rp), Host(sp), Host(wp)),
              raw::kl_from_ratios(Device(rp_d), Device(sp_d), Device(wp_d)), tolerance<T>,
              "kl_from_ratios");
  const Tensor<T> g = normal<T>(rows, 50);
  const Tensor<T, cuda> g_d = on_device(g);
  std::vector<bool> wanted(3 * r.size(), true);
  wanted[1] = wanted[r.size() + 2] = wanted[2 * r.size()] = false;
  for (const bool uniform : {false, true}) {
    INFO("uniform " << uniform);
    const auto on_host =
        raw::kl_from_ratios_backward(Host(sp), Host(wp), uniform ? nullptr : &g, T(-0.75), wanted);
    const auto on_gpu = raw::kl_from_ratios_backward(Device(sp_d), Device(wp_d),
                                                     uniform ? nullptr : &g_d, T(-0.75), wanted);
    for (std::size_t k = 0; k < wanted.size(); ++k) {
      INFO("gradient " << k);
      if (!wanted[k]) continue;
      CHECK(on_gpu[k].template to<cpu>().to_vector() == on_host[k].to_vector());
    }
  }
}

TEMPLATE_TEST_CASE("squared_error matches the CPU backend, its differences bit for bit",
                   "[cuda][backend]", float, double) {
  using T = TestType;
  // Rows of one point, of fewer points than a warp and of many; the mean
  // squared error and the Gaussian NLL, by their mean or sum.
  for (const Shape& shape : {Shape{25, 10, 1}, Shape{3, 100, 2}, Shape{7, 1}})
    for (const int batch_dims : {1, shape.rank()})
      for (const bool mean : {false, true})
        for (const bool gaussian : {false, true}) {
          INFO("shape " << shape.to_string() << ", batch_dims " << batch_dims << ", mean " << mean
                        << ", gaussian " << gaussian);
          const Tensor<T> pred = normal<T>(shape, 60), target = normal<T>(shape, 61);
          SquaredErrorLayout<T> form{.mean = mean, .gaussian = gaussian};
          if (gaussian) {
            form.variance = T(0.09);
            form.log_variance = std::log(form.variance);
            form.log_two_pi = T(1.8378770664093453);
          }
          const auto on_host = raw::squared_error(pred, target, batch_dims, form);
          const auto on_gpu =
              raw::squared_error(on_device(pred), on_device(target), batch_dims, form);
          check_close(on_host.loss, on_gpu.loss, tolerance<T>, "squared_error");
          CHECK(on_gpu.difference.template to<cpu>().to_vector() == on_host.difference.to_vector());
        }
}

TEMPLATE_TEST_CASE("cross_entropy matches the CPU backend, its one-hot rows bit for bit",
                   "[cuda][backend]", float, double) {
  using T = TestType;
  // Fewer classes than a warp (conv4's five), more than one warp's worth,
  // one class; target rows that sum to one, and class indices.
  for (const Shape& shape : {Shape{4, 75, 5}, Shape{6, 100}, Shape{9, 1}})
    for (const bool class_indices : {false, true}) {
      INFO("shape " << shape.to_string() << ", class indices " << class_indices);
      const std::int64_t classes = shape[shape.rank() - 1], rows = shape.numel() / classes;
      const Tensor<T> logits = raw::map(UnaryOp::scale, normal<T>(shape, 62), T(3));
      Shape label_shape = shape;
      label_shape[shape.rank() - 1] = 1;
      std::vector<T> labels(static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r)
        labels[static_cast<std::size_t>(r)] = static_cast<T>((r * 7) % classes);
      const Tensor<T> soft = raw::map(UnaryOp::exp, normal<T>(shape, 63));
      const Tensor<T> targets =
          class_indices ? Tensor<T>::from_host(label_shape, labels)
                        : raw::map(BinaryOp::div, soft, raw::sum_to(soft, label_shape), "test");
      const auto on_host = raw::cross_entropy(logits, targets, class_indices);
      const auto on_gpu = raw::cross_entropy(on_device(logits), on_device(targets), class_indices);
      check_close(on_host.loss, on_gpu.loss, tolerance<T>, "cross_entropy loss");
      check_close(on_host.softmax, on_gpu.softmax, tolerance<T>, "cross_entropy softmax");
      if (class_indices)
        CHECK(on_gpu.one_hot.template to<cpu>().to_vector() == on_host.one_hot.to_vector());
    }
}

TEMPLATE_TEST_CASE(
    "cross_entropy_backward matches the CPU backend from the losses' gradient, the softmax's and "
    "both",
    "[cuda][backend]", float, double) {
  using T = TestType;
  for (const Shape& shape : {Shape{4, 75, 5}, Shape{6, 100}, Shape{9, 1}}) {
    INFO("shape " << shape.to_string());
    const Shape losses = shape.take_front(shape.rank() - 1), label_shape = [&] {
      Shape s = shape;
      s[shape.rank() - 1] = 1;
      return s;
    }();
    const Tensor<T> soft = raw::map(UnaryOp::exp, normal<T>(shape, 64));
    const Tensor<T> p = raw::map(BinaryOp::div, soft, raw::sum_to(soft, label_shape), "test");
    const Tensor<T> y = raw::map(BinaryOp::div, raw::map(UnaryOp::exp, normal<T>(shape, 65)),
                                 raw::sum_to(soft, label_shape), "test");
    const Tensor<T> gl = normal<T>(losses, 66), gp = normal<T>(shape, 67);
    const auto dp = on_device(p), dy = on_device(y), dgl = on_device(gl), dgp = on_device(gp);
    check_close(raw::cross_entropy_backward(p, y, nullptr, T(0.3), nullptr),
                raw::cross_entropy_backward(dp, dy, nullptr, T(0.3), nullptr), tolerance<T>,
                "uniform");
    check_close(raw::cross_entropy_backward(p, y, &gl, std::nullopt, nullptr),
                raw::cross_entropy_backward(dp, dy, &dgl, std::nullopt, nullptr), tolerance<T>,
                "per row");
    // One value for each row of a task (a per-task mean's gradient), read in place.
    Shape per_task = losses;
    per_task[per_task.rank() - 1] = 1;
    const Tensor<T> gt = normal<T>(per_task, 68);
    const auto dgt = on_device(gt);
    check_close(raw::cross_entropy_backward(p, y, &gt, std::nullopt, nullptr),
                raw::cross_entropy_backward(dp, dy, &dgt, std::nullopt, nullptr), tolerance<T>,
                "broadcast rows");
    check_close(raw::cross_entropy_backward(p, y, nullptr, std::nullopt, &gp),
                raw::cross_entropy_backward(dp, dy, nullptr, std::nullopt, &dgp), tolerance<T>,
                "softmax's");
    check_close(raw::cross_entropy_backward(p, y, &gl, std::nullopt, &gp),
                raw::cross_entropy_backward(dp, dy, &dgl, std::nullopt, &dgp), tolerance<T>,
                "both");
  }
}

TEMPLATE_TEST_CASE("select matches the CPU backend", "[cuda][backend]", float, double) {
  using T = TestType;
  const Tensor<T> mask = raw::map(UnaryOp::greater_scalar, normal<T>({500}, 7), T(0));
  const Tensor<T> a = normal<T>({500}, 8), b = normal<T>({500}, 9);
  check_close(raw::select(mask, a, b), raw::select(on_device(mask), on_device(a), on_device(b)), 0,
              "select");
}

TEMPLATE_TEST_CASE("sum, max and mean reductions match the CPU backend, a slice read in place too",
                   "[cuda][backend]", float, double) {
  using T = TestType;
  // Kept axes inside, outside and between reduced ones; short and long
  // reductions (a warp or a wide block per output); a full reduction; a
  // convolution bias's gradient (per task and channel over images and
  // pixels: a wide block each, two reduced runs).
  const std::vector<std::pair<Shape, Shape>> cases{{{3, 4, 5}, {3, 1, 5}},
                                                   {{3, 4, 5}, {}},
                                                   {{3, 4, 5}, {4, 1}},
                                                   {{6, 1, 4}, {6, 1, 1}},
                                                   {{3, 5000}, {3, 1}},
                                                   {{5000, 3}, {1, 3}},
                                                   {{3000, 4}, {3000, 1}},
                                                   {{1}, {}},
                                                   {{2, 3, 4, 5, 6}, {3, 1, 5, 1}},
                                                   {{70000}, {}},
                                                   {{2, 5, 3, 40, 40}, {2, 1, 3, 1, 1}}};
  for (const auto op : {ReduceOp::sum, ReduceOp::max, ReduceOp::mean})
    for (const auto& [in, out] : cases) {
      INFO(op_name(op) << " of " << in.to_string() << " to " << out.to_string());
      const Tensor<T> x = normal<T>(in, 10);
      check_close(raw::reduce_to(op, x, out), raw::reduce_to(op, on_device(x), out), tolerance<T>,
                  "reduce");
    }
  // A slice's sum read in place (the bias transformation's v): rows wider
  // than one, rows of one column, a slice of the middle axis.
  const Tensor<T> x = normal<T>({3, 9, 11}, 11);
  for (const auto& [axis, start, length, out] :
       std::vector<std::tuple<int, std::int64_t, std::int64_t, Shape>>{
           {2, 6, 5, {3, 1, 5}}, {2, 10, 1, {1, 1, 1}}, {1, 2, 7, {1, 7, 11}}}) {
    INFO("sum of a slice of [3, 9, 11] to " << out.to_string());
    check_close(raw::sum_slice_to(x, axis, start, length, out),
                raw::sum_slice_to(on_device(x), axis, start, length, out), tolerance<T>,
                "sum_slice_to");
  }
}

TEMPLATE_TEST_CASE("batch norm, its backward and its double backward match the CPU backend",
                   "[cuda][backend]", float, double) {
  using T = TestType;
  // Groups of 12 elements (fewer than a block's 1,024 threads), of 3 x 2,000 and of
  // 300 x 4 (more, in long and in short runs per image), images [T, N, C, H, W], and
  // feature vectors [T, N, F], also in more groups than the grid has blocks.
  for (const auto& [shape, positions] : std::vector<std::pair<Shape, int>>{{{2, 3, 4, 2, 2}, 2},
                                                                           {{1, 3, 2, 40, 50}, 2},
                                                                           {{2, 300, 3, 2, 2}, 2},
                                                                           {{3, 7, 5}, 0},
                                                                           {{1, 3, 5000}, 0}}) {
    INFO(shape.to_string());
    const Tensor<T> x = normal<T>(shape, 12), g = normal<T>(shape, 13);
    const Shape groups = raw::norm_statistics_shape(shape, positions);
    const Tensor<T> scale = normal<T>(groups, 14), shift = normal<T>(groups, 15);
    const auto host = raw::batch_norm(x, scale, shift, positions, T(1e-3));
    const auto device =
        raw::batch_norm(on_device(x), on_device(scale), on_device(shift), positions, T(1e-3));
    check_close(host.y, device.y, tolerance<T>, "y");
    check_close(host.x_hat, device.x_hat, tolerance<T>, "x_hat");
    check_close(host.inv_std, device.inv_std, tolerance<T>, "inv_std");
    const auto host_grads = raw::batch_norm_backward(host.x_hat, host.inv_std, scale, g, positions);
    const auto device_grads = raw::batch_norm_backward(device.x_hat, device.inv_std,
                                                       on_device(scale), on_device(g), positions);
    check_close(host_grads.dx, device_grads.dx, tolerance<T>, "dx");
    check_close(host_grads.d_scale, device_grads.d_scale, 10 * tolerance<T>, "d_scale");
    check_close(host_grads.d_shift, device_grads.d_shift, 10 * tolerance<T>, "d_shift");
    const Tensor<T> h = normal<T>(shape, 16), k = normal<T>(groups, 17), u = normal<T>(groups, 18);
    const auto device_k = on_device(k), device_u = on_device(u);
    const auto device_zeros = on_device(Tensor<T>::zeros(groups));
    const auto host_second =
        raw::batch_norm_double_backward(host.x_hat, host.inv_std, scale, g, host_grads.d_scale,
                                        host_grads.d_shift, h, &k, &u, positions);
    const auto second_on_device = [&](const Tensor<T, cuda>* dk, const Tensor<T, cuda>* du) {
      return raw::batch_norm_double_backward(device.x_hat, device.inv_std, on_device(scale),
                                             on_device(g), device_grads.d_scale,
                                             device_grads.d_shift, on_device(h), dk, du, positions);
    };
    const auto device_second = second_on_device(&device_k, &device_u);
    check_close(host_second.d_x_hat, device_second.d_x_hat, 10 * tolerance<T>, "d_x_hat");
    check_close(host_second.d_g, device_second.d_g, 10 * tolerance<T>, "d_g");
    check_close(host_second.d_inv_std, device_second.d_inv_std, 100 * tolerance<T>, "d_inv_std");
    check_close(host_second.d_scale, device_second.d_scale, 100 * tolerance<T>, "d_scale (second)");
    // A null k or u is read as zeros: a filled tensor's bits.
    const auto unfilled = second_on_device(nullptr, nullptr);
    const auto filled = second_on_device(&device_zeros, &device_zeros);
    CHECK(unfilled.d_x_hat.template to<cpu>().to_vector() ==
          filled.d_x_hat.template to<cpu>().to_vector());
    CHECK(unfilled.d_g.template to<cpu>().to_vector() == filled.d_g.template to<cpu>().to_vector());
  }
}

TEMPLATE_TEST_CASE("strided copies match the CPU backend", "[cuda][backend]", float, double) {
  using T = TestType;
  const Tensor<T> x = normal<T>({3, 4, 5, 6}, 11);
  const auto dx = on_device(x);
  check_close(raw::transpose(x, 0, 3), raw::transpose(dx, 0, 3), 0, "transpose");
  check_close(raw::transpose(x, 1, 2), raw::transpose(dx, 1, 2), 0, "transpose");
  check_close(raw::slice(x, 2, 1, 3), raw::slice(dx, 2, 1, 3), 0, "slice");
  check_close(raw::pad(x, 1, 2, 9), raw::pad(dx, 1, 2, 9), 0, "pad");
  const Tensor<T> row = normal<T>({5, 1}, 12);
  check_close(raw::expand(row, {2, 5, 7}), raw::expand(on_device(row), {2, 5, 7}), 0, "expand");
  const Tensor<T> y = normal<T>({3, 2, 5, 6}, 13);
  const auto dy = on_device(y);
  const std::array<const Tensor<T>*, 2> host_parts{&x, &y};
  const std::array<const Tensor<T, cuda>*, 2> device_parts{&dx, &dy};
  check_close(raw::concat(std::span<const Tensor<T>* const>(host_parts), 1),
              raw::concat(std::span<const Tensor<T, cuda>* const>(device_parts), 1), 0, "concat");
  // foreach_strided_copy: a pad's zeros on either side or one, and six parts
  // (two calls), some broadcast. The cached allocator hands each pad the
  // NaNs' buffer back, so that its zeros must be written, not found.
  const T nan = std::numeric_limits<T>::quiet_NaN();
  { const auto nans = Tensor<T, cuda>::full({3, 4, 5, 8}, nan); }
  check_close(raw::pad(x, 3, 0, 8), raw::pad(dx, 3, 0, 8), 0, "pad at the start");
  { const auto nans = Tensor<T, cuda>::full({7, 4, 5, 6}, nan); }
  check_close(raw::pad(x, 0, 4, 7), raw::pad(dx, 0, 4, 7), 0, "pad at the end");
  const Tensor<T> v = normal<T>({2, 1, 3}, 19);
  check_close(raw::expand_pad(v, -1, 2, {2, 5, 7}), raw::expand_pad(on_device(v), -1, 2, {2, 5, 7}),
              0, "expand_pad");
  std::vector<Tensor<T>> many;
  std::vector<Tensor<T, cuda>> many_on_device;
  for (int i = 0; i < 6; ++i) {
    many.push_back(normal<T>({i % 2 == 0 ? 3 : 1, 4, i + 1}, 20 + static_cast<std::uint64_t>(i)));
    many_on_device.push_back(on_device(many.back()));
  }
  std::vector<const Tensor<T>*> host_many;
  std::vector<const Tensor<T, cuda>*> device_many;
  for (int i = 0; i < 6; ++i) {
    host_many.push_back(&many[static_cast<std::size_t>(i)]);
    device_many.push_back(&many_on_device[static_cast<std::size_t>(i)]);
  }
  check_close(raw::expand_concat(std::span<const Tensor<T>* const>(host_many), -1),
              raw::expand_concat(std::span<const Tensor<T, cuda>* const>(device_many), -1), 0,
              "expand_concat of six parts");
}

TEMPLATE_TEST_CASE("gather and scatter-add match the CPU backend, repeated indices included",
                   "[cuda][backend]", float, double) {
  using T = TestType;
  const Tensor<T> x = normal<T>({3, 5, 4}, 14);
  const std::vector<std::int64_t> picks{4, 0, 4, 4, 2};
  const auto index = Index<>::from_host({5}, picks);
  const auto device_index = Index<cuda>::from_host({5}, picks);
  check_close(raw::gather(x, 1, index), raw::gather(on_device(x), 1, device_index), 0, "gather");
  const Tensor<T> g = normal<T>({3, 5, 4}, 15);
  check_close(raw::scatter_add(g, 1, index, 6), raw::scatter_add(on_device(g), 1, device_index, 6),
              tolerance<T>, "scatter_add");
  // Many slices into two rows: heavy contention on the atomics.
  std::vector<std::int64_t> halves(1000);
  for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::int64_t>(i % 2);
  const Tensor<T> many = normal<T>({1000, 8}, 16);
  check_close(raw::scatter_add(many, 0, Index<>::from_host({1000}, halves), 2),
              raw::scatter_add(on_device(many), 0, Index<cuda>::from_host({1000}, halves), 2),
              tolerance<T>, "scatter_add into two rows");
}

TEMPLATE_TEST_CASE(
    "max_pool2d with a ReLU, its backward and double backward match the CPU backend, bit for bit "
    "where windows do not overlap",
    "[cuda][backend]", float, double) {
  using T = TestType;
  // Values of few levels (ties, zeros, negative maxima); 2 x 2 windows of
  // stride 2 on odd sizes, gaps (stride 3: a thread per input element) and
  // overlaps (3 x 3 of stride 2: a fill and atomics, sums in any order).
  std::vector<T> values(2 * 3 * 7 * 9);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = std::floor(T(3) * std::sin(T(2.3) * static_cast<T>(i) + T(0.1))) * T(0.5);
  const auto x = Tensor<T>::from_host({2, 3, 7, 9}, values);
  for (const Window window : {Window{.kernel = 2, .stride = 2}, Window{.kernel = 2, .stride = 3},
                              Window{.kernel = 3, .stride = 2}})
    for (const bool relu : {false, true}) {
      INFO("kernel " << window.kernel << ", stride " << window.stride << ", relu " << relu);
      const auto [y, positions] = raw::max_pool2d(x, window, relu);
      const auto [y_gpu, positions_gpu] = raw::max_pool2d(on_device(x), window, relu);
      check_close(y, y_gpu, 0, "max_pool2d");
      CHECK(positions_gpu.template to<cpu>().to_vector() == positions.to_vector());
      const Tensor<T> g = normal<T>(y.shape(), 17);
      const auto dx = raw::max_pool2d_backward(g, y, positions, x.shape(), window, relu);
      const auto dx_gpu =
          raw::max_pool2d_backward(on_device(g), y_gpu, positions_gpu, x.shape(), window, relu);
      if (window.stride >= window.kernel)
        CHECK(dx_gpu.template to<cpu>().to_vector() == dx.to_vector());
      else
        check_close(dx, dx_gpu, tolerance<T>, "max_pool2d_backward");
      const Tensor<T> h = normal<T>(x.shape(), 18);
      const auto dg = raw::max_pool2d_double_backward(h, y, positions, window, relu);
      CHECK(raw::max_pool2d_double_backward(on_device(h), y_gpu, positions_gpu, window, relu)
                .template to<cpu>()
                .to_vector() == dg.to_vector());
    }
}

TEMPLATE_TEST_CASE("GEMM matches the CPU backend for every transpose, batch stride, alpha and beta",
                   "[cuda][backend]", float, double) {
  using T = TestType;
  const std::int64_t m = 5, n = 7, k = 3, batch = 4;
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true})
      for (bool shared_a : {false, true})
        for (bool shared_b : {false, true}) {
          INFO("trans_a " << trans_a << " trans_b " << trans_b << " shared_a " << shared_a
                          << " shared_b " << shared_b);
          const GemmLayout<T> g{.trans_a = trans_a,
                                .trans_b = trans_b,
                                .m = m,
                                .n = n,
                                .k = k,
                                .batch = batch,
                                .stride_a = shared_a ? 0 : m * k,
                                .stride_b = shared_b ? 0 : k * n,
                                .stride_c = m * n,
                                .alpha = T(0.5),
                                .beta = T(2)};
          const Tensor<T> a = normal<T>({shared_a ? 1 : batch, m * k}, 17),
                          b = normal<T>({shared_b ? 1 : batch, k * n}, 18);
          Tensor<T> c = normal<T>({batch, m * n}, 19);
          auto dc = on_device(c);
          const auto da = on_device(a), db = on_device(b);
          cpu::gemm(g, a.data(), b.data(), c.data());
          cuda::gemm(g, da.data(), db.data(), dc.data());
          check_close(c, dc, tolerance<T>, "gemm");
        }
}

TEMPLATE_TEST_CASE(
    "gemms matches the CPU backend for two products and a bias's row sums in one kernel, and by "
    "cuBLAS where one is large",
    "[cuda][backend]", float, double) {
  using T = TestType;
  // Products of 17 x 33 (partial tiles), every transpose, k across a tile's
  // edge, on it and over the one-kernel limit: the first a batch against a
  // shared matrix at beta 0 (over NaN on the device: C is not read), the
  // second a shared matrix against a batch at alpha 0.5, beta 2. The row
  // sums (3 x 300 elements: three blocks and part of a fourth) are the CPU's
  // bits, summed in the same order, written over NaN.
  const BiasLayout bias{.batch = 3, .rows = 5, .n = 300};
  const Tensor<T> rows = normal<T>({3, 5 * 300}, 26);
  const auto d_rows = on_device(rows);
  for (const std::int64_t k : {std::int64_t{19}, std::int64_t{32}, std::int64_t{4096}})
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true}) {
        INFO("k " << k << " trans_a " << trans_a << " trans_b " << trans_b);
        const std::int64_t m = 17, n = 33;
        GemmsLayout<T> l{.count = 2};
        l.gemm[0] = {.trans_a = trans_a,
                     .trans_b = trans_b,
                     .m = m,
                     .n = n,
                     .k = k,
                     .batch = 3,
                     .stride_a = m * k,
                     .stride_b = 0,
                     .stride_c = m * n};
        l.gemm[1] = {.trans_a = !trans_a,
                     .trans_b = trans_b,
                     .m = n,
                     .n = m,
                     .k = k,
                     .batch = 2,
                     .stride_a = 0,
                     .stride_b = k * m,
                     .stride_c = n * m,
                     .alpha = T(0.5),
                     .beta = T(2)};
        const Tensor<T> a0 = normal<T>({3, m * k}, 20), b0 = normal<T>({k * n}, 21),
                        a1 = normal<T>({n * k}, 22), b1 = normal<T>({2, k * m}, 23);
        Tensor<T> c0 = normal<T>({3, m * n}, 24), c1 = normal<T>({2, n * m}, 25);
        auto dc0 = Tensor<T, cuda>::full(c0.shape(), std::numeric_limits<T>::quiet_NaN()),
             dc1 = on_device(c1);
        const auto da0 = on_device(a0), db0 = on_device(b0), da1 = on_device(a1),
                   db1 = on_device(b1);
        GemmsLayout<T> dl = l;
        l.a = {a0.data(), a1.data()}, l.b = {b0.data(), b1.data()}, l.c = {c0.data(), c1.data()};
        dl.a = {da0.data(), da1.data()}, dl.b = {db0.data(), db1.data()};
        dl.c = {dc0.data(), dc1.data()};
        Tensor<T> sums({3, 300});
        auto d_sums = Tensor<T, cuda>::full(sums.shape(), std::numeric_limits<T>::quiet_NaN());
        l.bias = dl.bias = bias;
        l.rows = rows.data(), l.sums = sums.data();
        dl.rows = d_rows.data(), dl.sums = d_sums.data();
        cpu::gemms(l);
        cuda::gemms(dl);
        const T scale = static_cast<T>(std::sqrt(static_cast<double>(k)));
        check_close(c0, dc0, tolerance<T> * scale, "first product");
        check_close(c1, dc1, tolerance<T> * scale, "second product");
        CHECK(d_sums.to_vector() == sums.to_vector());
      }
  // Row sums alone: a layer whose product's factors need no gradient.
  Tensor<T> sums({3, 300});
  auto d_sums = Tensor<T, cuda>::full(sums.shape(), std::numeric_limits<T>::quiet_NaN());
  cpu::gemms(GemmsLayout<T>{.bias = bias, .rows = rows.data(), .sums = sums.data()});
  cuda::gemms(GemmsLayout<T>{.bias = bias, .rows = d_rows.data(), .sums = d_sums.data()});
  CHECK(d_sums.to_vector() == sums.to_vector());
}

TEMPLATE_TEST_CASE("Philox fills give the CPU backend's numbers for the same seed",
                   "[cuda][random]", float, double) {
  using T = TestType;
  for (std::int64_t n : {1, 3, 4, 5, 1001, (1 << 20) + 3}) {
    INFO(n << " values");
    Generator host(7, 3), device(7, 3);
    host.reserve<T>(5);  // so that the fills do not start at block 0
    device.reserve<T>(5);
    CHECK(raw::uniform<T>({n}, host).to_vector() == raw::uniform<T, cuda>({n}, device).to_vector());
    const auto expected = raw::normal<T>({n}, host).to_vector(),
               actual = raw::normal<T, cuda>({n}, device).to_vector();
    double worst = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
      worst = std::max(worst, ulps_apart(expected[i], actual[i]));
    INFO("normal draws up to " << worst << " ulps apart");
    CHECK(worst <= 8);
  }
}

TEMPLATE_TEST_CASE("row fills give the CPU backend's numbers, one launch for every row",
                   "[cuda][random]", float, double) {
  using T = TestType;
  const TaskStreams streams{.key = 99, .first = 4};
  for (const auto& [rows, n] :
       {std::pair<std::int64_t, std::int64_t>{1, 1}, {25, 7}, {25, 4000}, {3, 100003}}) {
    INFO(rows << " rows of " << n);
    std::vector<T> expected(static_cast<std::size_t>(rows * n));
    cpu::fill_normal_rows(expected.data(), rows, n, 5, streams, 9);
    Tensor<T, cuda> actual({rows, n});
    cuda::fill_normal_rows(actual.data(), rows, n, 5, streams, 9);
    const auto got = actual.to_vector();
    double worst = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
      worst = std::max(worst, ulps_apart(expected[i], got[i]));
    INFO("normal draws up to " << worst << " ulps apart");
    CHECK(worst <= 8);
  }
}

TEMPLATE_TEST_CASE("foreach row fills are each piece's row fill bit for bit, in one launch",
                   "[cuda][random]", float, double) {
  using T = TestType;
  const TaskStreams streams{.key = 99, .first = 4};
  NormalRowsLayout<T> l{.count = 3, .rows = 25};
  const std::array<std::int64_t, 3> n{7, 4000, 1};
  std::vector<Tensor<T, cuda>> pieces;
  for (int i = 0; i < l.count; ++i) {
    pieces.emplace_back(Shape{l.rows, n[static_cast<std::size_t>(i)]});
    l.y[static_cast<std::size_t>(i)] = pieces.back().data();
    l.n[static_cast<std::size_t>(i)] = n[static_cast<std::size_t>(i)];
    l.block[static_cast<std::size_t>(i)] = 9 + 1000 * static_cast<std::uint64_t>(i);
  }
  cuda::foreach_fill_normal_rows(l, 5, streams);
  for (int i = 0; i < l.count; ++i) {
    const auto k = static_cast<std::size_t>(i);
    Tensor<T, cuda> one({l.rows, n[k]});
    cuda::fill_normal_rows(one.data(), l.rows, n[k], 5, streams, l.block[k]);
    CHECK(pieces[k].to_vector() == one.to_vector());
  }
}

TEST_CASE("CUDA failures throw platipus::error naming the call, and the backend goes on working",
          "[cuda][errors]") {
  CHECK_THROWS_WITH(cuda::allocate(std::size_t{1} << 50),
                    Contains("cudaMalloc") && Contains("requested"));
  CHECK(Tensor<float, cuda>::full({3}, 2.0f).to_vector() == std::vector<float>(3, 2.0f));
}

TEST_CASE("host threads compute on their own streams without interfering", "[cuda][threads]") {
  constexpr int threads = 8;
  std::vector<double> errors(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([t, &errors] {
      // A long chain of dependent launches; small weights keep it contractive,
      // so that rounding differences do not grow along it.
      const Tensor<double> w =
          normal<double>({64, 64}, 100 + static_cast<std::uint64_t>(t), 0, 0.05);
      auto chain = [](const auto& v) {
        auto y = raw::map(UnaryOp::tanh, raw::matmul(v, v));
        for (int i = 0; i < 20; ++i) y = raw::map(UnaryOp::tanh, raw::matmul(y, v, false, true));
        return raw::sum_to(y, Shape{64}).to_vector();
      };
      const auto expected = chain(w), actual = chain(on_device(w));
      for (std::size_t i = 0; i < expected.size(); ++i)
        errors[static_cast<std::size_t>(t)] =
            std::max(errors[static_cast<std::size_t>(t)], std::abs(expected[i] - actual[i]));
    });
  for (auto& p : pool) p.join();
  for (double e : errors) CHECK(e < 1e-9);
}
