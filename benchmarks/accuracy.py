"""Judge cost and agreement with humans: faithtrace vs DeepEval vs RAGAS vs a length rule, one judge for all.

Rows come from a RAGTruth QA JSONL file (``question``, ``contexts``, ``answer``, ``label`` faithful |
hallucinated). By default a balanced subset is drawn with a fixed seed (``--limit`` rows per label), because
on this CPU one evaluation takes tens of seconds per system. Every system uses the same judge: the embedded
local judge unless ``--judge-model`` names a litellm model (``--api-base``/``--api-key`` for an
OpenAI-compatible server). DeepEval and RAGAS run in their own venv (see README), as a subprocess, one
after the other.

Per system: balanced accuracy at the system's own pass threshold, AUROC of its score against the labels, LLM
calls, input/output tokens and seconds per evaluation, and the invalid-output rate (evaluations that ended
with no score; they count as "faithful", since that is what a failed check lets through). The no-LLM reference
calls an answer hallucinated iff it has more than 130 words.

    python benchmarks/accuracy.py --quick
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _accuracy_metrics as metrics
import _common

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/ragtruth_qa_dev.jsonl"
PEERS_VENV_PYTHON = Path.home() / ".cache/faithtrace/bench-peers-venv/bin/python"
LENGTH_RULE_WORDS = 130
PEER_THRESHOLD = 0.5  # DeepEval's default threshold; RAGAS has none, so the same midpoint


def load_rows(path: Path, per_label: int, seed: int) -> tuple[list[dict[str, Any]], str]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if per_label <= 0:
        return rows, f"all {len(rows)} rows"
    rng = random.Random(seed)
    chosen: set[str] = set()
    for label in ("faithful", "hallucinated"):
        ids = [r["id"] for r in rows if r["label"] == label]
        chosen.update(rng.sample(ids, min(per_label, len(ids))))
    subset = [r for r in rows if r["id"] in chosen]  # file order, interleaving whatever the file does
    return subset, f"seed {seed}, {per_label} per label ({len(subset)} rows)"


def _words(text: str) -> int:
    return len(text.split())


def length_rule(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": r["id"],
            "hallucinated": r["label"] == "hallucinated",
            "risk": float(_words(r["answer"])),
            "predicted": _words(r["answer"]) > LENGTH_RULE_WORDS,
            "invalid": False,
            "llm_calls": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "seconds": 0.0,
        }
        for r in rows
    ]


def run_faithtrace(rows: list[dict[str, Any]], judge: Any, rows_out: Path) -> list[dict[str, Any]]:
    import faithtrace

    out = []
    for r in rows:
        t0 = time.perf_counter()
        try:
            res = faithtrace.evaluate(r["question"], r["contexts"], r["answer"], judge=judge)
        except Exception as exc:  # evaluate() should not raise for judge failures; count it if it does
            rec = {
                "id": r["id"],
                "score": None,
                "outcome": "exception",
                "error": f"{type(exc).__name__}: {exc}",
            }
            rec.update(llm_calls=0, input_tokens=0, output_tokens=0)
        else:
            rec = {
                "id": r["id"],
                "score": res.score,
                "faithfulness": res.faithfulness,
                "passed": res.passed,
                "outcome": str(res.outcome),
                "counts": res.counts.model_dump(),
                "error": res.error.model_dump() if res.error else None,
                "llm_calls": res.llm_calls,
                "input_tokens": res.input_tokens,
                "output_tokens": res.output_tokens,
            }
        rec["seconds"] = time.perf_counter() - t0
        _append(rows_out, {"system": "faithtrace", **rec})
        print(
            f"  faithtrace {r['id']} ({r['label']}): score={rec['score']} outcome={rec['outcome']} "
            f"calls={rec['llm_calls']} in={rec['input_tokens']} out={rec['output_tokens']} "
            f"{rec['seconds']:.1f}s",
            flush=True,
        )
        scored = rec["score"] is not None
        invalid = rec["outcome"] in ("error", "exception")
        out.append(
            {
                **rec,
                "hallucinated": r["label"] == "hallucinated",
                # no_claims: nothing checkable was said, so nothing was found unsupported
                "risk": 1.0 - rec["score"] if scored else 0.0,
                "predicted": rec.get("passed") is False,
                "invalid": invalid,
            }
        )
    return out


def run_peer(
    system: str, rows: list[dict[str, Any]], python: Path, endpoint: dict[str, Any], rows_out: Path
) -> list[dict[str, Any]] | str:
    if not python.exists():
        return f"not installed (no {python})"
    with tempfile.TemporaryDirectory() as tmp:
        rows_file = Path(tmp) / "rows.jsonl"
        rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        result_file = Path(tmp) / "out.jsonl"
        cmd = [
            str(python),
            str(Path(__file__).resolve().parent / "_peers_accuracy.py"),
            "--system",
            system,
            "--rows",
            str(rows_file),
            "--out",
            str(result_file),
            "--model",
            endpoint["model"],
        ]
        if endpoint.get("api_base"):
            cmd += ["--api-base", endpoint["api_base"]]
        if endpoint.get("api_key"):
            cmd += ["--api-key", endpoint["api_key"]]
        if endpoint.get("timeout"):
            cmd += ["--timeout", str(endpoint["timeout"])]
        if endpoint.get("schema_grammar"):
            cmd.append("--schema-grammar")
        proc = subprocess.run(cmd, timeout=len(rows) * 1800 + 300, check=False)
        if proc.returncode != 0 and not result_file.exists():
            return f"failed (exit {proc.returncode})"
        results = [json.loads(x) for x in result_file.read_text(encoding="utf-8").splitlines() if x.strip()]
    by_id = {r["id"]: r for r in rows}
    for rec in results:
        _append(rows_out, rec)
    return [{**rec, "label": by_id[rec["id"]]["label"]} for rec in results]


def peer_records(results: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    out = []
    for rec in results:
        score = (rec.get("scores") or {}).get(key)
        out.append(
            {
                "id": rec["id"],
                "hallucinated": rec["label"] == "hallucinated",
                "risk": 1.0 - score if score is not None else 0.0,
                "predicted": score is not None and score < PEER_THRESHOLD,
                "invalid": score is None,
                "llm_calls": rec["llm_calls"],
                "input_tokens": rec["input_tokens"],
                "output_tokens": rec["output_tokens"],
                "seconds": rec["seconds"],
            }
        )
    return out


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")


def resolve_judge(args: argparse.Namespace) -> tuple[Any, dict[str, Any], str]:
    """(faithtrace judge argument, the peers' endpoint, a display name)."""
    import faithtrace

    if args.judge_model:
        settings = faithtrace.JudgeSettings(
            model=args.judge_model,
            api_base=args.api_base,
            api_key=args.api_key,
            structured_output=args.structured_output,
            timeout_s=args.timeout,
        )
        endpoint = {"model": args.judge_model, "api_base": args.api_base, "api_key": args.api_key}
        endpoint["timeout"] = args.timeout
        endpoint["schema_grammar"] = args.schema_grammar
        return settings, endpoint, args.judge_model
    from faithtrace.judge.local import ensure_local_judge

    ep = ensure_local_judge(progress=lambda msg: print(f"  local judge: {msg}", flush=True))
    # faithtrace gets its embedded judge (model=None); the peers the very same server and model.
    endpoint = {"model": ep.model, "api_base": ep.api_base, "api_key": ep.api_key, "schema_grammar": True}
    endpoint["timeout"] = args.timeout
    return faithtrace.JudgeSettings(timeout_s=args.timeout), endpoint, ep.display_model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="faithtrace vs DeepEval vs RAGAS vs a length rule, one judge.")
    p.add_argument("--quick", action="store_true", help="3 rows per label")
    p.add_argument("--data", default=str(DEFAULT_DATA), help=f"JSONL rows (default {DEFAULT_DATA})")
    p.add_argument("--limit", type=int, help="rows per label (default 6, quick 3; 0 = all rows)")
    p.add_argument("--seed", type=int, default=0, help="which balanced subset")
    p.add_argument("--systems", default="faithtrace,deepeval,ragas", help="comma list; length is always run")
    p.add_argument("--judge-model", help="litellm model for every system (default: the embedded local judge)")
    p.add_argument("--api-base")
    p.add_argument("--api-key")
    p.add_argument("--structured-output", default="auto", help="faithtrace's mode with --judge-model")
    p.add_argument("--schema-grammar", action="store_true", help="DeepEval: send json_object + schema")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="per judge request, every system (a shared CPU judge queues requests; default 600 s)",
    )
    p.add_argument("--peers-python", default=str(PEERS_VENV_PYTHON))
    p.add_argument("--out", help="JSON output path (default benchmarks/results/accuracy.json)")
    args = p.parse_args(argv)

    data = Path(args.data)
    if not data.exists():
        print(f"no data at {data}: pass --data FILE.jsonl", file=sys.stderr)
        return 2
    per_label = args.limit if args.limit is not None else (3 if args.quick else 6)
    rows, subset = load_rows(data, per_label, args.seed)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    out_path = Path(args.out) if args.out else _common.RESULTS_DIR / "accuracy.json"
    rows_out = out_path.with_name(out_path.stem + "_rows.jsonl")
    rows_out.parent.mkdir(parents=True, exist_ok=True)
    rows_out.write_text("")
    print(f"{len(rows)} rows from {data} ({subset}); per-row results -> {rows_out}", flush=True)

    judge, endpoint, judge_name = resolve_judge(args)
    print(f"judge: {judge_name} ({endpoint['api_base'] or 'provider default'})", flush=True)
    summary: dict[str, Any] = {}
    notes: dict[str, str] = {}
    summary[f"length rule (>{LENGTH_RULE_WORDS} words)"] = metrics.summarise(
        length_rule(rows), f"hallucinated iff > {LENGTH_RULE_WORDS} words; AUROC by word count"
    )
    if "faithtrace" in systems:
        print("faithtrace:", flush=True)
        summary["faithtrace"] = metrics.summarise(
            run_faithtrace(rows, judge, rows_out), "hallucinated iff not passed (score < its threshold, 0.7)"
        )
    for system in ("deepeval", "ragas"):
        if system not in systems:
            continue
        print(f"{system} (peers venv):", flush=True)
        res = run_peer(system, rows, Path(args.peers_python), endpoint, rows_out)
        keys = ["deepeval", "deepeval_penalize_ambiguous"] if system == "deepeval" else ["ragas"]
        for key in keys:
            name = key.replace("_penalize_ambiguous", " penalize_ambiguous_claims=True")
            if isinstance(res, str):
                notes[name] = res
                continue
            summary[name] = metrics.summarise(
                peer_records(res, key), f"hallucinated iff score < {PEER_THRESHOLD}; AUROC on 1 - score"
            )
    if "deepeval" in summary and "faithtrace" in summary:
        d = (summary["deepeval"]["input_tokens_per_eval"] or 0) + (
            summary["deepeval"]["output_tokens_per_eval"] or 0
        )
        f = (summary["faithtrace"]["input_tokens_per_eval"] or 0) + (
            summary["faithtrace"]["output_tokens_per_eval"] or 0
        )
        notes["faithtrace tokens / deepeval tokens"] = f"{f / d:.2f}" if d else "n/a"
    if "deepeval penalize_ambiguous_claims=True" in summary:
        notes["deepeval penalize_ambiguous_claims=True"] = (
            "scored from the same run's verdicts as the default (the option changes only the score formula); "
            "usage figures are that one run's"
        )

    headers = [
        "system",
        "rows",
        "bal.acc",
        "AUROC",
        "invalid",
        "calls/eval",
        "in tok/eval",
        "out tok/eval",
        "s/eval",
    ]
    table_rows = [
        [
            name,
            s["rows"],
            s["balanced_accuracy"],
            s["auroc"],
            s["invalid_rate"],
            s["llm_calls_per_eval"],
            s["input_tokens_per_eval"],
            s["output_tokens_per_eval"],
            s["seconds_per_eval"],
        ]
        for name, s in summary.items()
    ]
    print(f"\naccuracy on {data.name}, {subset}, judge {judge_name}\n")
    print(_common.table(headers, table_rows))
    for k, v in notes.items():
        print(f"{k}: {v}")
    path = _common.write_results(
        "accuracy",
        {
            "data": str(data),
            "subset": subset,
            "row_ids": [r["id"] for r in rows],
            "judge": judge_name,
            "systems": summary,
            "notes": notes,
            "rows_file": str(rows_out),
        },
        str(out_path),
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
