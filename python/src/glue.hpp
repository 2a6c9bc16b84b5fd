// What the bindings put between Python and the library: settings as JSON
// text (io/settings_json.hpp reads them strictly, so a misspelt keyword is
// an error naming it), one loss type over the library's losses and one task
// sampler type over its samplers and Python callables, so that each learner
// is compiled once per dtype; and the error that Python sees as OSError.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <variant>

#include <nanobind/nanobind.h>
#include <nlohmann/json.hpp>

#include "arrays.hpp"
#include "platipus/io/checkpoint.hpp"
#include "platipus/io/settings_json.hpp"
#include "platipus/platipus.hpp"
#ifdef PLATIPUS_PYTHON_IMAGES
#include "platipus/images.hpp"
#endif

namespace platipus::python {

// A platipus::error from reading or writing a file: Python's OSError.
class file_error : public error {
 public:
  using error::error;
};

// Runs f, turning the platipus::error it throws into a file_error.
template <class F>
decltype(auto) with_file(F&& f) {
  try {
    return f();
  } catch (const file_error&) {
    throw;
  } catch (const error& e) {
    throw file_error(e.what());
  }
}

// Settings of type S from JSON text, `who` naming the caller in errors.
template <class S>
S settings_from(const std::string& json, std::string_view who) {
  try {
    return nlohmann::json::parse(json).get<S>();
  } catch (const nlohmann::json::exception& e) {
    fail(who, "{}", e.what());
  } catch (const error& e) {
    fail(who, "{}", e.what());
  }
}

// The library's losses as one type; a learner is compiled once for all.
struct AnyLoss {
  std::variant<MseLoss, GaussianNllLoss, BceWithLogitsLoss, SoftmaxCrossEntropyLoss> loss;
  std::string name;

  template <class T, class B>
  Var<T, B> operator()(const Var<T, B>& prediction, const Var<T, B>& target, int batch_dims) const {
    return std::visit([&](const auto& l) { return l(prediction, target, batch_dims); }, loss);
  }

  template <class T, class B>
  void check_targets(const Tensor<T, B>& y, std::int64_t outputs, std::string_view who) const {
    std::visit(
        [&](const auto& l) {
          if constexpr (requires { l.check_targets(y, outputs, who); })
            l.check_targets(y, outputs, who);
        },
        loss);
  }
};

// Four arrays as a batch of tasks on backend B, checked as the learners
// check one.
template <class T, class B = cpu>
TaskBatch<T, B> batch_of(const Array& support_x, const Array& support_y, const Array& query_x,
                         const Array& query_y, std::string_view who) {
  TaskBatch<T, B> batch{on_backend<B>(tensor_of<T>(support_x, who, "support_x")),
                        on_backend<B>(tensor_of<T>(support_y, who, "support_y", 3)),
                        on_backend<B>(tensor_of<T>(query_x, who, "query_x")),
                        on_backend<B>(tensor_of<T>(query_y, who, "query_y", 3))};
  batch.validate(who);
  return batch;
}

#ifdef PLATIPUS_PYTHON_IMAGES
// A loaded image split and the tasks to draw from it, which every dtype's
// and backend's sampler shares: N-way K-shot tasks (Omniglot, MiniImagenet,
// Fashion-MNIST) or CelebA's attribute tasks (Appendix A). A sampler is made
// for each training or evaluation call (a CelebA sampler enumerates the
// split's attribute pairs then, a fraction of a second).
struct FewShotSource {
  data::FewShotSplit split;
  data::FewShotSettings settings;
};
struct CelebaSource {
  data::CelebaSplit split;
  data::CelebaTaskSettings settings;
};
#else
struct FewShotSource {};
struct CelebaSource {};
#endif

// A task sampler: one of the library's, by its settings, or a Python
// callable `sample(tasks, generator)` returning (support_x, support_y,
// query_x, query_y).
struct AnySampler {
  std::variant<data::SinusoidLineSettings, data::CirclesSettings, FewShotSource, CelebaSource,
               nb::object>
      source;

  // The sampler that a learner of dtype T on backend B trains on.
  template <class T, class B = cpu>
  std::function<TaskBatch<T, B>(std::int64_t, Generator&)> for_learner() const {
    if (const auto* s = std::get_if<data::SinusoidLineSettings>(&source))
      return [sampler = data::SinusoidLineSampler<T, B>(*s)](std::int64_t n, Generator& gen) {
        return sampler.sample(n, gen);
      };
    if (const auto* s = std::get_if<data::CirclesSettings>(&source))
      return [sampler = data::CirclesSampler<T, B>(*s)](std::int64_t n, Generator& gen) {
        return sampler.sample(n, gen);
      };
#ifdef PLATIPUS_PYTHON_IMAGES
    if (const auto* s = std::get_if<FewShotSource>(&source))
      return [sampler = data::FewShotSampler<T, B>(s->split, s->settings)](std::int64_t n,
                                                                           Generator& gen) {
        return sampler.sample(n, gen);
      };
    if (const auto* s = std::get_if<CelebaSource>(&source))
      return [sampler = data::CelebaTaskSampler<T, B>(s->split, s->settings)](std::int64_t n,
                                                                              Generator& gen) {
        return sampler.sample(n, gen);
      };
#endif
    return [callable = std::get<nb::object>(source)](std::int64_t n, Generator& gen) {
      nb::gil_scoped_acquire gil;
      const nb::object drawn = callable(n, nb::cast(&gen, nb::rv_policy::reference));
      const char* who = "a Python task sampler";
      nb::tuple four;
      check(nb::try_cast(drawn, four) && four.size() == 4, who,
            "must return (support_x, support_y, query_x, query_y), got {}",
            nb::str(nb::handle(drawn.type())).c_str());
      // Copies: the arrays are the callable's, and die with the tuple.
      const auto batch = batch_of<T>(
          array_argument(four[0], who, "support_x"), array_argument(four[1], who, "support_y"),
          array_argument(four[2], who, "query_x"), array_argument(four[3], who, "query_y"), who);
      return TaskBatch<T, B>{copy_on_backend<B>(batch.support_x),
                             copy_on_backend<B>(batch.support_y), copy_on_backend<B>(batch.query_x),
                             copy_on_backend<B>(batch.query_y)};
    };
  }
};

inline nb::dict as_dict(const RegressionScores& s) {
  nb::dict d;
  d["mse"] = s.mse;
  d["nll"] = s.nll;
  d["coverage"] = s.coverage;
  d["mse_per_sample"] = s.mse_per_sample;
  return d;
}
inline nb::dict as_dict(const ClassificationScores& s) {
  nb::dict d;
  d["accuracy"] = s.accuracy;
  d["nll"] = s.nll;
  d["ece"] = s.ece;
  return d;
}

inline nb::dict as_dict(const AmbiguityScores& s) {
  nb::dict d;
  d["coverage"] = s.coverage;
  d["accuracy"] = s.accuracy;
  d["nll"] = s.nll;
  return d;
}

// The sampler type the library's training loop takes.
template <class T, class B = cpu>
struct ErasedSampler {
  std::function<TaskBatch<T, B>(std::int64_t, Generator&)> draw;
  TaskBatch<T, B> sample(std::int64_t tasks, Generator& gen) const { return draw(tasks, gen); }
};

}  // namespace platipus::python
