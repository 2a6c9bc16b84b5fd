// The image data sets: decoding, resizing, the cache, the Omniglot,
// MiniImagenet, CelebA and Fashion-MNIST readers on fixtures written here in
// their real layouts, the N-way K-shot sampler and the CelebA attribute
// tasks.
#include "catch.hpp"

#include <array>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <zlib.h>

#include "image_files.hpp"
#include "platipus/data/celeba.hpp"
#include "platipus/data/fashion_mnist.hpp"
#include "platipus/data/miniimagenet.hpp"
#include "platipus/data/omniglot.hpp"
#include "temporary_directory.hpp"

using namespace platipus;
using namespace platipus::data;
using namespace image_files;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& file) {
  return read_file(file);
}

// An h x w grey image that is `value` everywhere.
std::vector<std::uint8_t> flat(int h, int w, std::uint8_t value) {
  return std::vector<std::uint8_t>(static_cast<std::size_t>(h * w), value);
}

// An Omniglot tree: Alpha (background) with 2 characters, Beta
// (evaluation) with 1, each with 3 PNGs of 10 x 10 whose value tells
// character and image apart; a split file over some of their rotations.
void write_omniglot(const fs::path& root) {
  const auto character = [&](const std::string& part, const std::string& name, int id) {
    for (int i = 0; i < 3; ++i)
      write_png(root / part / name / fmt::format("0{}_0{}.png", id, i), 10, 10, 1,
                flat(10, 10, static_cast<std::uint8_t>(40 * id + 10 * i)));
  };
  character("images_background", "Alpha/character01", 1);
  character("images_background", "Alpha/character02", 2);
  character("images_evaluation", "Beta/character01", 3);
  write_text(root / "splits/vinyals/train.txt",
             "Alpha/character01/rot000\nAlpha/character01/rot090\r\n\nBeta/character01/rot180\n");
}

// The single cache file in `dir`, failing unless there is exactly one file.
fs::path only_file(const TemporaryDirectory& dir) {
  const auto names = dir.entries();
  REQUIRE(names.size() == 1);
  return dir.path() / names[0];
}

void flip_byte(const fs::path& file, std::uint64_t from_end) {
  std::string bytes = read_bytes(file);
  bytes[bytes.size() - 1 - from_end] ^= 0x5a;
  write_file_atomically(file, bytes);
}

// gzip-compressed IDX file of unsigned bytes.
void write_idx_gz(const fs::path& file, const std::vector<std::uint32_t>& dims,
                  const std::vector<std::uint8_t>& data) {
  std::string bytes{'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (const auto d : dims)
    for (int b = 3; b >= 0; --b) bytes += static_cast<char>((d >> (8 * b)) & 0xff);
  bytes.append(data.begin(), data.end());
  gzFile out = gzopen(file.c_str(), "wb");
  REQUIRE(out != nullptr);
  REQUIRE(gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  gzclose(out);
}

}  // namespace

TEST_CASE("decode_image reads PNG and JPEG files channel-major, and names a file it cannot read",
          "[data]") {
  TemporaryDirectory dir;
  // 2 x 3 grey PNG: exact.
  const std::vector<std::uint8_t> grey{0, 10, 20, 30, 40, 250};
  write_png(dir / "grey.png", 2, 3, 1, grey);
  const Image g = read_image(dir / "grey.png", 1);
  CHECK((g.channels == 1 && g.height == 2 && g.width == 3));
  CHECK(g.pixels == grey);
  // As RGB, the grey value in each of the three planes.
  const Image g3 = read_image(dir / "grey.png", 3);
  REQUIRE(g3.pixels.size() == 18);
  for (int c = 0; c < 3; ++c)
    CHECK(std::vector<std::uint8_t>(g3.pixels.begin() + 6 * c, g3.pixels.begin() + 6 * c + 6) ==
          grey);
  // An 8 x 8 RGB JPEG of one colour: planes R, G, B (JPEG is lossy: a few levels).
  std::vector<std::uint8_t> rgb;
  for (int p = 0; p < 64; ++p) rgb.insert(rgb.end(), {200, 100, 30});
  write_jpg(dir / "colour.jpg", 8, 8, rgb);
  const Image c = read_image(dir / "colour.jpg", 3);
  REQUIRE((c.channels == 3 && c.height == 8 && c.width == 8));
  for (int p = 0; p < 64; ++p) {
    CHECK(std::abs(c.pixels[p] - 200) <= 4);
    CHECK(std::abs(c.pixels[64 + p] - 100) <= 4);
    CHECK(std::abs(c.pixels[128 + p] - 30) <= 4);
  }
  write_text(dir / "broken.png", "not an image at all");
  CHECK_THROWS_WITH(read_image(dir / "broken.png", 1),
                    Catch::Contains("broken.png") && Catch::Contains("cannot decode"));
  CHECK_THROWS_WITH(read_image(dir / "absent.png", 1), Catch::Contains("absent.png"));
  CHECK_THROWS_WITH(read_image(dir / "grey.png", 2), Catch::Contains("channels must be 1 or 3"));
}

TEST_CASE("resize_image keeps a flat image flat and a left-bright image left-bright", "[data]") {
  Image flat_image{1, 10, 10, flat(10, 10, 77)};
  const Image small = resize_image(flat_image, 4, 6);
  CHECK((small.channels == 1 && small.height == 4 && small.width == 6));
  for (const auto p : small.pixels) CHECK(p == 77);
  Image halves{1, 8, 8, {}};
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c) halves.pixels.push_back(c < 4 ? 255 : 0);
  const Image h = resize_image(halves, 4, 4);
  for (int r = 0; r < 4; ++r) {
    CHECK(h.pixels[r * 4 + 0] > 200);
    CHECK(h.pixels[r * 4 + 3] < 55);
    CHECK(h.pixels[r * 4 + 1] > h.pixels[r * 4 + 2]);
  }
  CHECK(resize_image(halves, 8, 8).pixels == halves.pixels);
  CHECK_THROWS_WITH(resize_image(halves, 0, 3), Catch::Contains("must be positive"));
}

