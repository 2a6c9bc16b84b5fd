// N-way K-shot classification tasks drawn from an image set's classes
// (Vinyals et al. 2016; MAML's image experiments, Finn et al. 2017): each
// task draws N classes without replacement, gives them the labels 0..N-1 in
// the order drawn (a fresh permutation per task), and draws K support and Q
// query images of each class without replacement. Pixels become T in
// [0, 1] (p / 255, or 1 - p / 255 for sets that invert, as MAML's scripts
// do for Omniglot's black ink on white).
#pragma once

#include <memory>
#include <numeric>

#include "platipus/data/image_set.hpp"
#include "platipus/data/task_batch.hpp"

namespace platipus::data {

// A class of a split: class `index` of an ImageSet, turned counter-clockwise
// by quarter_turns x 90 degrees (Omniglot's rotated classes; square images).
struct ImageClass {
  std::int64_t index = 0;
  int quarter_turns = 0;
  std::string name;
};

// A split ready for sampling: the stored images and the split's classes.
struct FewShotSplit {
  std::shared_ptr<const ImageSet> images;
  std::vector<ImageClass> classes;
  bool invert = false;  // 1 - p / 255 instead of p / 255
};

struct FewShotSettings {
  std::int64_t ways = 5;      // N: classes per task
  std::int64_t shots = 1;     // K: support images per class
  std::int64_t queries = 15;  // Q: query images per class
};

// `count` distinct indices of [0, n) in random order: the first steps of a
// Fisher-Yates shuffle.
inline std::vector<std::int64_t> draw_without_replacement(std::int64_t n, std::int64_t count,
                                                          Generator& gen) {
  check(count >= 0 && count <= n, "draw_without_replacement",
        "cannot draw {} of {} without replacement", count, n);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  for (std::int64_t i = 0; i < count; ++i)
    std::swap(order[static_cast<std::size_t>(i)],
              order[static_cast<std::size_t>(i + gen.index(n - i))]);
  order.resize(static_cast<std::size_t>(count));
  return order;
}

// Image i of a set as T in [0, 1] (p / 255, or 1 - p / 255 with invert),
// turned counter-clockwise by quarter_turns x 90 degrees: output (r, c) reads
// input (c, n-1-r) for one turn, (n-1-r, n-1-c) for two, (n-1-c, r) for
// three (square images).
template <class T>
void copy_unit_image(const ImageSet& images, std::int64_t i, int quarter_turns, bool invert,
                     T* out) {
  const std::uint8_t* in = images.image(i);
  const std::int64_t h = images.height, w = images.width, n = h;
  const T scale = T(1) / T(255);
  const int turns = ((quarter_turns % 4) + 4) % 4;
  for (std::int64_t ch = 0; ch < images.channels; ++ch, in += h * w, out += h * w)
    for (std::int64_t r = 0; r < h; ++r)
      for (std::int64_t c = 0; c < w; ++c) {
        const std::int64_t source = turns == 0   ? r * w + c
                                    : turns == 1 ? c * w + (n - 1 - r)
                                    : turns == 2 ? (n - 1 - r) * w + (n - 1 - c)
                                                 : (n - 1 - c) * w + r;
        const T value = static_cast<T>(in[source]) * scale;
        out[r * w + c] = invert ? T(1) - value : value;
      }
}

template <class T = float, class B = cpu>
class FewShotSampler {
 public:
  FewShotSampler(FewShotSplit split, FewShotSettings settings)
      : split_(std::move(split)), settings_(settings) {
    constexpr std::string_view who = "FewShotSampler";
    check(split_.images != nullptr, who, "no image set");
    split_.images->validate(who);
    const auto& s = settings_;
    check(s.ways > 0 && s.shots > 0 && s.queries > 0, who,
          "ways, shots and queries must be positive (got {}, {}, {})", s.ways, s.shots, s.queries);
    check(static_cast<std::int64_t>(split_.classes.size()) >= s.ways, who,
          "{}-way tasks need {} classes; the split has {}", s.ways, s.ways, split_.classes.size());
    const auto& images = *split_.images;
    for (const auto& c : split_.classes) {
      check(c.index >= 0 && c.index < images.classes(), who,
            "class {} refers to class {} of a set of {}", c.name, c.index, images.classes());
      check(images.class_size(c.index) >= s.shots + s.queries, who,
            "class {} has {} images; {} shots and {} queries need {}", c.name,
            images.class_size(c.index), s.shots, s.queries, s.shots + s.queries);
      check(c.quarter_turns % 4 == 0 || images.height == images.width, who,
            "class {} turns {}x{} images by {} x 90 degrees; only square images turn", c.name,
            images.height, images.width, c.quarter_turns);
    }
  }

  const FewShotSplit& split() const { return split_; }
  const FewShotSettings& settings() const { return settings_; }

  // x [tasks, N K, C, H, W] and [tasks, N Q, C, H, W], class by class; y the
  // labels as [tasks, points, 1].
  TaskBatch<T, B> sample(std::int64_t tasks, Generator& gen) const {
    check(tasks > 0, "FewShotSampler::sample", "no tasks requested ({})", tasks);
    const auto& s = settings_;
    const auto& images = *split_.images;
    const std::int64_t bytes = images.image_bytes();
    std::vector<T> sx(static_cast<std::size_t>(tasks * s.ways * s.shots * bytes)),
        qx(static_cast<std::size_t>(tasks * s.ways * s.queries * bytes));
    std::vector<T> sy, qy;
    T* support = sx.data();
    T* query = qx.data();
    for (std::int64_t t = 0; t < tasks; ++t) {
      const auto classes =
          draw_without_replacement(static_cast<std::int64_t>(split_.classes.size()), s.ways, gen);
      for (std::int64_t label = 0; label < s.ways; ++label) {
        const auto& c = split_.classes[static_cast<std::size_t>(classes[label])];
        const auto picks =
            draw_without_replacement(images.class_size(c.index), s.shots + s.queries, gen);
        for (std::int64_t k = 0; k < s.shots + s.queries; ++k) {
          T*& out = k < s.shots ? support : query;
          copy_unit_image(images, images.class_begin[c.index] + picks[k], c.quarter_turns,
                          split_.invert, out);
          out += bytes;
          (k < s.shots ? sy : qy).push_back(static_cast<T>(label));
        }
      }
    }
    const std::int64_t c = images.channels, h = images.height, w = images.width;
    TaskBatch<T, B> batch;
    batch.support_x = Tensor<T, B>::from_host({tasks, s.ways * s.shots, c, h, w}, sx);
    batch.support_y = Tensor<T, B>::from_host({tasks, s.ways * s.shots, 1}, sy);
    batch.query_x = Tensor<T, B>::from_host({tasks, s.ways * s.queries, c, h, w}, qx);
    batch.query_y = Tensor<T, B>::from_host({tasks, s.ways * s.queries, 1}, qy);
    return batch;
  }

 private:
  FewShotSplit split_;
  FewShotSettings settings_;
};

}  // namespace platipus::data
