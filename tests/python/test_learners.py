"""The Python package against the library's promises: learning, the same
bits for the same seed, NumPy in and out, and errors that name what is wrong."""

import os
import signal
import struct
import threading
import zlib

import numpy as np
import pytest

import platipus as pp

LEARNERS = [pp.Maml, pp.Platipus, pp.MetaSgd, pp.Anil, pp.Reptile, pp.MamlPlusPlus]


def small_maml(seed=0, dtype="float32", **settings):
    gen = pp.Generator(seed)
    net = pp.mlp(inputs=1, hidden=[40, 40], outputs=1)
    settings.setdefault("inner_loop", {"steps": 5, "learning_rate": 0.01})
    return pp.Maml(net, pp.MseLoss(), generator=gen, dtype=dtype, **settings), gen


def test_maml_learns_the_sinusoid_line_tasks():
    maml, gen = small_maml()
    tasks = pp.SinusoidLine(support=10, query=10)
    held_out = tasks.sample(100, pp.Generator(7))
    before = maml.query_losses(*held_out).mean()
    records = maml.fit(tasks, steps=1500, meta_batch=10, record_every=500)
    after = maml.query_losses(*held_out).mean()
    assert [r["step"] for r in records] == [500, 1000, 1500]
    assert maml.steps == 1500
    assert after < 0.7 * before, (before, after)


@pytest.mark.parametrize("learner", LEARNERS)
def test_every_learner_trains_from_python_and_its_loss_falls(learner):
    settings = {"inner_loop": {"steps": 5, "learning_rate": 0.01}}
    if learner is pp.Anil:
        settings["head"] = ["layer4.weight", "layer4.bias"]
    model = learner(pp.mlp(hidden=[40, 40]), pp.MseLoss(), generator=pp.Generator(0), **settings)
    records = model.fit(
        pp.SinusoidLine(support=10, query=10), steps=1500, meta_batch=10, record_every=250
    )
    first, last = records[0]["query_loss"], records[-1]["query_loss"]  # means over 250 steps
    assert last < 0.9 * first, [r["query_loss"] for r in records]


def test_fit_is_the_loop_of_sample_and_meta_step():
    tasks = pp.SinusoidLine()
    a, gen_a = small_maml(seed=3)
    a.fit(tasks, steps=5, meta_batch=4)
    b, gen_b = small_maml(seed=3)
    for _ in range(5):
        b.meta_step(*tasks.sample(4, gen_b))
    assert np.array_equal(a.state()["theta"], b.state()["theta"])
    assert gen_a.counter == gen_b.counter


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_same_bits_on_any_thread_count(dtype):
    tasks = pp.SinusoidLine()
    thetas = []
    for threads in (1, 2):
        learner, _ = small_maml(seed=1, dtype=dtype, threads=threads)
        learner.fit(tasks, steps=3, meta_batch=6)
        thetas.append(learner.state()["theta"])
    assert thetas[0].dtype == np.dtype(dtype)
    assert np.array_equal(thetas[0], thetas[1])


def test_a_python_sampler_gives_the_same_bits_as_the_library_sampler():
    tasks = pp.SinusoidLine()
    a, _ = small_maml(seed=2)
    a.fit(tasks, steps=3, meta_batch=5)
    b, _ = small_maml(seed=2)
    b.fit(lambda n, gen: tasks.sample(n, gen), steps=3, meta_batch=5)
    assert np.array_equal(a.state()["theta"], b.state()["theta"])


def test_arrays_in_any_layout_read_as_the_same_numbers():
    batch = pp.SinusoidLine().sample(4, pp.Generator(0))
    read_only = [x.copy() for x in batch]
    for x in read_only:
        x.flags.writeable = False
    strided = [np.repeat(x, 2, axis=2)[:, :, ::2] for x in batch]
    assert not strided[0].flags.c_contiguous
    # Read in place wherever they start: 4 bytes past a 64-byte boundary here.
    offset = []
    for x in batch:
        buffer = np.empty(x.nbytes + 68, dtype=np.uint8)
        start = (-buffer.ctypes.data) % 64 + 4
        offset.append(buffer[start : start + x.nbytes].view(np.float32).reshape(x.shape))
        offset[-1][...] = x
    assert offset[0].ctypes.data % 64 == 4
    steps, thetas = [], []
    for arrays in (batch, read_only, strided, offset):
        learner, gen = small_maml()
        steps.append(learner.meta_step(*arrays))
        thetas.append(learner.state()["theta"].tobytes())
    assert all(s == steps[0] for s in steps)
    assert all(t == thetas[0] for t in thetas)


