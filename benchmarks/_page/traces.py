"""The page's traces part: what lands in the app's traces and when (traces/held_spans.py): RAG spans held for
their evaluation with the default judge, what a kill -9 loses of them, and each path's trace durations."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from benchmarks._page.results import Figures, Headline, Run, fmt, newest, of_kind, table_section

HOLD, KILL9, PATHS = "held_spans_hold", "held_spans_kill9", "held_spans_paths"
PATH_NAMES = {
    "decorator": "the decorator",
    "score_openinference": "`score_openinference()`",
    "faithtrace serve": "`faithtrace serve`",
}
PLACEMENTS = {"rag_span": "`rag_span` (default)", "child": "`child`", "linked": "`linked`"}


def headlines(runs: list[Run]) -> list[Headline]:
    out: list[Headline] = []
    paths = newest(of_kind(runs, PATHS))
    if paths is not None:
        rows = paths.doc["runs"]
        default, child = _row(rows, "decorator", "rag_span"), _row(rows, "decorator", "child")
        if default is not None and child is not None:
            f = Figures()
            answer = (
                f"{f(paths, 'runs', default, 'trace_ms', digits=1)} ms for a "
                f"{f(paths, 'runs', default, 'request_ms', digits=1)} ms request, the score on its RAG span; "
                f"{f(paths, 'runs', child, 'trace_ms', digits=0)} ms with the evaluation as a child span "
                f"(judge {fmt(paths.doc['judge_latency_s'], 1)} s)"
            )
            out.append(
                Headline(
                    "A scored request's trace duration (the decorator)", answer, tuple(f.cited), "trace-paths"
                )
            )
    kill = newest(of_kind(runs, KILL9))
    if kill is not None:
        rows = kill.doc["runs"]
        held, child = _worst(rows, "rag_span", keeps_up=True), _worst(rows, "child", keeps_up=True)
        if held is not None and child is not None:
            f = Figures()
            answer = (
                f"at most {f(kill, 'runs', held, 'rag_spans_lost', digits=0)} RAG spans "
                f"({f(kill, 'runs', held, 'rag_spans_lost_s', digits=1)} s of traffic) with a judge that "
                f"keeps up, {f(kill, 'runs', child, 'rag_spans_lost', digits=0)} with placement `child`"
            )
            out.append(
                Headline("What a kill -9 loses with RAG spans held", answer, tuple(f.cited), "held-kill9")
            )
    hold = newest(of_kind(runs, HOLD))
    if hold is not None:
        f = Figures()
        answer = (
            f"{f(hold, 'released_at_deadline', digits=0)} of {f(hold, 'calls', digits=0)} released at the "
            f"{f(hold, 'hold_timeout_s', digits=0)} s deadline, the evaluation taking "
            f"{f(hold, 'evaluation_s', 'p50', digits=1)} s at the median, the judge sharing "
            f"{f(hold, 'machine', 'cores', digits=0)} cores at load "
            f"{f(hold, 'machine', 'loadavg_1m', digits=1)}"
        )
        out.append(Headline("RAG spans held for the default judge", answer, tuple(f.cited), "held-spans"))
    return out


def sections(runs: list[Run], images: dict[str, str]) -> list[tuple[str, list[Run]]]:
    """(markdown, runs shown) per section; no plots."""
    out = []
    for kind, render in ((HOLD, _hold), (KILL9, _kill9), (PATHS, _paths)):
        run = newest(of_kind(runs, kind))
        if run is not None:
            out.append((render(run), [run]))
    return out


def _row(rows: list[dict[str, Any]], path: str, placement: str) -> int | None:
    return next((i for i, r in enumerate(rows) if r["path"] == path and r["placement"] == placement), None)


def _worst(rows: list[dict[str, Any]], placement: str, *, keeps_up: bool) -> int | None:
    """The run of ``placement`` that lost the most RAG spans, among those whose judge keeps up (or not)."""
    picked = [i for i, r in enumerate(rows) if r["placement"] == placement and _keeps_up(r) == keeps_up]
    return max(picked, key=lambda i: rows[i]["rag_spans_lost"], default=None)


def _keeps_up(row: dict[str, Any]) -> bool:
    # The app's worker judges 4 at once (the script's `concurrency`): capacity 4 / latency evaluations/s.
    return bool(row["rate_per_s"] * row["judge_latency_s"] <= 4)


def _hold(run: Run) -> str:
    d = run.doc
    header = ["judge", "hold s", "calls", "evaluation s p50 / p95 / max", "queue wait s p50 / max"]
    header += ["held s p50 / max", "released at the deadline"]
    rows = [
        [
            str(d["judge"]),
            fmt(d["hold_timeout_s"], 0),
            f"{d['paced_calls']} paced {fmt(d['interval_s'], 0)} s apart, then {d['burst']} at once",
            " / ".join(fmt(d["evaluation_s"][k], 1) for k in ("p50", "p95", "max")),
            " / ".join(fmt(d["queue_wait_s"][k], 1) for k in ("p50", "max")),
            " / ".join(fmt(d["hold_s"][k], 1) for k in ("p50", "max")),
            f"{d['released_at_deadline']} of {d['calls']}",
        ]
    ]
    intro = (
        "With placement `rag_span` (the default), each RAG span is exported once its evaluation is on it, or "
        "at `hold_timeout_s`, its evaluation then following in a linked trace. Decorated calls answer RAG "
        "rows with the default (embedded) judge: each call's hold (the span's export time minus the call's "
        "end), its evaluation's own time and its wait in the queue. Read with the run's load: the judge "
        "shares the machine's cores."
    )
    return table_section(run, "### RAG spans held for their evaluation {#held-spans}", intro, header, rows)


def _kill9(run: Run) -> str:
    header = ["calls/s", "judge s per request", "placement", "runs", "calls returned"]
    header += ["RAG spans lost, each run", "as seconds of traffic", "evaluations lost, each run"]
    rows = [
        [
            fmt(rate, 0),
            f"{fmt(latency, 1)} ({'keeps up' if _keeps_up(group[0]) else 'behind'})",
            PLACEMENTS.get(placement, placement),
            str(len(group)),
            f"{sum(r['calls_returned'] for r in group):,}",
            ", ".join(fmt(r["rag_spans_lost"]) for r in group),
            _span(r["rag_spans_lost_s"] for r in group),
            ", ".join(fmt(r["evaluations_lost"]) for r in group),
        ]
        for (rate, latency, placement), group in _groups(run.doc["runs"])
    ]
    intro = (
        f"An app configured from the environment alone (the SDK's batch defaults, the worker's defaults: "
        f"{run.doc['concurrency']} evaluations at once) killed with SIGKILL {fmt(run.doc['seconds'], 0)} s "
        "in, with its RAG spans held (`rag_span`) against exported as the call ends (`child`). Lost: calls "
        "that returned whose RAG span or evaluation never arrived."
    )
    return table_section(
        run, "### What a kill -9 loses with RAG spans held {#held-kill9}", intro, header, rows
    )


def _span(values: Iterable[float]) -> str:
    """``low–high`` of the runs' figures, or the one figure when they agree."""
    low, high = min(values := list(values)), max(values)
    return fmt(low) if low == high else f"{fmt(low)}–{fmt(high)}"


