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

}  // namespace image_files
