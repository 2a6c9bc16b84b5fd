// The memory a test process holds, for tests that memory stays flat.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <fstream>
#include <string>

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

// Linux's peak resident memory (VmHWM) in KiB, and its reset (clear_refs 5):
// the peak of a stretch of code, whatever the tests before it held.
inline long peak_resident_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string key; status >> key;) {
    if (key == "VmHWM:") {
      long kib = 0;
      status >> kib;
      return kib;
    }
  }
  return 0;
}
inline void reset_peak_resident() {
  std::ofstream("/proc/self/clear_refs") << "5";
}
