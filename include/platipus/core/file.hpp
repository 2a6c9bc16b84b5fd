// Writing a file atomically: the bytes go to a temporary file beside the
// target (unnamed while it is written, where Linux's O_TMPFILE allows), are
// flushed to disk, and the temporary is renamed over the target,
// so a reader sees the old file or the new one, never half of one. Only
// regular files are read or written: renaming over a device node or a FIFO
// would replace it (run as root, `--checkpoint /dev/null` would replace the
// system's /dev/null), and reading one may never end (/dev/zero, a FIFO). A
// symlink is written through: its target file is replaced, the link stays.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "platipus/core/error.hpp"

namespace platipus {

namespace detail {

inline ::mode_t file_mode(const std::filesystem::path& path) {
  struct ::stat existing;
  if (::stat(path.c_str(), &existing) == 0) return existing.st_mode & 07777;
  const ::mode_t mask = ::umask(0);  // reading the umask means setting it; restore at once
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace detail

inline const char* describe_file_type(std::filesystem::file_type type) {
  using std::filesystem::file_type;
  switch (type) {
    case file_type::directory:
      return "a directory";
    case file_type::character:
      return "a character device";
    case file_type::block:
      return "a block device";
    case file_type::fifo:
      return "a FIFO";
    case file_type::socket:
      return "a socket";
    case file_type::symlink:
      return "a symlink";
    case file_type::regular:
      return "a regular file";
    case file_type::not_found:
      return "missing";
    default:
      return "not a file";
  }
}

// A regular file opened for reading, with its size: opening never blocks
// (O_NONBLOCK, for a FIFO) and anything but a regular file is refused before
// a byte is read.
class RegularFile {
 public:
  explicit RegularFile(const std::filesystem::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    check(fd_ >= 0, "read_file", "cannot open {}: {}", path.string(), std::strerror(errno));
    struct ::stat info;
    if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
      std::error_code ec;
      const auto type = std::filesystem::status(path, ec).type();
      ::close(fd_);
      fail("read_file", "{} is not a regular file ({})", path.string(), describe_file_type(type));
    }
    size_ = static_cast<std::uint64_t>(info.st_size);
  }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile() { ::close(fd_); }

  std::uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  // Exactly `count` bytes from `offset`; throws when the file is shorter.
  std::string read(std::uint64_t offset, std::uint64_t count) const {
    std::string bytes(static_cast<std::size_t>(count), '\0');
    read_into(offset, bytes.data(), count);
    return bytes;
  }

  // The same into `count` bytes at `out`.
  void read_into(std::uint64_t offset, void* out, std::uint64_t count) const {
    check(offset <= size_ && count <= size_ - offset, "read_file",
          "{}: {} bytes at offset {} lie past its end ({} bytes)", path_.string(), count, offset,
          size_);
    auto* bytes = static_cast<char*>(out);
    std::uint64_t done = 0;
    while (done < count) {
      const ::ssize_t n = ::pread(fd_, bytes + done, static_cast<std::size_t>(count - done),
                                  static_cast<::off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      check(n > 0, "read_file", "error reading {}: {}", path_.string(),
            n == 0 ? "it became shorter" : std::strerror(errno));
      done += static_cast<std::uint64_t>(n);
    }
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// The file a write to `path` replaces: `path`, or the end of its chain of
// symlinks; refused when that exists and is not a regular file.
inline std::filesystem::path write_target(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  check(!path.empty(), "write_file", "empty file name");
  fs::path target = path;
  std::error_code ec;
  for (int links = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++links) {
    check(links < 40, "write_file", "{}: too many levels of symbolic links", path.string());
    const fs::path next = fs::read_symlink(target, ec);
    check(!ec, "write_file", "cannot read the symlink {}: {}", target.string(), ec.message());
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  const auto status = fs::status(target, ec);
  check(!fs::exists(status) || fs::is_regular_file(status), "write_file",
        "{} is not a regular file ({}); refusing to replace it", target.string(),
        describe_file_type(status.type()));
  return target;
}

namespace detail {

// Every byte to fd, flushed to disk; false (errno set) on failure.
inline bool write_all(int fd, std::string_view bytes) {
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ::ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    written += static_cast<std::size_t>(n);
  }
  return ::fsync(fd) == 0;
}

// Gives the unnamed file `fd` (O_TMPFILE) a fresh name `stem`.<pid>.<n>;
// returns it, or an empty string when it cannot.
inline std::string link_unnamed(int fd, const std::string& stem) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  for (int n = 0; n < 100; ++n) {
    std::string name = stem;
    name += '.';
    name += std::to_string(::getpid());
    name += '.';
    name += std::to_string(n);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0)
      return name;
    if (errno != EEXIST) break;
  }
  return {};
}

}  // namespace detail

inline void write_file_atomically(const std::filesystem::path& requested, std::string_view bytes) {
  const auto path = write_target(requested);
  const auto parent = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  check(!ec, "write_file", "cannot create directory {}: {}", parent.string(), ec.message());
  std::string hidden = ".";  // built by appending: GCC 12 warns (-Wrestrict) on "." + name
  hidden += path.filename().string();
  const std::string stem = (parent / hidden).string();
  auto replace = [&](const std::string& temporary) {
    if (std::rename(temporary.c_str(), path.c_str()) == 0) return;
    const std::string reason = std::strerror(errno);
    ::unlink(temporary.c_str());
    fail("write_file", "cannot write {}: {}", path.string(), reason);
  };
  // The bytes go first to an unnamed file (O_TMPFILE), so that a process
  // killed while writing leaves nothing behind; it is named only for the
  // rename, a window of two system calls. Where the file system (or a
  // missing /proc) does not allow that, a named temporary holds the bytes.
  if (const int fd =
          ::open(parent.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, detail::file_mode(path));
      fd >= 0) {
    ::fchmod(fd, detail::file_mode(path));  // open() applied the umask to a replaced file's mode
    const bool written = detail::write_all(fd, bytes);
    const std::string temporary = written ? detail::link_unnamed(fd, stem) : std::string();
    ::close(fd);
    if (!temporary.empty()) return replace(temporary);
  }
  std::string temporary = stem;
  temporary += ".XXXXXX";
  const int fd = ::mkstemp(temporary.data());
  check(fd >= 0, "write_file", "cannot create a temporary file beside {}: {}", path.string(),
        std::strerror(errno));
  // mkstemp creates the file 0600; give it the mode a plain open would: the
  // replaced file's, or 0666 less the process's umask.
  ::fchmod(fd, detail::file_mode(path));
  const bool written = detail::write_all(fd, bytes);
  const int saved = errno;
  if (::close(fd) != 0 || !written) {
    const std::string reason = std::strerror(written ? errno : saved);
    ::unlink(temporary.c_str());
    fail("write_file", "writing {} failed: {}", path.string(), reason);
  }
  replace(temporary);
}

inline std::string read_file(const std::filesystem::path& path) {
  const RegularFile file(path);
  return file.read(0, file.size());
}

// FNV-1a, 64 bits, of bytes fed in pieces (the same as of their
// concatenation), as "fnv1a64:" and 16 hex digits: the checksum that
// checkpoints and data caches store beside their bytes.
class DataChecksum {
 public:
  DataChecksum& add(std::string_view bytes) {
    for (unsigned char c : bytes) hash_ = (hash_ ^ c) * 0x100000001b3ull;
    return *this;
  }
  std::string text() const { return fmt::format("fnv1a64:{:016x}", hash_); }

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ull;
};

}  // namespace platipus
