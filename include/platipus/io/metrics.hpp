// Metrics files: one row of named numbers per record, kept as JSON lines and
// as CSV. Every record reaches both files at once, so a run that stops early
// (a divergence, a kill) keeps every row up to that point. A row is appended
// with one write; the CSV is rewritten atomically only when a row brings a
// new column, so a reader (a plot script, a second terminal) never sees a
// torn line or a header that does not match the rows. resume() takes up the
// files of a run that stopped, at the row count its training state saved.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "platipus/core/file.hpp"

namespace platipus::io {

class MetricsLog {
 public:
  // Writes <stem>.jsonl and <stem>.csv under `directory`, replacing files of
  // an earlier run at the first record.
  MetricsLog(std::filesystem::path directory, std::string stem)
      : jsonl_(directory / (stem + ".jsonl")), csv_(directory / (stem + ".csv")) {}

  void record(const nlohmann::json& row) {
    check(row.is_object(), "MetricsLog::record", "a row must be a JSON object, got {}", row.dump());
    bool new_column = false;
    for (const auto& [key, value] : row.items())
      if (std::find(columns_.begin(), columns_.end(), key) == columns_.end()) {
        columns_.push_back(key);
        new_column = true;
      }
    rows_.push_back(row);
    if (rows_.size() == 1)
      write_file_atomically(jsonl_, row.dump() + "\n");
    else
      append(jsonl_, row.dump() + "\n");
    if (new_column) {
      rewrite_csv();
    } else {
      append(csv_, csv_row(row));
    }
  }

  // Takes up the files of a run that stopped, keeping their first `rows`
  // rows (those its training state counted; later ones, and a line torn by a
  // kill, are dropped and will be recomputed, never duplicated). Both files
  // are rewritten atomically. Throws naming the file when it holds fewer
  // rows or a line that is not a JSON object.
  void resume(std::size_t rows) {
    columns_.clear();
    rows_.clear();
    if (rows == 0) return;  // the next record starts the files afresh
    const std::string text = read_file(jsonl_);
    std::string kept;
    std::size_t start = 0;
    while (rows_.size() < rows) {
      const std::size_t end = text.find('\n', start);
      check(end != std::string::npos, "MetricsLog::resume",
            "{} holds {} complete rows, but the run to resume had written {}", jsonl_.string(),
            rows_.size(), rows);
      const std::string line = text.substr(start, end - start);
      auto row = nlohmann::json::parse(line, nullptr, false);
      check(row.is_object(), "MetricsLog::resume", "{}, line {}: not a JSON object: {}",
            jsonl_.string(), rows_.size() + 1, line);
      for (const auto& [key, value] : row.items())
        if (std::find(columns_.begin(), columns_.end(), key) == columns_.end())
          columns_.push_back(key);
      rows_.push_back(std::move(row));
      kept += line + "\n";
      start = end + 1;
    }
    write_file_atomically(jsonl_, kept);
    rewrite_csv();
  }

  const std::vector<nlohmann::json>& rows() const { return rows_; }

 private:
  // The CSV file anew, header and every row, in one atomic write.
  void rewrite_csv() const {
    std::string csv = header();
    for (const auto& r : rows_) csv += csv_row(r);
    write_file_atomically(csv_, csv);
  }
  std::string header() const {
    std::string line;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      if (i) line += ",";
      line += cell(columns_[i]);
    }
    return line + "\n";
  }

  std::string csv_row(const nlohmann::json& row) const {
    std::string line;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      if (i) line += ",";
      if (row.contains(columns_[i])) {
        const auto& v = row[columns_[i]];
        line += cell(v.is_string() ? v.get<std::string>() : v.dump());
      }
    }
    return line + "\n";
  }

  // One write(2) of a whole line to the end of the file.
  static void append(const std::filesystem::path& path, const std::string& line) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    check(fd >= 0, "MetricsLog", "cannot open {} to append: {}", path.string(),
          std::strerror(errno));
    ::ssize_t n;
    do n = ::write(fd, line.data(), line.size());
    while (n < 0 && errno == EINTR);
    const std::string reason = std::strerror(errno);
    ::close(fd);
    check(n == static_cast<::ssize_t>(line.size()), "MetricsLog", "appending to {} failed: {}",
          path.string(), reason);
  }

  // RFC 4180: a cell holding a comma, a quote or a line break is quoted, its
  // quotes doubled.
  static std::string cell(const std::string& text) {
    if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
    std::string quoted = "\"";
    for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }

  std::filesystem::path jsonl_, csv_;
  std::vector<std::string> columns_;
  std::vector<nlohmann::json> rows_;
};

}  // namespace platipus::io
