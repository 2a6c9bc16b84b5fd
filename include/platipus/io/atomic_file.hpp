// Writing a file atomically: the bytes go to a temporary file beside the
// target, are flushed to disk, and the temporary is renamed over the target,
// so a reader sees the old file or the new one, never half of one.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "platipus/core/error.hpp"

namespace platipus::io {

namespace detail {

inline ::mode_t file_mode(const std::filesystem::path& path) {
  struct ::stat existing;
  if (::stat(path.c_str(), &existing) == 0) return existing.st_mode & 07777;
  const ::mode_t mask = ::umask(0);  // reading the umask means setting it; restore at once
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace detail

inline void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  const auto parent = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  check(!ec, "write_file", "cannot create directory {}: {}", parent.string(), ec.message());
  std::string name = ".";
  name += path.filename().string();
  name += ".XXXXXX";
  std::string temporary = (parent / name).string();
  const int fd = ::mkstemp(temporary.data());
  check(fd >= 0, "write_file", "cannot create a temporary file beside {}: {}", path.string(),
        std::strerror(errno));
  // mkstemp creates the file 0600; give it the mode a plain open would: the
  // replaced file's, or 0666 less the process's umask.
  ::fchmod(fd, detail::file_mode(path));
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ::ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      ::unlink(temporary.c_str());
      fail("write_file", "writing {} failed: {}", path.string(), reason);
    }
    written += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed || std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temporary.c_str());
    fail("write_file", "cannot write {}: {}", path.string(), reason);
  }
}

inline std::string read_file(const std::filesystem::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  check(f != nullptr, "read_file", "cannot open {}: {}", path.string(), std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) bytes.append(buffer, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  check(!failed, "read_file", "error reading {}", path.string());
  return bytes;
}

}  // namespace platipus::io
