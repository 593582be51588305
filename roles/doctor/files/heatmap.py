"""Draw the ping-pong link matrix (links.json from check.yml) as two heatmaps in one PNG.

Usage: heatmap.py links.json links.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402


def matrices(links):
    names = [links["names"].get(h, h) for h in links["hosts"]]
    n = len(names)
    latency, bandwidth = np.full((n, n), np.nan), np.full((n, n), np.nan)
    for p in links["pairs"]:
        for a, b in ((p["a"], p["b"]), (p["b"], p["a"])):
            latency[a, b], bandwidth[a, b] = p["latency_us"], p["gbps"]
    return names, latency, bandwidth


def main(source, target):
    with open(source) as f:
        names, latency, bandwidth = matrices(json.load(f))
    fig, axes = plt.subplots(1, 2, figsize=(4 + 1.6 * len(names), 2 + 0.8 * len(names)))
    panels = ((latency, "latency (us)", "viridis_r", "{:.0f}"),
              (bandwidth, "bandwidth (Gbit/s)", "viridis", "{:.2f}"))
    for ax, (data, title, cmap, fmt) in zip(axes, panels, strict=True):
        image = ax.imshow(data, cmap=cmap)
        ax.set_title(title)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
        ax.set_yticks(range(len(names)), names)
        for (i, j), value in np.ndenumerate(data):
            if not np.isnan(value):
                red, green, blue, _ = image.cmap(image.norm(value))
                light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.5
                ax.text(j, i, fmt.format(value), ha="center", va="center",
                        color="black" if light else "white")
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle("mpi4py ping-pong between host pairs (check.yml)")
    fig.tight_layout()
    fig.savefig(target, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
