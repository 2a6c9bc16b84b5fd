// A bump allocator for tape records: chunks of memory handed out in order
// and released all at once, as in Stan Math's stack_alloc. Destructors of
// the objects placed in it are the owner's business (the tape runs them).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace platipus::detail {

class Arena {
 public:
  static constexpr std::size_t chunk_bytes = 64 * 1024;

  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (void* c : chunks_) std::free(c);
  }

  void* allocate(std::size_t bytes, std::size_t align) {
    std::byte* p = align_up(cursor_, align);
    if (cursor_ == nullptr || p + bytes > limit_) {
      const std::size_t size = std::max(chunk_bytes, bytes + align);
      auto* chunk = static_cast<std::byte*>(std::malloc(size));
      if (!chunk) throw std::bad_alloc();
      chunks_.push_back(chunk);
      limit_ = chunk + size;
      p = align_up(chunk, align);
    }
    cursor_ = p + bytes;
    return p;
  }

  template <class U, class... Args>
  U* make(Args&&... args) {
    return new (allocate(sizeof(U), alignof(U))) U(std::forward<Args>(args)...);
  }

  template <class U>
  U* make_array(std::size_t count) {
    U* p = static_cast<U*>(allocate(sizeof(U) * count, alignof(U)));
    std::uninitialized_value_construct_n(p, count);
    return p;
  }

 private:
  static std::byte* align_up(std::byte* p, std::size_t align) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    return p + ((align - address % align) % align);
  }

  std::vector<void*> chunks_;
  std::byte* cursor_ = nullptr;
  std::byte* limit_ = nullptr;
};

}  // namespace platipus::detail
