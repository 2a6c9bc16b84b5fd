// Image files to 8-bit pixels: decoding (PNG, JPEG and the other formats
// stb_image reads) and resizing (stb_image_resize), for the few-shot image
// sets. Pixels are stored channel-major, C x H x W, as the networks take
// them (NCHW). Needs the platipus::images target (stb, from Debian's
// libstb-dev).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include <stb_image.h>
#include <stb_image_resize.h>

#include "platipus/core/file.hpp"

namespace platipus::data {

struct Image {
  std::int64_t channels = 0, height = 0, width = 0;
  std::vector<std::uint8_t> pixels;  // C x H x W
};

// Decodes the bytes of an image file to `channels` channels (1: grey, 3:
// RGB; other channel counts are converted as stb_image converts them).
// `file` names the source in errors.
inline Image decode_image(std::string_view bytes, int channels, const std::filesystem::path& file) {
  check(channels == 1 || channels == 3, "decode_image", "{}: channels must be 1 or 3, got {}",
        file.string(), channels);
  check(bytes.size() <= static_cast<std::size_t>(INT32_MAX), "decode_image",
        "{}: {} bytes is too large for an image file", file.string(), bytes.size());
  int width = 0, height = 0, in_file = 0;
  const std::unique_ptr<stbi_uc, void (*)(void*)> decoded(
      stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()),
                            static_cast<int>(bytes.size()), &width, &height, &in_file, channels),
      stbi_image_free);
  check(decoded != nullptr, "decode_image", "cannot decode {} as an image: {}", file.string(),
        stbi_failure_reason());
  Image image{channels, height, width, {}};
  const std::int64_t plane = std::int64_t{height} * width;
  image.pixels.resize(static_cast<std::size_t>(plane * channels));
  for (std::int64_t p = 0; p < plane; ++p)  // stb_image interleaves the channels
    for (std::int64_t c = 0; c < channels; ++c)
      image.pixels[static_cast<std::size_t>(c * plane + p)] = decoded.get()[p * channels + c];
  return image;
}

inline Image read_image(const std::filesystem::path& file, int channels) {
  return decode_image(read_file(file), channels, file);
}

// The centred square whose side is `fraction` of the image's shorter side
// (rounded, at least one pixel): PLATIPUS's CelebA crop, about 168 x 168 of
// the 178 x 218 aligned faces (Appendix A). A fraction of 1 keeps the whole
// image, square or not.
inline Image crop_centre(const Image& image, double fraction) {
  check(fraction > 0 && fraction <= 1, "crop_centre", "fraction must lie in (0, 1], got {}",
        fraction);
  if (fraction == 1) return image;
  const auto side = std::max<std::int64_t>(
      1, std::llround(fraction * static_cast<double>(std::min(image.height, image.width))));
  const std::int64_t top = (image.height - side) / 2, left = (image.width - side) / 2;
  Image out{image.channels, side, side, {}};
  out.pixels.resize(static_cast<std::size_t>(image.channels * side * side));
  for (std::int64_t c = 0; c < image.channels; ++c)
    for (std::int64_t r = 0; r < side; ++r)
      std::copy_n(image.pixels.begin() + static_cast<std::ptrdiff_t>(
                                             (c * image.height + top + r) * image.width + left),
                  side, out.pixels.begin() + static_cast<std::ptrdiff_t>((c * side + r) * side));
  return out;
}

// The image resampled to height x width, each channel on its own, with
// stb_image_resize's defaults (a Mitchell filter when shrinking, Catmull-Rom
// when enlarging: both smooth, as PIL's antialiased resize that MAML's data
// scripts used). The same size returns a copy.
inline Image resize_image(const Image& image, std::int64_t height, std::int64_t width) {
  check(height > 0 && width > 0 && height <= 1 << 15 && width <= 1 << 15, "resize_image",
        "target size {}x{} must be positive and at most 32768", height, width);
  if (image.height == height && image.width == width) return image;
  Image out{image.channels, height, width, {}};
  out.pixels.resize(static_cast<std::size_t>(image.channels * height * width));
  const std::int64_t in_plane = image.height * image.width, out_plane = height * width;
  for (std::int64_t c = 0; c < image.channels; ++c) {
    const int ok =
        stbir_resize_uint8(image.pixels.data() + c * in_plane, static_cast<int>(image.width),
                           static_cast<int>(image.height), 0, out.pixels.data() + c * out_plane,
                           static_cast<int>(width), static_cast<int>(height), 0, 1);
    check(ok == 1, "resize_image", "stb_image_resize failed on {}x{} -> {}x{}", image.height,
          image.width, height, width);
  }
  return out;
}

}  // namespace platipus::data
