// CelebA (Liu et al. 2015) in its official layout, and PLATIPUS's ambiguous
// attribute tasks (Finn, Xu, Levine 2018, Section 5 and Appendix A):
//   <root>/img_align_celeba/NNNNNN.jpg  aligned faces (178 x 218; any size)
//   <root>/list_attr_celeba.txt         the image count; the 40 attribute
//                                       names; then one row per image,
//                                       "NNNNNN.jpg" and 40 values 1 or -1
//   <root>/list_eval_partition.txt      "NNNNNN.jpg p", p 0 train, 1 val,
//                                       2 test
// Line endings LF or CRLF, fields separated by runs of spaces.
//
// Splits of images: the official partition when the partition file holds
// all three partitions; otherwise (a subset, such as a copy of the first
// 10,000 images, all in the official train partition) by row index: the
// first 80% meta-train, the next 10% meta-validation, the last 10%
// meta-test. Splits of attributes: Appendix A's 25 / 5 / 10.
//
// Images: the centred square of 168/178 of the shorter side (Appendix A's
// "approximately 168 x 168" of the full-size faces; 84 x 84 of a
// half-resolution copy), resized to size x size, RGB; cached as
// "celeba-<split>-crop<fraction>".
//
// Tasks: a task of attributes a_1..a_k and Boolean values v_1..v_k has the
// images where every a_i = v_i as one class and those where every a_i =
// not v_i as the other (Appendix A: "one class shares the setting of these
// attributes and the other is the converse"); CelebaTaskRule::
// both_or_neither keeps only v = all true (Section 5's wording: positives
// with every attribute, negatives with none). Training tasks take two
// attributes; an ambiguous test task takes three, its support set has
// positives of the three-attribute setting and negatives of its converse,
// and its three candidates are the two-attribute tasks of its pairs, which
// every support image fits.
#pragma once

#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <span>
#include <string_view>

#include "platipus/data/dataset_files.hpp"
#include "platipus/data/few_shot.hpp"
#include "platipus/data/image_cache.hpp"
#include "platipus/data/task_batch.hpp"

namespace platipus::data {

// The attribute file: names, image files in row order, and for each image
// and attribute whether the image has it.
struct CelebaAttributes {
  std::filesystem::path file;
  std::vector<std::string> names;
  std::vector<std::string> images;
  std::vector<std::uint8_t> values;  // images x names, 1 where the image has the attribute

  std::int64_t attributes() const { return static_cast<std::int64_t>(names.size()); }
  bool has(std::int64_t image, std::int64_t attribute) const {
    return values[static_cast<std::size_t>(image * attributes() + attribute)] != 0;
  }
  // The index of an attribute; throws naming it and the file when absent.
  std::int64_t index_of(std::string_view name) const {
    const auto it = std::ranges::find(names, name);
    check(it != names.end(), "celeba", "{} has no attribute {} (it has {})", file.string(), name,
          fmt::join(names, ", "));
    return it - names.begin();
  }
};

namespace detail {

// The fields of a line separated by runs of spaces (or tabs).
inline std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> fields;
  for (std::size_t begin = 0;;) {
    begin = line.find_first_not_of(" \t", begin);
    if (begin == std::string_view::npos) return fields;
    const std::size_t end = std::min(line.find_first_of(" \t", begin), line.size());
    fields.push_back(line.substr(begin, end - begin));
    begin = end;
  }
}

}  // namespace detail

