"""``faithtrace report scored.jsonl``: the HTML report, figures and gate of a finished or resumed run."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from faithtrace._config.scoring_options import ScoringOptions
from faithtrace.cli.deliver import Deliver, deliver_results, read_lines, report_problem
from faithtrace.cli.eval_dataset import load_rows
from faithtrace.cli.figures import Gate, Skip, Source
from faithtrace.cli.output import Output
from faithtrace.cli.scored_file import load_scored, with_inputs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="the results file of `faithtrace eval --out`")
    p.add_argument(
        "--data",
        type=Path,
        help="the input file it scored: lists its skipped lines and rows not scored yet, and fills in texts",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        help="the HTML report (default: FILE with .html; with --json, only when given)",
    )


def run_report_command(out: Output, args: argparse.Namespace, gate: Gate) -> int:
    file: Path = args.file
    loaded = read_lines(out, "report", file, load_scored)
    if loaded is None:
        return 2
    records, skips = loaded
    rows: int | None = None
    not_scored = 0
    if args.data is not None:
        inputs_loaded = read_lines(out, "report", args.data, load_rows)
        if inputs_loaded is None:
            return 2
        inputs, input_skips = inputs_loaded
        records, not_scored = with_inputs(records, inputs)
        rows = len(inputs)
        # The input's own bad lines are what its run skipped; the results file's follow, named as its.
        skips = [*input_skips, *(Skip(k.line, f"{file.name}: {k.reason}") for k in skips)]
    if not records:
        out.error(f"faithtrace report: {file} has no result records")
        return 2
    threshold = args.threshold
    if threshold is None:
        marks = Counter(float(r["threshold"]) for r in records if isinstance(r.get("threshold"), int | float))
        threshold = marks.most_common(1)[0][0] if marks else ScoringOptions.from_env().threshold
    output: Path | None = args.output
    if output is None and not args.json:
        output = file.with_suffix(".html")
    if output is not None and (problem := report_problem(output)) is not None:
        out.error(f"faithtrace report: {problem}")
        return 2
    source = Source(str(args.data or file), rows, skips, not_scored)
    deliver = Deliver(report=output, json=args.json, gate=gate, report_answers=args.report_answers)
    code = deliver_results(out, records, source, threshold, deliver, command="report")
    if skips:
        out.error(f"faithtrace report: {len(skips)} line(s) skipped (see the messages above)")
    return code
