// Uses platipus::images the way a downstream program does: a PNG made in
// memory decodes to its pixels; exits non-zero otherwise.
#include <cstdio>
#include <string>
#include <vector>

#include <stb_image_write.h>

#include <platipus/images.hpp>

int main() {
  const std::vector<unsigned char> pixels{0, 64, 128, 255};
  std::string png;
  stbi_write_png_to_func(
      [](void* out, void* data, int size) {
        static_cast<std::string*>(out)->append(static_cast<const char*>(data), size);
      },
      &png, 2, 2, 1, pixels.data(), 2);
  const auto image = platipus::data::decode_image(png, 1, "in-memory.png");
  const bool same = image.pixels == std::vector<std::uint8_t>(pixels.begin(), pixels.end());
  std::printf("decoded a 2x2 PNG: %s\n", same ? "same pixels" : "different pixels");
  return same ? 0 : 1;
}