TEST_CASE("crop_centre keeps the centred square of a fraction of the shorter side", "[data]") {
  Image tall{2, 6, 4, {}};  // 2 channels, 6 rows, 4 columns, pixel = 100 c + 10 r + col
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < 6; ++r)
      for (int col = 0; col < 4; ++col)
        tall.pixels.push_back(static_cast<std::uint8_t>(100 * c + 10 * r + col));
  // Side round(0.5 x 4) = 2, from row (6 - 2) / 2 = 2 and column (4 - 2) / 2 = 1.
  const auto square = crop_centre(tall, 0.5);
  CHECK((square.channels == 2 && square.height == 2 && square.width == 2));
  CHECK(square.pixels == std::vector<std::uint8_t>{21, 22, 31, 32, 121, 122, 131, 132});
  CHECK(crop_centre(tall, 1).pixels == tall.pixels);
  CHECK_THROWS_WITH(crop_centre(tall, 0), Catch::Contains("fraction must lie in (0, 1]"));
}

TEST_CASE("for_each_line numbers lines, drops CRLF endings and skips blank lines", "[data]") {
  TemporaryDirectory dir;
  write_text(dir / "list.txt", "a,b\r\n\n  \nc\nd");
  std::vector<std::pair<std::string, std::int64_t>> lines;
  for_each_line(dir / "list.txt",
                [&](std::string_view line, std::int64_t n) { lines.emplace_back(line, n); });
  CHECK(lines == std::vector<std::pair<std::string, std::int64_t>>{{"a,b", 1}, {"c", 4}, {"d", 5}});
  CHECK_THROWS_WITH(files_in(dir.path(), {".png"}), Catch::Contains("holds no .png files"));
}

