// What the example programs share: progress display, summary statistics,
// result files, the call to the plot scripts, the failure report and the
// flags of every run. The paper's learners and their training are
// training.hpp's, the ranks ranks.hpp's, the random streams streams.hpp's.
#pragma once

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "platipus/core/file.hpp"
#include "platipus/meta/scores/evaluation.hpp"
#include "ranks.hpp"
#include "streams.hpp"

namespace examples {

namespace fs = std::filesystem;

// A one-line progress display on stderr: redrawn in place on a terminal,
// printed every tenth of the way otherwise (logs, CI). A resumed run's
// display starts at the step it goes on from.
class Progress {
 public:
  Progress(std::string label, long total, long first = 0)
      : label_(std::move(label)),
        total_(total),
        first_(first),
        start_(Clock::now()),
        tty_(::isatty(STDERR_FILENO) != 0) {}

  void update(long done, const std::string& status) {
    const double elapsed = seconds();
    const double per_step = done > first_ ? elapsed / static_cast<double>(done - first_) : 0;
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
  long total_, first_;
  Clock::time_point start_;
  bool tty_;
  long last_tenth_ = -1;
};

using platipus::Estimate;
using platipus::estimate;

// An estimate as results.json stores it.
inline nlohmann::json as_json(const Estimate& e) {
  return {{"mean", e.mean}, {"ci95", e.interval}};
}

// Every learner of a set scored on the same held-out tasks, the stream
// `tasks` of the seed, each drawing its models from its own stream:
// score(learner, tasks, models) returns a learner's scores of each task
// (platipus::held_out_regression, held_out_classification).
template <class Scores, class Set, class Score>
std::map<std::string, std::vector<Scores>> score_learners(const Set& learners, std::uint64_t seed,
                                                          std::uint64_t tasks, Score&& score) {
  std::map<std::string, std::vector<Scores>> scores;
  learners.for_each([&](const std::string& name, const auto& learner) {
    platipus::Generator task_draws(seed, tasks), model_draws(seed, stream::models(name));
    scores[name] = score(learner, task_draws, model_draws);
  });
  return scores;
}

// The estimates over tasks of each score, as results.json stores them.
inline nlohmann::json as_json(const std::vector<platipus::RegressionScores>& s) {
  using platipus::RegressionScores;
  return {{"mse", as_json(estimate(s, &RegressionScores::mse))},
          {"nll", as_json(estimate(s, &RegressionScores::nll))},
          {"coverage90", as_json(estimate(s, &RegressionScores::coverage))}};
}
inline nlohmann::json as_json(const std::vector<platipus::ClassificationScores>& s) {
  using platipus::ClassificationScores;
  return {{"accuracy", as_json(estimate(s, &ClassificationScores::accuracy))},
          {"nll", as_json(estimate(s, &ClassificationScores::nll))},
          {"ece", as_json(estimate(s, &ClassificationScores::ece))}};
}

// One row per learner of results[learner][key] as "mean +- interval", under
// the given column titles.
inline void print_scores(const nlohmann::json& results, const std::vector<std::string>& keys,
                         const std::vector<std::string>& titles) {
  fmt::print("  {:<11}", "");
  for (const auto& title : titles) fmt::print(" {:>16}", title);
  fmt::print("\n");
  for (const char* learner : {"maml", "maml_noise", "platipus"}) {
    fmt::print("  {:<11}", learner);
    for (const auto& key : keys)
      fmt::print(" {:>16}",
                 Estimate{results[learner][key]["mean"], results[learner][key]["ci95"]}.text());
    fmt::print("\n");
  }
}

// One id per run of an example, in everything the run writes (results,
// figure data, checkpoint metadata): a kill between two writes can leave
// files of two runs in one directory, and the ids tell them apart.
inline const std::string& run_id() {
  static const std::string id = [] {
    std::random_device entropy;
    const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    return fmt::format("{:%Y%m%dT%H%M%SZ}-{:08x}", fmt::gmtime(now), entropy());
  }();
  return id;
}

// Writes a JSON object atomically, stamped with run_id().
inline void write_json(const fs::path& path, nlohmann::json value) {
  value["run_id"] = run_id();
  platipus::write_file_atomically(path, value.dump(2) + "\n");
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

// A run stopped by SIGINT or SIGTERM after saving its checkpoint: every
// rank stops at the same step, so none is left waiting.
struct Stopped : std::runtime_error {
  Stopped(const std::string& what, int signal) : std::runtime_error(what), signal(signal) {}
  int signal;
};

// For main's catch (...): prints the exception in flight as one line on
// stderr, "program: what went wrong", and returns the exit status 1. Under
// MPI it then ends every rank (MPI_Abort), so none waits for this one. A
// stopped run instead returns the shell's status for its signal (130 for
// SIGINT, 143 for SIGTERM), every rank for itself.
inline int report_failure(std::string_view program) {
  try {
    throw;
  } catch (const Stopped& e) {
    if (is_root()) fmt::print(stderr, "{}: {}\n", program, e.what());
    return 128 + e.signal;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "{}: out of memory (a smaller --meta-batch, --support, --samples or --eval-tasks "
               "needs less)\n",
               program);
  } catch (const std::exception& e) {  // platipus::error and anything from below it
    fmt::print(stderr, "{}: {}\n", program, e.what());
  } catch (...) {
    fmt::print(stderr, "{}: an unknown exception\n", program);
  }
  try {
    if (auto* ranks = world(); ranks != nullptr && ranks->size() > 1) {
      std::fflush(nullptr);
      ranks->abort(1);
    }
  } catch (...) {  // MPI itself failed to start: there are no ranks to end
  }
  return 1;
}

// A decimal integer in [0, 2^64 - 1], refused otherwise (CLI11 alone turns
// "-1" and 2^64 into 2^64 - 1 without a word).
inline const CLI::Validator unsigned_64_bits(
    [](std::string& text) -> std::string {
      std::uint64_t value = 0;
      const auto [end, problem] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || problem != std::errc() || end != text.data() + text.size())
        return fmt::format("{} is not an integer from 0 to 18446744073709551615", text);
      return {};
    },
    "UINT64");

// An output directory: not empty (an empty --out wrote into the current directory).
inline const CLI::Validator output_directory(
    [](std::string& text) -> std::string {
      return text.empty() ? "the output directory must not be empty" : std::string();
    },
    "DIR");

// The flags every experiment program has beside the training settings,
// spelled and behaving alike in all of them: where it writes, its
// checkpoint, a quick smoke run, evaluation only, the held-out tasks, the
// samples per task of the sampling learners, and no figures.
struct RunFlags {
  std::string out, checkpoint;
  bool quick = false, eval_only = false;
  long eval_tasks = 600, samples = 10;
  bool no_plot = false;

