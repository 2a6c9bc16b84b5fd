#!/usr/bin/env python3
"""The README's main job in Python: the PLATIPUS paper's 5-shot
sinusoid-or-line regression (Section 5, Figure 3). Meta-trains MAML, MAML +
noise and PLATIPUS with the paper's network and settings, scores them on
held-out tasks (query MSE, predictive NLL, 90% coverage, with 95% intervals)
and draws Figure 3. With the same seed and settings it computes what the C++
example `sine_line` computes: the same results.json numbers, bit for bit.

    .venv/bin/python examples/python/sine_line.py [--quick] [--out DIR] [--steps N] ...
"""

import argparse
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

import platipus as pp

# Generator streams, as examples/streams.hpp numbers them.
TRAINING_TASKS = {"maml": 1, "platipus": 2, "maml_noise": 3}
MODELS = {"maml": 6, "maml_noise": 7, "platipus": 8}
HELD_OUT_TASKS, FIGURES = 20, 4
NOISE_STD = 0.3  # the tasks' label noise, the likelihood's known scale
GRID = [-5 + 10 * i / 199 for i in range(200)]


def arguments(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out/sine_line_python", help="output directory")
    p.add_argument("--steps", type=int, default=None, help="meta-steps of each learner (20000)")
    p.add_argument("--meta-batch", type=int, default=25, help="tasks per meta-step")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="0: one per core")
    p.add_argument("--eval-tasks", type=int, default=None, help="held-out tasks (600)")
    p.add_argument(
        "--samples", type=int, default=10, help="models per task of the sampling learners"
    )
    p.add_argument("--quick", action="store_true", help="200 steps and 100 held-out tasks")
    p.add_argument("--no-plot", action="store_true", help="write no figures")
    a = p.parse_args(argv)
    a.steps = a.steps if a.steps is not None else (200 if a.quick else 20000)
    a.eval_tasks = a.eval_tasks if a.eval_tasks is not None else (100 if a.quick else 600)
    return a


def paper_learners(a):
    """MAML, MAML + noise and PLATIPUS as sine_line.cpp sets them up
    (examples/regression.hpp): the paper's network, a Gaussian likelihood of
    std 0.3, alpha = 0.001 on the MSE (1.8e-4 on the mean NLL), KL weight 1.5."""
    network = pp.mlp(inputs=1, hidden=[100, 100, 100], outputs=1, bias_transform=20)
    loss = pp.GaussianNllLoss(noise_std=NOISE_STD)
    inner_loop = {"steps": 5, "learning_rate": 1.8e-4, "max_gradient_norm": 1e4}
    shared = {"inner_loop": inner_loop, "threads": a.threads}
    return {
        "maml": pp.Maml(network, loss, generator=pp.Generator(a.seed), **shared),
        "maml_noise": pp.MamlNoise(
            network, loss, gradient_noise=80, generator=pp.Generator(a.seed), **shared
        ),
        "platipus": pp.Platipus(
            network,
            loss,
            generator=pp.Generator(a.seed),
            kl_weight=1.5,
            query_reduction="sum",
            posterior_data="support_and_query",
            initial_prior_variance=0.001,
            initial_posterior_variance=0.001,
            initial_gamma_p=1.8e-4,
            initial_gamma_q=1.8e-4,
            **shared,
        ),
    }


def train(learners, a, out):
    """Each learner in turn on its own task stream; the metrics are appended
    to train.jsonl as training goes."""
    tasks = pp.SinusoidLine(support=5, query=10)
    with open(out / "train.jsonl", "w") as log:
        for name, learner in learners.items():

            def record(r, name=name):
                log.write(json.dumps({"learner": name, **r}, sort_keys=True) + "\n")
                log.flush()

            learner.fit(
                tasks,
                steps=a.steps,
                meta_batch=a.meta_batch,
                callback=record,
                generator=pp.Generator(a.seed, TRAINING_TASKS[name]),
            )


def as_json(values):
    mean, interval = pp.estimate(values)
    return {"mean": mean, "ci95": interval}


