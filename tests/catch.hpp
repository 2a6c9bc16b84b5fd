// Catch2 v2 (Debian 12) or v3 (Ubuntu 24.04, the GPU machine): the tests use
// the common subset through this header.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
using Catch::Approx;
namespace Catch {
inline auto Contains(const std::string& s) {
  return Matchers::ContainsSubstring(s);
}
}  // namespace Catch
#else
#include <catch2/catch.hpp>
#endif
