"""How good a learner's uncertainty is, task by task (C++ meta/scores/uncertainty.hpp)."""

from typing import Dict, Sequence, Tuple

import numpy as np

from . import _platipus as _core


def estimate(values: Sequence[float]) -> Tuple[float, float]:
    """The mean of ``values`` and 1.96 standard errors (C++ ``estimate``, the
    same sums, so the same bits as a C++ program's results.json)."""
    return _core.estimate([float(v) for v in values])


def score_regression(
    samples: np.ndarray, targets: np.ndarray, noise_std: float, interval: float = 0.9
) -> Dict[str, float]:
    """One task's ``mse`` (of the samples' mean), ``nll`` (of the mixture of
    N(f_s(x), noise_std^2)), ``coverage`` (of its central ``interval``) and
    ``mse_per_sample``; ``samples`` float64 [S, N], ``targets`` float64 [N]."""
    return _core.score_regression(samples, targets, noise_std, interval)


def score_classification(
    probabilities: np.ndarray, labels: np.ndarray, bins: int = 10
) -> Dict[str, float]:
    """One task's ``accuracy``, ``nll`` and ``ece`` (expected calibration
    error over ``bins`` confidence bins); ``probabilities`` float64 [N, K]
    (rows sum to 1), ``labels`` float64 [N] in [0, K)."""
    return _core.score_classification(probabilities, labels, bins)
