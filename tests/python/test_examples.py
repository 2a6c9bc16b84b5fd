"""The Python package computes what the C++ library computes, bit for bit,
for the same seed and settings: examples/python/sine_line.py against the C++
example sine_line (results.json, training records), and 50 Python meta_step
calls of MAML and PLATIPUS against the C++ driver's meta-parameters in that
example's checkpoint. The C++ example is PLATIPUS_EXAMPLES/sine_line, else
build/release/examples/sine_line (README.md's build)."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import platipus as pp

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = pathlib.Path(
    os.environ.get("PLATIPUS_EXAMPLES", ROOT / "build" / "release" / "examples")
)
SEED, STEPS = 3, 50
SHORT = [
    "--steps",
    str(STEPS),
    "--eval-tasks",
    "30",
    "--samples",
    "4",
    "--no-plot",
    "--seed",
    str(SEED),
]

pytestmark = pytest.mark.skipif(
    not (EXAMPLES / "sine_line").exists(),
    reason=f"no C++ sine_line in {EXAMPLES} (build the examples or set PLATIPUS_EXAMPLES)",
)


@pytest.fixture(scope="module")
def cpp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpp")
    subprocess.run([str(EXAMPLES / "sine_line"), *SHORT, "--out", str(out)], check=True)
    return out


def records(out):
    rows = [json.loads(line) for line in open(out / "train.jsonl")]
    for row in rows:
        del row["seconds"]
    return rows


def test_python_sine_line_equals_the_cpp_example(cpp_run, tmp_path):
    script = ROOT / "examples" / "python" / "sine_line.py"
    subprocess.run([sys.executable, str(script), *SHORT, "--out", str(tmp_path)], check=True)
    cpp_results = json.load(open(cpp_run / "results.json"))["results"]
    assert json.load(open(tmp_path / "results.json"))["results"] == cpp_results
    assert records(tmp_path) == records(cpp_run)
    figure = json.load(open(tmp_path / "figure3.json"))
    assert [p["kind"] for p in figure["panels"]] == ["sinusoid", "line"] + ["sinusoid"] * 4
    assert [len(p["platipus"]) for p in figure["panels"]] == [4] * 6


@pytest.mark.parametrize("name", ["maml", "platipus"])
def test_python_meta_steps_give_the_cpp_drivers_meta_parameters(cpp_run, name):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    sys.path.insert(0, str(ROOT / "examples" / "python"))
    import sine_line  # the example's learners and streams

    args = sine_line.arguments([*SHORT])
    learner = sine_line.paper_learners(args)[name]
    tasks = pp.SinusoidLine(support=5, query=10)
    gen = pp.Generator(SEED, sine_line.TRAINING_TASKS[name])
    for _ in range(STEPS):
        learner.meta_step(*tasks.sample(args.meta_batch, gen), generator=gen)
    saved = safetensors_numpy.load_file(str(cpp_run / "checkpoint.safetensors"))
    state = learner.state()
    for part, value in state.items():
        assert value.tobytes() == saved[f"{name}/{part}"].tobytes(), part
