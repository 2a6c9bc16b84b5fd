// The host memory a process holds and the machine has left, as Linux reports
// it (/proc): for memory checks before a run and for benchmarks that report
// peak memory beside time. Every function returns 0 (or false) where /proc
// cannot be read, so callers degrade to "unknown" rather than fail.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace platipus::memory {

namespace detail {
// The "<key>: <n> kB" line of a /proc file, in bytes.
inline std::uint64_t proc_bytes(const char* file, std::string_view key) {
  std::ifstream in(file);
  for (std::string word; in >> word;)
    if (word == key) {
      std::uint64_t kib = 0;
      in >> kib;
      return kib * 1024;
    }
  return 0;
}
}  // namespace detail

// Bytes a new process can have without swapping (MemAvailable).
inline std::uint64_t available_bytes() {
  return detail::proc_bytes("/proc/meminfo", "MemAvailable:");
}
// This process's resident set now (VmRSS) and at its peak (VmHWM).
inline std::uint64_t resident_bytes() {
  return detail::proc_bytes("/proc/self/status", "VmRSS:");
}
inline std::uint64_t peak_resident_bytes() {
  return detail::proc_bytes("/proc/self/status", "VmHWM:");
}
// Resets the peak to the present resident set (clear_refs 5), so that
// peak_resident_bytes measures a stretch of code; says whether it could.
inline bool reset_peak_resident() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  return static_cast<bool>(clear_refs << "5" << std::flush);
}

}  // namespace platipus::memory