TEST_CASE("Omniglot: the split's rotations are classes of the characters it names, cached once",
          "[data]") {
  TemporaryDirectory data, cache;
  write_omniglot(data.path());
  CacheReport report;
  const auto split = load_omniglot(data.path(), "train", {.directory = cache.path()}, &report, 5);
  CHECK(report.built);
  CHECK(report.reason == "there is no cache yet");
  const auto& images = *split.images;
  CHECK((images.channels == 1 && images.height == 5 && images.width == 5));
  CHECK(images.class_names == std::vector<std::string>{"Alpha/character01", "Beta/character01"});
  CHECK(images.class_begin == std::vector<std::int64_t>{0, 3, 6});
  // Flat images stay flat when resized: character 1 image i is 40 + 10 i.
  CHECK(images.image(1)[12] == 50);
  CHECK(images.image(5)[0] == 140);
  REQUIRE(split.classes.size() == 3);
  CHECK((split.classes[0].index == 0 && split.classes[0].quarter_turns == 0));
  CHECK((split.classes[1].index == 0 && split.classes[1].quarter_turns == 1));
  CHECK((split.classes[2].index == 1 && split.classes[2].quarter_turns == 2));
  CHECK(split.classes[2].name == "Beta/character01/rot180");
  CHECK(split.invert);
  const auto cache_file = only_file(cache);
  CHECK(cache_file.filename() == "omniglot-train-1x5x5.images");

  SECTION("a second load reads the cache") {
    const auto again = load_omniglot(data.path(), "train", {.directory = cache.path()}, &report, 5);
    CHECK(!report.built);
    CHECK(again.images->pixels == images.pixels);
    CHECK(again.images->class_names == images.class_names);
  }
  SECTION("a changed source file rebuilds it") {
    write_png(data / "images_evaluation/Beta/character01/03_01.png", 10, 10, 1, flat(10, 10, 3));
    const auto again = load_omniglot(data.path(), "train", {.directory = cache.path()}, &report, 5);
    CHECK(report.built);
    CHECK(report.reason == "its sources or format changed");
    CHECK(again.images->image(4)[0] == 3);
    CHECK(only_file(cache) == cache_file);
  }
  SECTION("another size is another cache file") {
    load_omniglot(data.path(), "train", {.directory = cache.path()}, &report, 4);
    CHECK(report.built);
    CHECK(cache.entries().size() == 2);
  }
  SECTION("a corrupt or truncated cache is rebuilt, never used") {
    flip_byte(cache_file, 3);  // a pixel
    auto again = load_omniglot(data.path(), "train", {.directory = cache.path()}, &report, 5);
    CHECK(report.built);
    CHECK_THAT(report.reason, Catch::Contains("checksum"));
    CHECK(again.images->pixels == images.pixels);
    const std::string whole = read_bytes(cache_file);
    write_file_atomically(cache_file, whole.substr(0, whole.size() - 10));
    again = load_omniglot(data.path(), "train", {.directory = cache.path()}, &report, 5);
    CHECK(report.built);
    CHECK_THAT(report.reason, Catch::Contains("truncated"));
    write_file_atomically(cache_file, whole.substr(0, 30));
    load_omniglot(data.path(), "train", {.directory = cache.path()}, &report, 5);
    CHECK(report.built);
    write_file_atomically(cache_file, "something else entirely");
    load_omniglot(data.path(), "train", {.directory = cache.path()}, &report, 5);
    CHECK(report.reason == "it is not a platipus image cache");
    load_omniglot(data.path(), "train", {.directory = cache.path()}, &report, 5);
    CHECK(!report.built);
    CHECK(only_file(cache) == cache_file);  // no temporaries left behind
  }
}

TEST_CASE("Omniglot and MiniImagenet name the file and line of bad input", "[data]") {
  TemporaryDirectory data, cache;
  const CacheOptions options{.directory = cache.path()};
  write_omniglot(data.path());
  write_text(data / "splits/vinyals/val.txt", "Alpha/character01/rot000\nAlpha/character01/r45\n");
  CHECK_THROWS_WITH(load_omniglot(data.path(), "val", options),
                    Catch::Contains("val.txt:2") && Catch::Contains("rotDDD"));
  write_text(data / "splits/vinyals/test.txt", "Gamma/character07/rot000\n");
  CHECK_THROWS_WITH(load_omniglot(data.path(), "test", options),
                    Catch::Contains("test.txt:1") && Catch::Contains("Gamma/character07"));
  CHECK_THROWS_WITH(load_omniglot(data.path(), "trainval", options),
                    Catch::Contains("trainval.txt") && Catch::Contains("cannot open"));

  write_text(data / "mini/train.csv", "filename,label\na.jpg,n01\nb.jpg\n");
  CHECK_THROWS_WITH(load_miniimagenet(data / "mini", "train", options),
                    Catch::Contains("train.csv:3") && Catch::Contains("filename,label"));
  write_text(data / "mini/val.csv", "filename,label\nmissing.jpg,n01\n");
  CHECK_THROWS_WITH(load_miniimagenet(data / "mini", "val", options),
                    Catch::Contains("missing.jpg") && Catch::Contains("missing"));
  write_text(data / "mini/images/broken.jpg", "\xff\xd8 not really a JPEG");
  write_text(data / "mini/test.csv", "filename,label\nbroken.jpg,n01\n");
  CHECK_THROWS_WITH(load_miniimagenet(data / "mini", "test", options),
                    Catch::Contains("broken.jpg") && Catch::Contains("cannot decode"));
  CHECK(cache.entries().empty());  // nothing half-written

  // A cache directory that cannot be made: its parent is a file.
  write_text(cache / "a-file", "x");
  CHECK_THROWS_WITH(load_omniglot(data.path(), "train", {.directory = cache / "a-file/cache"}),
                    Catch::Contains("a-file"));
}

