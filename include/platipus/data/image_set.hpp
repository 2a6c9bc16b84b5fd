// Images grouped in classes and packed as 8-bit pixels: what a split of an
// image data set decodes to, what its cache file holds (data/image_cache.hpp)
// and what the N-way K-shot sampler draws from (data/few_shot.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "platipus/core/thread_pool.hpp"
#include "platipus/data/image_file.hpp"

namespace platipus::data {

struct ImageSet {
  std::int64_t channels = 0, height = 0, width = 0;
  std::vector<std::string> class_names;
  std::vector<std::int64_t> class_begin{
      0};                            // class c holds images [class_begin[c], class_begin[c + 1])
  std::vector<std::uint8_t> pixels;  // image after image, each C x H x W

  std::int64_t classes() const { return static_cast<std::int64_t>(class_names.size()); }
  std::int64_t images() const { return class_begin.back(); }
  std::int64_t image_bytes() const { return channels * height * width; }
  std::int64_t class_size(std::int64_t c) const { return class_begin[c + 1] - class_begin[c]; }
  const std::uint8_t* image(std::int64_t i) const { return pixels.data() + i * image_bytes(); }

  // Throws naming `who` unless the sizes and class boundaries agree.
  void validate(std::string_view who) const {
    check(channels > 0 && height > 0 && width > 0, who, "image size {}x{}x{} is empty", channels,
          height, width);
    check(class_begin.size() == class_names.size() + 1 && class_begin.front() == 0, who,
          "{} class boundaries for {} classes", class_begin.size(), class_names.size());
    for (std::size_t c = 0; c + 1 < class_begin.size(); ++c)
      check(class_begin[c] <= class_begin[c + 1], who, "class {} ({}) ends before it begins", c,
            class_names[c]);
    check(static_cast<std::int64_t>(pixels.size()) == images() * image_bytes(), who,
          "{} bytes of pixels for {} images of {} bytes", pixels.size(), images(), image_bytes());
  }
};

// What every image of a set is converted to.
struct ImageFormat {
  int channels = 1;
  std::int64_t height = 28, width = 28;
  double centre_crop = 1;  // crop_centre's fraction, cut before resizing (1: the whole image)
  bool operator==(const ImageFormat&) const = default;
};

// One class of a data set on disk: its name and its image files.
struct ClassFiles {
  std::string name;
  std::vector<std::filesystem::path> files;
};

// Called as decoding goes, with the images done and the total.
using Progress = std::function<void(std::int64_t done, std::int64_t total)>;

// Decodes every file to `format` (resized where it differs), classes in
// order, on `threads` threads (0: one per core); the result does not depend
// on the thread count. Calls `progress` on the calling thread.
inline ImageSet decode_image_set(std::span<const ClassFiles> classes, ImageFormat format,
                                 int threads = 0, const Progress& progress = {}) {
  ImageSet set{format.channels, format.height, format.width, {}, {0}, {}};
  std::vector<const std::filesystem::path*> files;
  for (const auto& c : classes) {
    set.class_names.push_back(c.name);
    for (const auto& f : c.files) files.push_back(&f);
    set.class_begin.push_back(static_cast<std::int64_t>(files.size()));
  }
  const auto total = static_cast<std::int64_t>(files.size());
  set.pixels.resize(static_cast<std::size_t>(total * set.image_bytes()));
  set.validate("decode_image_set");
  ThreadPool pool(threads);
  constexpr std::int64_t piece = 512;  // images between two progress calls
  for (std::int64_t begin = 0; begin < total; begin += piece) {
    const std::int64_t count = std::min(piece, total - begin);
    pool.run(static_cast<int>(count), [&](int k) {
      const std::int64_t i = begin + k;
      const Image image =
          resize_image(crop_centre(read_image(*files[i], format.channels), format.centre_crop),
                       format.height, format.width);
      std::copy(image.pixels.begin(), image.pixels.end(),
                set.pixels.begin() + static_cast<std::ptrdiff_t>(i * set.image_bytes()));
    });
    if (progress) progress(begin + count, total);
  }
  return set;
}

}  // namespace platipus::data
