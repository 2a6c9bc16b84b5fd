"""Learners on the GPU (device="cuda"): the refusals run everywhere, the rest
where this process sees a CUDA device (benchmarks/gpu_check.sh runs them on
the GPU machine)."""

import numpy as np
import pytest

import platipus as pp
from platipus import _platipus as core

built_with_cuda = hasattr(core, "cuda_device_count")
gpu = pytest.mark.skipif(not pp.cuda_available(), reason="no CUDA device")


def learner(kind=pp.Maml, device="cpu", seed=0, **settings):
    settings.setdefault("inner_loop", {"steps": 5, "learning_rate": 0.01})
    return kind(
        pp.mlp(inputs=1, hidden=[40, 40], outputs=1),
        pp.MseLoss(),
        generator=pp.Generator(seed),
        device=device,
        **settings,
    )


def test_a_device_other_than_cpu_and_cuda_is_refused():
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda', got 'gpu'"):
        learner(device="gpu")


@pytest.mark.skipif(built_with_cuda, reason="this build has the CUDA backend")
def test_without_the_cuda_backend_cuda_is_refused_by_name():
    assert not pp.cuda_available()
    with pytest.raises(RuntimeError, match="no CUDA backend"):
        learner(device="cuda")


@pytest.mark.skipif(not built_with_cuda, reason="this build has no CUDA backend")
def test_cuda_learners_are_float32_and_need_a_device():
    assert core.cuda_device_count() >= 0
    with pytest.raises(ValueError, match="learners on the GPU are float32, got dtype float64"):
        learner(device="cuda", dtype="float64")
    if not pp.cuda_available():
        with pytest.raises(RuntimeError, match="sees no CUDA device"):
            learner(device="cuda")


@gpu
@pytest.mark.parametrize("kind", [pp.Maml, pp.Platipus])
def test_a_gpu_meta_step_matches_the_cpu_one(kind):
    """Same seed, same initialisation (one Philox formula on both backends);
    a meta-step's losses agree to float32 rounding (cuBLAS sums in another
    order than Eigen)."""
    cpu, gpu_learner = learner(kind), learner(kind, device="cuda")
    assert gpu_learner.device == "cuda"
    for name, value in cpu.state().items():
        np.testing.assert_allclose(gpu_learner.state()[name], value, rtol=1e-6, atol=1e-7)
    batch = pp.SinusoidLine(support=10, query=10).sample(25, pp.Generator(3))
    a = cpu.meta_step(*batch, generator=pp.Generator(4))
    b = gpu_learner.meta_step(*batch, generator=pp.Generator(4))
    assert a.keys() == b.keys()
    for key in a:
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key


@gpu
def test_a_gpu_learner_learns_and_its_results_are_numpy_arrays():
    maml = learner(device="cuda")
    tasks = pp.SinusoidLine(support=10, query=10)
    held_out = tasks.sample(100, pp.Generator(7))
    before = maml.query_losses(*held_out).mean()
    maml.fit(tasks, steps=1000, meta_batch=10)
    after = maml.query_losses(*held_out).mean()
    assert after < 0.7 * before, (before, after)
    phi = maml.adapt(held_out[0][:4], held_out[1][:4])
    prediction = maml.predict(phi, held_out[2][:4])
    assert isinstance(prediction, np.ndarray) and prediction.shape == (4, 10, 1)
    assert prediction.dtype == np.float32


@gpu
def test_platipus_samples_on_the_gpu():
    platipus = learner(pp.Platipus, device="cuda")
    sx, sy, qx, _ = pp.SinusoidLine(support=10, query=10).sample(3, pp.Generator(1))
    models = platipus.sample(sx, sy, 5)
    assert models.shape == (3, 5, platipus.parameter_count)
    assert np.isfinite(platipus.predict(models, qx)).all()


@gpu
def test_a_python_sampler_feeds_a_gpu_learner():
    line = pp.SinusoidLine(support=10, query=10)
    calls = []

    def sample(tasks, generator):
        calls.append(tasks)
        return line.sample(tasks, generator)

    maml = learner(device="cuda")
    maml.fit(sample, steps=3, meta_batch=4)
    assert calls == [4, 4, 4] and maml.steps == 3


@gpu
def test_a_gpu_checkpoint_loads_on_the_cpu(tmp_path):
    trained = learner(pp.Platipus, device="cuda")
    trained.fit(pp.SinusoidLine(support=10, query=10), steps=5, meta_batch=4)
    trained.save(tmp_path / "gpu.safetensors")
    on_cpu = learner(pp.Platipus, seed=1)
    on_cpu.load(tmp_path / "gpu.safetensors")
    back = learner(pp.Platipus, device="cuda", seed=2)
    back.load_state(on_cpu.state())
    for name, value in trained.state().items():
        np.testing.assert_array_equal(on_cpu.state()[name], value)
        np.testing.assert_array_equal(back.state()[name], value)


@gpu
def test_fit_replays_maml_steps_that_are_its_eager_steps():
    """fit records MAML's step as a CUDA graph and replays it (the default);
    MAML's replays compute its eager steps, so both runs end at the same
    meta-parameters."""
    replayed, eager = learner(device="cuda"), learner(device="cuda")
    tasks = pp.SinusoidLine(support=10, query=10)
    a = replayed.fit(tasks, steps=6, meta_batch=5, record_every=1, generator=pp.Generator(5))
    b = eager.fit(
        tasks, steps=6, meta_batch=5, record_every=1, generator=pp.Generator(5), cuda_graph=False
    )
    assert [r["query_loss"] for r in a] == pytest.approx([r["query_loss"] for r in b], rel=1e-6)
    for name, value in eager.state().items():
        np.testing.assert_allclose(replayed.state()[name], value, rtol=1e-6, atol=1e-7)
