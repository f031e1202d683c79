"""The Benchmarks page's plots, drawn with matplotlib as SVG text from the results files.

The same results give the same bytes: a fixed hash salt for the SVG's ids, no date, text as text (no glyph
outlines), so ``report.py --check`` compares images as it compares the page. matplotlib is pinned in
constraints.txt because its SVG writer's output is what is compared.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from benchmarks._shared import metrics

STYLE: dict[Any, Any] = {  # rcParams (matplotlib types the keys as a Literal of every name)
    "svg.hashsalt": "faithtrace-benchmarks",
    "svg.fonttype": "none",
    "font.size": 9.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

# A series: a label and its (replicas, evaluations/s) points.
Series = tuple[str, Sequence[tuple[int, float]]]


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    return buf.getvalue()


def _figure(width: float, height: float, panels: int = 1) -> tuple[Figure, list[Any]]:
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = [fig.add_subplot(1, panels, i + 1) for i in range(panels)]
    return fig, axes


def overhead(rows: Sequence[dict[str, Any]]) -> str:
    """Nanoseconds per call for each variant (log scale): the spread of the rounds' p50 with the median
    marked, and the rounds' median p99; a line at the bare OTel span's p50."""
    rows = [r for r in rows if r.get("ns_per_call_median") is not None]
    fig, (ax,) = _figure(7.5, 0.32 * len(rows) + 1.2)
    with matplotlib.rc_context(STYLE):
        ys = list(range(len(rows)))[::-1]
        for y, r in zip(ys, rows, strict=True):
            rounds = r.get("ns_p50_rounds")
            if rounds:
                ax.boxplot([rounds], positions=[y], orientation="horizontal", widths=0.5, showfliers=False)
            else:  # runs that kept only the extremes of the rounds' p50
                ax.plot([r["ns_min"], r["ns_max"]], [y, y], color="C0", linewidth=3, alpha=0.4)
            ax.plot(r["ns_per_call_median"], y, "o", color="C0", markersize=4)
            if r.get("ns_p99") is not None:
                ax.plot(r["ns_p99"], y, "x", color="C3", markersize=5)
        floor = next((r for r in rows if r["variant"] == "otel span (floor)"), None)
        if floor is not None:
            ax.axvline(floor["ns_per_call_median"], color="grey", linestyle="--", linewidth=1)
        ax.set_yticks(ys, [r["variant"] for r in rows])
        ax.set_xscale("log")
        ax.set_xlabel("ns per call (o: p50, median of rounds; bar: rounds' p50; x: p99; dashed: OTel span)")
    return _svg(fig)


def roc(curves: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> str:
    """Each system's ROC curve on the same rows, from its per-row [risk, hallucinated]; AUROC in the "
    "legend."""
    fig, (ax,) = _figure(4.8, 4.6)
    with matplotlib.rc_context(STYLE):
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
        for name, per_row in curves:
            points = roc_points(per_row)
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, linewidth=1.5, label=f"{name} (AUROC {metrics.area(points):.2f})")
        ax.set_xlabel("false positive rate (faithful answers flagged)")
        ax.set_ylabel("true positive rate (hallucinated answers flagged)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.01)
        ax.set_aspect("equal")
        ax.legend(loc="lower right", fontsize=7.5)
    return _svg(fig)


def roc_points(per_row: Sequence[Sequence[Any]]) -> list[tuple[float, float]]:
    return metrics.roc_points([bool(h) for _, h in per_row], [float(r) for r, _ in per_row])


def scaling(panels: Sequence[tuple[str, Sequence[Series]]]) -> str:
    """Evaluations/s against replicas, one panel per judge latency, a line per path, each beside its ideal:
    its smallest fleet's rate per replica times the replicas."""
    fig, axes = _figure(3.6 * len(panels), 3.4, len(panels))
    with matplotlib.rc_context(STYLE):
        for ax, (title, series) in zip(axes, panels, strict=True):
            for i, (label, points) in enumerate(series):
                xs = [n for n, _ in points]
                ax.plot(xs, [v for _, v in points], "o-", color=f"C{i}", label=label)
                n0, v0 = points[0]
                ax.plot(xs, [v0 / n0 * n for n in xs], "--", color=f"C{i}", linewidth=1, alpha=0.6)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("replicas")
            ax.set_xticks(sorted({n for _, points in series for n, _ in points}))
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=7.5, title="dashed: ideal", title_fontsize=7)
        axes[0].set_ylabel("evaluations / s (steady state)")
    return _svg(fig)
