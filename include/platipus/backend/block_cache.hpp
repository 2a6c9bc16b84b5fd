// A size-class cache of device blocks, so that steady-state training
// allocates nothing from the device (or the system) per op. Blocks are
// rounded up to a power of two and kept on per-class free lists. The cache is
// thread-local: no lock, no sharing between threads; a block freed on another
// thread simply joins that thread's cache.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <vector>

namespace platipus::detail {

template <void* (*RawAllocate)(std::size_t), void (*RawFree)(void*)>
class BlockCache {
 public:
  static constexpr std::size_t min_block = 64;

  ~BlockCache() {
    for (auto& list : free_)
      for (void* p : list) RawFree(p);
  }

  void* allocate(std::size_t bytes) {
    const std::size_t cls = size_class(bytes);
    auto& list = free_[cls];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      return p;
    }
    return RawAllocate(std::size_t{1} << cls);
  }

  void deallocate(void* p, std::size_t bytes) {
    if (p) free_[size_class(bytes)].push_back(p);
  }

  static BlockCache& local() {
    thread_local BlockCache cache;
    return cache;
  }

 private:
  static std::size_t size_class(std::size_t bytes) {
    return static_cast<std::size_t>(std::bit_width(std::max(bytes, min_block) - 1));
  }

  std::array<std::vector<void*>, 64> free_;
};

}  // namespace platipus::detail
