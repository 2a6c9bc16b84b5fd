// Uses the library the way a downstream program does; exits non-zero when
// a derivative is wrong.
#include <cmath>
#include <cstdio>

#include <platipus/platipus.hpp>

int main() {
  platipus::Tape<double> tape;
  const auto x = tape.variable(platipus::Tensor<double>::scalar(0.7));
  const auto d2 = platipus::grad(
      platipus::grad(platipus::sum(platipus::tanh(x)), x, {.create_graph = true}), x);
  const double t = std::tanh(0.7), expected = -2 * t * (1 - t * t);  // d2/dx2 tanh
  std::printf("d2 tanh(0.7) / dx2 = %.12f (expected %.12f)\n", d2.item(), expected);
  return std::abs(d2.item() - expected) < 1e-12 ? 0 : 1;
}
