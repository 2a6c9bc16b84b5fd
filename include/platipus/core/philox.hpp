// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011), the counter-based generator behind every random number in
// platipus. A draw is a pure function of (seed, counter), so the CPU and CUDA
// backends produce the same numbers for the same seed: element i of a fill
// that starts at block `c` reads block c + i / per_block, lane i % per_block.
//
//   float:  4 values per block. uniform: (x >> 8) + 0.5) * 2^-24, in (0, 1).
//           normal: Box-Muller on lanes (0, 1) and (2, 3): lane 0 is
//           sqrt(-2 log u0) cos(2 pi u1), lane 1 the same with sin.
//   double: 2 values per block. uniform: 53 bits of (x0 << 32 | x1), in (0, 1).
//           normal: Box-Muller on the block's two uniforms.
// Uniforms are bit-identical on every backend; normals agree to the last
// few ulps, as far as the backends' log, sin and cos do (CPU fills evaluate
// them vectorised).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "platipus/core/hd.hpp"

namespace platipus {

using PhiloxBlock = std::array<std::uint32_t, 4>;

// The multipliers and the Weyl sequence's increments of the key.
struct PhiloxConstants {
  static constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  static constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
};

PLATIPUS_HD inline PhiloxBlock philox4x32_10(std::uint64_t seed, std::uint64_t counter,
                                             std::uint64_t stream) {
  using C = PhiloxConstants;
  constexpr std::uint32_t m0 = C::m0, m1 = C::m1, w0 = C::w0, w1 = C::w1;
  std::uint32_t c0 = static_cast<std::uint32_t>(counter),
                c1 = static_cast<std::uint32_t>(counter >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(stream),
                c3 = static_cast<std::uint32_t>(stream >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(m0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(m1) * c2;
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32),
                        lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32),
                        lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += w0;
    k1 += w1;
  }
  return {c0, c1, c2, c3};
}

// blocks[j] = philox4x32_10(seed, counter + j, stream) for j < count, on the
// host: the rounds run on 16 counters side by side, which the compiler
// vectorises (the same integer arithmetic, so the same bits, 9x faster
// than one block at a time on AVX-512).
inline void philox4x32_10_blocks(std::uint64_t seed, std::uint64_t counter, std::uint64_t stream,
                                 std::int64_t count, PhiloxBlock* blocks) {
  using C = PhiloxConstants;
  constexpr int width = 16;
  std::int64_t j = 0;
  for (; j + width <= count; j += width) {
    std::array<std::uint32_t, width> c0, c1, c2, c3;
    for (int l = 0; l < width; ++l) {
      const std::uint64_t c = counter + static_cast<std::uint64_t>(j + l);
      c0[l] = static_cast<std::uint32_t>(c);
      c1[l] = static_cast<std::uint32_t>(c >> 32);
      c2[l] = static_cast<std::uint32_t>(stream);
      c3[l] = static_cast<std::uint32_t>(stream >> 32);
    }
    std::uint32_t k0 = static_cast<std::uint32_t>(seed),
                  k1 = static_cast<std::uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      for (int l = 0; l < width; ++l) {
        const std::uint64_t p0 = static_cast<std::uint64_t>(C::m0) * c0[l];
        const std::uint64_t p1 = static_cast<std::uint64_t>(C::m1) * c2[l];
        const std::uint32_t next0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
        const std::uint32_t next2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
        c1[l] = static_cast<std::uint32_t>(p1);
        c3[l] = static_cast<std::uint32_t>(p0);
        c0[l] = next0;
        c2[l] = next2;
      }
      k0 += C::w0;
      k1 += C::w1;
    }
    for (int l = 0; l < width; ++l) blocks[j + l] = {c0[l], c1[l], c2[l], c3[l]};
  }
  for (; j < count; ++j)
    blocks[j] = philox4x32_10(seed, counter + static_cast<std::uint64_t>(j), stream);
}

// How a value type consumes Philox blocks; see the file comment.
template <class T>
struct PhiloxDraw;

