// platipus::error and the argument checks that throw it.
//
// Every check names the operation and the offending arguments, in the manner
// of Stan Math's check_* functions: "matmul: inner dimensions differ: a is
// [3, 4], b is [5, 2]".
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace platipus {

// The one exception type for bad input: shapes, files, arguments, numerics.
class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error(what) {}
};

// Meta-training whose loss became NaN or infinite: an error that a driver
// comparing many runs may record as a result and go on (examples/algorithms).
class divergence : public error {
 public:
  using error::error;
};

// Throws platipus::error with "<op>: <formatted message>".
template <class... Args>
[[noreturn]] void fail(std::string_view op, fmt::format_string<Args...> format, Args&&... args) {
  throw error(fmt::format("{}: {}", op, fmt::format(format, std::forward<Args>(args)...)));
}

// Throws unless `condition` holds; the message is only formatted on failure.
template <class... Args>
void check(bool condition, std::string_view op, fmt::format_string<Args...> format,
           Args&&... args) {
  if (!condition) fail(op, format, std::forward<Args>(args)...);
}

// The named range checks, after Stan's check_positive(function, name, value):
// one wording for every setting and argument, "<op>: <name> must be
// positive, got <value>", with an optional hint on what a boundary value
// means ("0: no clip"). A NaN fails each of them.
namespace detail {
inline std::string hint_text(std::string_view hint) {
  return hint.empty() ? std::string() : fmt::format(" ({})", hint);
}
}  // namespace detail

template <class V>
void check_positive(std::string_view op, std::string_view name, V value,
                    std::string_view hint = {}) {
  if (!(value > 0)) fail(op, "{} must be positive{}, got {}", name, detail::hint_text(hint), value);
}

template <class V>
void check_non_negative(std::string_view op, std::string_view name, V value,
                        std::string_view hint = {}) {
  if (!(value >= 0))
    fail(op, "{} must be non-negative{}, got {}", name, detail::hint_text(hint), value);
}

template <class V>
void check_finite(std::string_view op, std::string_view name, V value) {
  if (!std::isfinite(value)) fail(op, "{} must be finite, got {}", name, value);
}

template <class V>
void check_at_least(std::string_view op, std::string_view name, V value, V bound) {
  if (!(value >= bound)) fail(op, "{} must be at least {}, got {}", name, bound, value);
}

}  // namespace platipus
