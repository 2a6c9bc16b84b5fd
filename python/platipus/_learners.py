"""The meta-learners: one class per C++ learner, over the extension's
``<Learner>_<dtype>`` classes, each holding the generator it draws from by
default (as the C++ README's program passes one generator to everything)."""

import copy
import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from . import _platipus as _core
from ._parts import _dtype_name, _Sampler

Sampler = Union[_Sampler, Callable[[int, _core.Generator], Tuple[np.ndarray, ...]]]


def cuda_available() -> bool:
    """Whether learners can take ``device="cuda"``: this build has the CUDA
    backend and the process sees a CUDA device."""
    return hasattr(_core, "cuda_device_count") and _core.cuda_device_count() > 0


def _device_name(device: str, dtype: str) -> str:
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda":
        if not hasattr(_core, "cuda_device_count"):
            raise RuntimeError(
                "this build of platipus has no CUDA backend (CUDA and cuDNN were not "
                "found when it was built)"
            )
        if dtype != "float32":
            raise ValueError(f"learners on the GPU are float32, got dtype {dtype}")
        if _core.cuda_device_count() == 0:
            raise RuntimeError("device='cuda': this process sees no CUDA device")
    return device


def _core_sampler(sampler: Sampler) -> _core.Sampler:
    if isinstance(sampler, _Sampler):
        return sampler._core
    return _core.python_sampler(sampler)