inline CelebaAttributes read_celeba_attributes(const std::filesystem::path& file) {
  constexpr std::string_view who = "celeba";
  CelebaAttributes a{file, {}, {}, {}};
  std::int64_t count = -1, last = 0;
  for_each_line(file, [&](std::string_view line, std::int64_t number) {
    const auto fields = detail::fields_of(line);
    last = number;
    if (count < 0) {
      char* end = nullptr;
      const std::string text(line.substr(0, line.find_last_not_of(" \t") + 1));
      count = std::strtoll(text.c_str(), &end, 10);
      check(fields.size() == 1 && end == text.c_str() + text.size() && count > 0, who,
            "{}:{}: expected the image count, got \"{}\"", file.string(), number, line);
      return;
    }
    if (a.names.empty()) {
      for (auto f : fields) a.names.emplace_back(f);
      return;
    }
    check(fields.size() == a.names.size() + 1, who,
          "{}:{}: {} values for the {} attributes of the header", file.string(), number,
          fields.size() - 1, a.names.size());
    check(fields[0].find_first_of("/\\") == std::string_view::npos && fields[0] != "." &&
              fields[0] != "..",
          who, "{}:{}: \"{}\" is not a file name in img_align_celeba/", file.string(), number,
          fields[0]);
    a.images.emplace_back(fields[0]);
    for (std::size_t i = 1; i < fields.size(); ++i) {
      check(fields[i] == "1" || fields[i] == "-1", who,
            "{}:{}: attribute {} is \"{}\", not 1 or -1", file.string(), number, a.names[i - 1],
            fields[i]);
      a.values.push_back(fields[i] == "1");
    }
  });
  check(!a.names.empty(), who, "{}: no attribute names", file.string());
  check(std::ssize(a.images) == count, who,
        "{}:{}: the file lists {} images, its first line says {}", file.string(), last,
        a.images.size(), count);
  return a;
}

// Each image's official partition (0 train, 1 val, 2 test), in the attribute
// file's row order. Throws naming the file and line of a bad row and an
// image of the attribute file the partition file does not list.
inline std::vector<int> read_celeba_partition(const std::filesystem::path& file,
                                              const CelebaAttributes& attributes) {
  constexpr std::string_view who = "celeba";
  std::map<std::string, int, std::less<>> partition_of;
  for_each_line(file, [&](std::string_view line, std::int64_t number) {
    const auto fields = detail::fields_of(line);
    check(fields.size() == 2 && (fields[1] == "0" || fields[1] == "1" || fields[1] == "2"), who,
          "{}:{}: expected \"file partition\" with partition 0, 1 or 2, got \"{}\"", file.string(),
          number, line);
    partition_of[std::string(fields[0])] = fields[1][0] - '0';
  });
  std::vector<int> partition;
  for (const auto& image : attributes.images) {
    const auto it = partition_of.find(image);
    check(it != partition_of.end(), who, "{} does not list {}, which {} lists", file.string(),
          image, attributes.file.string());
    partition.push_back(it->second);
  }
  return partition;
}

// The rows of a split ("train", "val" or "test"): the official partition
// when it holds all three partitions, else the first 80% / next 10% / last
// 10% of the rows.
inline std::vector<std::int64_t> celeba_split_images(std::span<const int> partition,
                                                     std::string_view split) {
  const int wanted = split == "train" ? 0 : split == "val" ? 1 : split == "test" ? 2 : -1;
  check(wanted >= 0, "celeba", "unknown split \"{}\" (train, val, test)", split);
  std::vector<std::int64_t> rows;
  const bool official = std::ranges::find(partition, 0) != partition.end() &&
                        std::ranges::find(partition, 1) != partition.end() &&
                        std::ranges::find(partition, 2) != partition.end();
  const auto n = static_cast<std::int64_t>(partition.size());
  const std::array<std::int64_t, 4> cut{0, n * 8 / 10, n * 9 / 10, n};
  for (std::int64_t i = 0; i < n; ++i)
    if (official ? partition[static_cast<std::size_t>(i)] == wanted
                 : i >= cut[static_cast<std::size_t>(wanted)] &&
                       i < cut[static_cast<std::size_t>(wanted) + 1])
      rows.push_back(i);
  return rows;
}