  explicit RunFlags(std::string default_out) : out(std::move(default_out)) {}

  void add_flags(CLI::App& app) {
    app.add_option("--out", out, "output directory (metrics, results, figures, checkpoint)")
        ->check(output_directory);
    app.add_flag("--quick", quick,
                 "a few minutes' training and a small evaluation (unless --steps and "
                 "--eval-tasks say otherwise): a smoke test");
    app.add_option("--checkpoint", checkpoint,
                   "checkpoint file to write (default DIR/checkpoint.safetensors) or, with "
                   "--eval-only, to read");
    auto* evaluate =
        app.add_flag("--eval-only", eval_only, "skip training: load --checkpoint and evaluate")
            ->needs(app.get_option("--checkpoint"));
    if (auto* resume = app.get_option_no_throw("--resume")) evaluate->excludes(resume);
    app.add_option("--eval-tasks", eval_tasks, "held-out tasks for the reported scores")
        ->check(CLI::Range(1L, 100'000L));
    app.add_option("--samples", samples, "samples per task of PLATIPUS and MAML + noise")
        ->check(CLI::Range(1L, 1'000L));
    app.add_flag("--no-plot", no_plot,
                 "do not call the plot script (of the programs that draw figures)");
  }

  // Draws the figures of plots/<script>.py from `out` unless --no-plot.
  void plot(const std::string& script, const fs::path& dir) const {
    if (!no_plot) examples::plot(script, dir);
  }

  // After parsing: --quick's step and task counts where the command line
  // gave none; a few minutes on two cores (the image programs take fewer
  // steps, each costs seconds).
  template <class Options>
  void apply_quick(const CLI::App& app, Options& o, long steps = 200, long tasks = 100) {
    if (!quick) return;
    if (app.count("--steps") == 0) o.steps = steps;
    if (app.count("--eval-tasks") == 0) eval_tasks = tasks;
  }
};

}  // namespace examples
