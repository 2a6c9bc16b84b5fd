// One Python class per meta-learner, dtype and backend ("Maml_float32",
// "Maml_float32_cuda"), over the library's MetaLearner: the Python package's
// classes (platipus/_learners.py) hold one and pass it their default
// generator. Arrays in are host memory; a learner on the GPU copies them to
// the device, and its results back. The GIL is released while
// the library works; the training loop takes it back to call Python (a
// sampler, the record callback) and, between steps, to look for Ctrl-C.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "glue.hpp"

namespace platipus::python {

template <class Objective>
class LearnerBinding {
 public:
  using Learner = MetaLearner<Objective>;
  using T = typename Learner::T;
  using B = typename Objective::Backend;
  using Settings = typename Learner::Settings;

  LearnerBinding(const nn::Sequential& network, const AnyLoss& loss, const std::string& settings,
                 Generator& gen)
      : learner_(network, loss, settings_from<Settings>(settings, Objective::name), gen) {}

  // One meta-update; the step's statistics by name.
  nb::dict meta_step(const Array& support_x, const Array& support_y, const Array& query_x,
                     const Array& query_y, Generator& gen) {
    const auto batch = batch_of<T, B>(support_x, support_y, query_x, query_y, who("meta_step"));
    MetaStepResult result;
    {
      nb::gil_scoped_release release;
      result = learner_.meta_train_step(batch, gen);
    }
    nb::dict out;
    out["query_loss"] = result.query_loss;
    out["support_loss"] = result.support_loss;
    for (const auto& s : result.statistics) out[nb::str(s.name.data(), s.name.size())] = s.value;
    return out;
  }

  // The library's training loop (meta_train): callback(record) after every
  // record; stops with KeyboardInterrupt between two steps on Ctrl-C.
  std::int64_t fit(const AnySampler& sampler, Generator& gen, std::int64_t steps,
                   std::int64_t meta_batch, std::int64_t record_every, nb::object callback,
                   bool cuda_graph) {
    const ErasedSampler<T, B> erased{sampler.template for_learner<T, B>()};
    const TrainingLoop loop{.steps = steps,
                            .meta_batch = meta_batch,
                            .record_every = record_every,
                            .name = std::string(Objective::name),
                            .cuda_graph = cuda_graph};
    bool interrupted = false;
    const auto on_record = [&](const TrainingRecord& r) {
      if (callback.is_none()) return;
      nb::gil_scoped_acquire gil;
      nb::dict record;
      record["step"] = r.step;
      record["query_loss"] = r.query_loss;
      for (const auto& s : r.statistics) record[nb::str(s.name.data(), s.name.size())] = s.value;
      record["seconds"] = r.seconds;
      callback(record);
    };
    const TrainingControl control{.after_step = [&](const LoopPosition&) {
      nb::gil_scoped_acquire gil;
      interrupted = PyErr_CheckSignals() != 0;
      return !interrupted;
    }};
    LoopPosition at;
    {
      nb::gil_scoped_release release;
      at = meta_train(learner_, erased, gen, loop, on_record, control);
    }
    if (interrupted) throw nb::python_error();  // the signal handler's KeyboardInterrupt
    return at.step;
  }

  NumpyArray<T> sample(const Array& support_x, const Array& support_y, std::int64_t n,
                       Generator& gen) const {
    const auto [x, y] = support(support_x, support_y, "sample");
    nb::gil_scoped_release release;
    return array_of(learner_.sample(x, y, n, gen));
  }

  NumpyArray<T> adapt(const Array& support_x, const Array& support_y, Generator& gen) const requires
      requires(const Learner& l, const Tensor<T, B>& x, Generator& g) {
    l.adapt_to(x, x, g);
  }
  {
    const auto [x, y] = support(support_x, support_y, "adapt");
    nb::gil_scoped_release release;
    return array_of(learner_.adapt_to(x, y, gen));
  }

  NumpyArray<T> predict(const Array& parameters, const Array& x) const {
    const auto p = on_backend<B>(tensor_of<T>(parameters, who("predict"), "parameters"));
    const auto inputs = on_backend<B>(tensor_of<T>(x, who("predict"), "x"));
    nb::gil_scoped_release release;
    return array_of(learner_.predict(p, inputs));
  }

