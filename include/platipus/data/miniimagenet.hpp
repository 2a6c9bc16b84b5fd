// MiniImagenet (Vinyals et al. 2016) with the split of Ravi & Larochelle
// (2017): 64 / 16 / 20 classes in
//   <root>/{train,val,test}.csv   "filename,label" and one row per image
//   <root>/images/<filename>      84 x 84 RGB JPEGs (others are resized)
// A split is decoded once (RGB, size x size, 84 in MAML) and cached as
// "miniimagenet-<split>"; classes in the order they first appear.
#pragma once

#include <map>

#include "platipus/data/dataset_files.hpp"
#include "platipus/data/few_shot.hpp"
#include "platipus/data/image_cache.hpp"

namespace platipus::data {

inline FewShotSplit load_miniimagenet(const std::filesystem::path& root, std::string_view split,
                                      const CacheOptions& cache, CacheReport* report = nullptr,
                                      std::int64_t size = 84) {
  constexpr std::string_view who = "miniimagenet";
  const auto csv = root / (std::string(split) + ".csv");
  std::vector<ClassFiles> classes;
  std::map<std::string, std::size_t, std::less<>> class_index;
  for_each_line(csv, [&](std::string_view line, std::int64_t number) {
    const auto comma = line.find(',');
    check(comma != std::string_view::npos && comma > 0 && comma + 1 < line.size() &&
              line.find(',', comma + 1) == std::string_view::npos,
          who, "{}:{}: expected \"filename,label\", got \"{}\"", csv.string(), number, line);
    const auto filename = line.substr(0, comma), label = line.substr(comma + 1);
    if (number == 1 && filename == "filename" && label == "label") return;  // the header
    auto [it, added] = class_index.try_emplace(std::string(label), classes.size());
    if (added) classes.push_back({std::string(label), {}});
    classes[it->second].files.push_back(root / "images" / filename);
  });
  check(!classes.empty(), who, "{} lists no images", csv.string());
  FewShotSplit out;
  for (std::size_t c = 0; c < classes.size(); ++c)
    out.classes.push_back({static_cast<std::int64_t>(c), 0, classes[c].name});
  out.images = std::make_shared<const ImageSet>(cached_image_set(
      fmt::format("miniimagenet-{}", split), classes, {3, size, size}, cache, report));
  return out;
}

}  // namespace platipus::data