template <>
struct PhiloxDraw<float> {
  static constexpr int per_block = 4;
  PLATIPUS_HD static float uniform(const PhiloxBlock& b, int lane) {
    return (static_cast<float>(b[static_cast<unsigned>(lane)] >> 8) + 0.5f) * 0x1p-24f;
  }
  PLATIPUS_HD static float normal(const PhiloxBlock& b, int lane) {
    const int pair = lane & ~1;
    const float radius = std::sqrt(-2.0f * std::log(uniform(b, pair))),
                angle = two_pi * uniform(b, pair + 1);
    return radius * ((lane & 1) ? std::sin(angle) : std::cos(angle));
  }
  static constexpr float two_pi = 6.2831853071795865f;
};

template <>
struct PhiloxDraw<double> {
  static constexpr int per_block = 2;
  PLATIPUS_HD static double uniform(const PhiloxBlock& b, int lane) {
    const unsigned i = 2u * static_cast<unsigned>(lane);
    const std::uint64_t bits = (static_cast<std::uint64_t>(b[i]) << 32 | b[i + 1]) >> 11;
    return (static_cast<double>(bits) + 0.5) * 0x1p-53;
  }
  PLATIPUS_HD static double normal(const PhiloxBlock& b, int lane) {
    const double u0 = uniform(b, 0), u1 = uniform(b, 1);
    const double radius = std::sqrt(-2.0 * std::log(u0)), angle = 6.283185307179586 * u1;
    return radius * (lane ? std::sin(angle) : std::cos(angle));
  }
};

// The streams of a task-keyed fill (meta/driver/task_noise.hpp): row r reads the
// stream of task first + r, a hash of (the draw's key, the task's index), so
// a task's numbers do not depend on which rows it shares a fill with.
struct TaskStreams {
  std::uint64_t key = 0;
  std::int64_t first = 0;
};

PLATIPUS_HD inline std::uint64_t task_stream(const TaskStreams& s, std::int64_t row) {
  const PhiloxBlock b =
      philox4x32_10(s.key, static_cast<std::uint64_t>(s.first + row), 0x7461736bull);
  return static_cast<std::uint64_t>(b[0]) << 32 | b[1];
}

// A seed, a stream and a position: every sampler and algorithm takes one of
// these explicitly (there is no global generator). Fills reserve whole blocks
// with `reserve`, so consecutive fills never share counters.
class Generator {
 public:
  // `counter`: the position to start from, as counter() gave it (a resumed run).
  explicit Generator(std::uint64_t seed = 0, std::uint64_t stream = 0, std::uint64_t counter = 0)
      : seed_(seed), stream_(stream), counter_(counter) {}

  std::uint64_t seed() const { return seed_; }
  std::uint64_t stream() const { return stream_; }
  std::uint64_t counter() const { return counter_; }

  // Reserves the blocks for `count` values of type T; returns the first block.
  template <class T>
  std::uint64_t reserve(std::int64_t count) {
    const std::uint64_t start = counter_;
    counter_ += static_cast<std::uint64_t>((count + PhiloxDraw<T>::per_block - 1) /
                                           PhiloxDraw<T>::per_block);
    return start;
  }

  // An independent generator: same seed, another stream, derived from this
  // generator's stream and position so that repeated forks differ.
  Generator fork() {
    const PhiloxBlock b = philox4x32_10(seed_, counter_++, stream_ ^ 0x5bd1e995ull);
    return Generator(seed_, static_cast<std::uint64_t>(b[0]) << 32 | b[1]);
  }

  // Host-side scalar draws, for samplers that pick a few numbers at a time.
  template <class T>
  T uniform() {
    return PhiloxDraw<T>::uniform(philox4x32_10(seed_, reserve<T>(1), stream_), 0);
  }
  template <class T>
  T uniform(T low, T high) {
    return low + (high - low) * uniform<T>();
  }
  template <class T>
  T normal() {
    return PhiloxDraw<T>::normal(philox4x32_10(seed_, reserve<T>(1), stream_), 0);
  }
  // 64 uniformly random bits.
  std::uint64_t bits() {
    const PhiloxBlock b = philox4x32_10(seed_, counter_++, stream_);
    return static_cast<std::uint64_t>(b[0]) << 32 | b[1];
  }
  // Uniform integer in [0, n).
  std::int64_t index(std::int64_t n) {
    return static_cast<std::int64_t>(bits() % static_cast<std::uint64_t>(n));
  }

 private:
  std::uint64_t seed_, stream_, counter_;
};

}  // namespace platipus
