// Helpers of the components' tests: tensors, by-hand networks, differences.
// Part of components_test.cpp, which includes it once after helpers.hpp: the
// components' tests are one translation unit (build time).
#pragma once

using Inputs = std::vector<Tensor<double>>;

namespace {

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

// The mean, variance, least and greatest of draws.
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

}  // namespace
