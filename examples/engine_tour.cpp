// A tour of the engine without meta-learning: fit a 1-40-40-1 MLP to a sine
// with Adam, then check a Hessian-vector product (grad of grad) against a
// finite difference of gradients, in double precision.
#include <cmath>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "platipus/platipus.hpp"

using namespace platipus;

int main(int argc, char** argv) {
  CLI::App app{"A tour of the engine: fit an MLP with Adam, check a Hessian-vector product"};
  CLI11_PARSE(app, argc, argv);  // no options: --help, and an unknown flag is an error
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {40, 40}, .outputs = 1, .activation = nn::Activation::tanh});
  Generator gen(0);
  Tensor<double> params = model.initialize<double>(gen);
  std::vector<double> xs, ys;
  for (int i = 0; i < 64; ++i) {
    const double x = -3.0 + 6.0 * i / 63.0;
    xs.push_back(x);
    ys.push_back(std::sin(x));
  }
  const auto x = Tensor<double>::from_host({64, 1}, xs), y = Tensor<double>::from_host({64, 1}, ys);

  // Fitting: one tape per step; the tape frees everything when it ends.
  optim::Adam<double> adam({.learning_rate = 1e-2});
  auto loss_at = [&](Tape<double>& tape, const Var<double>& p) {
    return mse_loss(model.forward(p, tape.constant(x)), tape.constant(y));
  };
  for (int step = 0; step <= 2000; ++step) {
    Tape<double> tape;
    const auto p = tape.variable(params);
    const auto loss = loss_at(tape, p);
    const auto g = grad(loss, p);
    Tensor<double>* ps[] = {&params};
    const Tensor<double>* gs[] = {&g.value()};
    adam.step(ps, gs);
    if (step % 500 == 0) fmt::print("step {:4d}  mse {:.6f}\n", step, loss.item());
  }

  // H v by differentiating <grad L, v> (create_graph), against
  // (grad L(p + eps v) - grad L(p - eps v)) / (2 eps).
  const auto v = raw::normal<double>(params.shape(), gen);
  Tape<double> tape;
  const auto p = tape.variable(params);
  const auto g = grad(loss_at(tape, p), p, {.create_graph = true});
  const auto hv = grad(sum(g * tape.constant(v)), p).to_vector();
  auto gradient_at = [&](double eps) {
    Tape<double> t;
    const auto q =
        t.variable(raw::map(BinaryOp::add, params, raw::map(UnaryOp::scale, v, eps), "add"));
    return grad(loss_at(t, q), q).to_vector();
  };
  const double eps = 1e-5;
  const auto plus = gradient_at(eps), minus = gradient_at(-eps);
  double error = 0, norm = 0;
  for (std::size_t i = 0; i < hv.size(); ++i) {
    const double fd = (plus[i] - minus[i]) / (2 * eps);
    error += (hv[i] - fd) * (hv[i] - fd);
    norm += fd * fd;
  }
  const double relative = std::sqrt(error / norm);
  fmt::print(
      "Hessian-vector product vs finite differences: relative error {:.2e} over {} parameters "
      "({})\n",
      relative, hv.size(), relative < 1e-6 ? "ok" : "MISMATCH");
  return relative < 1e-6 ? 0 : 1;
}
