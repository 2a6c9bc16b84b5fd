// A data set's files on disk: the images of a class directory, and text
// files (split lists, CSV) read line by line with line numbers for errors.
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/ranges.h>

#include "platipus/core/file.hpp"

namespace platipus::data {

// The regular files in `directory` whose extension is one of `extensions`
// (compared without case, e.g. ".png"), sorted by name. Throws naming the
// directory when it cannot be read or holds no such file.
inline std::vector<std::filesystem::path> files_in(
    const std::filesystem::path& directory, std::initializer_list<std::string_view> extensions) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  std::filesystem::directory_iterator it(directory, ec), end;
  check(!ec, "files_in", "cannot read directory {}: {}", directory.string(), ec.message());
  for (; it != end; it.increment(ec)) {
    check(!ec, "files_in", "cannot read directory {}: {}", directory.string(), ec.message());
    std::string extension = it->path().extension().string();
    std::ranges::transform(extension, extension.begin(),
                           [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (std::ranges::find(extensions, std::string_view(extension)) != extensions.end() &&
        it->is_regular_file(ec))
      files.push_back(it->path());
  }
  check(!files.empty(), "files_in", "{} holds no {} files", directory.string(),
        fmt::join(extensions, " or "));
  std::ranges::sort(files);
  return files;
}

// Calls f(line, number) for each line of a text file that is not blank,
// numbered from 1, without its line ending (LF or CRLF).
template <class F>
void for_each_line(const std::filesystem::path& file, F&& f) {
  const std::string text = read_file(file);
  std::int64_t number = 0;
  for (std::size_t begin = 0; begin < text.size();) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++number;
    if (line.find_first_not_of(" \t") != std::string_view::npos) f(line, number);
    begin = end + 1;
  }
}

}  // namespace platipus::data
