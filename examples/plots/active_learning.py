"""Figures 5 and 6 of the PLATIPUS paper from active_learning's output.
Figure 6: error against the true function after each query, per learner,
with 95% intervals. Figure 5: the initial points (purple triangles), the
points PLATIPUS asked for (blue circles, numbered) and its samples after the
last query."""
from common import load, output_dir, plt, save, training_curves

out = output_dir()
result = load(out, "active_learning.json")

fig, ax = plt.subplots(figsize=(5.5, 4))
for curve in result["curves"]:
    means = [p["mean"] for p in curve["mse"]]
    half = [p["ci95"] for p in curve["mse"]]
    steps = range(len(means))
    ax.plot(steps, means, marker="o", label=curve["learner"])
    ax.fill_between(steps, [m - h for m, h in zip(means, half)], [m + h for m, h in zip(means, half)], alpha=0.2)
ax.set_xlabel("number of queried points")
ax.set_ylabel("MSE against the true function")
ax.set_title(f'active learning, {result["tasks"]} tasks')
ax.legend()
save(fig, out, "figure6.png")

grid = result["grid"]
examples = result["examples"]
fig, axes = plt.subplots(1, len(examples), figsize=(4 * len(examples), 3.5), squeeze=False)
for ax, e in zip(axes[0], examples):
    for curve in e["platipus"]:
        ax.plot(grid, curve, ":", linewidth=1.5)
    ax.plot(grid, e["truth"], color="gray", linewidth=3, alpha=0.6)
    k = e["initial"]
    ax.plot(e["x"][:k], e["y"][:k], "^", color="purple", markersize=9)
    ax.plot(e["x"][k:], e["y"][k:], "o", color="blue", markersize=8)
    for i, (x, y) in enumerate(zip(e["x"][k:], e["y"][k:]), 1):
        ax.annotate(str(i), (x, y), textcoords="offset points", xytext=(4, 4), color="blue")
    ax.set_xlim(-5, 5)
save(fig, out, "figure5.png")
training_curves(out)
