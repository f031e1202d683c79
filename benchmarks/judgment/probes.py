"""Contradiction and paraphrase probes: does the score catch what a user would call made up?

Runs every probe of ``data/probes.jsonl`` (written by hand: contradictions of ten kinds, faithful paraphrases
of five; every third probe held out from all tuning) through ``faithtrace.evaluate`` with the embedded judge,
or ``--judge-model``, and prints per kind and per split: how many contradictions score < 1.0 *and* fail at the
threshold, how many paraphrases pass, and judge tokens and seconds per evaluation. Per-probe results (with
each claim's verdict, who decided it and P(yes)) go to ``results/probes_rows.jsonl``.

    python benchmarks/judgment/probes.py                      # default options, embedded judge
    python benchmarks/judgment/probes.py --split tune         # only the tuning two thirds
    python benchmarks/judgment/probes.py --detector-model DIR --out results/probes_detector_rows.jsonl
                                                     # the trained detector decides (no LLM)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: data/ and results/
PROBES = HERE / "data/probes.jsonl"


def caught(row: dict[str, Any]) -> bool:
    """A contradiction is caught when its score is below 1.0 and it fails; a paraphrase when it passes."""
    if row["label"] == "contradiction":
        return row["score"] is not None and row["score"] < 1.0 and row["passed"] is False
    return row["passed"] is True


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import faithtrace
    from faithtrace import JudgeSettings, ScoringOptions

    probes = [json.loads(line) for line in PROBES.read_text().splitlines() if line.strip()]
    if args.split != "all":
        probes = [p for p in probes if p["split"] == args.split]
    judge = JudgeSettings(model=args.judge_model, api_base=args.api_base, api_key=args.api_key)
    overrides = json.loads(args.options) if args.options else {}
    if args.detector_model:
        overrides.update(verdict_source="detector", detector_model=args.detector_model)
    options = ScoringOptions(**overrides)
    rows = []
    for probe in probes:
        t0 = time.perf_counter()
        res = faithtrace.evaluate(
            probe["question"], probe["contexts"], probe["answer"], judge=judge, options=options
        )
        row = {
            "id": probe["id"],
            "kind": probe["kind"],
            "label": probe["label"],
            "split": probe["split"],
            "score": res.score,
            "passed": res.passed,
            "outcome": str(res.outcome),
            "error": res.error.message if res.error else None,
            "input_tokens": res.input_tokens,
            "output_tokens": res.output_tokens,
            "llm_calls": res.llm_calls,
            "seconds": round(time.perf_counter() - t0, 2),
            "claims": [
                {
                    "text": c.text,
                    "false": c.text in probe["false_sentences"],
                    "verdict": c.verdict,
                    "decided_by": c.decided_by,
                    "status": c.status,
                    "judge_verdict": c.judge_verdict,
                    "check_verdict": c.check_verdict,
                    "p_supported": c.p_supported,
                    "detector_spans": [(s.text, s.p) for s in c.detector_spans],
                }
                for c in res.claims
            ],
            "unjudged": res.unjudged,
        }
        row["caught"] = caught(row)
        rows.append(row)
        mark = "ok  " if row["caught"] else "MISS"
        print(
            f"  {mark} {probe['id']:32} score={res.score} in={res.input_tokens} out={res.output_tokens} "
            f"{row['seconds']:.1f}s "
            + " | ".join(f"{c.verdict}/{c.decided_by}/{c.p_supported}" for c in res.claims),
            flush=True,
        )
    return rows


def rethreshold(
    rows: list[dict[str, Any]], t: float, policy: str, threshold: float = 0.7
) -> list[dict[str, Any]]:
    """The rows as a run with ``min_p_supported=t`` (t >= the run's own) would have scored them.

    Exact for the embedded judge at temperature 0: a judged claim is "yes" iff its recorded P(yes) >= t (the
    run already applied its own, lower threshold), then ``policy`` lowers a "yes" as ``verdict_checks`` does.
    A claim that is not "yes" fails the answer (``fail_on_contradiction``) when the judge wrote "no" or the
    checks found a mechanical contradiction. Rows whose claims carry no ``status`` recorded ``judge_verdict``
    after the confidence step (an unsure "yes" as "no"), so on those the contradiction rule fails more answers
    than a run would.
    """
    from faithtrace.scoring import contradictions, grounding, verdict_checks

    probes = {p["id"]: p for p in map(json.loads, PROBES.read_text().splitlines()) if p}
    out = []
    for row in rows:
        probe = probes[row["id"]]
        found = grounding.check_claims(
            [c["text"] for c in row["claims"]], probe["contexts"], probe["question"]
        )
        yes = 0
        contradicted = False
        for c, g in zip(row["claims"], found, strict=True):
            if c["decided_by"] == "proof":
                yes += 1
            elif c["p_supported"] is None:
                yes += c["verdict"] == "yes"
                contradicted = contradicted or c["verdict"] == "no"
            else:
                contra = contradictions.find(c["text"], g.near)
                lowered = verdict_checks.lowers(policy, g, contra)
                supported = c["p_supported"] >= t and not lowered
                yes += supported
                said_no = not supported and c.get("judge_verdict") == "no"
                contradicted = contradicted or (lowered and contra is not None) or said_no
        score = yes / len(row["claims"]) if row["claims"] else None
        passed = None if score is None else score >= threshold and not contradicted
        new = {**row, "score": score, "passed": passed}
        new["caught"] = caught(new)
        out.append(new)
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per label and split, how many probes there are and how many were caught; what the page's headline
    reads, next to the per-probe rows."""
    out: dict[str, Any] = {}
    for label in ("contradiction", "faithful"):
        for split in ("tune", "heldout", "all"):
            sel = [r for r in rows if r["label"] == label and (split == "all" or r["split"] == split)]
            out.setdefault(label, {})[split] = {"n": len(sel), "caught": sum(bool(r["caught"]) for r in sel)}
    out["errors"] = sum(r["outcome"] == "error" for r in rows)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| probes | split | n | caught | share |", "|---|---|---|---|---|"]
    for label, what in (
        ("contradiction", "contradictions scored < 1.0 and failed"),
        ("faithful", "paraphrases passed"),
    ):
        for split in ("tune", "heldout", "all"):
            sel = [r for r in rows if r["label"] == label and (split == "all" or r["split"] == split)]
            if sel:
                k = sum(r["caught"] for r in sel)
                lines.append(f"| {what} | {split} | {len(sel)} | {k} | {k / len(sel):.0%} |")
    lines += ["", "| kind | n | caught |", "|---|---|---|"]
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(r)
    for kind, sel in by_kind.items():
        lines.append(f"| {kind} ({sel[0]['label']}) | {len(sel)} | {sum(r['caught'] for r in sel)} |")
    # What each claim was recorded as (rows whose claims carry a status): a false claim the judge was unsure
    # of is "not_confirmed", never "contradicted"; either way it counts against the score.
    claims = [(r["label"], c) for r in rows for c in r["claims"]]
    if claims and all("status" in c for _, c in claims):
        for what, sel in (
            ("false claims", [c for _, c in claims if c["false"]]),
            ("claims of faithful probes", [c for label, c in claims if label == "faithful"]),
        ):
            count = Counter(c["status"] for c in sel)
            lines += ["", f"{what}: " + ", ".join(f"{k} {count[k]}" for k in sorted(count))]
    tokens = [r["input_tokens"] + r["output_tokens"] for r in rows]
    seconds = [r["seconds"] for r in rows]
    lines += [
        "",
        f"judge tokens per evaluation: median {statistics.median(tokens):.0f}, max {max(tokens)}; "
        f"seconds per evaluation: median {statistics.median(seconds):.1f}, max {max(seconds):.1f}; "
        f"errors: {sum(r['outcome'] == 'error' for r in rows)}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=("all", "tune", "heldout"), default="all")
    parser.add_argument("--judge-model", default=None, help="a litellm model; default: the embedded judge")
    parser.add_argument("--api-base", default=None)
    parser.add_argument("--api-key", default=None)
    parser.add_argument(
        "--options", default=None, help='ScoringOptions overrides as JSON, e.g. {"min_p_supported": 0.6}'
    )
    parser.add_argument("--detector-model", help="a detector model directory: it decides every verdict")
    parser.add_argument("--out", type=Path, default=HERE / "results/probes_rows.jsonl")
    parser.add_argument("--table-only", action="store_true", help="print the table of an earlier --out file")
    parser.add_argument(
        "--min-p",
        type=float,
        default=None,
        help="with --table-only: re-decide judged claims at this min_p_supported (>= the run's own)",
    )
    parser.add_argument(
        "--policy", choices=("judge", "numbers", "checks", "strict"), default="checks", help="with --min-p"
    )
    args = parser.parse_args()
    if args.table_only:
        rows = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
        if args.min_p is not None:
            rows = rethreshold(rows, args.min_p, args.policy)
    else:
        rows = run(args)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        # The run's date, command and machine and the counts, beside the rows (probes_rows -> probes.json).
        doc = {"split": args.split, "options": args.options, "summary": summary(rows)}
        doc["rows_file"] = args.out.name
        summary_out = args.out.with_name(args.out.stem.removesuffix("_rows") + ".json")
        _common.write_results("probes", doc, summary_out)
    print(table(rows))


if __name__ == "__main__":
    sys.exit(main())