class _Learner:
    _name = ""

    def __init__(
        self,
        network: _core.Network,
        loss: _core.Loss,
        *,
        generator: _core.Generator,
        dtype: Any = "float32",
        device: str = "cpu",
        **settings: Any,
    ) -> None:
        """Initialises the meta-parameters from ``generator``, which the learner
        then draws from whenever a method is not given another. ``settings``
        are the C++ settings struct's fields by name (``inner_loop`` a dict).
        ``device="cuda"``: the learner computes on the GPU (C++
        ``platipus::cuda``, float32), taking and giving NumPy arrays as on the CPU."""
        self.dtype = _dtype_name(dtype)
        self.device = _device_name(device, self.dtype)
        self.generator = generator
        suffix = self.dtype if self.device == "cpu" else f"{self.dtype}_{self.device}"
        cls = getattr(_core, f"{self._name}_{suffix}")
        self._core = cls(network, loss, json.dumps(settings), generator)

    def _gen(self, generator: Optional[_core.Generator]) -> _core.Generator:
        return self.generator if generator is None else generator

    def meta_step(
        self,
        support_x: np.ndarray,
        support_y: np.ndarray,
        query_x: np.ndarray,
        query_y: np.ndarray,
        *,
        generator: Optional[_core.Generator] = None,
    ) -> Dict[str, float]:
        """One meta-update on a batch of tasks, arrays ``[tasks, points, ...]``;
        returns ``query_loss``, ``support_loss`` and the learner's own
        statistics (PLATIPUS: ``kl``)."""
        return self._core.meta_step(support_x, support_y, query_x, query_y, self._gen(generator))

    def fit(
        self,
        sampler: Sampler,
        *,
        steps: int,
        meta_batch: int = 25,
        record_every: int = 0,
        callback: Optional[Callable[[Dict[str, float]], None]] = None,
        progress: Optional[bool] = None,
        generator: Optional[_core.Generator] = None,
        cuda_graph: bool = True,
    ) -> List[Dict[str, float]]:
        """Meta-trains for ``steps`` steps of ``meta_batch`` tasks from ``sampler``
        (a library sampler, or any callable ``(tasks, generator)`` returning the
        four arrays) with the library's training loop. Every ``record_every``
        steps (0: steps / 200) a record (``step``, ``query_loss``, the learner's
        statistics, ``seconds``) goes to ``callback`` and to the returned list;
        a progress line goes to stderr when it is a terminal (``progress``).
        Ctrl-C stops between two steps with KeyboardInterrupt; the learner
        keeps the steps taken. On ``device="cuda"`` each step from the first
        the learner allows replays one recorded CUDA graph (``cuda_graph``;
        PLATIPUS's and MAML + noise's noise is then drawn on the device, not
        the eager steps' numbers); ``cuda_graph=False`` keeps every step eager."""
        records: List[Dict[str, float]] = []
        show = sys.stderr.isatty() if progress is None else progress
        start = time.monotonic()

        def on_record(record: Dict[str, float]) -> None:
            records.append(record)
            if show:
                done = record["step"] / steps
                eta = (time.monotonic() - start) * (1 - done) / max(done, 1e-9)
                print(
                    f"\r[{self._name}] {record['step']}/{steps}  query loss "
                    f"{record['query_loss']:.4g}  eta {eta:.0f} s",
                    end="" if record["step"] < steps else "\n",
                    file=sys.stderr,
                    flush=True,
                )
            if callback is not None:
                callback(record)

        self._core.fit(
            _core_sampler(sampler),
            self._gen(generator),
            steps,
            meta_batch,
            record_every,
            on_record,
            cuda_graph,
        )
        return records

    def adapt(
        self,
        support_x: np.ndarray,
        support_y: np.ndarray,
        *,
        generator: Optional[_core.Generator] = None,
    ) -> np.ndarray:
        """Parameters adapted to each task's support set, ``[tasks, P]`` (the
        learners with one deterministic adaptation; PLATIPUS: use ``sample``)."""
        if not hasattr(self._core, "adapt"):
            raise TypeError(
                f"{self._name} samples its adapted models; use sample(support_x, support_y, n)"
            )
        return self._core.adapt(support_x, support_y, self._gen(generator))

    def sample(
        self,
        support_x: np.ndarray,
        support_y: np.ndarray,
        n: int,
        *,
        generator: Optional[_core.Generator] = None,
    ) -> np.ndarray:
        """``n`` adapted models per task, ``[tasks, n, P]`` (PLATIPUS: Algorithm 2)."""
        return self._core.sample(support_x, support_y, n, self._gen(generator))

    def predict(self, parameters: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The network's outputs for parameters ``[P]``, ``[tasks, P]`` or
        ``[tasks, n, P]`` on inputs ``x`` ``[tasks, points, ...]``."""
        return self._core.predict(parameters, x)

    def query_losses(
        self,
        support_x: np.ndarray,
        support_y: np.ndarray,
        query_x: np.ndarray,
        query_y: np.ndarray,
        *,
        generator: Optional[_core.Generator] = None,
    ) -> np.ndarray:
        """Each task's mean query loss after adapting to its support set, ``[tasks]``."""
        return self._core.query_losses(support_x, support_y, query_x, query_y, self._gen(generator))

    def held_out_regression(
        self,
        sampler: Sampler,
        *,
        noise_std: float,
        task_generator: _core.Generator,
        model_generator: _core.Generator,
        tasks: int = 600,
        samples: int = 10,
        batch: int = 100,
    ) -> List[Dict[str, float]]:
        """Each of ``tasks`` fresh tasks' scores (``mse``, ``nll``, ``coverage``
        of the central 90% interval, ``mse_per_sample``; C++
        ``held_out_regression``): tasks drawn from ``task_generator``, models
        (``samples`` per task where they are random) from ``model_generator``,
        so that every learner can meet the same tasks."""
        return self._core.held_out_regression(
            _core_sampler(sampler),
            tasks,
            samples,
            batch,
            noise_std,
            task_generator,
            model_generator,
        )

    def held_out_classification(
        self,
        sampler: Sampler,
        *,
        task_generator: _core.Generator,
        model_generator: _core.Generator,
        tasks: int = 600,
        samples: int = 10,
        batch: int = 100,
    ) -> List[Dict[str, float]]:
        """Each held-out task's ``accuracy``, ``nll`` and ``ece`` of its models'
        mean predictive probabilities (C++ ``held_out_classification``)."""
        return self._core.held_out_classification(
            _core_sampler(sampler), tasks, samples, batch, task_generator, model_generator
        )

    def evaluate_ambiguity(
        self,
        tasks: Dict[str, Any],
        *,
        assignment: int = 15,
        likelihood: int = 100,
        at_once: int = 15,
        generator: Optional[_core.Generator] = None,
    ) -> List[Dict[str, float]]:
        """Each ambiguous task's ``coverage`` (how many of its candidate tasks
        some sampled model is assigned to, Table 1's), ``accuracy`` and ``nll``
        (C++ ``evaluate_ambiguity``) for tasks from ``AmbiguousCeleba.sample``:
        ``max(assignment, likelihood)`` sampled models per task, ``at_once``
        adapted at a time."""
        if not hasattr(self._core, "evaluate_ambiguity"):
            raise RuntimeError("this build of platipus has no image readers")
        return self._core.evaluate_ambiguity(
            tasks, assignment, likelihood, at_once, self._gen(generator)
        )

    def state(self) -> Dict[str, np.ndarray]:
        """The meta-parameters by name (copies): MAML's ``theta``, PLATIPUS's five parts."""
        return dict(self._core.state())

    def load_state(self, state: Dict[str, np.ndarray]) -> None:
        """Sets meta-parameters by name, each of its current shape and this dtype."""
        for name, value in state.items():
            self._core.set_state(name, value)

    def save(self, path: str, metadata: Optional[Dict[str, Any]] = None) -> None:
        """Writes the meta-parameters to a safetensors checkpoint (atomically),
        with the network's layout and ``metadata`` (default: the learner's
        name, dtype and settings); ``safetensors.numpy.load_file`` reads it,
        and a learner on either device loads it."""
        if metadata is None:
            metadata = {"learner": self._name, "dtype": self.dtype, "settings": self.settings}
        self._core.save(str(path), json.dumps(metadata))

    def load(self, path: str) -> Dict[str, Any]:
        """Reads a checkpoint written by ``save`` (or by C++ ``io::save``) for
        this network; returns its metadata. OSError for a missing or corrupt
        file or another architecture."""
        return json.loads(self._core.load(str(path)))

    @property
    def settings(self) -> Dict[str, Any]:
        """Every setting, defaults included, as the C++ struct holds them."""
        return json.loads(self._core.settings)

    @property
    def parameter_count(self) -> int:
        """P, the network's parameter count."""
        return self._core.parameter_count

    @property
    def steps(self) -> int:
        """Meta-steps taken."""
        return self._core.steps

    @property
    def statistic_names(self) -> List[str]:
        """The names of the learner's own statistics in meta_step's result."""
        return list(self._core.statistic_names)

    @property
    def adapts_randomly(self) -> bool:
        """Whether two models sampled for one task differ."""
        return self._core.adapts_randomly

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dtype={self.dtype}, device={self.device}, "
            f"parameters={self.parameter_count})"
        )