// Appendix A's attribute split, spelled as the attribute file spells them.
inline std::span<const std::string_view> celeba_split_attributes(std::string_view split) {
  static constexpr std::array<std::string_view, 25> train{"Oval_Face",
                                                          "Attractive",
                                                          "Mustache",
                                                          "Male",
                                                          "Pointy_Nose",
                                                          "Bushy_Eyebrows",
                                                          "Blond_Hair",
                                                          "Rosy_Cheeks",
                                                          "Receding_Hairline",
                                                          "Eyeglasses",
                                                          "Goatee",
                                                          "Brown_Hair",
                                                          "Narrow_Eyes",
                                                          "Chubby",
                                                          "Big_Lips",
                                                          "Wavy_Hair",
                                                          "Bags_Under_Eyes",
                                                          "Arched_Eyebrows",
                                                          "Wearing_Earrings",
                                                          "High_Cheekbones",
                                                          "Black_Hair",
                                                          "Bangs",
                                                          "Wearing_Lipstick",
                                                          "Sideburns",
                                                          "Bald"};
  static constexpr std::array<std::string_view, 5> val{"Wearing_Necklace", "Smiling", "Pale_Skin",
                                                       "Wearing_Necktie", "Big_Nose"};
  static constexpr std::array<std::string_view, 10> test{
      "Straight_Hair", "5_o_Clock_Shadow", "Wearing_Hat", "Gray_Hair",           "Heavy_Makeup",
      "Young",         "Blurry",           "Double_Chin", "Mouth_Slightly_Open", "No_Beard"};
  if (split == "train") return train;
  if (split == "val") return val;
  check(split == "test", "celeba", "unknown split \"{}\" (train, val, test)", split);
  return test;
}

// A split ready for tasks: its images (one class, in row order), its
// attributes (Appendix A's for the split) and each image's values of them.
struct CelebaSplit {
  std::string name;
  std::shared_ptr<const ImageSet> images;
  std::vector<std::string> attribute_names;
  std::vector<std::uint8_t> values;  // images x attribute_names

  std::int64_t attributes() const { return static_cast<std::int64_t>(attribute_names.size()); }
  bool has(std::int64_t image, std::int64_t attribute) const {
    return values[static_cast<std::size_t>(image * attributes() + attribute)] != 0;
  }
};

// Appendix A's crop: 168 of the 178 pixels of the aligned faces' width.
inline constexpr double celeba_crop = 168.0 / 178.0;

inline CelebaSplit load_celeba(const std::filesystem::path& root, std::string_view split,
                               const CacheOptions& cache, CacheReport* report = nullptr,
                               std::int64_t size = 84, double crop = celeba_crop) {
  const auto attributes = read_celeba_attributes(root / "list_attr_celeba.txt");
  const auto partition = read_celeba_partition(root / "list_eval_partition.txt", attributes);
  const auto rows = celeba_split_images(partition, split);
  check(!rows.empty(), "celeba", "the {} split of {} holds no images", split, root.string());
  CelebaSplit out{std::string(split), nullptr, {}, {}};
  std::vector<std::int64_t> columns;
  for (const auto name : celeba_split_attributes(split)) {
    out.attribute_names.emplace_back(name);
    columns.push_back(attributes.index_of(name));
  }
  ClassFiles files{std::string(split), {}};
  for (const auto row : rows) {
    files.files.push_back(root / "img_align_celeba" /
                          attributes.images[static_cast<std::size_t>(row)]);
    for (const auto column : columns) out.values.push_back(attributes.has(row, column));
  }
  out.images = std::make_shared<const ImageSet>(
      cached_image_set(fmt::format("celeba-{}-crop{:.3f}", split, crop), std::span(&files, 1),
                       {3, size, size, crop}, cache, report));
  check(out.images->images() == std::ssize(rows) && out.images->image_bytes() == 3 * size * size,
        "celeba", "the {} split's cache holds {} images of {} bytes, not {} of {}", split,
        out.images->images(), out.images->image_bytes(), rows.size(), 3 * size * size);
  return out;
}

enum class CelebaTaskRule {
  converse,         // Appendix A: one class has a setting of the attributes, the other its converse
  both_or_neither,  // Section 5: one class has every attribute, the other none
};

// A task of attributes (indices into the split's attribute_names) and their
// values: `positives` are the images where every attribute has its value,
// `negatives` those where every attribute has the other.
struct AttributeTask {
  std::vector<std::int64_t> attributes;
  std::vector<bool> values;
  std::vector<std::int64_t> positives, negatives;

