// Metrics files: one row of named numbers per record, kept as JSON lines and
// as CSV. Each flush rewrites both files atomically, so a reader (a plot
// script, a second terminal) never sees a torn line.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "platipus/io/atomic_file.hpp"

namespace platipus::io {

class MetricsLog {
 public:
  // Writes <stem>.jsonl and <stem>.csv under `directory`.
  MetricsLog(std::filesystem::path directory, std::string stem)
      : jsonl_(directory / (stem + ".jsonl")), csv_(directory / (stem + ".csv")) {}

  void record(const nlohmann::json& row) {
    check(row.is_object(), "MetricsLog::record", "a row must be a JSON object, got {}", row.dump());
    for (const auto& [key, value] : row.items())
      if (std::find(columns_.begin(), columns_.end(), key) == columns_.end())
        columns_.push_back(key);
    rows_.push_back(row);
  }

  void flush() const {
    std::string jsonl, csv;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      if (i) csv += ",";
      csv += cell(columns_[i]);
    }
    csv += "\n";
    for (const auto& row : rows_) {
      jsonl += row.dump() + "\n";
      for (std::size_t i = 0; i < columns_.size(); ++i) {
        if (i) csv += ",";
        if (row.contains(columns_[i])) {
          const auto& v = row[columns_[i]];
          csv += cell(v.is_string() ? v.get<std::string>() : v.dump());
        }
      }
      csv += "\n";
    }
    write_file_atomically(jsonl_, jsonl);
    write_file_atomically(csv_, csv);
  }

  const std::vector<nlohmann::json>& rows() const { return rows_; }

 private:
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
