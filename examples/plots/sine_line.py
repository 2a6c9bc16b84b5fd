"""Figure 3 of the PLATIPUS paper from sine_line's output: ground truth (gray),
support points (purple triangles), MAML's fit (black) and PLATIPUS samples
(colored, dotted). Top: a sinusoid and a line task with 5 points; bottom: one
task with 1, 2, 5 and 10 support points."""
from common import load, output_dir, plt, save, training_curves

out = output_dir()
figure = load(out, "figure3.json")
grid = figure["grid"]
top = [p for p in figure["panels"] if p.get("row") != "support"]
bottom = [p for p in figure["panels"] if p.get("row") == "support"]
fig = plt.figure(figsize=(16, 7))
grid_spec = fig.add_gridspec(2, 4)
top_axes = [fig.add_subplot(grid_spec[0, 2 * i:2 * i + 2]) for i in range(len(top))]
bottom_axes = [fig.add_subplot(grid_spec[1, i]) for i in range(len(bottom))]
for ax, p in list(zip(top_axes, top)) + list(zip(bottom_axes, bottom)):
    for curve in p["platipus"]:
        ax.plot(grid, curve, ":", linewidth=1.5)
    ax.plot(grid, p["truth"], color="gray", linewidth=3, alpha=0.6, label="ground truth")
    ax.plot(grid, p["maml"], color="black", linewidth=1.5, label="MAML")
    ax.plot(p["support_x"], p["support_y"], "^", color="purple", markersize=9, label="support")
    ax.set_title(f'{p["kind"]}, {len(p["support_x"])} support point{"s" if len(p["support_x"]) > 1 else ""}')
    ax.set_xlim(-5, 5)
    low, high = min(p["truth"]), max(p["truth"])
    margin = max(1.0, 0.5 * (high - low))
    ax.set_ylim(low - margin, high + margin)
top_axes[0].legend(loc="lower left", fontsize=8)
save(fig, out, "figure3.png")
training_curves(out)