  // "Smiling, not Pale_Skin"
  std::string name(const CelebaSplit& split) const {
    std::vector<std::string> parts;
    for (std::size_t i = 0; i < attributes.size(); ++i)
      parts.push_back(fmt::format("{}{}", values[i] ? "" : "not ",
                                  split.attribute_names[static_cast<std::size_t>(attributes[i])]));
    return fmt::format("{}", fmt::join(parts, ", "));
  }
};

// The task of these attributes and values, with its images.
inline AttributeTask attribute_task(const CelebaSplit& split, std::vector<std::int64_t> attributes,
                                    std::vector<bool> values) {
  AttributeTask task{std::move(attributes), std::move(values), {}, {}};
  for (std::int64_t i = 0; i < split.images->images(); ++i) {
    bool positive = true, negative = true;
    for (std::size_t k = 0; k < task.attributes.size(); ++k) {
      const bool has = split.has(i, task.attributes[k]);
      positive = positive && has == task.values[k];
      negative = negative && has != task.values[k];
    }
    if (positive) task.positives.push_back(i);
    if (negative) task.negatives.push_back(i);
  }
  return task;
}

// Every task of `arity` attributes of the split under `rule` (each setting
// once: with the converse rule, values whose first is true, since the
// setting v and its converse make the same task) whose classes hold at least
// `needed` images each.
inline std::vector<AttributeTask> attribute_tasks(const CelebaSplit& split, int arity,
                                                  CelebaTaskRule rule, std::int64_t needed) {
  check(arity >= 1 && arity <= std::min<std::int64_t>(split.attributes(), 16), "celeba",
        "tasks of {} attributes from the {} split's {}", arity, split.name, split.attributes());
  std::vector<AttributeTask> tasks;
  const std::int64_t n = split.attributes();
  std::vector<std::int64_t> chosen(static_cast<std::size_t>(arity));
  const auto settings = rule == CelebaTaskRule::converse ? 1 << (arity - 1) : 1;
  // Combinations in lexicographic order, then settings in binary order.
  const auto visit = [&](auto&& self, int depth, std::int64_t from) -> void {
    if (depth == arity) {
      for (int s = 0; s < settings; ++s) {
        std::vector<bool> values(static_cast<std::size_t>(arity), true);
        for (int k = 1; k < arity; ++k) values[static_cast<std::size_t>(k)] = !((s >> (k - 1)) & 1);
        auto task = attribute_task(split, chosen, values);
        if (std::ssize(task.positives) >= needed && std::ssize(task.negatives) >= needed)
          tasks.push_back(std::move(task));
      }
      return;
    }
    for (std::int64_t a = from; a < n; ++a) {
      chosen[static_cast<std::size_t>(depth)] = a;
      self(self, depth + 1, a + 1);
    }
  };
  visit(visit, 0, 0);
  return tasks;
}

struct CelebaTaskSettings {
  std::int64_t shots = 5;     // support images per class
  std::int64_t queries = 15;  // query images per class
  CelebaTaskRule rule = CelebaTaskRule::converse;

  void validate(std::string_view who) const {
    check(shots > 0 && queries > 0, who, "shots and queries must be positive (got {}, {})", shots,
          queries);
  }
};

namespace detail {

// Copies the images `rows` of `set` as T in [0, 1] to `out`, advancing it.
template <class T>
void copy_images(const ImageSet& set, std::span<const std::int64_t> rows, T*& out) {
  for (const auto row : rows) {
    copy_unit_image(set, row, 0, false, out);
    out += set.image_bytes();
  }
}

// `count` of `from` drawn without replacement, skipping those in `taken`.
inline std::vector<std::int64_t> draw_from(std::span<const std::int64_t> from,
                                           std::span<const std::int64_t> taken, std::int64_t count,
                                           Generator& gen) {
  std::vector<std::int64_t> pool;
  for (const auto i : from)
    if (std::ranges::find(taken, i) == taken.end()) pool.push_back(i);
  std::vector<std::int64_t> out;
  for (const auto k : draw_without_replacement(std::ssize(pool), count, gen))
    out.push_back(pool[static_cast<std::size_t>(k)]);
  return out;
}

}  // namespace detail

