"""The judge budget of an ``accuracy.py`` run: tokens and seconds per evaluation, and against another run.

The judge budget is 1,100 judge tokens and 15 s per evaluation on this 2-core CPU. For faithtrace's rows in
an ``accuracy.py`` per-row file this prints, over the evaluations that called the judge: tokens (prompt plus
output) and seconds as mean, median, 90th percentile and maximum, how many are over each limit, and how
many claims were left unjudged by a judge token budget. With ``--against`` another run's rows, it also prints,
over the rows both have, how many claim lists are identical, how many verdicts changed (of the claims both
runs judged, matched by text), the largest change of P(yes), whether the tokens are the same and both mean
times: a change meant to be faster only (same replies) must show zero changes there.

    python benchmarks/judgment/budget.py /tmp/new_rows.jsonl --against benchmarks/results/accuracy_rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common

TOKENS, SECONDS = 1100, 15.0


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {r["id"]: r for r in rows if r.get("system") == "faithtrace"}


def _spread(values: list[float]) -> str:
    return (
        f"mean {statistics.mean(values):.1f}, median {_common.median(values):.1f}, "
        f"90th percentile {_common.percentile(values, 90):.1f}, max {max(values):.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    parser.add_argument("rows", type=Path)
    parser.add_argument("--against", type=Path, default=None)
    args = parser.parse_args(argv)

    rows = _rows(args.rows)
    called = [r for r in rows.values() if r.get("llm_calls")]
    if not called:
        print("no evaluation called the judge")
        return 1
    tokens = [r["input_tokens"] + r["output_tokens"] for r in called]
    seconds = [r["seconds"] for r in called]
    within = sum(t <= TOKENS and s <= SECONDS for t, s in zip(tokens, seconds, strict=True))
    print(f"{len(called)} of {len(rows)} evaluations called the judge")
    print(f"judge tokens: {_spread(tokens)}; over {TOKENS:,}: {sum(t > TOKENS for t in tokens)}")
    print(f"seconds:      {_spread(seconds)}; over {SECONDS:g}: {sum(s > SECONDS for s in seconds)}")
    print(f"within both:  {within}")
    left = [len(r.get("unjudged") or []) for r in rows.values()]
    print(f"claims not judged (judge token budget): {sum(left)} in {sum(1 for k in left if k)} evaluations")
    if args.against is not None:
        other = _rows(args.against)
        common = [k for k in rows if k in other]
        # Matched by text: a run with a judge token budget leaves some claims out of its list.
        theirs = {k: {d[0]: d for d in other[k]["claims"]} for k in common}
        pairs = [(c, theirs[k][c[0]]) for k in common for c in rows[k]["claims"] if c[0] in theirs[k]]
        changed = sum(c[1] != d[1] for c, d in pairs)
        moved = [abs(c[4] - d[4]) for c, d in pairs if c[4] is not None and d[4] is not None]
        same_lists = sum(rows[k]["claims"] == other[k]["claims"] for k in common)
        same_tokens = sum(
            (rows[k]["input_tokens"], rows[k]["output_tokens"])
            == (other[k]["input_tokens"], other[k]["output_tokens"])
            for k in common
        )

        def mean_s(run: dict[str, dict[str, Any]]) -> float:
            return (
                statistics.mean(run[k]["seconds"] for k in common if run[k].get("llm_calls"))
                if common
                else 0.0
            )

        print(
            f"against {args.against.name}: {len(common)} rows in both; identical claim lists {same_lists}; "
            f"verdicts changed {changed} of {len(pairs)}; "
            f"largest P(yes) change {max(moved, default=0.0):.4f}; "
            f"same tokens {same_tokens}; mean seconds {mean_s(rows):.2f} against {mean_s(other):.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