TEST_CASE("MiniImagenet: classes in the order the CSV lists them, RGB, resized", "[data]") {
  TemporaryDirectory data, cache;
  std::string csv = "filename,label\n";
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 3; ++i) {
      const std::string name = fmt::format("n0{}_{}.jpg", 9 - c, i);
      std::vector<std::uint8_t> rgb;
      for (int p = 0; p < 144; ++p)
        rgb.insert(rgb.end(),
                   {static_cast<std::uint8_t>(100 * c), 50, static_cast<std::uint8_t>(20 * i)});
      write_jpg(data / "images" / name, 12, 12, rgb);
      csv += fmt::format("{},n0{}\r\n", name, 9 - c);
    }
  write_text(data / "train.csv", csv);
  CacheReport report;
  const auto split =
      load_miniimagenet(data.path(), "train", {.directory = cache.path()}, &report, 6);
  const auto& images = *split.images;
  CHECK((images.channels == 3 && images.height == 6 && images.width == 6));
  CHECK(images.class_names == std::vector<std::string>{"n09", "n08"});
  CHECK(images.class_begin == std::vector<std::int64_t>{0, 3, 6});
  CHECK(split.classes.size() == 2);
  CHECK(!split.invert);
  // Image 4: class n08 (red 100), image 1 (blue 20); planes R, G, B.
  CHECK(std::abs(images.image(4)[0] - 100) <= 4);
  CHECK(std::abs(images.image(4)[36] - 50) <= 4);
  CHECK(std::abs(images.image(4)[72] - 20) <= 4);
  CHECK(only_file(cache).filename() == "miniimagenet-train-3x6x6.images");
}

TEST_CASE("Fashion-MNIST: gzip IDX files grouped by label, and bad files named", "[data]") {
  TemporaryDirectory dir;
  // Three 2 x 2 images with labels 1, 0, 1.
  write_idx_gz(dir / "train-images-idx3-ubyte.gz", {3, 2, 2}, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  write_idx_gz(dir / "train-labels-idx1-ubyte.gz", {3}, {1, 0, 1});
  const auto split = load_fashion_mnist(dir.path(), "train");
  const auto& images = *split.images;
  CHECK((images.height == 2 && images.width == 2 && images.classes() == 10));
  CHECK(images.class_begin[1] == 1);
  CHECK(images.class_begin[2] == 3);
  CHECK(images.image(0)[0] == 2);  // class 0: the second image
  CHECK(images.image(1)[0] == 1);
  CHECK(images.image(2)[0] == 3);
  CHECK(images.class_names[9] == "Ankle boot");

  write_idx_gz(dir / "t10k-images-idx3-ubyte.gz", {3, 2, 2}, {1, 1, 1, 1, 2, 2, 2, 2});
  write_idx_gz(dir / "t10k-labels-idx1-ubyte.gz", {3}, {1, 0, 1});
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), "t10k"),
                    Catch::Contains("t10k-images-idx3-ubyte.gz") && Catch::Contains("need 12"));
  const std::string whole = read_bytes(dir / "train-images-idx3-ubyte.gz");
  write_file_atomically(dir / "train-images-idx3-ubyte.gz", whole.substr(0, whole.size() / 2));
  CHECK_THROWS_WITH(
      load_fashion_mnist(dir.path(), "train"),
      Catch::Contains("train-images-idx3-ubyte.gz") && Catch::Contains("does not decompress"));
  write_idx_gz(dir / "train-images-idx3-ubyte.gz", {3, 2}, {1, 1, 2, 2, 3, 3});
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), "train"),
                    Catch::Contains("not an IDX file of unsigned bytes with 3 dimensions"));
}