class Maml(_Learner):
    """MAML (Finn et al. 2017), second order unless ``first_order=True``."""

    _name = "Maml"


class MamlNoise(Maml):
    """MAML + noise, the paper's baseline: MAML whose inner-loop gradients get
    Gaussian noise of std ``gradient_noise`` (C++: ``Maml`` with
    ``inner_loop.gradient_noise``)."""

    def __init__(
        self,
        network: _core.Network,
        loss: _core.Loss,
        *,
        gradient_noise: float,
        generator: _core.Generator,
        dtype: Any = "float32",
        device: str = "cpu",
        **settings: Any,
    ) -> None:
        if not gradient_noise > 0:
            raise ValueError(f"MamlNoise: gradient_noise must be positive, got {gradient_noise}")
        settings = copy.deepcopy(settings)
        settings.setdefault("inner_loop", {})["gradient_noise"] = gradient_noise
        super().__init__(network, loss, generator=generator, dtype=dtype, device=device, **settings)


class Platipus(_Learner):
    """PLATIPUS (Finn, Xu, Levine 2018): Algorithm 1 to train, Algorithm 2 to sample."""

    _name = "Platipus"


class MetaSgd(_Learner):
    """Meta-SGD (Li et al. 2017): learned per-parameter inner learning rates."""

    _name = "MetaSgd"


class Anil(_Learner):
    """ANIL (Raghu et al. 2020): only the head adapts in the inner loop."""

    _name = "Anil"


class Reptile(_Learner):
    """Reptile (Nichol et al. 2018): first-order, the inner loop's displacement."""

    _name = "Reptile"


class MamlPlusPlus(_Learner):
    """MAML++ (Antoniou et al. 2019): multi-step loss, learned per-layer per-step
    rates, annealed derivative order."""

    _name = "MamlPlusPlus"
