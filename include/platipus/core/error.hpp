// platipus::error and the argument checks that throw it.
//
// Every check names the operation and the offending arguments, in the manner
// of Stan Math's check_* functions: "matmul: inner dimensions differ: a is
// [3, 4], b is [5, 2]".
#pragma once

#include <stdexcept>
#include <string>
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

}  // namespace platipus