TEST_CASE(
    "FewShotSampler: N classes of the split per task, labels a permutation, K + Q distinct "
    "images of each, reproducible",
    "[data]") {
  // 6 classes of 4 grey 2 x 2 images; image j of class c is 10 c + j everywhere.
  auto set = std::make_shared<ImageSet>();
  set->channels = 1;
  set->height = set->width = 2;
  for (int c = 0; c < 6; ++c) {
    set->class_names.push_back(fmt::format("c{}", c));
    for (int j = 0; j < 4; ++j)
      for (int p = 0; p < 4; ++p) set->pixels.push_back(static_cast<std::uint8_t>(10 * c + j));
    set->class_begin.push_back(4 * (c + 1));
  }
  // The split uses classes 1, 2, 4 and 5 only.
  FewShotSplit split{set, {{1, 0, "c1"}, {2, 0, "c2"}, {4, 0, "c4"}, {5, 0, "c5"}}, false};
  const FewShotSettings settings{.ways = 3, .shots = 2, .queries = 1};
  const FewShotSampler<double> sampler(split, settings);
  Generator gen(7);
  const std::int64_t tasks = 50;
  const auto batch = sampler.sample(tasks, gen);
  batch.validate("test");
  CHECK(batch.support_x.shape() == Shape{tasks, 6, 1, 2, 2});
  CHECK(batch.query_x.shape() == Shape{tasks, 3, 1, 2, 2});
  CHECK(batch.support_y.shape() == Shape{tasks, 6, 1});
  const auto sx = batch.support_x.to_vector(), qx = batch.query_x.to_vector();
  const auto sy = batch.support_y.to_vector(), qy = batch.query_y.to_vector();
  std::set<int> classes_seen;
  std::set<std::vector<int>> assignments;
  for (std::int64_t t = 0; t < tasks; ++t) {
    std::vector<int> class_of_label(3, -1);
    std::set<int> images_of_task;
    const auto visit = [&](const std::vector<double>& x, const std::vector<double>& y,
                           std::int64_t points, std::int64_t p) {
      const std::size_t at = static_cast<std::size_t>(t * points + p);
      const double value = x[4 * at] * 255;
      const int id = static_cast<int>(std::lround(value)), c = id / 10,
                label = static_cast<int>(y[at]);
      CHECK(x[4 * at + 3] == x[4 * at]);  // a whole image, not a mix
      REQUIRE((label >= 0 && label < 3));
      if (class_of_label[label] < 0) class_of_label[label] = c;
      CHECK(class_of_label[label] == c);        // one class per label
      CHECK(images_of_task.insert(id).second);  // no image twice in a task
      classes_seen.insert(c);
    };
    for (std::int64_t p = 0; p < 6; ++p) visit(sx, sy, 6, p);
    for (std::int64_t p = 0; p < 3; ++p) visit(qx, qy, 3, p);
    CHECK(std::set<int>(class_of_label.begin(), class_of_label.end()).size() == 3);
    for (int label = 0; label < 3; ++label)
      CHECK(std::count(sy.begin() + 6 * t, sy.begin() + 6 * t + 6, double(label)) == 2);
    assignments.insert(class_of_label);
  }
  CHECK(classes_seen == std::set<int>{1, 2, 4, 5});  // the split's classes, all of them
  CHECK(assignments.size() > 10);                    // labels are permuted across tasks
  Generator same(7), other(8);
  CHECK(sampler.sample(tasks, same).support_x.to_vector() == sx);
  CHECK(sampler.sample(tasks, other).support_x.to_vector() != sx);

  SECTION("bad settings and classes are refused, naming them") {
    CHECK_THROWS_WITH(FewShotSampler<double>(split, {.ways = 5, .shots = 1, .queries = 1}),
                      Catch::Contains("5-way tasks need 5 classes; the split has 4"));
    CHECK_THROWS_WITH(FewShotSampler<double>(split, {.ways = 2, .shots = 2, .queries = 3}),
                      Catch::Contains("class c1 has 4 images; 2 shots and 3 queries need 5"));
    CHECK_THROWS_WITH(FewShotSampler<double>(split, {.ways = 2, .shots = 0, .queries = 3}),
                      Catch::Contains("must be positive"));
    FewShotSplit bad = split;
    bad.classes.push_back({9, 0, "c9"});
    CHECK_THROWS_WITH(FewShotSampler<double>(bad, settings),
                      Catch::Contains("class c9 refers to class 9 of a set of 6"));
  }
}

TEST_CASE("FewShotSampler turns a class's images by quarter turns and inverts on request",
          "[data]") {
  // One class of two copies of the 2 x 2 image [[1, 2], [3, 4]] (1 shot, 1 query).
  auto set = std::make_shared<ImageSet>();
  set->channels = 1;
  set->height = set->width = 2;
  set->class_names = {"a"};
  set->class_begin = {0, 2};
  set->pixels = {1, 2, 3, 4, 1, 2, 3, 4};
  const auto first_image = [&](int turns, bool invert) {
    const FewShotSampler<double> sampler({set, {{0, turns, "a"}}, invert},
                                         {.ways = 1, .shots = 1, .queries = 1});
    Generator gen(1);
    auto v = sampler.sample(1, gen).support_x.to_vector();
    for (auto& x : v) x = std::round(x * 255);
    return v;
  };
  // Counter-clockwise, as numpy.rot90: [[1, 2], [3, 4]] -> [[2, 4], [1, 3]].
  CHECK(first_image(0, false) == std::vector<double>{1, 2, 3, 4});
  CHECK(first_image(1, false) == std::vector<double>{2, 4, 1, 3});
  CHECK(first_image(2, false) == std::vector<double>{4, 3, 2, 1});
  CHECK(first_image(3, false) == std::vector<double>{3, 1, 4, 2});
  CHECK(first_image(0, true) == std::vector<double>{254, 253, 252, 251});
}

