// The memory a test process holds, for tests that memory stays flat.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <fstream>

#include "platipus/core/memory.hpp"

#if defined(__SANITIZE_ADDRESS__)
// The sanitizer runtime's count of live heap bytes (GCC ships no header for it).
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#endif

// Resident memory in KiB; under AddressSanitizer, whose quarantine holds
// freed blocks back and so grows the resident set, the live heap instead.
inline long resident_kib() {
#if defined(__SANITIZE_ADDRESS__)
  return static_cast<long>(__sanitizer_get_current_allocated_bytes() / 1024);
#else
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE) / 1024;
#endif
}

// Linux's peak resident memory (VmHWM) in KiB since the library's
// memory::reset_peak_resident: the peak of a stretch of code, whatever the
// tests before it held.
inline long peak_resident_kib() {
  return static_cast<long>(platipus::memory::peak_resident_bytes() / 1024);
}
using platipus::memory::reset_peak_resident;
