"""Figure 8 of the PLATIPUS paper from celeba's output: an ambiguous
training set (top: its positives framed purple, negatives gray), and for
each of the three two-attribute tasks that explain it, query images framed
by the label that the sampled classifier fitting that task best gives them
(purple: positive), with the true label below each image: at most five
query images of each true label per candidate."""
from common import load, output_dir, plt, save, training_curves

out = output_dir()
figure = load(out, "figure.json")
channels, height, width = figure["image_shape"]
plane = height * width


def image(pixels, index):
    """Image `index` of a flat C x H x W list as rows of RGB triples in [0, 1]."""
    start = index * channels * plane
    return [[[pixels[start + ch * plane + r * width + c] / 255 for ch in range(channels)]
             for c in range(width)] for r in range(height)]


def show(ax, pixels, index, positive, caption=None):
    ax.imshow(image(pixels, index))
    for spine in ax.spines.values():
        spine.set_edgecolor("purple" if positive else "lightgray")
        spine.set_linewidth(4)
    ax.set_xticks([])
    ax.set_yticks([])
    if caption:
        ax.set_xlabel(caption, fontsize=7)


candidates = figure["candidates"]
support_labels = figure["support_labels"]


def shown(labels, most=5):
    """The indices of the first `most` images of each label."""
    return [i for i, y in enumerate(labels) if sum(1 for z in labels[:i] if z == y) < most]


columns = max(len(support_labels), max(len(shown(c["labels"])) for c in candidates))
fig, axes = plt.subplots(1 + len(candidates), columns, figsize=(1.1 * columns, 1.4 * (1 + len(candidates))),
                         squeeze=False)
for ax in axes.flat:
    ax.axis("off")
for i, label in enumerate(support_labels):
    axes[0][i].axis("on")
    show(axes[0][i], figure["support"], i, label == 1)
axes[0][0].set_title(f"training set: {figure['task']} (purple) vs the converse", fontsize=8, loc="left")
for row, candidate in enumerate(candidates, start=1):
    for column, i in enumerate(shown(candidate["labels"])):
        truth, predicted = candidate["labels"][i], candidate["predicted"][i]
        axes[row][column].axis("on")
        show(axes[row][column], candidate["images"], i, predicted == 1, "true +" if truth == 1 else "true -")
    axes[row][0].set_title(f"{candidate['task']}: {figure['learner']}'s best-fitting sample", fontsize=8,
                           loc="left")
save(fig, out, "figure8.png")
training_curves(out)
