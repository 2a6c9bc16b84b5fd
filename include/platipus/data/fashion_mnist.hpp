// Fashion-MNIST (Xiao et al. 2017) as Debian's dataset-fashion-mnist
// installs it: <root>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz,
// gzip-compressed IDX files (the MNIST format: a magic number with the
// element type and rank, big-endian dimensions, then the elements), 28 x 28
// grey images of 10 classes. Small enough to read whole every time, so it is
// not cached; images are grouped by label, classes in label order.
#pragma once

#include <array>

#include <fmt/ranges.h>
#include <zlib.h>

#include "platipus/data/few_shot.hpp"

namespace platipus::data {

inline std::filesystem::path fashion_mnist_directory() {
  return "/usr/share/datasets/fashion-mnist";
}

// The bytes a gzip (or zlib) stream inflates to, at most `limit` of them.
inline std::string inflate_bytes(std::string_view compressed, const std::filesystem::path& file,
                                 std::uint64_t limit = std::uint64_t{1} << 32) {
  ::z_stream stream{};
  check(::inflateInit2(&stream, 15 + 32) == Z_OK, "inflate", "{}: zlib could not start",
        file.string());
  std::string out;
  std::array<char, 1 << 16> chunk;
  stream.next_in = reinterpret_cast<::Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<::uInt>(compressed.size());
  int status = Z_OK;
  while (status == Z_OK) {
    stream.next_out = reinterpret_cast<::Bytef*>(chunk.data());
    stream.avail_out = static_cast<::uInt>(chunk.size());
    status = ::inflate(&stream, Z_NO_FLUSH);
    out.append(chunk.data(), chunk.size() - stream.avail_out);
    if (status == Z_OK && out.size() > limit) status = Z_MEM_ERROR;
    if (status == Z_BUF_ERROR && stream.avail_in == 0) status = Z_DATA_ERROR;  // it ended early
  }
  const std::string reason = stream.msg != nullptr ? stream.msg : "truncated or too large";
  ::inflateEnd(&stream);
  check(status == Z_STREAM_END, "inflate", "{} does not decompress: {}", file.string(), reason);
  return out;
}

// An IDX array of unsigned bytes (type 0x08) of the given rank.
struct IdxBytes {
  std::vector<std::int64_t> dims;
  std::string data;
};

inline IdxBytes read_idx(const std::filesystem::path& file, int rank) {
  std::string bytes = read_file(file);
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b)
    bytes = inflate_bytes(bytes, file);
  const auto at = [&](std::size_t i) {
    return static_cast<unsigned char>(bytes[i]);
  };
  check(bytes.size() >= 4 && at(0) == 0 && at(1) == 0 && at(2) == 0x08 && at(3) == rank, "read_idx",
        "{} is not an IDX file of unsigned bytes with {} dimensions", file.string(), rank);
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  check(bytes.size() >= header, "read_idx", "{} is truncated in its header", file.string());
  IdxBytes idx;
  std::uint64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const std::size_t i = 4 + 4 * static_cast<std::size_t>(d);
    const std::uint64_t dim =
        std::uint64_t{at(i)} << 24 | at(i + 1) << 16 | at(i + 2) << 8 | at(i + 3);
    idx.dims.push_back(static_cast<std::int64_t>(dim));
    check(dim == 0 || count <= bytes.size() / dim, "read_idx",
          "{}: dimensions {} need more bytes than the file has", file.string(),
          fmt::join(idx.dims, " x "));
    count *= dim;
  }
  check(bytes.size() - header == count, "read_idx",
        "{} holds {} bytes of data; its dimensions need {}", file.string(), bytes.size() - header,
        count);
  idx.data = bytes.substr(header);
  return idx;
}

// Split "train" (60,000 images) or "t10k" (10,000).
inline FewShotSplit load_fashion_mnist(const std::filesystem::path& root, std::string_view split) {
  constexpr std::array<const char*, 10> names{"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                              "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                              "Bag",         "Ankle boot"};
  const auto images_file = root / (std::string(split) + "-images-idx3-ubyte.gz");
  const auto labels_file = root / (std::string(split) + "-labels-idx1-ubyte.gz");
  const auto images = read_idx(images_file, 3);
  const auto labels = read_idx(labels_file, 1);
  check(images.dims[0] == labels.dims[0], "fashion_mnist",
        "{} holds {} images but {} holds {} labels", images_file.string(), images.dims[0],
        labels_file.string(), labels.dims[0]);
  ImageSet set{1, images.dims[1], images.dims[2], {}, {0}, {}};
  set.pixels.resize(images.data.size());
  std::int64_t next = 0;
  for (std::size_t c = 0; c < names.size(); ++c) {
    for (std::int64_t i = 0; i < labels.dims[0]; ++i)
      if (static_cast<unsigned char>(labels.data[static_cast<std::size_t>(i)]) == c)
        std::copy_n(images.data.data() + i * set.image_bytes(), set.image_bytes(),
                    set.pixels.begin() + next++ * set.image_bytes());
    set.class_names.push_back(names[c]);
    set.class_begin.push_back(next);
  }
  check(next == labels.dims[0], "fashion_mnist", "{}: {} labels are not in [0, 10)",
        labels_file.string(), labels.dims[0] - next);
  FewShotSplit out;
  out.images = std::make_shared<const ImageSet>(std::move(set));
  for (std::int64_t c = 0; c < out.images->classes(); ++c)
    out.classes.push_back({c, 0, out.images->class_names[static_cast<std::size_t>(c)]});
  return out;
}

}  // namespace platipus::data