namespace {

// The 40 attribute names: Appendix A's train, val and test attributes.
std::vector<std::string> celeba_names() {
  std::vector<std::string> names;
  for (const char* split : {"train", "val", "test"})
    for (const auto name : celeba_split_attributes(split)) names.emplace_back(name);
  return names;
}

// A CelebA fixture of `count` 12 x 10 images with random attributes (each
// set with probability 1/2, from seed 5), all in the official train
// partition unless `official`, then split 0 / 1 / 2 by i % 3.
fs::path write_celeba_fixture(const TemporaryDirectory& data, int count, bool official = false) {
  std::vector<std::vector<bool>> has(static_cast<std::size_t>(count));
  Generator gen(5);
  for (auto& row : has)
    for (int a = 0; a < 40; ++a) row.push_back(gen.index(2) == 1);
  write_celeba(
      data.path(), count, 12, 10, celeba_names(),
      [&](int i, std::size_t a) { return has[static_cast<std::size_t>(i)][a]; },
      [&](int i) { return official ? i % 3 : 0; });
  return data.path();
}

}  // namespace

TEST_CASE("CelebA: the attribute file's count line, names and CRLF rows, and the splits",
          "[data]") {
  TemporaryDirectory data;
  write_text(data / "list_attr_celeba.txt",
             "3\r\nSmiling  Young\r\n000001.jpg  1 -1\r\n000002.jpg -1  1\r\n000003.jpg  1  1\r\n");
  const auto a = read_celeba_attributes(data / "list_attr_celeba.txt");
  CHECK(a.names == std::vector<std::string>{"Smiling", "Young"});
  CHECK(a.images == std::vector<std::string>{"000001.jpg", "000002.jpg", "000003.jpg"});
  CHECK((a.has(0, 0) && !a.has(0, 1) && !a.has(1, 0) && a.has(1, 1) && a.has(2, 0)));
  CHECK(a.index_of("Young") == 1);
  write_text(data / "list_eval_partition.txt", "000002.jpg 1\r\n000001.jpg 0\r\n000003.jpg 2\r\n");
  const auto partition = read_celeba_partition(data / "list_eval_partition.txt", a);
  CHECK(partition == std::vector<int>{0, 1, 2});
  // All three partitions present: the official split.
  CHECK(celeba_split_images(partition, "val") == std::vector<std::int64_t>{1});
  // A subset in one partition: 80% / 10% / 10% by index.
  const std::vector<int> subset(20, 0);
  CHECK(celeba_split_images(subset, "train").size() == 16);
  CHECK(celeba_split_images(subset, "val") == std::vector<std::int64_t>{16, 17});
  CHECK(celeba_split_images(subset, "test") == std::vector<std::int64_t>{18, 19});
  // Appendix A's attribute split: 25 / 5 / 10, the 40 names once each.
  const auto names = celeba_names();
  CHECK(names.size() == 40);
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == 40);
  CHECK(celeba_split_attributes("val").size() == 5);
}

