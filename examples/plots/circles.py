"""Figure 7 of the PLATIPUS paper from circles' output: the single positive
example (green plus), the true circle (gray), MAML's decision boundary
(black) and the boundaries of PLATIPUS samples (colored, dotted)."""
import matplotlib.patches as patches

from common import load, output_dir, plt, save, training_curves

out = output_dir()
figure = load(out, "figure7.json")
side, extent = figure["side"], figure["extent"]
axis = [extent * i / (side - 1) for i in range(side)]


def field(values):
    return [values[r * side:(r + 1) * side] for r in range(side)]


panels = figure["panels"]
fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4), squeeze=False)
colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
for ax, p in zip(axes[0], panels):
    cx, cy, r = p["circle"]
    ax.add_patch(patches.Circle((cx, cy), r, fill=False, color="gray", linewidth=3, alpha=0.6))
    for i, sample in enumerate(p["platipus"]):
        ax.contour(axis, axis, field(sample), levels=[0.0], colors=[colors[i % len(colors)]], linestyles="dotted")
    ax.contour(axis, axis, field(p["maml"]), levels=[0.0], colors="black", linewidths=1.5)
    ax.plot(p["support"][0::2], p["support"][1::2], "+", color="green", markersize=14, markeredgewidth=3)
    ax.set_xlim(0, extent)
    ax.set_ylim(0, extent)
    ax.set_aspect("equal")
save(fig, out, "figure7.png")
training_curves(out)
