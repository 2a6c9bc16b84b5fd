"""Networks, losses and task samplers: the C++ settings structs as keyword arguments."""

import json
from typing import Any, Tuple

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
    """Negative log-likelihood under N(prediction, noise_std^2): ``noise_std`` (0.3), ``reduction``."""
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


class SinusoidLine(_Sampler):
    """The paper's sinusoid-or-line regression tasks (C++ ``data::SinusoidLineSampler``):
    ``support``, ``query``, ``noise_std``, the ranges ``x_min``/``x_max``,
    ``amplitude_*``, ``phase_*``, ``line_*`` and ``sinusoid_fraction``."""

    def __init__(self, **settings: Any) -> None:
        self._core = _core.sinusoid_line(json.dumps(settings))


class Circles(_Sampler):
    """The paper's 2-D circle classification tasks (C++ ``data::CirclesSampler``):
    ``support``, ``query``, ``positive_fraction``, ``domain``, ``centre_*``, ``radius_*``."""

    def __init__(self, **settings: Any) -> None:
        self._core = _core.circles(json.dumps(settings))