TEST_CASE("CelebA names the file, line or attribute of bad input", "[data]") {
  TemporaryDirectory data;
  const auto attributes = data / "list_attr_celeba.txt";
  const auto refuses = [&](const std::string& text, const std::string& message) {
    write_text(attributes, text);
    CHECK_THROWS_WITH(read_celeba_attributes(attributes), Catch::Contains(message));
  };
  refuses("2\r\nSmiling Young\r\n1.jpg 1 -1\r\n2.jpg 1\r\n", "list_attr_celeba.txt:4: 1 values");
  refuses("2\r\nSmiling Young\r\n1.jpg 1 -1\r\n2.jpg 1 0\r\n",
          "list_attr_celeba.txt:4: attribute Young is \"0\"");
  refuses("3\r\nSmiling Young\r\n1.jpg 1 -1\r\n2.jpg 1 1\r\n",
          "lists 2 images, its first line says 3");
  refuses("two\r\nSmiling\r\n", "list_attr_celeba.txt:1: expected the image count");
  refuses("1\r\nSmiling\r\n../1.jpg 1\r\n",
          "list_attr_celeba.txt:3: \"../1.jpg\" is not a file name in img_align_celeba/");
  write_text(attributes, "1\r\nSmiling\r\n1.jpg 1\r\n");
  const auto a = read_celeba_attributes(attributes);
  CHECK_THROWS_WITH(a.index_of("Wearing_Hat"), Catch::Contains("has no attribute Wearing_Hat"));
  write_text(data / "list_eval_partition.txt", "2.jpg 0\r\n");
  CHECK_THROWS_WITH(read_celeba_partition(data / "list_eval_partition.txt", a),
                    Catch::Contains("does not list 1.jpg"));
  write_text(data / "list_eval_partition.txt", "1.jpg 3\r\n");
  CHECK_THROWS_WITH(read_celeba_partition(data / "list_eval_partition.txt", a),
                    Catch::Contains("list_eval_partition.txt:1: expected"));
  // The layout with an image missing, and with too few images for a task.
  TemporaryDirectory celeba, cache;
  write_celeba_fixture(celeba, 40);
  fs::remove(celeba / "img_align_celeba" / "000002.jpg");
  CHECK_THROWS_WITH(load_celeba(celeba.path(), "train", {.directory = cache.path()}, nullptr, 8),
                    Catch::Contains("000002.jpg is missing"));
  TemporaryDirectory small;
  write_celeba_fixture(small, 30);
  const auto val = load_celeba(small.path(), "val", {.directory = cache.path()}, nullptr, 8);
  CHECK_THROWS_WITH(CelebaTaskSampler<double>(val, {.shots = 5, .queries = 5}),
                    Catch::Contains("no pair of the val attributes"));
  CHECK_THROWS_WITH(attribute_tasks(val, 0, CelebaTaskRule::converse, 1),
                    Catch::Contains("tasks of 0 attributes from the val split's 5"));
  Generator gen(2);
  CHECK_THROWS_WITH(draw_without_replacement(3, 4, gen),
                    Catch::Contains("cannot draw 4 of 3 without replacement"));
  CHECK_THROWS_WITH(CelebaTaskSampler<double>(val, {.shots = 0, .queries = 5}),
                    Catch::Contains("shots and queries must be positive (got 0, 5)"));
  CHECK_THROWS_WITH(AmbiguousCelebaSampler<double>(val, {.shots = 5, .queries = 5}),
                    Catch::Contains("no three of the val attributes"));
}

