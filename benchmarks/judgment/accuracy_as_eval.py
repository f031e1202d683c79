"""faithtrace's rows of an ``accuracy.py`` per-row file as ``faithtrace eval`` results (for its report).

The accuracy benchmark keeps, per row, what ``faithtrace.evaluate`` returned (score, pass / fail, each claim's
text, verdict, reason, who decided it and P(yes), tokens, seconds), not the texts: they come from the dataset,
joined by id with its labels. Nothing is scored again. A claim's ``status`` is the result model's own
(``faithtrace.ClaimVerdict``): an "idk" the judge wrote as an unsure "yes" is "not confirmed", which the file
shows by its reason ("the judge was unsure ..."). The options are the defaults the benchmark ran with; the
judge is the one its summary names.

    python benchmarks/judgment/accuracy_as_eval.py benchmarks/results/accuracy_rows.jsonl \\
        --data ../shared/data/ragtruth_qa_dev.jsonl --out /tmp/dev-scored.jsonl
    faithtrace report /tmp/dev-scored.jsonl --output /tmp/dev-report.html
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import faithtrace
from faithtrace.cli.eval_dataset import Row, load_rows

UNSURE = "the judge was unsure"


def claim(text: str, verdict: str, reason: str | None, decided_by: str, p: float | None) -> dict[str, Any]:
    unsure_yes = verdict == "idk" and decided_by == "judge" and (reason or "").startswith(UNSURE)
    judge_verdict = "yes" if unsure_yes else verdict if decided_by == "judge" else None
    return faithtrace.ClaimVerdict.model_validate(
        {
            "text": text,
            "verdict": verdict,
            "reason": reason,
            "decided_by": decided_by,
            "judge_verdict": judge_verdict,
            "p_supported": p,
        }
    ).model_dump(mode="json")


def as_eval(row: dict[str, Any], data: Row, judge: str | None) -> dict[str, Any]:
    options = faithtrace.ScoringOptions()
    return {
        "id": row["id"],
        "line": data.line,
        "label": data.label,
        "score": row.get("score"),
        "faithfulness": row.get("faithfulness"),
        "outcome": row.get("outcome"),
        "passed": row.get("passed"),
        "threshold": options.threshold,
        "idk_policy": str(options.idk_policy),
        "counts": row.get("counts") or {},
        "claims": [claim(*c) for c in row.get("claims") or []],
        "unjudged": row.get("unjudged") or [],
        "judge_model": judge,
        "duration_s": row.get("seconds"),
        "error": row.get("error") if isinstance(row.get("error"), dict) else None,
        "usage": {k: row.get(k) for k in ("llm_calls", "input_tokens", "output_tokens")} | {"cost_usd": None},
        "question": data.question,
        "contexts": data.contexts,
        "answer": data.answer,
        "options": options.model_dump(mode="json"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rows", type=Path, help="an accuracy.py per-row file (results/accuracy_rows.jsonl)")
    parser.add_argument("--data", type=Path, required=True, help="the dataset it scored")
    parser.add_argument("--out", type=Path, required=True, help="the results file to write")
    parser.add_argument("--system", default="faithtrace", help="whose rows (default faithtrace)")
    args = parser.parse_args()
    summary = args.rows.with_name(args.rows.name.replace("_rows.jsonl", ".json"))
    judge = json.loads(summary.read_text()).get("judge") if summary.exists() else None
    # The dataset read as `faithtrace eval` reads it: the same ids, labels and line numbers.
    data = {row.id: row for row in load_rows(args.data)[0]}
    rows = [json.loads(t) for t in args.rows.read_text(encoding="utf-8").splitlines() if t.strip()]
    written = [as_eval(r, data[r["id"]], judge) for r in rows if r.get("system") == args.system]
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in written), encoding="utf-8")
    print(f"{len(written)} results -> {args.out} (judge {judge})")


if __name__ == "__main__":
    main()
