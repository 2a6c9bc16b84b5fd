// The largest tensor rank. Shape and the backend layouts share it; it lives
// apart from shape.hpp so that the layouts, which nvcc compiles into
// kernels, need neither fmt nor the rest of Shape.
#pragma once

namespace platipus {

inline constexpr int max_rank = 6;

}  // namespace platipus
