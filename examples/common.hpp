// What the example programs share: progress display, summary statistics,
// result files, checkpoints holding several meta-learners, and the call to
// the plot scripts.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "platipus/io/checkpoint.hpp"
#include "platipus/io/metrics.hpp"

namespace examples {

namespace fs = std::filesystem;

// A one-line progress display on stderr: redrawn in place on a terminal,
// printed every tenth of the way otherwise (logs, CI).
class Progress {
 public:
  Progress(std::string label, long total)
      : label_(std::move(label)),
        total_(total),
        start_(Clock::now()),
        tty_(::isatty(STDERR_FILENO) != 0) {}

  void update(long done, const std::string& status) {
    const double elapsed = seconds();
    const double per_step = done > 0 ? elapsed / static_cast<double>(done) : 0;
    const std::string line =
        fmt::format("[{}] {}/{}  {}  {:.2f} ms/step  eta {:.0f} s", label_, done, total_, status,
                    1000 * per_step, per_step * static_cast<double>(total_ - done));
    if (tty_) {
      fmt::print(stderr, "\r{:<100}", line);
    } else if (done == total_ || done * 10 / total_ != last_tenth_) {
      last_tenth_ = done * 10 / total_;
      fmt::print(stderr, "{}\n", line);
    }
    if (tty_ && done == total_) fmt::print(stderr, "\n");
  }

  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  long total_;
  Clock::time_point start_;
  bool tty_;
  long last_tenth_ = -1;
};

// Mean and the half-width of a normal-approximation 95% interval.
struct Estimate {
  double mean = 0, interval = 0;
  nlohmann::json json() const { return {{"mean", mean}, {"ci95", interval}}; }
  std::string text() const { return fmt::format("{:.3f} +- {:.3f}", mean, interval); }
};

inline Estimate estimate(const std::vector<double>& values) {
  const double n = static_cast<double>(values.size());
  double mean = 0, variance = 0;
  for (double v : values) mean += v / n;
  for (double v : values) variance += (v - mean) * (v - mean) / std::max(1.0, n - 1);
  return {mean, 1.96 * std::sqrt(variance / n)};
}

inline void write_json(const fs::path& path, const nlohmann::json& value) {
  platipus::io::write_file_atomically(path, value.dump(2) + "\n");
}

// A checkpoint holding a MAML and a PLATIPUS learner of one model, their
// tensors prefixed with "maml/" and "platipus/".
template <class Maml, class Platipus>
void save_learners(const fs::path& path, const nlohmann::json& metadata, const Maml& maml,
                   const Platipus& platipus) {
  auto named = maml.state();
  for (auto& entry : named) entry.first = "maml/" + entry.first;
  for (const auto& [name, tensor] : platipus.state())
    named.emplace_back("platipus/" + name, tensor);
  platipus::io::save_checkpoint(path, maml.model().layout(), named, metadata);
}

// Loads what save_learners wrote; throws platipus::error naming the file when
// it is missing, corrupt or written for another architecture.
template <class Maml, class Platipus>
nlohmann::json load_learners(const fs::path& path, Maml& maml, Platipus& platipus) {
  using Tensor = std::remove_cvref_t<decltype(maml.parameters())>;
  auto checkpoint =
      platipus::io::load_checkpoint<typename Tensor::value_type, typename Tensor::backend>(path);
  auto restore = [&](auto& learner, const std::string& prefix) {
    for (const auto& [name, tensor] : learner.state())
      learner.set_state(name, platipus::io::take(checkpoint, path, learner.model().layout(),
                                                 prefix + name, tensor->shape()));
  };
  restore(maml, "maml/");
  restore(platipus, "platipus/");
  return checkpoint.metadata;
}

// A Python interpreter with matplotlib: $PLATIPUS_PYTHON, python3 on the
// PATH, or the system's /usr/bin/python3 (where Debian's python3-matplotlib
// lives when another python3 comes first on the PATH). Empty when none.
inline std::string python_with_matplotlib() {
  std::vector<std::string> candidates{"python3", "/usr/bin/python3"};
  if (const char* chosen = std::getenv("PLATIPUS_PYTHON"))
    candidates.insert(candidates.begin(), chosen);
  for (const auto& python : candidates)
    if (std::system(fmt::format("'{}' -c 'import matplotlib' >/dev/null 2>&1", python).c_str()) ==
        0)
      return python;
  return {};
}

// Runs plots/<script>.py on the output directory; the scripts are copied
// next to the executables.
inline void plot(const std::string& script, const fs::path& out) {
  const fs::path path =
      fs::read_symlink("/proc/self/exe").parent_path() / "plots" / (script + ".py");
  if (!fs::exists(path)) {
    fmt::print(stderr, "plot script {} not found; skipping figures\n", path.string());
    return;
  }
  const std::string python = python_with_matplotlib();
  if (python.empty()) {
    fmt::print(stderr,
               "no python3 with matplotlib found; to draw the figures later run: python3 {} {}\n",
               path.string(), out.string());
    return;
  }
  const std::string command = fmt::format("'{}' '{}' '{}'", python, path.string(), out.string());
  std::fflush(nullptr);  // our report first, then the script's lines
  if (std::system(command.c_str()) != 0)
    fmt::print(stderr, "the plot script failed: {}\n", command);
}

}  // namespace examples
