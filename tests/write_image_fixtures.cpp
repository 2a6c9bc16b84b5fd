// Writes small data sets in Omniglot's and MiniImagenet's layouts under the
// directory given, for the image examples' smoke tests:
//   DIR/omniglot      images_background/, images_evaluation/, splits/vinyals/
//                     (3 training and 2 test characters, 4 rotations each,
//                     20 PNGs of 32 x 32 per character)
//   DIR/miniimagenet  images/, train.csv, val.csv, test.csv (6, 5 and 5
//                     classes of 20 JPEGs of 84 x 84)
//   DIR/celeba        img_align_celeba/, list_attr_celeba.txt,
//                     list_eval_partition.txt (400 flat JPEGs of 24 x 20,
//                     random attributes, all in the official train partition)
// Each class draws its own bars, so that a learner can tell classes apart.
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "image_files.hpp"
#include "platipus/core/philox.hpp"
#include "platipus/data/celeba.hpp"

namespace fs = std::filesystem;
using namespace image_files;

namespace {

// A size x size image of `channels` planes, interleaved: bars whose rows
// and colour depend on the class, plus noise that differs per image.
std::vector<std::uint8_t> class_image(int size, int channels, int klass, platipus::Generator& gen) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(size * size * channels));
  for (int r = 0; r < size; ++r)
    for (int c = 0; c < size; ++c)
      for (int ch = 0; ch < channels; ++ch) {
        const bool bar = ((r + 3 * klass) / 4) % (2 + klass % 3) == 0;
        const double base = bar ? 40 + 30 * ((klass + ch) % 5) : 230;
        const double value = base + 20 * (gen.uniform<double>() - 0.5);
        pixels[static_cast<std::size_t>((r * size + c) * channels + ch)] =
            static_cast<std::uint8_t>(value);
      }
  return pixels;
}

void write_omniglot(const fs::path& root, platipus::Generator& gen) {
  std::string train, test;
  for (int k = 0; k < 5; ++k) {
    const std::string part = k < 3 ? "images_background" : "images_evaluation";
    const std::string character = fmt::format("{}/character{:02}", k < 3 ? "Alpha" : "Beta", k + 1);
    for (int i = 0; i < 20; ++i)
      write_png(root / part / character / fmt::format("{:04}_{:02}.png", k, i), 32, 32, 1,
                class_image(32, 1, k, gen));
    for (const char* rotation : {"rot000", "rot090", "rot180", "rot270"})
      (k < 3 ? train : test) += fmt::format("{}/{}\n", character, rotation);
  }
  write_text(root / "splits/vinyals/train.txt", train);
  write_text(root / "splits/vinyals/test.txt", test);
  write_text(root / "splits/vinyals/val.txt", test);
}

void write_miniimagenet(const fs::path& root, platipus::Generator& gen) {
  int klass = 0;
  for (const auto& [split, classes] : {std::pair{"train", 6}, {"val", 5}, {"test", 5}}) {
    std::string csv = "filename,label\n";
    for (int c = 0; c < classes; ++c, ++klass)
      for (int i = 0; i < 20; ++i) {
        const std::string name = fmt::format("n{:08}{:08}.jpg", klass, i);
        write_jpg(root / "images" / name, 84, 84, class_image(84, 3, klass, gen));
        csv += fmt::format("{},n{:08}\n", name, klass);
      }
    write_text(root / fmt::format("{}.csv", split), csv);
  }
}

void write_celeba_fixture(const fs::path& root, platipus::Generator& gen) {
  std::vector<std::string> names;
  for (const char* split : {"train", "val", "test"})
    for (const auto name : platipus::data::celeba_split_attributes(split)) names.emplace_back(name);
  std::vector<std::vector<bool>> has(400);
  for (auto& row : has)
    for (std::size_t a = 0; a < names.size(); ++a) row.push_back(gen.index(2) == 1);
  write_celeba(
      root, 400, 24, 20, names,
      [&](int i, std::size_t a) { return has[static_cast<std::size_t>(i)][a]; },
      [](int) { return 0; });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_image_fixtures DIR\n");
    return 2;
  }
  try {
    platipus::Generator gen(1);
    write_omniglot(fs::path(argv[1]) / "omniglot", gen);
    write_miniimagenet(fs::path(argv[1]) / "miniimagenet", gen);
    write_celeba_fixture(fs::path(argv[1]) / "celeba", gen);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_image_fixtures: %s\n", e.what());
    return 1;
  }
}
