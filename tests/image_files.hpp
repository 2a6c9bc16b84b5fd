// Writing image files and text files in the data sets' layouts, for the
// image tests' fixtures and the examples' fixture data (write_image_fixtures).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <stb_image_write.h>

#include "platipus/core/error.hpp"

namespace image_files {

// A grey (1 channel) or RGB (3, interleaved) PNG of h x w pixels.
inline void write_png(const std::filesystem::path& file, int h, int w, int channels,
                      const std::vector<std::uint8_t>& interleaved) {
  std::filesystem::create_directories(file.parent_path());
  platipus::check(
      stbi_write_png(file.c_str(), w, h, channels, interleaved.data(), w * channels) != 0,
      "write_png", "cannot write {}", file.string());
}

// An RGB JPEG (interleaved) of h x w pixels, quality 100.
inline void write_jpg(const std::filesystem::path& file, int h, int w,
                      const std::vector<std::uint8_t>& rgb) {
  std::filesystem::create_directories(file.parent_path());
  platipus::check(stbi_write_jpg(file.c_str(), w, h, 3, rgb.data(), 100) != 0, "write_jpg",
                  "cannot write {}", file.string());
}

inline void write_text(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << text;
}

// A CelebA tree: `count` (at most 416) RGB JPEGs of h x w in
// img_align_celeba/, image i flat with red 8 (i % 32) and green
// 10 + 20 (i / 32), so that its index reads back from a decoded pixel;
// list_attr_celeba.txt in the official format (the
// count line, the names, CRLF rows of 1 / -1 with has(i, a)) and
// list_eval_partition.txt (partition(i)).
template <class Has, class Partition>
void write_celeba(const std::filesystem::path& root, int count, int h, int w,
                  const std::vector<std::string>& names, Has has, Partition partition) {
  std::string attributes = std::to_string(count) + "\r\n";
  for (const auto& name : names) attributes += name + " ";
  attributes += "\r\n";
  std::string partitions;
  for (int i = 0; i < count; ++i) {
    const std::string file = fmt::format("{:06}.jpg", i + 1);
    std::vector<std::uint8_t> rgb;
    for (int p = 0; p < h * w; ++p)
      rgb.insert(rgb.end(), {static_cast<std::uint8_t>(8 * (i % 32)),
                             static_cast<std::uint8_t>(10 + 20 * (i / 32)), 160});
    write_jpg(root / "img_align_celeba" / file, h, w, rgb);
    attributes += file;
    for (std::size_t a = 0; a < names.size(); ++a) attributes += has(i, a) ? "  1" : " -1";
    attributes += "\r\n";
    partitions += fmt::format("{} {}\r\n", file, partition(i));
  }
  write_text(root / "list_attr_celeba.txt", attributes);
  write_text(root / "list_eval_partition.txt", partitions);
}

}  // namespace image_files
