// Device memory of the platipus::cuda library (not installed): the block
// cache that cuda::allocate draws from, and the pool a recording graph
// substitutes for it on the recording thread.
#pragma once

#include <cstddef>

#include "platipus/backend/block_cache.hpp"

namespace platipus::detail {

void* raw_device_allocate(std::size_t bytes);
void raw_device_free(void* p);

using DeviceCache = BlockCache<&raw_device_allocate, &raw_device_free>;

// The pool the calling thread allocates from while it records a graph, or
// null: then it allocates from DeviceCache::local().
DeviceCache*& recording_pool();

}  // namespace platipus::detail
