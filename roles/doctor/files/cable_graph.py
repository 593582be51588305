"""Draw the Thunderbolt cables (cables.json from check.yml) as a graph in a PNG.

Usage: cable_graph.py cables.json cables.png

cables.json: {"plan": cable_plan's result, "ring": the ring order or [], "summary": one line,
"failed": [targets of failed cable rows, e.g. "mac1 en2 -> mac2 en3"]}. Hosts sit on a circle (in
ring order when the cables form one, so the ring draws without crossings), each cable is a line
labelled with both ports and addresses; a cable named by a failed row is red and dashed.
cables.dot beside it holds the same graph for Graphviz (`dot -Tpng cables.dot`).
"""

import json
import math
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)


def positions(names):
    """Hosts on a unit circle, the first at the top, clockwise."""
    n = len(names)
    return {name: (math.sin(2 * math.pi * i / n), math.cos(2 * math.pi * i / n))
            for i, name in enumerate(names)}


def failed(cable, targets):
    """Whether a failed row names both ends of this cable."""
    ends = [f"{h} {i}" for h, i in zip(cable["hosts"], cable["interfaces"], strict=True)]
    return any(all(end in target.split(" -> ") + target.split(" - ") for end in ends)
               for target in targets)


def main(source, target):
    with open(source) as f:
        data = json.load(f)
    plan = data["plan"]
    names = list(data.get("ring") or []) + [h for h in plan["hosts"] if h not in data.get("ring")]
    where = positions(names)
    fig, ax = plt.subplots(figsize=(2.5 + 1.2 * len(names), 2.5 + 1.2 * len(names)))
    seen = {}
    for cable in plan["cables"]:
        a, b = cable["hosts"]
        pair = tuple(sorted((a, b)))
        nth = seen[pair] = seen.get(pair, -1) + 1  # a second cable between a pair bends away
        (xa, ya), (xb, yb) = where[a], where[b]
        bend = 0.15 * nth * (1 if nth % 2 else -1)
        mx, my = (xa + xb) / 2 - bend * (yb - ya), (ya + yb) / 2 + bend * (xb - xa)
        bad = failed(cable, data.get("failed") or [])
        ax.plot([xa, mx, xb], [ya, my, yb], color="tab:red" if bad else "tab:blue",
                linestyle="--" if bad else "-", linewidth=2, zorder=1)
        (ia, ib), (pa, pb) = cable["interfaces"], cable["addresses"]
        ax.text(mx, my, f"{a} {ia} {pa}\n{b} {ib} {pb}" + ("\nFAILED" if bad else ""),
                ha="center", va="center", fontsize=7, zorder=3,
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85,
                      "edgecolor": "tab:red" if bad else "lightgray"})
    for name, (x, y) in where.items():
        ax.text(x, y, name, ha="center", va="center", fontsize=10, zorder=4,
                bbox={"boxstyle": "square", "facecolor": "lightyellow", "edgecolor": "black"})
    ax.set_xlim(-1.5, 1.5)
    ax.set_ylim(-1.5, 1.5)
    ax.set_aspect("equal")
    ax.axis("off")
    title = textwrap.fill(f"{data.get('summary', '')} (pool {plan['pool']})", 60)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(target, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
