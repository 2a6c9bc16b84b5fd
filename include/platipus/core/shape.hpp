// Shape: the dimensions of a row-major tensor, kept inline (no heap).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include <fmt/format.h>

#include "platipus/core/error.hpp"
#include "platipus/core/max_rank.hpp"

namespace platipus {

class Shape {
 public:
  static constexpr int max_rank = platipus::max_rank;

  constexpr Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) { assign(std::span(dims.begin(), dims.size())); }
  explicit Shape(std::span<const std::int64_t> dims) { assign(dims); }

  int rank() const { return rank_; }
  std::int64_t operator[](int axis) const { return dims_[static_cast<std::size_t>(axis)]; }
  std::int64_t& operator[](int axis) { return dims_[static_cast<std::size_t>(axis)]; }
  // Dimension counted from the end when negative, as in NumPy.
  std::int64_t dim(int axis) const { return (*this)[normalize_axis(axis, "Shape::dim")]; }

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
    return n;
  }
  bool is_scalar() const { return numel() == 1; }

  std::span<const std::int64_t> dims() const {
    return {dims_.data(), static_cast<std::size_t>(rank_)};
  }
  const std::int64_t* begin() const { return dims_.data(); }
  const std::int64_t* end() const { return dims_.data() + rank_; }

  // Axis in [0, rank) from an axis in [-rank, rank).
  int normalize_axis(int axis, std::string_view op) const {
    check(axis >= -rank_ && axis < rank_, op, "axis {} is out of range for shape [{}]", axis,
          fmt::join(dims(), ", "));
    return axis < 0 ? axis + rank_ : axis;
  }

  void push_back(std::int64_t d) {
    check(rank_ < max_rank, "Shape", "rank exceeds {}", max_rank);
    dims_[static_cast<std::size_t>(rank_++)] = d;
  }
  // The shape without its first `count` dimensions / with only its first `count`.
  Shape drop_front(int count) const {
    return Shape(dims().subspan(static_cast<std::size_t>(std::min(count, rank_))));
  }
  Shape take_front(int count) const {
    return Shape(dims().first(static_cast<std::size_t>(std::min(count, rank_))));
  }

  std::string to_string() const { return fmt::format("[{}]", fmt::join(dims(), ", ")); }

  friend bool operator==(const Shape& a, const Shape& b) {
    return std::ranges::equal(a.dims(), b.dims());
  }

 private:
  void assign(std::span<const std::int64_t> dims) {
    check(dims.size() <= max_rank, "Shape", "rank {} exceeds the maximum {}", dims.size(),
          max_rank);
    for (auto d : dims) check(d >= 0, "Shape", "negative dimension {}", d);
    rank_ = static_cast<int>(dims.size());
    std::ranges::copy(dims, dims_.begin());
  }

  std::array<std::int64_t, max_rank> dims_{};
  int rank_ = 0;
};

}  // namespace platipus

template <>
struct fmt::formatter<platipus::Shape> : fmt::formatter<std::string> {
  auto format(const platipus::Shape& s, format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.to_string(), ctx);
  }
};

namespace platipus {

// Shape a op b under NumPy broadcasting; throws naming `op` when incompatible.
inline Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  if (a == b) return a;
  const int rank = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    const std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    check(da == db || da == 1 || db == 1, op, "shapes {} and {} do not broadcast", a, b);
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

}  // namespace platipus
