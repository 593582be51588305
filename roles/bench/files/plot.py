"""Plot bench.yml's results.json: all-reduce time and bus bandwidth per message size.

Usage: plot.py results.json allreduce.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

LABELS = {"mpi": "MLX mpi", "ring": "MLX ring", "mpi4py": "mpi4py"}


def main(source, target):
    with open(source) as f:
        data = json.load(f)
    fig, (time_ax, bw_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in data["allreduce"]:
        if r.get("error"):
            continue
        links = f" links={r['links']}" if r["links"] > 1 else ""
        label = f"{LABELS[r['backend']]}{links} @ {r['network']}"
        style = "-" if r["network"] == "thunderbolt" else "--"
        n = r["ranks"]
        busbw = [2 * (n - 1) / n * b * 8 / s / 1e9 for b, s in zip(r["sizes"], r["seconds"],
                                                                   strict=True)]
        time_ax.plot(r["sizes"], [s * 1e3 for s in r["seconds"]], style, marker="o", label=label)
        bw_ax.plot(r["sizes"], busbw, style, marker="o", label=label)
    for network, color in (("thunderbolt", "black"), ("management", "grey")):
        speeds = [link["gbps"] for link in data["iperf3"]
                  if link["network"] == network and "gbps" in link]
        if speeds:
            bw_ax.axhline(min(speeds), color=color, linestyle=":",
                          label=f"iperf3 {network} (slowest link)")
    for ax, ylabel in ((time_ax, "all-reduce time (ms)"), (bw_ax, "bus bandwidth (Gbit/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    time_ax.set_yscale("log")
    bw_ax.legend(fontsize=8)
    fig.suptitle("bench.yml: float32 all-reduce across the cluster")
    fig.tight_layout()
    fig.savefig(target, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
