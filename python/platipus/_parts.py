"""Networks, losses and task samplers: the C++ settings structs as keyword arguments."""

import json
from typing import Any, List, NamedTuple, Sequence, Tuple

import numpy as np

from . import _platipus as _core


def mlp(**settings: Any) -> _core.Network:
    """A fully connected network (C++ ``nn::mlp``): ``inputs``, ``hidden`` (widths),
    ``outputs``, ``activation`` ("relu", "tanh", "sigmoid", "none"),
    ``bias_transform`` (dims, 0 for none) and ``init``."""
    return _core.mlp(json.dumps(settings))


def conv4(**settings: Any) -> _core.Network:
    """MAML's convolutional network (C++ ``nn::conv4``): ``channels``, ``size``,
    ``filters``, ``blocks``, ``outputs``, ``strided``, ``batch_norm`` and
    ``activation``."""
    return _core.conv4(json.dumps(settings))


def MseLoss(**settings: Any) -> _core.Loss:
    """Mean squared error; ``reduction`` "mean" (default) or "sum" over a task's points."""
    return _core.loss("MseLoss", json.dumps(settings))


def GaussianNllLoss(**settings: Any) -> _core.Loss:
    """Negative log-likelihood under N(prediction, noise_std^2): ``noise_std``
    (0.3), ``reduction``."""
    return _core.loss("GaussianNllLoss", json.dumps(settings))


def BceWithLogitsLoss(**settings: Any) -> _core.Loss:
    """Binary cross-entropy on logits; ``reduction``."""
    return _core.loss("BceWithLogitsLoss", json.dumps(settings))


def SoftmaxCrossEntropyLoss(**settings: Any) -> _core.Loss:
    """Cross-entropy of logits [..., K] against class indices [..., 1]; ``reduction``."""
    return _core.loss("SoftmaxCrossEntropyLoss", json.dumps(settings))


def _dtype_name(dtype: Any) -> str:
    name = np.dtype(dtype).name
    if name not in ("float32", "float64"):
        raise TypeError(f"dtype must be float32 or float64, got {name}")
    return name


