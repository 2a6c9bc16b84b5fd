// Decoded image sets cached as one packed file per data set and split, in a
// cache directory (never the data directory, which may be read-only).
//
// A cache file records what it was built from: a hash of every source
// file's path, size and modification time, of the image format and of the
// decoding recipe, so that a change to any of them rebuilds it; and a
// checksum of its pixels, so that a truncated or corrupt file is rebuilt,
// never used. Files are written atomically (core/file.hpp): two processes
// building the same cache at once each rename a complete file into place.
//
// Layout: the 16 bytes "platipus.images\n", the header's length (8 bytes,
// little-endian), the header (JSON: sizes, fingerprint, class names and
// boundaries, the pixels' CRC-32), then the pixels.
#pragma once

#include <chrono>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <variant>

#include <sys/stat.h>

#include <zlib.h>
#include <nlohmann/json.hpp>

#include "platipus/data/image_set.hpp"

namespace platipus::data {

namespace detail {

constexpr std::string_view cache_magic = "platipus.images\n";
// Changes whenever decoding or resizing changes what a file decodes to.
constexpr std::string_view cache_recipe = "stb_image, stb_image_resize defaults, C x H x W, v1";

// The pixels' checksum: zlib's CRC-32, several times faster than the
// byte-at-a-time FNV-1a of checkpoints on the hundreds of megabytes a
// MiniImagenet cache holds.
inline std::string pixel_checksum(const std::vector<std::uint8_t>& pixels) {
  const auto crc = ::crc32_z(::crc32_z(0, nullptr, 0), pixels.data(), pixels.size());
  return fmt::format("crc32:{:08x}", crc);
}

}  // namespace detail

// The cache directory: `requested` when given; otherwise $PLATIPUS_CACHE_DIR,
// $XDG_CACHE_HOME/platipus or ~/.cache/platipus, the first that is set.
inline std::filesystem::path cache_directory(const std::filesystem::path& requested = {}) {
  if (!requested.empty()) return requested;
  const auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? std::filesystem::path(value)
                                              : std::filesystem::path();
  };
  if (auto dir = env("PLATIPUS_CACHE_DIR"); !dir.empty()) return dir;
  if (auto dir = env("XDG_CACHE_HOME"); !dir.empty()) return dir / "platipus";
  const auto home = env("HOME");
  check(!home.empty(), "cache_directory",
        "no cache directory: give one, or set PLATIPUS_CACHE_DIR, XDG_CACHE_HOME or HOME");
  return home / ".cache" / "platipus";
}

// A hash of what a set is built from: the format (with its crop), the recipe, and each
// class's name and files (path, size, modification time). Throws naming a
// file that is missing.
inline std::string source_fingerprint(std::span<const ClassFiles> classes, ImageFormat format) {
  DataChecksum sum;
  sum.add(fmt::format("{}\n{}x{}x{}\n", detail::cache_recipe, format.channels, format.height,
                      format.width));
  if (format.centre_crop != 1) sum.add(fmt::format("centre crop {}\n", format.centre_crop));
  for (const auto& c : classes) {
    sum.add(fmt::format("class {}\n", c.name));
    for (const auto& file : c.files) {
      struct ::stat info;
      check(::stat(file.c_str(), &info) == 0 && S_ISREG(info.st_mode), "image set",
            "{} is missing or not a regular file", file.string());
      sum.add(fmt::format("{}\t{}\t{}.{:09}\n", file.string(), info.st_size, info.st_mtim.tv_sec,
                          info.st_mtim.tv_nsec));
    }
  }
  return sum.text();
}