def evaluate(learners, a):
    """The same held-out tasks for every learner, each drawing its models
    from its own stream (examples/common.hpp's score_learners)."""
    held_out = pp.SinusoidLine(support=5, query=100)
    scores = {
        name: learner.held_out_regression(
            held_out,
            noise_std=NOISE_STD,
            task_generator=pp.Generator(a.seed, HELD_OUT_TASKS),
            model_generator=pp.Generator(a.seed, MODELS[name]),
            tasks=a.eval_tasks,
            samples=a.samples,
        )
        for name, learner in learners.items()
    }
    results = {
        "tasks": a.eval_tasks,
        "query_points": 100,
        "support_points": 5,
        "samples": a.samples,
        "noise_std": NOISE_STD,
    }
    for name, s in scores.items():
        results[name] = {
            "mse": as_json([t["mse"] for t in s]),
            "nll": as_json([t["nll"] for t in s]),
            "coverage90": as_json([t["coverage"] for t in s]),
        }
    results["platipus"]["mse_per_sample"] = as_json(
        [t["mse_per_sample"] for t in scores["platipus"]]
    )
    results["platipus_minus_maml_mse"] = as_json(
        [p["mse"] - m["mse"] for p, m in zip(scores["platipus"], scores["maml"])]
    )
    return results


def figure3(learners, a):
    """Figure 3's panels, drawn as sine_line.cpp draws them: a sinusoid and a
    line task with 5 support points, then one sinusoid with 1, 2, 5 and 10."""
    sampler = pp.SinusoidLine()
    gen = pp.Generator(a.seed, FIGURES)
    maml, platipus = learners["maml"], learners["platipus"]

    def draw(sinusoid):
        while True:
            f = sampler.draw_function(gen)
            if f.sinusoid == sinusoid:
                return f

    gx = np.array([[[x] for x in GRID]], dtype=np.float32)  # [1, 200, 1]

    def panel(f, x, y):
        sx, sy = x.reshape(1, -1, 1), y.reshape(1, -1, 1)
        fit = maml.predict(maml.adapt(sx, sy, generator=gen), gx)
        sampled = platipus.predict(platipus.sample(sx, sy, a.samples, generator=gen), gx)
        return {
            "kind": "sinusoid" if f.sinusoid else "line",
            "truth": f([float(v) for v in gx.ravel()]),
            "support_x": x.tolist(),
            "support_y": y.tolist(),
            "maml": fit.ravel().tolist(),
            "platipus": sampled.reshape(a.samples, -1).tolist(),
        }

    panels = []
    for sinusoid in (True, False):
        f = draw(sinusoid)
        panels.append(panel(f, *sampler.points(f, 5, gen)))
    f = draw(True)
    x, y = sampler.points(f, 10, gen)
    for k in (1, 2, 5, 10):
        panels.append({**panel(f, x[:k], y[:k]), "row": "support"})
    return {"grid": GRID, "panels": panels}


def write_json(path, value):
    """Atomically: a reader never sees half a file."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as f:
        json.dump(value, f, indent=2)
    os.replace(f.name, path)


def main():
    a = arguments()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    learners = paper_learners(a)
    train(learners, a, out)
    results = evaluate(learners, a)
    options = {
        "steps": a.steps,
        "meta_batch": a.meta_batch,
        "seed": a.seed,
        "support": 5,
        "query": 10,
    }
    write_json(out / "results.json", {"results": results, "options": options})
    write_json(out / "figure3.json", figure3(learners, a))
    print(
        f"{a.eval_tasks} held-out tasks, 5 support and 100 query points "
        f"(mean +- 95% interval; {a.samples} samples)"
    )
    for name in learners:
        r = results[name]
        print(
            f"  {name:<11}"
            + "".join(
                f"  {key} {r[key]['mean']:.3f} +- {r[key]['ci95']:.3f}"
                for key in ("mse", "nll", "coverage90")
            )
        )
    d = results["platipus_minus_maml_mse"]
    print(f"  PLATIPUS's MSE minus MAML's, paired by task: {d['mean']:.3f} +- {d['ci95']:.3f}")
    if not a.no_plot:
        # The C++ example's plot script, which reads figure3.json and train.jsonl.
        script = pathlib.Path(__file__).resolve().parent.parent / "plots" / "sine_line.py"
        if importlib.util.find_spec("matplotlib") is None:
            print(
                f"no matplotlib here (pip install matplotlib); to draw the figures later: "
                f"python3 {script} {out}",
                file=sys.stderr,
            )
        else:
            subprocess.run([sys.executable, str(script), str(out)], check=False)
    print(f"wrote {out}/results.json, figure3.json, train.jsonl")


if __name__ == "__main__":
    main()