class _Sampler:
    """A task sampler of the library; ``sample(tasks, generator)`` draws a meta-batch."""

    _core: _core.Sampler

    def sample(
        self, tasks: int, generator: _core.Generator, dtype: Any = "float32"
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(support_x, support_y, query_x, query_y)``, each ``[tasks, points, ...]``,
        drawn from ``generator`` exactly as the C++ sampler draws them."""
        return getattr(self._core, "sample_" + _dtype_name(dtype))(tasks, generator)


class SineLineFunction(NamedTuple):
    """A sinusoid ``amplitude * sin(x + phase)`` or a line ``slope * x + intercept``."""

    sinusoid: bool
    amplitude: float
    phase: float
    slope: float
    intercept: float

    def __call__(self, x: Sequence[float]) -> List[float]:
        """The function's values at ``x``, computed in double as C++ computes them."""
        return _core.sinusoid_line_value(tuple(self), [float(v) for v in x])


class SinusoidLine(_Sampler):
    """The paper's sinusoid-or-line regression tasks (C++ ``data::SinusoidLineSampler``):
    ``support``, ``query``, ``noise_std``, the ranges ``x_min``/``x_max``,
    ``amplitude_*``, ``phase_*``, ``line_*`` and ``sinusoid_fraction``."""

    def __init__(self, **settings: Any) -> None:
        self._settings = json.dumps(settings)
        self._core = _core.sinusoid_line(self._settings)

    def draw_function(self, generator: _core.Generator) -> "SineLineFunction":
        """One task's function, drawn as ``sample`` draws each task's."""
        return SineLineFunction(*_core.sinusoid_line_function(self._settings, generator))

    def points(
        self, function: "SineLineFunction", n: int, generator: _core.Generator
    ) -> Tuple[np.ndarray, np.ndarray]:
        """``n`` points of ``function`` (float32 x and noisy y, each [n]), x
        uniform over the range, drawn as ``sample`` draws a task's points."""
        return _core.sinusoid_line_points(self._settings, tuple(function), n, generator)


class Circles(_Sampler):
    """The paper's 2-D circle classification tasks (C++ ``data::CirclesSampler``):
    ``support``, ``query``, ``positive_fraction``, ``domain``, ``centre_*``, ``radius_*``."""

    def __init__(self, **settings: Any) -> None:
        self._core = _core.circles(json.dumps(settings))


class FewShotImages(_Sampler):
    """N-way K-shot classification tasks of an image data set (C++
    ``data::FewShotSampler``): ``dataset`` "omniglot", "miniimagenet" or
    "fashion_mnist", its directory ``root`` (laid out as README.md's "Image
    data" says; Fashion-MNIST's default is Debian's), ``split`` ("train",
    "val", "test"; Fashion-MNIST "train" or "t10k"), ``ways``, ``shots``,
    ``queries`` and the image ``size`` (Omniglot 28, MiniImagenet 84). Images
    are [C, H, W] in [0, 1], labels class indices [..., 1] for
    ``SoftmaxCrossEntropyLoss``. A set is decoded once into the cache
    (``cache_directory``, default $PLATIPUS_CACHE_DIR or ~/.cache/platipus)."""

    def __init__(
        self,
        dataset: str,
        root: str = "",
        split: str = "train",
        *,
        ways: int = 5,
        shots: int = 1,
        queries: int = 15,
        size: int = 0,
        cache_directory: str = "",
    ) -> None:
        _require_images()
        size = size or {"omniglot": 28, "miniimagenet": 84}.get(dataset, 0)
        self._core = _core.few_shot_images(
            dataset, str(root), split, size, ways, shots, queries, str(cache_directory)
        )


class Celeba(_Sampler):
    """CelebA's binary attribute tasks (Appendix A; C++ ``data::CelebaTaskSampler``):
    ``root`` holds img_align_celeba/, list_attr_celeba.txt and
    list_eval_partition.txt; ``split`` "train", "val" or "test" (each with
    its own attributes); ``shots`` and ``queries`` per class; ``rule``
    "converse" (Appendix A) or "both_or_neither" (Section 5); images of
    ``size`` x ``size`` (the paper's 84), decoded once into the cache."""

    def __init__(
        self,
        root: str,
        split: str = "train",
        *,
        shots: int = 5,
        queries: int = 15,
        rule: str = "converse",
        size: int = 84,
        cache_directory: str = "",
    ) -> None:
        _require_images()
        self._core = _core.celeba(
            str(root), split, size, shots, queries, rule, str(cache_directory)
        )


class AmbiguousCeleba:
    """PLATIPUS's ambiguous CelebA tasks (Section 5; C++
    ``data::AmbiguousCelebaSampler``): a support set that shows two of three
    attributes, and a candidate query set for each pair of them. ``sample``
    gives a dict of ``support_x``, ``support_y``, ``candidate_x`` and
    ``candidate_y`` (lists of three arrays), ``names`` and
    ``candidate_names``, which ``learner.evaluate_ambiguity`` scores."""

    def __init__(
        self,
        root: str,
        split: str = "test",
        *,
        shots: int = 5,
        queries: int = 15,
        rule: str = "converse",
        size: int = 84,
        cache_directory: str = "",
    ) -> None:
        _require_images()
        self._core = _core.AmbiguousCeleba(
            str(root), split, size, shots, queries, rule, str(cache_directory)
        )

    @property
    def task_count(self) -> int:
        """The ambiguous tasks the split's attributes make."""
        return self._core.task_count

    def sample(self, tasks: int, generator: _core.Generator, dtype: Any = "float32") -> dict:
        """``tasks`` ambiguous tasks drawn from ``generator``."""
        return getattr(self._core, "sample_" + _dtype_name(dtype))(tasks, generator)


def _require_images() -> None:
    if not hasattr(_core, "few_shot_images"):
        raise RuntimeError(
            "this build of platipus has no image readers (stb and zlib "
            "were not found when it was built)"
        )