// Binary tasks of two attributes (meta-training and meta-validation): each
// draws one of the split's tasks, labels its two classes 0 and 1 in a random
// order, and draws shots + queries images of each class. x [tasks, 2 shots,
// 3, H, W] and [tasks, 2 queries, 3, H, W], class 0 first; y the labels.
template <class T = float, class B = cpu>
class CelebaTaskSampler {
 public:
  CelebaTaskSampler(CelebaSplit split, CelebaTaskSettings settings)
      : split_(std::move(split)), settings_(settings) {
    settings_.validate("CelebaTaskSampler");
    tasks_ = attribute_tasks(split_, 2, settings_.rule, settings_.shots + settings_.queries);
    check(!tasks_.empty(), "CelebaTaskSampler",
          "no pair of the {} attributes ({}) has {} images of each class in the {} split's {} "
          "images",
          split_.name, fmt::join(split_.attribute_names, ", "), settings_.shots + settings_.queries,
          split_.name, split_.images->images());
  }

  const CelebaSplit& split() const { return split_; }
  const CelebaTaskSettings& settings() const { return settings_; }
  const std::vector<AttributeTask>& tasks() const { return tasks_; }

  TaskBatch<T, B> sample(std::int64_t tasks, Generator& gen) const {
    check(tasks > 0, "CelebaTaskSampler::sample", "no tasks requested ({})", tasks);
    const auto& s = settings_;
    const auto& images = *split_.images;
    std::vector<T> sx(static_cast<std::size_t>(tasks * 2 * s.shots * images.image_bytes())),
        qx(static_cast<std::size_t>(tasks * 2 * s.queries * images.image_bytes()));
    std::vector<T> sy, qy;
    T* support = sx.data();
    T* query = qx.data();
    for (std::int64_t t = 0; t < tasks; ++t) {
      const auto& task = tasks_[static_cast<std::size_t>(gen.index(std::ssize(tasks_)))];
      const bool positives_first = gen.index(2) == 0;
      for (int label = 0; label < 2; ++label) {
        const auto& members = (label == 0) == positives_first ? task.positives : task.negatives;
        const auto picks = detail::draw_from(members, {}, s.shots + s.queries, gen);
        detail::copy_images(images, std::span(picks).first(static_cast<std::size_t>(s.shots)),
                            support);
        detail::copy_images(images, std::span(picks).subspan(static_cast<std::size_t>(s.shots)),
                            query);
        sy.insert(sy.end(), static_cast<std::size_t>(s.shots), static_cast<T>(label));
        qy.insert(qy.end(), static_cast<std::size_t>(s.queries), static_cast<T>(label));
      }
    }
    const std::int64_t c = images.channels, h = images.height, w = images.width;
    return {Tensor<T, B>::from_host({tasks, 2 * s.shots, c, h, w}, sx),
            Tensor<T, B>::from_host({tasks, 2 * s.shots, 1}, sy),
            Tensor<T, B>::from_host({tasks, 2 * s.queries, c, h, w}, qx),
            Tensor<T, B>::from_host({tasks, 2 * s.queries, 1}, qy)};
  }

 private:
  CelebaSplit split_;
  CelebaTaskSettings settings_;
  std::vector<AttributeTask> tasks_;
};

// Ambiguous tasks of three attributes (meta-testing, Table 1): the support
// set has `shots` images of the three-attribute setting (label 1) and
// `shots` of its converse (label 0); candidate c is the two-attribute task
// of the pair without attribute c, with `queries` images of each class
// that are not in the support set (class 0 first). Kept: the settings whose
// support classes have `shots` images and whose candidates have shots +
// queries per class.
template <class T = float, class B = cpu>
class AmbiguousCelebaSampler {
 public:
  AmbiguousCelebaSampler(CelebaSplit split, CelebaTaskSettings settings)
      : split_(std::move(split)), settings_(settings) {
    settings_.validate("AmbiguousCelebaSampler");
    for (auto& task : attribute_tasks(split_, 3, settings_.rule, settings_.shots)) {
      Ambiguous a{std::move(task), {}};
      bool enough = true;
      for (std::size_t left_out = 0; left_out < 3; ++left_out) {
        std::vector<std::int64_t> pair;
        std::vector<bool> values;
        for (std::size_t k = 0; k < 3; ++k)
          if (k != left_out)
            pair.push_back(a.task.attributes[k]), values.push_back(a.task.values[k]);
        a.candidates[left_out] = attribute_task(split_, pair, values);
        const auto needed = settings_.shots + settings_.queries;
        enough = enough && std::ssize(a.candidates[left_out].positives) >= needed &&
                 std::ssize(a.candidates[left_out].negatives) >= needed;
      }
      if (enough) ambiguous_.push_back(std::move(a));
    }
    check(!ambiguous_.empty(), "AmbiguousCelebaSampler",
          "no three of the {} attributes ({}) make an ambiguous task with {} shots and {} "
          "queries in the {} split's {} images",
          split_.name, fmt::join(split_.attribute_names, ", "), settings_.shots, settings_.queries,
          split_.name, split_.images->images());
  }