@pytest.mark.parametrize("learner", LEARNERS)
def test_every_learner_takes_a_step_and_samples(learner):
    gen = pp.Generator(0)
    net = pp.mlp(inputs=1, hidden=[20], outputs=1)
    model = learner(net, pp.GaussianNllLoss(noise_std=0.3), generator=gen)
    batch = pp.SinusoidLine().sample(3, gen)
    statistics = model.meta_step(*batch)
    assert set(statistics) == {"query_loss", "support_loss", *model.statistic_names}
    assert all(np.isfinite(v) for v in statistics.values())
    models = model.sample(batch[0], batch[1], 2)
    assert models.shape == (3, 2, model.parameter_count)
    assert model.predict(models, batch[2]).shape == (3, 2, 10, 1)


def test_maml_noise_samples_different_models():
    gen = pp.Generator(0)
    net = pp.mlp(inputs=1, hidden=[20], outputs=1)
    noisy = pp.MamlNoise(net, pp.MseLoss(), gradient_noise=1.0, generator=gen)
    assert noisy.settings["inner_loop"]["gradient_noise"] == 1.0 and noisy.adapts_randomly
    sx, sy, _, _ = pp.SinusoidLine().sample(2, gen)
    models = noisy.sample(sx, sy, 2)
    assert not np.array_equal(models[:, 0], models[:, 1])
    with pytest.raises(ValueError, match="gradient_noise must be positive"):
        pp.MamlNoise(net, pp.MseLoss(), gradient_noise=0.0, generator=gen)


def test_platipus_reports_its_kl_and_has_no_single_adaptation():
    gen = pp.Generator(0)
    platipus = pp.Platipus(pp.mlp(), pp.GaussianNllLoss(), generator=gen, kl_weight=0.5)
    assert platipus.statistic_names == ["kl"]
    assert set(platipus.state()) == {
        "mu_theta",
        "log_sigma2_theta",
        "log_v_q",
        "log_gamma_p",
        "log_gamma_q",
    }
    sx, sy, _, _ = pp.SinusoidLine().sample(2, gen)
    with pytest.raises(TypeError, match="sample"):
        platipus.adapt(sx, sy)