  NumpyArray<T> query_losses(const Array& support_x, const Array& support_y, const Array& query_x,
                             const Array& query_y, Generator& gen) const {
    const auto batch = batch_of<T, B>(support_x, support_y, query_x, query_y, who("query_losses"));
    nb::gil_scoped_release release;
    return array_of(learner_.query_losses(batch, gen));
  }

  // Each held-out task's scores (meta/scores/evaluation.hpp): tasks drawn
  // from `sampler` with task_draws, models with model_draws.
  nb::list held_out_regression(const AnySampler& sampler, std::int64_t tasks, std::int64_t samples,
                               std::int64_t batch, double noise_std, Generator& task_draws,
                               Generator& model_draws) const {
    const ErasedSampler<T, B> erased{sampler.template for_learner<T, B>()};
    std::vector<RegressionScores> scores;
    {
      nb::gil_scoped_release release;
      scores = platipus::held_out_regression(learner_, erased,
                                             {.tasks = tasks, .samples = samples, .batch = batch},
                                             noise_std, task_draws, model_draws);
    }
    nb::list out;
    for (const auto& s : scores) out.append(as_dict(s));
    return out;
  }
  nb::list held_out_classification(const AnySampler& sampler, std::int64_t tasks,
                                   std::int64_t samples, std::int64_t batch, Generator& task_draws,
                                   Generator& model_draws) const {
    const ErasedSampler<T, B> erased{sampler.template for_learner<T, B>()};
    std::vector<ClassificationScores> scores;
    {
      nb::gil_scoped_release release;
      scores = platipus::held_out_classification(
          learner_, erased, {.tasks = tasks, .samples = samples, .batch = batch}, task_draws,
          model_draws);
    }
    nb::list out;
    for (const auto& s : scores) out.append(as_dict(s));
    return out;
  }

#ifdef PLATIPUS_PYTHON_IMAGES
  // Each ambiguous task's coverage, accuracy and NLL (meta/scores/
  // ambiguity.hpp) of tasks as AmbiguousCeleba.sample gives them.
  nb::list evaluate_ambiguity(const nb::dict& tasks, std::int64_t assignment,
                              std::int64_t likelihood, std::int64_t at_once, Generator& gen) const {
    const std::string w = who("evaluate_ambiguity");
    AmbiguousTasks<T, B> t;
    const auto item = [&](const char* key) {
      check(tasks.contains(key), w, "the tasks have no '{}' (AmbiguousCeleba.sample's dict)", key);
      return tasks[key];
    };
    const auto read = [&](nb::handle value, const char* name, int rank) {
      return on_backend<B>(tensor_of<T>(array_argument(value, w, name), w, name, rank));
    };
    t.support_x = read(item("support_x"), "support_x", 0);
    t.support_y = read(item("support_y"), "support_y", 3);
    for (const auto& x : item("candidate_x")) t.candidate_x.push_back(read(x, "candidate_x", 0));
    for (const auto& y : item("candidate_y")) t.candidate_y.push_back(read(y, "candidate_y", 3));
    std::vector<AmbiguityScores> scores;
    {
      nb::gil_scoped_release release;
      scores = platipus::evaluate_ambiguity(
          learner_, t, {.assignment = assignment, .likelihood = likelihood, .at_once = at_once},
          gen);
    }
    nb::list out;
    for (const auto& s : scores) out.append(as_dict(s));
    return out;
  }
#endif

  // The meta-parameters by name (MAML: "theta"; PLATIPUS: its five parts).
  std::vector<std::pair<std::string, NumpyArray<T>>> state() const {
    std::vector<std::pair<std::string, NumpyArray<T>>> out;
    for (const auto& [name, tensor] : learner_.state()) out.emplace_back(name, array_of(*tensor));
    return out;
  }
  void set_state(const std::string& name, const Array& value) {
    learner_.set_state(name, copy_on_backend<B>(tensor_of<T>(value, who("set_state"), name)));
  }

  void save(const std::string& path, const std::string& metadata) const {
    const auto j = nlohmann::json::parse(metadata);
    nb::gil_scoped_release release;
    with_file([&] { io::save(path, learner_, j); });
  }
  std::string load(const std::string& path) {
    nb::gil_scoped_release release;
    return with_file([&] { return io::load(path, learner_).dump(); });
  }

