"""Shared helpers of the example plot scripts."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def output_dir():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} OUTPUT_DIR (the example's --out directory)")
    return sys.argv[1]


def load(out, name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def training_curves(out, name="training.png"):
    """Query loss over meta-training steps for each learner, from train.jsonl."""
    path = os.path.join(out, "train.jsonl")
    if not os.path.exists(path):
        return
    rows = [json.loads(line) for line in open(path)]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for learner in sorted({r["learner"] for r in rows}):
        points = [(r["step"], r["query_loss"]) for r in rows if r["learner"] == learner]
        ax.plot(*zip(*points), label=learner)
    ax.set_xlabel("meta-training step")
    ax.set_ylabel("query loss (post-adaptation)")
    ax.set_yscale("log")
    ax.legend()
    save(fig, out, name)