  const CelebaSplit& split() const { return split_; }
  const CelebaTaskSettings& settings() const { return settings_; }
  std::int64_t task_count() const { return std::ssize(ambiguous_); }

  AmbiguousTasks<T, B> sample(std::int64_t tasks, Generator& gen) const {
    check(tasks > 0, "AmbiguousCelebaSampler::sample", "no tasks requested ({})", tasks);
    const auto& s = settings_;
    const auto& images = *split_.images;
    const auto bytes = static_cast<std::size_t>(images.image_bytes());
    std::vector<T> sx(static_cast<std::size_t>(tasks * 2 * s.shots) * bytes), sy;
    std::array<std::vector<T>, 3> cx, cy;
    for (auto& x : cx) x.resize(static_cast<std::size_t>(tasks * 2 * s.queries) * bytes);
    T* support = sx.data();
    std::array<T*, 3> candidate{cx[0].data(), cx[1].data(), cx[2].data()};
    AmbiguousTasks<T, B> out;
    for (std::int64_t t = 0; t < tasks; ++t) {
      const auto& a = ambiguous_[static_cast<std::size_t>(gen.index(std::ssize(ambiguous_)))];
      const auto negatives = detail::draw_from(a.task.negatives, {}, s.shots, gen);
      const auto positives = detail::draw_from(a.task.positives, {}, s.shots, gen);
      detail::copy_images(images, negatives, support);
      detail::copy_images(images, positives, support);
      sy.insert(sy.end(), static_cast<std::size_t>(s.shots), T(0));
      sy.insert(sy.end(), static_cast<std::size_t>(s.shots), T(1));
      out.names.push_back(a.task.name(split_));
      out.candidate_names.emplace_back();
      for (std::size_t c = 0; c < 3; ++c) {
        const auto& candidate_task = a.candidates[c];
        detail::copy_images(images,
                            detail::draw_from(candidate_task.negatives, negatives, s.queries, gen),
                            candidate[c]);
        detail::copy_images(images,
                            detail::draw_from(candidate_task.positives, positives, s.queries, gen),
                            candidate[c]);
        cy[c].insert(cy[c].end(), static_cast<std::size_t>(s.queries), T(0));
        cy[c].insert(cy[c].end(), static_cast<std::size_t>(s.queries), T(1));
        out.candidate_names.back().push_back(candidate_task.name(split_));
      }
    }
    const std::int64_t c = images.channels, h = images.height, w = images.width;
    out.support_x = Tensor<T, B>::from_host({tasks, 2 * s.shots, c, h, w}, sx);
    out.support_y = Tensor<T, B>::from_host({tasks, 2 * s.shots, 1}, sy);
    for (std::size_t k = 0; k < 3; ++k) {
      out.candidate_x.push_back(Tensor<T, B>::from_host({tasks, 2 * s.queries, c, h, w}, cx[k]));
      out.candidate_y.push_back(Tensor<T, B>::from_host({tasks, 2 * s.queries, 1}, cy[k]));
    }
    return out;
  }

 private:
  struct Ambiguous {
    AttributeTask task;
    std::array<AttributeTask, 3> candidates;
  };
  CelebaSplit split_;
  CelebaTaskSettings settings_;
  std::vector<Ambiguous> ambiguous_;
};

}  // namespace platipus::data