  std::string settings() const {
    return nlohmann::json(learner_.settings()).dump();
  }
  std::int64_t parameter_count() const {
    return learner_.model().layout().size();
  }
  int steps() const {
    return learner_.steps();
  }
  bool adapts_randomly() const {
    return learner_.adapts_randomly();
  }

 private:
  static std::string who(const char* method) {
    return fmt::format("{}.{}", Objective::name, method);
  }

  std::pair<Tensor<T, B>, Tensor<T, B>> support(const Array& support_x, const Array& support_y,
                                                const char* method) const {
    auto x = on_backend<B>(tensor_of<T>(support_x, who(method), "support_x"));
    auto y = on_backend<B>(tensor_of<T>(support_y, who(method), "support_y", 3));
    check(x.rank() >= 3 && x.dim(0) == y.dim(0) && x.dim(1) == y.dim(1), who(method),
          "support_x {} and support_y {} are not [tasks, points, ...] of one batch", x.shape(),
          y.shape());
    return {std::move(x), std::move(y)};
  }

  Learner learner_;
};

// Binds LearnerBinding<Objective> as `name` in m.
template <class Objective>
void bind_learner(nb::module_& m, const char* name) {
  using namespace nb::literals;
  using L = LearnerBinding<Objective>;
  auto c =
      nb::class_<L>(m, name)
          .def(nb::init<const nn::Sequential&, const AnyLoss&, const std::string&, Generator&>(),
               "network"_a, "loss"_a, "settings"_a, "generator"_a)
          .def("meta_step", &L::meta_step, "support_x"_a, "support_y"_a, "query_x"_a, "query_y"_a,
               "generator"_a)
          .def("fit", &L::fit, "sampler"_a, "generator"_a, "steps"_a, "meta_batch"_a,
               "record_every"_a, "callback"_a.none(), "cuda_graph"_a)
          .def("sample", &L::sample, "support_x"_a, "support_y"_a, "n"_a, "generator"_a)
          .def("predict", &L::predict, "parameters"_a, "x"_a)
          .def("query_losses", &L::query_losses, "support_x"_a, "support_y"_a, "query_x"_a,
               "query_y"_a, "generator"_a)
          .def("held_out_regression", &L::held_out_regression, "sampler"_a, "tasks"_a, "samples"_a,
               "batch"_a, "noise_std"_a, "task_draws"_a, "model_draws"_a)
          .def("held_out_classification", &L::held_out_classification, "sampler"_a, "tasks"_a,
               "samples"_a, "batch"_a, "task_draws"_a, "model_draws"_a)
          .def("state", &L::state)
          .def("set_state", &L::set_state, "name"_a, "value"_a)
          .def("save", &L::save, "path"_a, "metadata"_a)
          .def("load", &L::load, "path"_a)
          .def_prop_ro("settings", &L::settings)
          .def_prop_ro("parameter_count", &L::parameter_count)
          .def_prop_ro("steps", &L::steps)
          .def_prop_ro("adapts_randomly", &L::adapts_randomly)
          .def_prop_ro_static("statistic_names", [](nb::handle) {
            std::vector<std::string> names;
            for (const auto n : MetaLearner<Objective>::statistic_names) names.emplace_back(n);
            return names;
          });
#ifdef PLATIPUS_PYTHON_IMAGES
  c.def("evaluate_ambiguity", &L::evaluate_ambiguity, "tasks"_a, "assignment"_a, "likelihood"_a,
        "at_once"_a, "generator"_a);
#endif
  if constexpr (requires(const L& l, const Array& a, Generator& g) { l.adapt(a, a, g); })
    c.def("adapt", &L::adapt, "support_x"_a, "support_y"_a, "generator"_a);
}

// Every learner of the library for dtype T on backend B, named
// "<Learner>_<dtype>" on the CPU and "<Learner>_<dtype>_<backend>" otherwise.
template <class T, class B>
void bind_learners(nb::module_& m);

#ifdef PLATIPUS_PYTHON_CUDA
// The CUDA devices this process sees (0 without a device or driver).
int cuda_device_count();
#endif

}  // namespace platipus::python
