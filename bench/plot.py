#!/usr/bin/env python3
"""Draws the charts of an airlock benchmark run from OUTDIR/results.json.

usage: plot.py OUTDIR   (writes startup.png, overhead.png, scaling.png there)
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"bare": "#7f7f7f", "unshare": "#bcbd22", "bwrap": "#1f77b4", "firejail": "#9467bd",
          "runc": "#8c564b", "crun": "#e377c2", "airlock": "#d62728"}


def startup(res, out):
    rows = res.get("cold_start") or []
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    if not workloads:
        return
    fig, axes = plt.subplots(1, len(workloads), figsize=(7 * len(workloads), 4.8), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        wr = [r for r in rows if r["workload"] == w and r["samples_ms"]]
        data = [r["samples_ms"] for r in wr]
        names = [r["contender"] for r in wr]
        bp = ax.boxplot(data, vert=False, whis=(1, 99), showfliers=False, patch_artist=True,
                        medianprops={"color": "black"})
        for patch, n in zip(bp["boxes"], names):
            patch.set_facecolor(COLORS.get(n, "#cccccc"))
            patch.set_alpha(0.8)
        ax.set_yticks(range(1, len(names) + 1), names)
        ax.set_xscale("log")
        ax.set_xlabel("ms from fork to exit (log scale; box 25–75 %, whiskers 1–99 %)")
        n = min(r["summary_ms"]["n"] for r in wr)
        ax.set_title(f"cold start: {w}  ({n} runs each)")
        for i, r in enumerate(wr, start=1):
            ax.annotate(f"{r['summary_ms']['median']:.1f} ms", (r["summary_ms"]["p99"], i),
                        xytext=(4, -3), textcoords="offset points", fontsize=8)
        ax.grid(axis="x", which="both", alpha=0.3)
        lo, hi = ax.get_xlim()
        ax.set_xlim(lo, hi * 1.6)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "startup.png"), dpi=110)
    plt.close(fig)


def overhead(res, out):
    rows = res.get("steady_state") or []
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    boxes = [c for c in ("bwrap", "airlock") if any(r["contender"] == c for r in rows)]
    if not workloads or not boxes:
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    width = 0.8 / len(boxes)
    for ax, key, what in zip(axes, ("median_vs_bare", "min_vs_bare"), ("median", "minimum")):
        top = 1.0
        for j, c in enumerate(boxes):
            vals = []
            for w in workloads:
                m = [r for r in rows if r["workload"] == w and r["contender"] == c]
                vals.append(m[0][key] if m else 0)
            top = max([top] + vals)
            xs = [i + (j - (len(boxes) - 1) / 2) * width for i in range(len(workloads))]
            bars = ax.bar(xs, vals, width, label=c, color=COLORS.get(c))
            for b, v in zip(bars, vals):
                ax.annotate(f"{v:.2f}×", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="bare = 1")
        ax.set_xticks(range(len(workloads)), workloads)
        ax.set_ylim(0, top * 1.25)
        ax.set_title(f"time per operation, {what} ÷ bare's {what}")
        ax.legend(loc="upper left", ncol=3, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("ratio to bare (1 = no overhead)")
    fig.suptitle(f"steady-state overhead, every process pinned to CPU {res['meta']['pin_cpu']}")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "overhead.png"), dpi=110)
    plt.close(fig)


def scaling(res, out):
    rows = res.get("scaling") or []
    names = list(dict.fromkeys(r["contender"] for r in rows))
    if not names:
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for n in names:
        rs = sorted((r for r in rows if r["contender"] == n), key=lambda r: r["concurrency"])
        cs = [r["concurrency"] for r in rs]
        a1.plot(cs, [r["per_run_ms"]["median"] for r in rs], marker="o", label=n, color=COLORS.get(n))
        a2.plot(cs, [r["runs_per_second"] for r in rs], marker="o", label=n, color=COLORS.get(n))
    for a in (a1, a2):
        a.set_xscale("log")
        a.set_xticks([1, 10, 50, 200], ["1", "10", "50", "200"])
        a.set_xlabel("runs of /bin/true started at once")
        a.grid(alpha=0.3, which="both")
        a.legend()
    a1.set_yscale("log")
    a1.set_ylabel("per-run median, ms (log)")
    a1.set_title("latency under concurrency")
    a2.set_ylabel("completed runs per second")
    a2.set_title("throughput under concurrency")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling.png"), dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)
    startup(res, out)
    overhead(res, out)
    scaling(res, out)


if __name__ == "__main__":
    main()