def test_checkpoints_round_trip_and_read_with_safetensors(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    maml, _ = small_maml(seed=4)
    maml.fit(pp.SinusoidLine(), steps=2, meta_batch=3)
    path = tmp_path / "maml.safetensors"
    maml.save(path)
    assert np.array_equal(safetensors_numpy.load_file(str(path))["theta"], maml.state()["theta"])
    other, _ = small_maml(seed=5)
    metadata = other.load(path)
    assert metadata["learner"] == "Maml" and metadata["settings"] == maml.settings
    assert np.array_equal(other.state()["theta"], maml.state()["theta"])


def test_file_errors_are_oserrors_naming_the_file(tmp_path):
    maml, _ = small_maml()
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(OSError, match="missing.safetensors"):
        maml.load(missing)
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage")
    with pytest.raises(OSError, match="corrupt.safetensors"):
        maml.load(corrupt)
    wider = pp.Maml(pp.mlp(hidden=[41, 40]), pp.MseLoss(), generator=pp.Generator(0))
    saved = tmp_path / "wider.safetensors"
    wider.save(saved)
    before = maml.state()["theta"]
    with pytest.raises(OSError, match="different architecture"):
        maml.load(saved)
    assert np.array_equal(maml.state()["theta"], before)


def test_bad_arguments_raise_errors_naming_them():
    maml, gen = small_maml()
    sx, sy, qx, qy = pp.SinusoidLine().sample(3, gen)
    with pytest.raises(ValueError, match="support_x must be float32.*got float64"):
        maml.meta_step(sx.astype(np.float64), sy, qx, qy)
    with pytest.raises(ValueError, match="query_y must have 3 axes, got 2"):
        maml.meta_step(sx, sy, qx, qy[:, :, 0])
    with pytest.raises(ValueError, match=r"support x \[3, 4, 1\] and y \[3, 5, 1\]"):
        maml.meta_step(sx[:, :4], sy, qx, qy)
    with pytest.raises(ValueError, match='unknown setting "inner_lop"'):
        pp.Maml(pp.mlp(), pp.MseLoss(), generator=gen, inner_lop={})
    with pytest.raises(ValueError, match='"steps": expected an integer, got 1.5'):
        pp.Maml(pp.mlp(), pp.MseLoss(), generator=gen, inner_loop={"steps": 1.5})
    with pytest.raises(ValueError, match='"activation".*none of'):
        pp.mlp(activation="gelu")
    with pytest.raises(ValueError, match='unknown setting "noise"'):
        pp.GaussianNllLoss(noise=1.0)
    with pytest.raises(TypeError, match="float32 or float64"):
        small_maml(dtype="int32")
    with pytest.raises(ValueError, match="a Python task sampler: must return"):
        maml.fit(lambda n, g: (sx, sy), steps=1, meta_batch=3)
    with pytest.raises(ValueError, match="sampler: support_x must be an array.*list"):
        maml.fit(lambda n, g: (sx.tolist(), sy, qx, qy), steps=1, meta_batch=3)
    with pytest.raises(ValueError, match="meta_batch must be positive"):
        maml.fit(pp.SinusoidLine(), steps=1, meta_batch=0)


def test_divergence_is_a_floating_point_error_and_the_learner_stays_usable():
    maml, gen = small_maml(inner_loop={"steps": 5, "learning_rate": 1e30})
    with pytest.raises(FloatingPointError, match="diverged at step 1"):
        maml.fit(pp.SinusoidLine(), steps=3, meta_batch=2)


def test_a_callback_error_reaches_the_caller():
    maml, _ = small_maml()

    def callback(record):
        raise RuntimeError(f"stop at {record['step']}")

    with pytest.raises(RuntimeError, match="stop at 2"):
        maml.fit(pp.SinusoidLine(), steps=4, meta_batch=2, record_every=2, callback=callback)
    assert maml.steps == 2
    maml.meta_step(*pp.SinusoidLine().sample(2, pp.Generator(1)))
    assert maml.steps == 3


def test_ctrl_c_stops_fit_between_steps_and_leaves_the_learner_usable():
    maml, _ = small_maml()
    main = threading.main_thread().ident
    # Python's own SIGINT handler, which a process started in the background
    # (SIGINT ignored, as a shell's `cmd &` leaves it) would not have.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            maml.fit(pp.SinusoidLine(), steps=200_000, meta_batch=2)  # a minute at most
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    taken = maml.steps
    assert 0 < taken < 200_000
    maml.meta_step(*pp.SinusoidLine().sample(2, pp.Generator(1)))
    assert maml.steps == taken + 1


FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST), reason="no Debian dataset-fashion-mnist")
def test_few_shot_image_tasks_train_conv4(tmp_path):
    tasks = pp.FewShotImages(
        "fashion_mnist", split="t10k", ways=3, shots=2, queries=4, cache_directory=tmp_path
    )
    sx, sy, qx, qy = tasks.sample(2, pp.Generator(0))
    assert sx.shape == (2, 6, 1, 28, 28) and qx.shape == (2, 12, 1, 28, 28)
    assert set(np.unique(sy)) == {0.0, 1.0, 2.0} and 0 <= sx.min() and sx.max() <= 1
    net = pp.conv4(channels=1, size=28, filters=4, outputs=3)
    maml = pp.Maml(
        net,
        pp.SoftmaxCrossEntropyLoss(),
        generator=pp.Generator(0),
        inner_loop={"steps": 1, "learning_rate": 0.4},
    )
    records = maml.fit(tasks, steps=2, meta_batch=2, record_every=1)
    assert [r["step"] for r in records] == [1, 2] and np.isfinite(records[-1]["query_loss"])
    with pytest.raises(ValueError, match="3-way tasks need|class label 3 is not in"):
        maml.meta_step(sx, sy + 1, qx, qy)
    with pytest.raises(OSError, match="nowhere"):
        pp.FewShotImages("omniglot", "/nowhere", cache_directory=tmp_path)