TEST_CASE(
    "CelebA tasks: classes of a setting and its converse, ambiguous sets that every "
    "candidate explains",
    "[data]") {
  TemporaryDirectory data, cache;
  write_celeba_fixture(data, 300, true);
  CacheReport report;
  const auto test = load_celeba(data.path(), "test", {.directory = cache.path()}, &report, 8);
  // The official partition: every third image, cropped to 9 x 9, resized to 8 x 8.
  CHECK(test.images->images() == 100);
  CHECK((test.images->channels == 3 && test.images->height == 8 && test.images->width == 8));
  CHECK(std::abs(test.images->image(1)[0] - 40) <= 3);  // fixture image 5: red 40, green 10
  CHECK(std::abs(test.images->image(1)[64] - 10) <= 3);
  CHECK(report.file.filename() == "celeba-test-crop0.944-3x8x8.images");
  CHECK(test.attribute_names.size() == 10);

  // Pairs under the converse rule: two settings per pair, each checked image by image.
  const auto pairs = attribute_tasks(test, 2, CelebaTaskRule::converse, 1);
  CHECK(pairs.size() == 90);
  for (const auto& task : pairs) {
    CHECK(task.values[0]);
    for (const auto i : task.positives)
      for (std::size_t k = 0; k < 2; ++k) CHECK(test.has(i, task.attributes[k]) == task.values[k]);
    for (const auto i : task.negatives)
      for (std::size_t k = 0; k < 2; ++k) CHECK(test.has(i, task.attributes[k]) != task.values[k]);
  }
  CHECK(attribute_tasks(test, 2, CelebaTaskRule::both_or_neither, 1).size() == 45);

  Generator gen(1);

  // Ambiguous sets: each support image fits all three candidates, and no
  // query image is a support image.
  AmbiguousCelebaSampler<double> ambiguous(test, {.shots = 2, .queries = 2});
  CHECK(ambiguous.task_count() > 0);
  const auto sets = ambiguous.sample(20, gen);
  sets.validate("test");
  CHECK(sets.candidates() == 3);
  CHECK(sets.support_y.to_vector().size() == 80);
  // Image p of task t of x, as the fixture's image index (its colour).
  const auto fixture_index = [](const Tensor<double>& x, std::int64_t t, std::int64_t p) {
    const auto v = x.to_vector();
    const auto at = static_cast<std::size_t>((t * x.dim(1) + p) * 192);
    return std::lround(v[at] * 255 / 8) + 32 * std::lround((v[at + 64] * 255 - 10) / 20);
  };
  // "A, not B" -> {(index of A, true), (index of B, false)}.
  const auto setting = [&](const std::string& name) {
    std::vector<std::pair<std::int64_t, bool>> out;
    std::stringstream in(name);
    for (std::string part; std::getline(in, part, ',');) {
      part.erase(0, part.find_first_not_of(' '));
      const bool negated = part.rfind("not ", 0) == 0;
      const auto attribute = negated ? part.substr(4) : part;
      const auto it = std::ranges::find(test.attribute_names, attribute);
      REQUIRE(it != test.attribute_names.end());
      out.emplace_back(it - test.attribute_names.begin(), !negated);
    }
    return out;
  };
  // Row r of the test split is fixture image 3 r + 2; label 1 has the
  // setting, label 0 its converse.
  const auto fits = [&](std::int64_t image, const std::vector<std::pair<std::int64_t, bool>>& s,
                        double label) {
    REQUIRE((image - 2) % 3 == 0);
    const std::int64_t row = (image - 2) / 3;
    for (const auto& [attribute, value] : s)
      if (test.has(row, attribute) != (label == 1 ? value : !value)) return false;
    return true;
  };
  // Training batches: 2 shots and 3 queries per class, labels 0 then 1;
  // each task's label-1 images are the positives of one of the sampler's
  // tasks and its label-0 images the negatives (or the other way round),
  // all distinct.
  CelebaTaskSampler<double> tasks(test, {.shots = 2, .queries = 3});
  const auto batch = tasks.sample(6, gen);
  batch.validate("test");
  CHECK(batch.support_x.shape() == Shape{6, 4, 3, 8, 8});
  const auto batch_query_y = batch.query_y.to_vector();
  for (std::int64_t t = 0; t < 6; ++t) {
    std::array<std::set<std::int64_t>, 2> rows;  // by label
    std::set<long> images;
    for (const auto* x : {&batch.support_x, &batch.query_x})
      for (std::int64_t p = 0; p < x->dim(1); ++p) {
        const auto image = fixture_index(*x, t, p);
        images.insert(image);
        const bool positive = x == &batch.support_x ? p >= 2 : p >= 3;
        rows[positive ? 1 : 0].insert((image - 2) / 3);
      }
    CHECK(images.size() == 10);
    for (std::int64_t p = 0; p < 6; ++p)
      CHECK(batch_query_y[static_cast<std::size_t>(t * 6 + p)] == (p >= 3 ? 1 : 0));
    const auto within = [](const std::set<std::int64_t>& some,
                           const std::vector<std::int64_t>& of) {
      return std::ranges::all_of(some,
                                 [&](auto r) { return std::ranges::find(of, r) != of.end(); });
    };
    CHECK(std::ranges::any_of(tasks.tasks(), [&](const AttributeTask& task) {
      return (within(rows[1], task.positives) && within(rows[0], task.negatives)) ||
             (within(rows[0], task.positives) && within(rows[1], task.negatives));
    }));
  }

  const auto support_y = sets.support_y.to_vector();
  for (std::int64_t t = 0; t < sets.tasks(); ++t) {
    const auto three = setting(sets.names[static_cast<std::size_t>(t)]);
    REQUIRE(three.size() == 3);
    REQUIRE(sets.candidate_names[static_cast<std::size_t>(t)].size() == 3);
    std::set<long> support;
    for (std::int64_t p = 0; p < 4; ++p) {
      const auto image = fixture_index(sets.support_x, t, p);
      const double label = support_y[static_cast<std::size_t>(t * 4 + p)];
      support.insert(image);
      CHECK(fits(image, three, label));
      for (const auto& candidate : sets.candidate_names[static_cast<std::size_t>(t)])
        CHECK(fits(image, setting(candidate), label));
    }
    // The candidates are the three pairs of the setting, each once.
    std::set<std::vector<std::pair<std::int64_t, bool>>> pairs;
    for (const auto& candidate : sets.candidate_names[static_cast<std::size_t>(t)])
      pairs.insert(setting(candidate));
    CHECK(pairs == std::set<std::vector<std::pair<std::int64_t, bool>>>{
                       {three[1], three[2]}, {three[0], three[2]}, {three[0], three[1]}});
    for (std::size_t c = 0; c < 3; ++c) {
      const auto two = setting(sets.candidate_names[static_cast<std::size_t>(t)][c]);
      CHECK(two.size() == 2);
      const auto y = sets.candidate_y[c].to_vector();
      for (std::int64_t p = 0; p < 4; ++p) {
        const auto image = fixture_index(sets.candidate_x[c], t, p);
        CHECK(fits(image, two, y[static_cast<std::size_t>(t * 4 + p)]));
        CHECK(!support.contains(image));
      }
    }
  }
}
