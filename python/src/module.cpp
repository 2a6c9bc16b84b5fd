// platipus._platipus: the extension module under the Python package
// (python/platipus). Settings travel as JSON text, which the package writes
// from keyword arguments; see docs/python.md.
#include <optional>

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "learners_all.hpp"
#ifdef PLATIPUS_PYTHON_CUDA
#include "platipus/backend/cuda/cuda.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;
using namespace platipus;
using namespace platipus::python;

namespace {

AnyLoss loss_from(const std::string& kind, const std::string& settings) {
  if (kind == "MseLoss") return {settings_from<MseLoss>(settings, kind), kind};
  if (kind == "GaussianNllLoss") return {settings_from<GaussianNllLoss>(settings, kind), kind};
  if (kind == "BceWithLogitsLoss") return {settings_from<BceWithLogitsLoss>(settings, kind), kind};
  if (kind == "SoftmaxCrossEntropyLoss")
    return {settings_from<SoftmaxCrossEntropyLoss>(settings, kind), kind};
  fail("loss", "no loss named '{}'", kind);
}

#ifdef PLATIPUS_PYTHON_IMAGES
data::CelebaTaskSettings celeba_settings(std::int64_t shots, std::int64_t queries,
                                         const std::string& rule, std::string_view who) {
  check(rule == "converse" || rule == "both_or_neither", who,
        "rule must be 'converse' or 'both_or_neither', got '{}'", rule);
  const data::CelebaTaskSettings s{.shots = shots,
                                   .queries = queries,
                                   .rule = rule == "converse"
                                               ? data::CelebaTaskRule::converse
                                               : data::CelebaTaskRule::both_or_neither};
  s.validate(who);
  return s;
}

data::CelebaSplit load_celeba_split(const std::string& root, const std::string& split,
                                    std::int64_t size, const std::string& cache_directory) {
  return data::load_celeba(
      root, split, {.directory = cache_directory, .threads = 0, .progress = {}}, nullptr, size);
}

// PLATIPUS's ambiguous CelebA tasks (Section 5): three attributes of which
// the support set shows two, and a candidate query set for each pair. The
// float32 sampler is made with the object (it enumerates the split's
// attribute triples, and refuses a split that has none); the float64 one on
// its first use, as few ask for it.
struct AmbiguousCeleba {
  data::AmbiguousCelebaSampler<float> float32;
  mutable std::optional<data::AmbiguousCelebaSampler<double>> float64;

  template <class T>
  nb::dict sample(std::int64_t tasks, Generator& gen) const {
    // Made with the GIL held, which orders two threads' first calls.
    if constexpr (std::is_same_v<T, double>)
      if (!float64) float64.emplace(float32.split(), float32.settings());
    AmbiguousTasks<T, cpu> drawn;
    {
      nb::gil_scoped_release release;
      if constexpr (std::is_same_v<T, float>)
        drawn = float32.sample(tasks, gen);
      else
        drawn = float64->sample(tasks, gen);
    }
    nb::dict out;
    out["support_x"] = array_of(drawn.support_x);
    out["support_y"] = array_of(drawn.support_y);
    nb::list cx, cy;
    for (const auto& x : drawn.candidate_x) cx.append(array_of(x));
    for (const auto& y : drawn.candidate_y) cy.append(array_of(y));
    out["candidate_x"] = cx;
    out["candidate_y"] = cy;
    out["names"] = drawn.names;
    out["candidate_names"] = drawn.candidate_names;
    return out;
  }
};
#endif

template <class T>
nb::tuple sample_tasks(const AnySampler& sampler, std::int64_t tasks, Generator& gen) {
  TaskBatch<T, cpu> batch;
  const auto draw = sampler.template for_learner<T>();
  {
    nb::gil_scoped_release release;
    batch = draw(tasks, gen);
  }
  return nb::make_tuple(array_of(batch.support_x), array_of(batch.support_y),
                        array_of(batch.query_x), array_of(batch.query_y));
}

}  // namespace