# CelebA's 40 attributes, as the library's splits name them (train, val, test).
CELEBA_ATTRIBUTES = (
    "Oval_Face Attractive Mustache Male Pointy_Nose Bushy_Eyebrows Blond_Hair Rosy_Cheeks "
    "Receding_Hairline Eyeglasses Goatee Brown_Hair Narrow_Eyes Chubby Big_Lips Wavy_Hair "
    "Bags_Under_Eyes Arched_Eyebrows Wearing_Earrings High_Cheekbones Black_Hair Bangs "
    "Wearing_Lipstick Sideburns Bald Wearing_Necklace Smiling Pale_Skin Wearing_Necktie Big_Nose "
    "Straight_Hair 5_o_Clock_Shadow Wearing_Hat Gray_Hair Heavy_Makeup Young Blurry Double_Chin "
    "Mouth_Slightly_Open No_Beard"
).split()


def write_png(path, height, width, rgb):
    """An 8-bit RGB PNG (the readers decode by content, so the name may say .jpg)."""
    rows = b"".join(b"\x00" + rgb[r * width * 3 : (r + 1) * width * 3] for r in range(height))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


@pytest.fixture(scope="module")
def celeba_tree(tmp_path_factory):
    """300 random 16 x 16 faces with random attributes, a third in each partition."""
    root = tmp_path_factory.mktemp("celeba")
    (root / "img_align_celeba").mkdir()
    rng = np.random.default_rng(0)
    lines = [str(300), " ".join(CELEBA_ATTRIBUTES)]
    partition = []
    for i in range(300):
        name = f"{i + 1:06d}.jpg"
        write_png(
            root / "img_align_celeba" / name, 16, 16, rng.integers(0, 256, 768, np.uint8).tobytes()
        )
        lines.append(name + " " + " ".join(rng.choice(["-1", "1"], len(CELEBA_ATTRIBUTES))))
        partition.append(f"{name} {i % 3}")
    (root / "list_attr_celeba.txt").write_text("\n".join(lines) + "\n")
    (root / "list_eval_partition.txt").write_text("\n".join(partition) + "\n")
    return root


def test_celeba_tasks_train_and_ambiguous_tasks_are_scored(celeba_tree, tmp_path):
    gen = pp.Generator(0)
    train = pp.Celeba(celeba_tree, "train", shots=1, queries=2, size=8, cache_directory=tmp_path)
    net = pp.conv4(channels=3, size=8, filters=4, blocks=2, outputs=2)
    platipus = pp.Platipus(net, pp.SoftmaxCrossEntropyLoss(), generator=gen, kl_weight=0.05)
    records = platipus.fit(train, steps=2, meta_batch=2, record_every=1)
    assert len(records) == 2 and np.isfinite(records[-1]["kl"])
    ambiguous = pp.AmbiguousCeleba(
        celeba_tree, "test", shots=1, queries=2, size=8, cache_directory=tmp_path
    )
    assert ambiguous.task_count > 0
    tasks = ambiguous.sample(3, gen)
    assert tasks["support_x"].shape == (3, 2, 3, 8, 8)
    assert [x.shape for x in tasks["candidate_x"]] == [(3, 4, 3, 8, 8)] * 3
    assert len(tasks["names"]) == 3 and all(len(c) == 3 for c in tasks["candidate_names"])
    scores = platipus.evaluate_ambiguity(tasks, assignment=3, likelihood=4, at_once=2)
    assert len(scores) == 3
    # coverage: how many of the three candidates some sampled model is assigned to
    assert all(s["coverage"] in (1, 2, 3) for s in scores)
    assert all(0 <= s["accuracy"] <= 1 and s["nll"] > 0 for s in scores)
    with pytest.raises(ValueError, match="the tasks have no 'candidate_y'"):
        platipus.evaluate_ambiguity({k: v for k, v in tasks.items() if k != "candidate_y"})
    with pytest.raises(ValueError, match="candidate_x must be an array"):
        platipus.evaluate_ambiguity({**tasks, "candidate_x": [None, None, None]})
    with pytest.raises(ValueError, match="rule must be"):
        pp.Celeba(celeba_tree, rule="either", cache_directory=tmp_path)
