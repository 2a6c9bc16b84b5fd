// A size-class cache of device blocks, so that steady-state training
// allocates nothing from the device (or the system) per op. Blocks are
// rounded up to one of sixteen sizes per octave (2^p times 1 + q / 16: less
// than a sixteenth above the request; four per octave wasted up to a quarter,
// 24% on the 68 MB activations of a MiniImagenet conv4 step) and kept on
// per-class free lists. The cache is
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
    return RawAllocate(class_bytes(cls));
  }

  void deallocate(void* p, std::size_t bytes) {
    if (p) free_[size_class(bytes)].push_back(p);
  }

  // Takes `other`'s free blocks as this cache's own (to be freed with it).
  void adopt_free_blocks(BlockCache& other) {
    for (std::size_t cls = 0; cls < free_.size(); ++cls) {
      free_[cls].insert(free_[cls].end(), other.free_[cls].begin(), other.free_[cls].end());
      other.free_[cls].clear();
    }
  }

  static BlockCache& local() {
    thread_local BlockCache cache;
    return cache;
  }

 private:
  static constexpr int octave_bits = 4;  // 16 classes per octave
  static constexpr int classes_per_octave = 1 << octave_bits;

  // Class 16 p + q - 1 (q in 1..16) holds blocks of 2^p + q 2^(p-4) bytes,
  // the smallest that is not below `bytes` (p >= 5: min_block is 64).
  static std::size_t size_class(std::size_t bytes) {
    bytes = std::max(bytes, min_block);
    const int p = std::bit_width(bytes - 1) - 1;  // 2^p < bytes <= 2^(p+1)
    const std::size_t step = std::size_t{1} << (p - octave_bits),
                      q = (bytes - (std::size_t{1} << p) + step - 1) / step;
    return static_cast<std::size_t>(classes_per_octave * p) + q - 1;
  }
  static std::size_t class_bytes(std::size_t cls) {
    const int p = static_cast<int>(cls / classes_per_octave);
    return (classes_per_octave + cls % classes_per_octave + 1) << (p - octave_bits);
  }

  std::array<std::vector<void*>, 64 * classes_per_octave> free_;
};

}  // namespace platipus::detail
