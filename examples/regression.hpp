// The 1-D regression setting of the PLATIPUS paper (Section 5 and the
// appendix), shared by the sine_line and active_learning examples: the
// network, the task sampler and the paper's settings.
#pragma once

#include "common.hpp"

namespace examples {

using platipus::Generator;
using RegressionLearners = Learners<platipus::MseLoss>;
using Sampler = platipus::data::SinusoidLineSampler<float, ExampleBackend>;

struct RegressionOptions : TrainingOptions {
  long support = 5;  // K: 5-shot regression
  long query = 10;

  RegressionOptions() {
    inner_rate = 1e-3;  // paper: alpha = 0.001 for regression
    kl_weight = 1.5;    // paper: 1.5 for 1-D regression
  }

  void add_flags(CLI::App& app) {
    TrainingOptions::add_flags(app);
    app.add_option("--support", support, "K, support points per training task")
        ->check(CLI::PositiveNumber);
  }

  nlohmann::json json() const {
    auto j = TrainingOptions::json();
    j["support"] = support;
    j["query"] = query;
    return j;
  }
};

// The paper's network: a 20-dim bias transformation on the input, then
// 3 x 100 ReLU layers.
inline platipus::nn::Sequential paper_network() {
  return platipus::nn::mlp(
      {.inputs = 1, .hidden = {100, 100, 100}, .outputs = 1, .bias_transform = 20});
}

inline RegressionLearners prepare(const RegressionOptions& o, bool eval_only,
                                  const std::string& checkpoint, const fs::path& out) {
  return examples::prepare<platipus::MseLoss>(paper_network(),
                                              Sampler({.support = o.support, .query = o.query}), o,
                                              eval_only, checkpoint, out, o.json());
}

}  // namespace examples
