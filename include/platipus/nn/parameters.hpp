// ParamLayout: the named pieces of a model's flat parameter vector, their
// shapes, offsets and initialisers. A model's parameters are one tensor of
// `size()` values (or [tasks, size()] once they differ per task); the layout
// says where each named piece lives in it.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "platipus/core/philox.hpp"
#include "platipus/tensor/layout.hpp"
#include "platipus/tensor/random.hpp"

namespace platipus::nn {

enum class Init {
  zeros,
  ones,            // batch norm's scale
  uniform_fan_in,  // U(-a, a), a = 1 / sqrt(fan_in): PyTorch's nn.Linear default
  glorot_uniform,  // U(-a, a), a = sqrt(6 / (fan_in + fan_out))
  he_normal,       // N(0, 2 / fan_in)
};

// The inputs and outputs that one weight connects, for the initialisers; 0:
// a weight [fan_in, fan_out...] (Linear's), the rule for a bias or vector.
struct Fans {
  std::int64_t in = 0, out = 0;
};

struct ParamSpec {
  std::string name;
  Shape shape;
  Init init;
  std::int64_t offset;
  Fans fans{};
};

class ParamLayout {
 public:
  // Adds a piece; weights are [fan_in, fan_out] unless `fans` says otherwise
  // (a convolution's [C_out, C_in, k, k] connects C_in k k inputs to C_out k
  // k outputs). Returns its index.
  std::size_t add(std::string name, const Shape& shape, Init init, Fans fans = {}) {
    for (const auto& s : specs_)
      check(s.name != name, "ParamLayout::add", "duplicate parameter name '{}'", name);
    specs_.push_back({std::move(name), shape, init, size_, fans});
    shapes_.push_back(shape);
    size_ += shape.numel();
    return specs_.size() - 1;
  }

  std::int64_t size() const { return size_; }
  std::span<const ParamSpec> specs() const { return specs_; }
  std::span<const Shape> shapes() const { return shapes_; }

  const ParamSpec& find(std::string_view name) const {
    for (const auto& s : specs_)
      if (s.name == name) return s;
    fail("ParamLayout", "no parameter named '{}'", name);
  }

  // A parameter vector drawn from each piece's initialiser.
  template <class T, class B = cpu>
  Tensor<T, B> initialize(Generator& gen) const {
    std::vector<T> values(static_cast<std::size_t>(size_), T(0));
    for (const auto& s : specs_) {
      if (s.init == Init::zeros) continue;
      if (s.init == Init::ones) {
        std::fill_n(values.begin() + s.offset, s.shape.numel(), T(1));
        continue;
      }
      const double fan_in = static_cast<double>(s.fans.in > 0         ? s.fans.in
                                                : s.shape.rank() >= 2 ? s.shape[0]
                                                                      : s.shape.numel());
      const double fan_out =
          static_cast<double>(s.fans.out > 0        ? s.fans.out
                              : s.shape.rank() >= 2 ? s.shape.numel() / s.shape[0]
                                                    : 1);
      const auto count = s.shape.numel();
      auto draws = s.init == Init::he_normal ? raw::normal<T>(s.shape, gen).to_vector()
                                             : raw::uniform<T>(s.shape, gen).to_vector();
      const double bound = s.init == Init::glorot_uniform ? std::sqrt(6.0 / (fan_in + fan_out))
                                                          : 1.0 / std::sqrt(fan_in);
      for (std::int64_t i = 0; i < count; ++i) {
        const T u = draws[static_cast<std::size_t>(i)];
        values[static_cast<std::size_t>(s.offset + i)] =
            s.init == Init::he_normal ? static_cast<T>(std::sqrt(2.0 / fan_in)) * u
                                      : static_cast<T>(bound) * (2 * u - 1);
      }
    }
    return Tensor<T, B>::from_host(Shape{size_}, values);
  }

  // A copy of the named piece of a flat vector [P] or of task row `task` of [T, P].
  template <class T, class B>
  Tensor<T, B> piece(const Tensor<T, B>& params, std::string_view name,
                     std::int64_t task = 0) const {
    const auto& s = find(name);
    check(params.dim(-1) == size_, "ParamLayout::piece",
          "parameters {} do not match a layout of {} values", params.shape(), size_);
    const Tensor<T, B> rows = Tensor<T, B>::view(params, Shape{params.numel() / size_, size_});
    return raw::slice(raw::slice(rows, 0, task, 1), 1, s.offset, s.shape.numel()).reshaped(s.shape);
  }

 private:
  std::vector<ParamSpec> specs_;
  std::vector<Shape> shapes_;
  std::int64_t size_ = 0;
};

}  // namespace platipus::nn