// The set in `file` when it is a complete cache with this fingerprint;
// otherwise why it cannot be used.
inline std::variant<ImageSet, std::string> read_image_cache(const std::filesystem::path& file,
                                                            std::string_view fingerprint) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::string("there is no cache yet");
  try {
    const RegularFile in(file);
    constexpr std::uint64_t prefix = detail::cache_magic.size() + 8;
    if (in.size() < prefix || in.read(0, detail::cache_magic.size()) != detail::cache_magic)
      return std::string("it is not a platipus image cache");
    std::uint64_t length = 0;
    const std::string length_bytes = in.read(detail::cache_magic.size(), 8);
    for (int b = 7; b >= 0; --b) length = length << 8 | static_cast<unsigned char>(length_bytes[b]);
    if (length > in.size() - prefix) return std::string("it is truncated (in its header)");
    const auto header = nlohmann::json::parse(in.read(prefix, length));
    if (header.at("fingerprint").get<std::string>() != fingerprint)
      return std::string("its sources or format changed");
    ImageSet set;
    set.channels = header.at("channels").get<std::int64_t>();
    set.height = header.at("height").get<std::int64_t>();
    set.width = header.at("width").get<std::int64_t>();
    set.class_names = header.at("class_names").get<std::vector<std::string>>();
    set.class_begin = header.at("class_begin").get<std::vector<std::int64_t>>();
    const std::uint64_t pixel_bytes = in.size() - prefix - length;
    // Sizes are checked against the file before anything is allocated.
    constexpr std::int64_t largest_side = 1 << 16;
    if (set.channels <= 0 || set.channels > 4 || set.height <= 0 || set.height > largest_side ||
        set.width <= 0 || set.width > largest_side || set.class_begin.empty() ||
        set.class_begin.back() < 0 ||
        static_cast<std::uint64_t>(set.class_begin.back()) !=
            pixel_bytes / static_cast<std::uint64_t>(set.image_bytes()) ||
        pixel_bytes % static_cast<std::uint64_t>(set.image_bytes()) != 0)
      return fmt::format("it is truncated or corrupt ({} bytes of pixels for its header)",
                         pixel_bytes);
    set.pixels.resize(static_cast<std::size_t>(pixel_bytes));
    set.validate("read_image_cache");
    in.read_into(prefix + length, set.pixels.data(), pixel_bytes);
    if (detail::pixel_checksum(set.pixels) != header.at("checksum").get<std::string>())
      return std::string("it is corrupt (its pixels do not match their checksum)");
    return set;
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("its header does not parse ({})", e.what());
  } catch (const error& e) {
    return std::string(e.what());
  }
}

inline void write_image_cache(const std::filesystem::path& file, const ImageSet& set,
                              std::string_view fingerprint) {
  set.validate("write_image_cache");
  const std::string_view pixels(reinterpret_cast<const char*>(set.pixels.data()),
                                set.pixels.size());
  const std::string header = nlohmann::json{{"fingerprint", fingerprint},
                                            {"channels", set.channels},
                                            {"height", set.height},
                                            {"width", set.width},
                                            {"class_names", set.class_names},
                                            {"class_begin", set.class_begin},
                                            {"checksum", detail::pixel_checksum(set.pixels)}}
                                 .dump();
  std::string bytes(detail::cache_magic);
  for (int b = 0; b < 8; ++b)
    bytes += static_cast<char>((static_cast<std::uint64_t>(header.size()) >> (8 * b)) & 0xff);
  bytes += header;
  bytes += pixels;
  write_file_atomically(file, bytes);
}

struct CacheOptions {
  std::filesystem::path directory{};  // see cache_directory
  int threads = 0;                    // decoding threads (0: one per core)
  Progress progress{};                // called while a cache is built
};

// What cached_image_set did.
struct CacheReport {
  std::filesystem::path file;
  bool built = false;  // decoded from the sources (else read from the cache)
  std::string reason;  // why it was built
  double seconds = 0;
};

// The image set of `classes` in `format`, from the cache file
// "<name>-<C>x<H>x<W>.images" in the cache directory when that is a complete
// cache of these sources; otherwise decoded and written there.
inline ImageSet cached_image_set(std::string_view name, std::span<const ClassFiles> classes,
                                 ImageFormat format, const CacheOptions& options,
                                 CacheReport* report = nullptr) {
  const auto start = std::chrono::steady_clock::now();
  CacheReport done;
  done.file = cache_directory(options.directory) /
              fmt::format("{}-{}x{}x{}.images", name, format.channels, format.height, format.width);
  const std::string fingerprint = source_fingerprint(classes, format);
  auto cached = read_image_cache(done.file, fingerprint);
  ImageSet set;
  if (auto* ready = std::get_if<ImageSet>(&cached)) {
    set = std::move(*ready);
  } else {
    done.built = true;
    done.reason = std::get<std::string>(cached);
    set = decode_image_set(classes, format, options.threads, options.progress);
    write_image_cache(done.file, set, fingerprint);
  }
  done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (report != nullptr) *report = std::move(done);
  return set;
}

}  // namespace platipus::data