NB_MODULE(_platipus, m) {
  m.doc() = "platipus's C++ core; use the package `platipus`, which wraps it.";
  m.attr("library_version") = std::string(library_version);

  // platipus::error: ValueError; a file's: OSError; divergence: FloatingPointError.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const divergence& e) {
      PyErr_SetString(PyExc_FloatingPointError, e.what());
    } catch (const file_error& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  nb::class_<Generator>(m, "Generator")
      .def(nb::init<std::uint64_t, std::uint64_t>(), "seed"_a = 0, "stream"_a = 0)
      .def_prop_ro("seed", &Generator::seed)
      .def_prop_ro("stream", &Generator::stream)
      .def_prop_ro("counter", &Generator::counter)
      .def("__repr__", [](const Generator& g) {
        return fmt::format("Generator(seed={}, stream={}, counter={})", g.seed(), g.stream(),
                           g.counter());
      });

  nb::class_<nn::Sequential>(m, "Network")
      .def_prop_ro("parameter_count", [](const nn::Sequential& n) { return n.layout().size(); })
      .def_prop_ro("layout",
                   [](const nn::Sequential& n) {
                     std::vector<std::tuple<std::string, std::vector<std::int64_t>>> pieces;
                     for (const auto& s : n.layout().specs())
                       pieces.emplace_back(
                           s.name, std::vector<std::int64_t>(s.shape.begin(), s.shape.end()));
                     return pieces;
                   })
      .def(
          "initialize",
          [](const nn::Sequential& n, Generator& gen, const std::string& dtype) -> nb::object {
            if (dtype == "float32") return nb::cast(array_of(n.initialize<float, cpu>(gen)));
            check(dtype == "float64", "Network.initialize",
                  "dtype must be 'float32' or 'float64', got '{}'", dtype);
            return nb::cast(array_of(n.initialize<double, cpu>(gen)));
          },
          "generator"_a, "dtype"_a);
  m.def("mlp", [](const std::string& settings) {
    return nn::mlp(settings_from<nn::MlpSettings>(settings, "mlp"));
  });
  m.def("conv4", [](const std::string& settings) {
    return nn::conv4(settings_from<nn::ConvNetSettings>(settings, "conv4"));
  });

  nb::class_<AnyLoss>(m, "Loss").def_ro("name", &AnyLoss::name);
  m.def("loss", &loss_from, "kind"_a, "settings"_a);

  nb::class_<AnySampler>(m, "Sampler")
      .def("sample_float32", &sample_tasks<float>, "tasks"_a, "generator"_a)
      .def("sample_float64", &sample_tasks<double>, "tasks"_a, "generator"_a);
  // One task's function and points, as Figure 3 draws them (sine_line.cpp).
  m.def(
      "sinusoid_line_function",
      [](const std::string& settings, Generator& gen) {
        const auto f = data::SinusoidLineSampler<float>(
                           settings_from<data::SinusoidLineSettings>(settings, "SinusoidLine"))
                           .draw_function(gen);
        return std::make_tuple(f.sinusoid, f.amplitude, f.phase, f.slope, f.intercept);
      },
      "settings"_a, "generator"_a);
  m.def(
      "sinusoid_line_points",
      [](const std::string& settings, std::tuple<bool, double, double, double, double> function,
         std::int64_t n, Generator& gen) {
        const auto [sinusoid, amplitude, phase, slope, intercept] = function;
        const data::SineLineFunction f{sinusoid, amplitude, phase, slope, intercept};
        auto [x, y] = data::SinusoidLineSampler<float>(
                          settings_from<data::SinusoidLineSettings>(settings, "SinusoidLine"))
                          .points(std::span(&f, 1), n, gen);
        return std::make_tuple(array_of(std::move(x).reshaped(Shape{n})),
                               array_of(std::move(y).reshaped(Shape{n})));
      },
      "settings"_a, "function"_a, "n"_a, "generator"_a);
  m.def(
      "sinusoid_line_value",
      [](std::tuple<bool, double, double, double, double> function, const std::vector<double>& x) {
        const auto [sinusoid, amplitude, phase, slope, intercept] = function;
        const data::SineLineFunction f{sinusoid, amplitude, phase, slope, intercept};
        std::vector<double> y;
        for (const double v : x) y.push_back(f(v));
        return y;
      },
      "function"_a, "x"_a);
  m.def("sinusoid_line", [](const std::string& settings) {
    const auto s = settings_from<data::SinusoidLineSettings>(settings, "SinusoidLine");
    data::SinusoidLineSampler<float> check_settings(s);
    return AnySampler{s};
  });
  m.def("circles", [](const std::string& settings) {
    const auto s = settings_from<data::CirclesSettings>(settings, "Circles");
    data::CirclesSampler<float> check_settings(s);
    return AnySampler{s};
  });
#ifdef PLATIPUS_PYTHON_IMAGES
  m.def(
      "few_shot_images",
      [](const std::string& dataset, const std::string& root, const std::string& split,
         std::int64_t size, std::int64_t ways, std::int64_t shots, std::int64_t queries,
         const std::string& cache_directory) {
        nb::gil_scoped_release release;  // decoding a set takes a while, on its own threads
        const data::CacheOptions cache{.directory = cache_directory, .threads = 0, .progress = {}};
        const auto loaded = with_file([&] {
          if (dataset == "omniglot") return data::load_omniglot(root, split, cache, nullptr, size);
          if (dataset == "miniimagenet")
            return data::load_miniimagenet(root, split, cache, nullptr, size);
          check(dataset == "fashion_mnist", "FewShotImages",
                "no data set '{}' (omniglot, miniimagenet, fashion_mnist)", dataset);
          return data::load_fashion_mnist(
              root.empty() ? data::fashion_mnist_directory() : std::filesystem::path(root), split);
        });
        const data::FewShotSettings settings{.ways = ways, .shots = shots, .queries = queries};
        data::FewShotSampler<float> check_settings(loaded, settings);
        return AnySampler{FewShotSource{loaded, settings}};
      },
      "dataset"_a, "root"_a, "split"_a, "size"_a, "ways"_a, "shots"_a, "queries"_a,
      "cache_directory"_a);
  m.def(
      "celeba",
      [](const std::string& root, const std::string& split, std::int64_t size, std::int64_t shots,
         std::int64_t queries, const std::string& rule, const std::string& cache_directory) {
        const auto s = celeba_settings(shots, queries, rule, "Celeba");
        nb::gil_scoped_release release;
        const auto loaded =
            with_file([&] { return load_celeba_split(root, split, size, cache_directory); });
        data::CelebaTaskSampler<float> check_settings(loaded, s);
        return AnySampler{CelebaSource{loaded, s}};
      },
      "root"_a, "split"_a, "size"_a, "shots"_a, "queries"_a, "rule"_a, "cache_directory"_a);
  nb::class_<AmbiguousCeleba>(m, "AmbiguousCeleba")
      .def(
          "__init__",
          [](AmbiguousCeleba* self, const std::string& root, const std::string& split,
             std::int64_t size, std::int64_t shots, std::int64_t queries, const std::string& rule,
             const std::string& cache_directory) {
            const auto s = celeba_settings(shots, queries, rule, "AmbiguousCeleba");
            nb::gil_scoped_release release;
            const auto loaded =
                with_file([&] { return load_celeba_split(root, split, size, cache_directory); });
            new (self) AmbiguousCeleba{data::AmbiguousCelebaSampler<float>(loaded, s), {}};
          },
          "root"_a, "split"_a, "size"_a, "shots"_a, "queries"_a, "rule"_a, "cache_directory"_a)
      .def_prop_ro("task_count", [](const AmbiguousCeleba& a) { return a.float32.task_count(); })
      .def("sample_float32", &AmbiguousCeleba::sample<float>, "tasks"_a, "generator"_a)
      .def("sample_float64", &AmbiguousCeleba::sample<double>, "tasks"_a, "generator"_a);
#endif
  m.def("python_sampler", [](nb::callable f) { return AnySampler{nb::object(f)}; });

  // The scores of meta/scores: host-side, in double.
  m.def(
      "estimate",
      [](const std::vector<double>& values) {
        const auto e = estimate(values);
        return std::make_tuple(e.mean, e.interval);
      },
      "values"_a);
  m.def(
      "score_regression",
      [](const Array& samples, const Array& targets, double noise_std, double interval) {
        const char* who = "score_regression";
        const auto s = tensor_of<double>(samples, who, "samples", 2);
        const auto y = tensor_of<double>(targets, who, "targets", 1);
        return as_dict(score_regression(std::span(s.data(), static_cast<std::size_t>(s.numel())),
                                        std::span(y.data(), static_cast<std::size_t>(y.numel())),
                                        noise_std, interval));
      },
      "samples"_a, "targets"_a, "noise_std"_a, "interval"_a = 0.9);
  m.def(
      "score_classification",
      [](const Array& probabilities, const Array& labels, int bins) {
        const char* who = "score_classification";
        const auto p = tensor_of<double>(probabilities, who, "probabilities", 2);
        const auto y = tensor_of<double>(labels, who, "labels", 1);
        check(p.dim(0) == y.dim(0), who, "probabilities {} and labels {} differ in points",
              p.shape(), y.shape());
        return as_dict(
            score_classification(std::span(p.data(), static_cast<std::size_t>(p.numel())),
                                 std::span(y.data(), static_cast<std::size_t>(y.numel())),
                                 static_cast<std::size_t>(p.dim(1)), bins));
      },
      "probabilities"_a, "labels"_a, "bins"_a = 10);

  bind_learners<float, cpu>(m);
  bind_learners<double, cpu>(m);
#ifdef PLATIPUS_PYTHON_CUDA
  bind_learners<float, cuda>(m);
  m.def("cuda_device_count", &cuda_device_count);
#endif
}