def _groups(rows: list[dict[str, Any]]) -> Iterator[tuple[tuple[float, float, str], list[dict[str, Any]]]]:
    """The runs by setting (rate, judge latency, placement), in first-seen order."""
    groups: dict[tuple[float, float, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["rate_per_s"], r["judge_latency_s"], r["placement"]), []).append(r)
    yield from groups.items()


def _paths(run: Run) -> str:
    header = ["path", "placement", "the request ms", "its trace ms", "the score in the request's trace"]
    rows = [
        [
            PATH_NAMES.get(r["path"], r["path"]),
            PLACEMENTS.get(r["placement"], r["placement"]),
            fmt(r["request_ms"], 1),
            fmt(r["trace_ms"], 1),
            fmt(r["score_in_request_trace"]),
        ]
        for r in run.doc["runs"]
    ]
    intro = (
        "Each way of scoring and each placement: the request's trace as a backend computes it (first span's "
        "start to last span's end, over every span in the request's trace) against the request's own root "
        f"span, with a stand-in judge taking {fmt(run.doc['judge_latency_s'], 1)} s per request. "
        "`score_openinference()` and `faithtrace serve` see a RAG span only once it is exported: for them "
        '`rag_span` means `linked` (docs/concepts.md, "Paths that score spans already exported").'
    )
    return table_section(run, "### Each path's trace durations {#trace-paths}", intro, header, rows)
