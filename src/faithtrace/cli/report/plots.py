"""The report's plots, drawn by matplotlib as inline SVG.

SVG keeps the report one offline file (no image files, no script library) and small: text stays text
(``svg.fonttype: none``). Every drawn series carries an element id (its ``gid``), so a reader's tools and the
report's browser test can find a curve in the page. Path simplification is off: the drawn curve has exactly
the points the figures list. Nothing here touches pyplot or matplotlib's global settings: each plot is a bare
``Figure`` rendered under ``rc_context``.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

FAITHFUL_COLOUR = "#2a9d8f"
HALLUCINATED_COLOUR = "#d1495b"
NEUTRAL_COLOUR = "#8d99ae"
PASS_MARK_COLOUR = "#264653"
BEST_COLOUR = "#e9a03b"
SIZE = (5.4, 3.5)
SWEEP_SIZE = (8.0, 3.6)  # a pass mark is read off its x axis: wider

_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
# matplotlib numbers its elements' ids alike in every figure ("axes_1", "line2d_3"): prefixed with the plot's
# name, so that ids stay unique in the page. The ids it references (clip paths, markers) are hashes, and ours
# (the gids) have no "_<number>" ending.
_NUMBERED_ID = re.compile(r'id="([A-Za-z][\w.]*_\d+)"')


def _nan(values: Sequence[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


def _render(name: str, fig: Figure) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    svg = _METADATA.sub("", _PROLOGUE.sub("", buffer.getvalue(), count=1), count=1)
    svg = _NUMBERED_ID.sub(lambda m: f'id="{name}-{m.group(1)}"', svg)
    # Named, so that the page and its tests can tell the plots apart.
    return svg.replace("<svg ", f'<svg data-plot="{name}" role="img" ', 1)


def _plot(name: str, draw: Callable[[Axes], None], size: tuple[float, float] = SIZE) -> str:
    # The hash salt makes matplotlib's generated ids (clip paths) depend on the plot: plots share one page.
    with matplotlib.rc_context(
        {"svg.fonttype": "none", "svg.hashsalt": f"faithtrace-{name}", "path.simplify": False}
    ):
        fig = Figure(figsize=size, layout="constrained")
        ax = fig.subplots()
        draw(ax)
        ax.grid(alpha=0.3)
        return _render(name, fig)


def histogram(scores: Mapping[str, Any], pass_mark: float) -> str:
    """How many answers have each score, by label where rows carry labels."""
    hist = scores["histogram"]
    edges: list[float] = hist["edges"]

    def draw(ax: Axes) -> None:
        for key, colour, label in (
            ("faithful", FAITHFUL_COLOUR, "labelled faithful"),
            ("hallucinated", HALLUCINATED_COLOUR, "labelled hallucinated"),
            ("unlabelled", NEUTRAL_COLOUR, "no label"),
        ):
            if key in hist:
                ax.stairs(
                    hist[key], edges, fill=True, alpha=0.45, color=colour, label=label, gid=f"hist-{key}"
                )
        ax.axvline(
            pass_mark,
            color=PASS_MARK_COLOUR,
            linestyle="--",
            label=f"pass mark {pass_mark:g}",
            gid="hist-pass-mark",
        )
        ax.set(xlabel="score", ylabel="answers", xlim=(0, 1))
        ax.legend(fontsize="small")

    return _plot("histogram", draw)


def roc(labels: Mapping[str, Any]) -> str:
    curve, at, best = labels["roc"], labels["at_pass_mark"], labels["best"]

    def draw(ax: Axes) -> None:
        ax.plot([0, 1], [0, 1], color=NEUTRAL_COLOUR, linestyle=":", gid="roc-chance")
        ax.plot(
            curve["fpr"],
            curve["tpr"],
            color=HALLUCINATED_COLOUR,
            gid="roc-curve",
            label=f"AUROC {labels['auroc']:.3f}",
        )
        _point(ax, at, "roc-pass-mark", PASS_MARK_COLOUR, f"pass mark {at['pass_mark']:g}")
        if best is not None:
            _point(ax, best, "roc-best", BEST_COLOUR, f"best pass mark {best['pass_mark']:.2f}")
        _unit_square(ax, "false-alarm rate (faithful answers flagged)", RECALL, "lower right")

    return _plot("roc", draw)


RECALL = "recall (hallucinations flagged)"


def _unit_square(ax: Axes, xlabel: str, ylabel: str, legend: Literal["lower left", "lower right"]) -> None:
    """Both axes are rates from 0 to 1, with a little room for the points on the edges."""
    ax.set(xlabel=xlabel, ylabel=ylabel, xlim=(-0.02, 1.02), ylim=(-0.02, 1.02))
    ax.legend(fontsize="small", loc=legend)


def _point(ax: Axes, counts: Mapping[str, Any], gid: str, colour: str, label: str) -> None:
    negatives = counts["fp"] + counts["tn"]
    positives = counts["tp"] + counts["fn"]
    x = counts["fp"] / negatives if negatives else math.nan
    y = counts["tp"] / positives if positives else math.nan
    ax.scatter([x], [y], s=45, color=colour, zorder=3, gid=gid, label=label)


def precision_recall(labels: Mapping[str, Any]) -> str:
    curve, at, best = labels["pr"], labels["at_pass_mark"], labels["best"]
    base = labels["hallucinated"] / labels["labelled"] if labels["labelled"] else 0.0

    def draw(ax: Axes) -> None:
        ax.axhline(
            base,
            color=NEUTRAL_COLOUR,
            linestyle=":",
            gid="pr-base-rate",
            label=f"share hallucinated {base:.2f}",
        )
        # Steps, as average precision counts them: each cut's precision over the recall it adds.
        ax.plot(
            curve["recall"],
            curve["precision"],
            drawstyle="steps-pre",
            color=HALLUCINATED_COLOUR,
            gid="pr-curve",
            label=f"average precision {labels['average_precision']:.3f}",
        )
        for counts, gid, colour, label in (
            (at, "pr-pass-mark", PASS_MARK_COLOUR, f"pass mark {at['pass_mark']:g}"),
            (best, "pr-best", BEST_COLOUR, "best pass mark"),
        ):
            if counts is not None and counts["tp"] + counts["fp"]:
                recall = counts["tp"] / (counts["tp"] + counts["fn"])
                ax.scatter(
                    [recall],
                    [counts["tp"] / (counts["tp"] + counts["fp"])],
                    s=45,
                    color=colour,
                    zorder=3,
                    gid=gid,
                    label=label,
                )
        _unit_square(ax, RECALL, "precision (flagged that are hallucinated)", "lower left")

    return _plot("pr", draw)


def sweep(labels: Mapping[str, Any]) -> str:
    """Balanced accuracy, precision, recall and the share flagged at every pass mark; the configured mark,
    and the best one with its bootstrap interval."""
    data, best, at = labels["sweep"], labels["best"], labels["at_pass_mark"]
    marks = data["pass_marks"]

    def draw(ax: Axes) -> None:
        if best is not None and best["interval"] is not None:
            ci = best["interval"]
            ax.axvspan(
                ci["low"],
                ci["high"],
                color=BEST_COLOUR,
                alpha=0.18,
                gid="sweep-interval",
                label=f"{ci['level']:.0%} bootstrap interval",
            )
        for key, colour, style, label in (
            ("balanced_accuracy", PASS_MARK_COLOUR, "-", "balanced accuracy"),
            ("precision", HALLUCINATED_COLOUR, "--", "precision"),
            ("recall", FAITHFUL_COLOUR, "-.", "recall"),
            ("flagged_rate", NEUTRAL_COLOUR, ":", "share flagged"),
        ):
            ax.plot(
                marks,
                _nan(data[key]),
                color=colour,
                linestyle=style,
                label=label,
                gid=f"sweep-{key.replace('_', '-')}",
            )
        ax.axvline(at["pass_mark"], color=PASS_MARK_COLOUR, linestyle="--", alpha=0.7, gid="sweep-pass-mark")
        if best is not None:
            ax.axvline(
                best["pass_mark"],
                color=BEST_COLOUR,
                linewidth=2,
                gid="sweep-best",
                label=f"best pass mark {best['pass_mark']:.2f}",
            )
        ax.set(xlabel="pass mark (score under it = flagged)", ylabel="rate", xlim=(0, 1), ylim=(-0.02, 1.02))
        ax.legend(fontsize="x-small", loc="lower left")

    return _plot("sweep", draw, SWEEP_SIZE)
