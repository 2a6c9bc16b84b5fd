// Omniglot (Lake et al. 2015) in its usual layout, split as Vinyals et al.
// (2016) split it:
//   <root>/images_background/<Alphabet>/characterNN/*.png  (30 alphabets)
//   <root>/images_evaluation/<Alphabet>/characterNN/*.png  (20 alphabets)
//   <root>/splits/vinyals/{train,val,trainval,test}.txt, one
//   "<Alphabet>/characterNN/rotDDD" per line, DDD in {000, 090, 180, 270}:
//   every rotation of a character is a class of its own.
// A split's characters are decoded once (grey, resized to size x size,
// 28 in MAML) and cached as "omniglot-<split>"; the rotations are applied
// when tasks are drawn. Ink becomes 1 on a 0 background (invert), as in
// MAML's scripts.
#pragma once

#include <map>

#include "platipus/data/dataset_files.hpp"
#include "platipus/data/few_shot.hpp"
#include "platipus/data/image_cache.hpp"

namespace platipus::data {

inline FewShotSplit load_omniglot(const std::filesystem::path& root, std::string_view split,
                                  const CacheOptions& cache, CacheReport* report = nullptr,
                                  std::int64_t size = 28) {
  constexpr std::string_view who = "omniglot";
  const auto split_file = root / "splits" / "vinyals" / (std::string(split) + ".txt");
  std::vector<ClassFiles> characters;
  std::map<std::string, std::int64_t> character_index;
  FewShotSplit out;
  out.invert = true;
  for_each_line(split_file, [&](std::string_view line, std::int64_t number) {
    const auto slash = line.rfind('/');
    const auto rotation =
        slash == std::string_view::npos ? std::string_view() : line.substr(slash + 1);
    const int turns = rotation == "rot000"   ? 0
                      : rotation == "rot090" ? 1
                      : rotation == "rot180" ? 2
                      : rotation == "rot270" ? 3
                                             : -1;
    check(turns >= 0 && slash > 0, who,
          "{}:{}: expected Alphabet/characterNN/rotDDD with DDD one of 000, 090, 180, 270, got "
          "\"{}\"",
          split_file.string(), number, line);
    const std::string character(line.substr(0, slash));
    auto [it, added] = character_index.try_emplace(character, std::ssize(characters));
    if (added) {
      std::filesystem::path directory;
      for (const char* part : {"images_background", "images_evaluation"})
        if (std::error_code ec; std::filesystem::is_directory(root / part / character, ec))
          directory = root / part / character;
      check(!directory.empty(), who,
            "{}:{}: character {} is in neither images_background nor images_evaluation under {}",
            split_file.string(), number, character, root.string());
      characters.push_back({character, files_in(directory, {".png"})});
    }
    out.classes.push_back({it->second, turns, std::string(line)});
  });
  check(!out.classes.empty(), who, "{} lists no classes", split_file.string());
  out.images = std::make_shared<const ImageSet>(cached_image_set(
      fmt::format("omniglot-{}", split), characters, {1, size, size}, cache, report));
  return out;
}

}  // namespace platipus::data
