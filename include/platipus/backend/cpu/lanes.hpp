// Vectors of T for the CPU's loops over short rows (Winograd's tiles of a
// row of conv4's planes: 5 to 21 of them): the GCC / Clang vector extension,
// loaded and stored with memcpy (no alignment asked), and a loop that covers
// a row with the widest vector that fits it, its last vector overlapping the
// one before instead of a scalar remainder. A row of 11 tiles is then two
// vectors of 8 where an auto-vectorised loop of 16 lanes ran 11 scalar
// iterations. The loop's body sees some elements twice; it must write the
// same values each time (it reads nothing it writes), so the results are
// those of the scalar loop, bit for bit.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace platipus::detail::lanes {

template <class T, int bytes>
using Lanes [[gnu::vector_size(bytes)]] = T;

// V is T itself or a Lanes<T, bytes>.
template <class V, class T>
V load(const T* from) {
  V v;
  std::memcpy(&v, from, sizeof(V));
  return v;
}
template <class V, class T>
void store(T* to, const V& v) {
  std::memcpy(to, &v, sizeof(V));
}

// Calls body(j, V{}) for vectors V of T whose lanes j, j + 1, ... cover [0, n)
// once or, for the last one, twice; rows shorter than 16 bytes of T take
// scalars (V = T).
template <class T, class F>
void for_lanes(std::int64_t n, F&& body) {
  const auto cover = [&](auto vector) {
    using V = decltype(vector);
    constexpr std::int64_t width = sizeof(V) / sizeof(T);
    for (std::int64_t j = 0; j + width < n; j += width) body(j, V{});
    body(n - width, V{});
  };
  if (n * std::int64_t(sizeof(T)) >= 64)
    cover(Lanes<T, 64>{});
  else if (n * std::int64_t(sizeof(T)) >= 32)
    cover(Lanes<T, 32>{});
  else if (n * std::int64_t(sizeof(T)) >= 16)
    cover(Lanes<T, 16>{});
  else
    for (std::int64_t j = 0; j < n; ++j) body(j, T{});
}

// Lanes i of the vectors a and b, half `half` (0, 1) of them interleaved:
// {a[i], b[i], a[i + 1], b[i + 1], ...} from i = half * width / 2.
template <int half, class V>
V interleave(const V& a, const V& b) {
  return [&]<std::size_t... i>(std::index_sequence<i...>) {
    constexpr std::size_t width = sizeof...(i);
    return __builtin_shufflevector(a, b, (half * width / 2 + i / 2 + i % 2 * width)...);
  }
  (std::make_index_sequence<sizeof(V) / sizeof(a[0])>{});
}
// The even (`odd` 0) or odd lanes of the vectors a and b one after another.
template <int odd, class V>
V deinterleave(const V& a, const V& b) {
  return [&]<std::size_t... i>(std::index_sequence<i...>) {
    return __builtin_shufflevector(a, b, (2 * i + odd)...);
  }
  (std::make_index_sequence<sizeof(V) / sizeof(a[0])>{});
}

// to[2 j] = a[j], to[2 j + 1] = b[j] over V's lanes.
template <class V, class T>
void store_interleaved(T* to, const V& a, const V& b) {
  if constexpr (std::is_same_v<V, T>) {
    to[0] = a;
    to[1] = b;
  } else {
    store(to, interleave<0>(a, b));
    store(to + sizeof(V) / sizeof(T), interleave<1>(a, b));
  }
}
// {from[2 j]}, {from[2 j + 1]} over V's lanes.
template <class V, class T>
std::pair<V, V> load_deinterleaved(const T* from) {
  if constexpr (std::is_same_v<V, T>) {
    return {from[0], from[1]};
  } else {
    const V a = load<V>(from), b = load<V>(from + sizeof(V) / sizeof(T));
    return {deinterleave<0>(a, b), deinterleave<1>(a, b)};
  }
}

}  // namespace platipus::detail::lanes
