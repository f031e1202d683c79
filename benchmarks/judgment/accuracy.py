"""Judge cost and agreement with humans: faithtrace vs DeepEval vs RAGAS vs a length rule, one judge for all.

Rows come from a RAGTruth QA JSONL file (``question``, ``contexts``, ``answer``, ``label`` faithful |
hallucinated). By default a balanced subset is drawn with a fixed seed (``--limit`` rows per label), because
on this CPU one evaluation takes tens of seconds per system. Every system uses the same judge: the embedded
local judge unless ``--judge-model`` names a litellm model (``--api-base``/``--api-key`` for an
OpenAI-compatible server). DeepEval and RAGAS run in their own venv (benchmarks/README.md), a subprocess, one
after the other.

Per system: balanced accuracy at the system's own pass threshold, AUROC of its score against the labels, LLM
calls, input/output tokens and seconds per evaluation, and the invalid-output rate (evaluations that ended
with no score; they count as "faithful", since that is what a failed check lets through). The no-LLM reference
calls an answer hallucinated iff it has more than 130 words. Each system's figures keep its rows' risk and
label (``per_row``, in ``row_ids`` order): the docs' ROC curves are drawn from them.

``--systems detector --detector-model DIR`` scores with the trained detector alone (no LLM): the judge is not
resolved (nor the embedded one started) unless another system needs it.

    python benchmarks/judgment/accuracy.py --quick
    python benchmarks/judgment/accuracy.py --systems detector --detector-model DIR --limit 0
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common
from benchmarks._shared import metrics

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared/data/ragtruth_qa_dev.jsonl"
PEERS_VENV_PYTHON = Path.home() / ".cache/faithtrace/bench-peers-venv/bin/python"
LENGTH_RULE_WORDS = 130
PEER_THRESHOLD = 0.5  # DeepEval's default threshold; RAGAS has none, so the same midpoint


def load_rows(
    path: Path, per_label: int, seed: int, only: set[str] | None = None
) -> tuple[list[dict[str, Any]], str]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if only is not None:
        rows = [r for r in rows if r["id"] in only]
    if per_label <= 0:
        return rows, f"all {len(rows)} rows" + (" of the named ids" if only is not None else "")
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


def score_faithtrace(
    row: dict[str, Any], judge: Any, options: Any = None, system: str = "faithtrace"
) -> dict[str, Any]:
    import faithtrace

    t0 = time.perf_counter()
    try:
        res = faithtrace.evaluate(
            row["question"], row["contexts"], row["answer"], judge=judge, options=options
        )
    except Exception as exc:  # evaluate() should not raise for judge failures; count it if it does
        rec: dict[str, Any] = {"id": row["id"], "score": None, "outcome": "exception"}
        rec.update(error=f"{type(exc).__name__}: {exc}", llm_calls=0, input_tokens=0, output_tokens=0)
    else:
        rec = {
            "id": row["id"],
            "score": res.score,
            "faithfulness": res.faithfulness,
            "passed": res.passed,
            "outcome": str(res.outcome),
            "counts": res.counts.model_dump(),
            # Per claim, for looking into a result later: [text, verdict, reason, decided_by, P(yes)].
            "claims": [[c.text, c.verdict, c.reason, c.decided_by, c.p_supported] for c in res.claims],
            "unjudged": res.unjudged,
            "error": res.error.model_dump() if res.error else None,
            "llm_calls": res.llm_calls,
            "input_tokens": res.input_tokens,
            "output_tokens": res.output_tokens,
        }
    rec["seconds"] = time.perf_counter() - t0
    print(
        f"  {system} {row['id']} ({row['label']}): score={rec['score']} outcome={rec['outcome']} "
        f"calls={rec['llm_calls']} in={rec['input_tokens']} out={rec['output_tokens']} {rec['seconds']:.1f}s",
        flush=True,
    )
    return {"system": system, **rec}


def _claim_support(claim: list[Any]) -> float:
    _text, verdict, _reason, decided_by, p_yes = claim[:5]
    if decided_by == "proof":
        return 1.0
    if decided_by == "check" or p_yes is None:
        # A verdict the checks lowered is theirs, not the judge's: its P(yes) says what the judge thought, not
        # what the claim counts as.
        return float(verdict == "yes")
    return float(p_yes)


def _support(rec: dict[str, Any]) -> float:
    """The mean P(supported) over the claims: 1 for a proven claim, the judge's P(yes) where it decided and
    returned one, else 1/0 by verdict (a verdict the checks lowered counts as theirs). A continuous score, so
    AUROC is a curve, not one point; rows stored before claims carried P(yes) fall back to the score."""
    claims = rec.get("claims") or []
    if not claims or any(len(c) < 5 for c in claims):
        return float(rec["score"])
    values = [_claim_support(c) for c in claims]
    return sum(values) / len(values)


def faithtrace_record(rec: dict[str, Any], label: str) -> dict[str, Any]:
    scored = rec["score"] is not None
    return {
        **rec,
        "hallucinated": label == "hallucinated",
        # no_claims: nothing checkable was said, so nothing was found unsupported
        "risk": 1.0 - _support(rec) if scored else 0.0,
        "predicted": rec.get("passed") is False,
        "invalid": rec["outcome"] in ("error", "exception"),
    }


class PeerProcess:
    """One long-lived peer runner (in the peers' venv), fed a row at a time so systems interleave per row."""

    def __init__(self, system: str, python: Path, endpoint: dict[str, Any]) -> None:
        cmd = [str(python), str(Path(__file__).resolve().parent / "_peers_accuracy.py"), "--system", system]
        cmd += ["--rows", "-", "--out", "-", "--model", endpoint["model"]]
        for flag, key in (("--api-base", "api_base"), ("--api-key", "api_key"), ("--timeout", "timeout")):
            if endpoint.get(key):
                cmd += [flag, str(endpoint[key])]
        if endpoint.get("schema_grammar"):
            cmd.append("--schema-grammar")
        self.system = system
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def score(self, row: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(row) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("RESULT "):
                result: dict[str, Any] = json.loads(line[len("RESULT ") :])
                return result
            print(line, end="", flush=True)
        raise RuntimeError(f"{self.system} runner exited (code {self.proc.wait()})")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def peer_record(rec: dict[str, Any], key: str, label: str) -> dict[str, Any]:
    score = (rec.get("scores") or {}).get(key)
    return {
        "id": rec["id"],
        "hallucinated": label == "hallucinated",
        "risk": 1.0 - score if score is not None else 0.0,
        "predicted": score is not None and score < PEER_THRESHOLD,
        "invalid": score is None,
        "llm_calls": rec["llm_calls"],
        "input_tokens": rec["input_tokens"],
        "output_tokens": rec["output_tokens"],
        "seconds": rec["seconds"],
    }


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
    from faithtrace.judge.local.endpoint import ensure_local_judge

    ep = ensure_local_judge(progress=lambda msg: print(f"  local judge: {msg}", flush=True))
    # faithtrace gets its embedded judge (model=None); the peers the very same server and model.
    endpoint = {"model": ep.model, "api_base": ep.api_base, "api_key": ep.api_key, "schema_grammar": True}
    endpoint["timeout"] = args.timeout
    return faithtrace.JudgeSettings(timeout_s=args.timeout), endpoint, ep.display_model


def summarise(
    rows: list[dict[str, Any]], done: dict[tuple[str, str], dict[str, Any]], systems: list[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Figures over the rows every requested system has finished (so partial runs compare like with like)."""
    labels = {r["id"]: r["label"] for r in rows}
    complete = [r for r in rows if all((s, r["id"]) in done for s in systems)]
    length_name = f"length rule (>{LENGTH_RULE_WORDS} words)"
    records: dict[str, list[dict[str, Any]]] = {length_name: length_rule(complete)}
    rules = {length_name: f"hallucinated iff > {LENGTH_RULE_WORDS} words; AUROC by word count"}
    for system in ("faithtrace", "detector"):
        if system in systems:
            records[system] = [faithtrace_record(done[(system, r["id"])], labels[r["id"]]) for r in complete]
            rules[system] = "hallucinated iff not passed (score < its threshold, 0.7)"
    if "detector" in records:
        rules["detector"] += "; AUROC on the mean over claims of 1 - max token P(not supported)"
    for system, keys in (("deepeval", ["deepeval", "deepeval_penalize_ambiguous"]), ("ragas", ["ragas"])):
        if system not in systems:
            continue
        for key in keys:
            name = key.replace("_penalize_ambiguous", " penalize_ambiguous_claims=True")
            records[name] = [peer_record(done[(system, r["id"])], key, labels[r["id"]]) for r in complete]
            rules[name] = f"hallucinated iff score < {PEER_THRESHOLD}; AUROC on 1 - score"
    summary: dict[str, Any] = {name: metrics.summarise(recs, rules[name]) for name, recs in records.items()}
    notes: dict[str, str] = {}
    mains = [m for m in ("faithtrace", "detector") if m in records]
    if mains and len(complete) >= 4:
        truth = [r["label"] == "hallucinated" for r in complete]
        for main in mains:
            for name, recs in records.items():
                # The detector is compared with the LLM judge's pipeline too (not the other way round).
                if name == main or (name in mains and main == "faithtrace"):
                    continue
                ci = metrics.paired_bootstrap(truth, records[main], recs)
                summary[main].setdefault("vs", {})[name] = ci
                notes[f"{main} − {name}, 95 % paired bootstrap"] = (
                    f"AUROC {_signed(summary[main]['auroc'], summary[name]['auroc'])} "
                    f"[{ci['auroc_diff_95'][0]:+.2f}, {ci['auroc_diff_95'][1]:+.2f}], balanced accuracy "
                    f"{_signed(summary[main]['balanced_accuracy'], summary[name]['balanced_accuracy'])} "
                    f"[{ci['balanced_accuracy_diff_95'][0]:+.2f}, {ci['balanced_accuracy_diff_95'][1]:+.2f}]"
                )
    if "deepeval" in summary and "faithtrace" in summary:
        d = (summary["deepeval"]["input_tokens_per_eval"] or 0) + (
            summary["deepeval"]["output_tokens_per_eval"] or 0
        )
        f = (summary["faithtrace"]["input_tokens_per_eval"] or 0) + (
            summary["faithtrace"]["output_tokens_per_eval"] or 0
        )
        notes["faithtrace tokens / deepeval tokens"] = f"{f / d:.2f}" if d else "n/a"
    if "deepeval" in systems:
        notes["deepeval penalize_ambiguous_claims=True"] = (
            "scored from the same run's verdicts as the default (the option changes only the score formula); "
            "usage figures are that one run's"
        )
    if len(complete) < len(rows):
        notes["partial"] = f"{len(complete)} of {len(rows)} rows finished by every system so far"
    return summary, notes


def _signed(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a - b:+.2f}"


def _print_table(summary: dict[str, Any], notes: dict[str, str], title: str) -> None:
    headers = ["system", "rows", "bal.acc", "AUROC", "invalid", "calls/eval", "in tok", "out tok", "s/eval"]
    keys = ["rows", "balanced_accuracy", "auroc", "invalid_rate", "llm_calls_per_eval"]
    keys += ["input_tokens_per_eval", "output_tokens_per_eval", "seconds_per_eval"]
    print(f"\n{title}\n")
    print(_common.table(headers, [[name, *(s[k] for k in keys)] for name, s in summary.items()]))
    for k, v in notes.items():
        print(f"{k}: {v}")


def _load_done(path: Path, ids: set[str]) -> dict[tuple[str, str], dict[str, Any]]:
    done: dict[tuple[str, str], dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                if rec.get("id") in ids:
                    done[(rec["system"], rec["id"])] = rec
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="faithtrace vs DeepEval vs RAGAS vs a length rule, one judge.")
    p.add_argument("--quick", action="store_true", help="3 rows per label")
    p.add_argument("--data", default=str(DEFAULT_DATA), help=f"JSONL rows (default {DEFAULT_DATA})")
    p.add_argument("--limit", type=int, help="rows per label (default 6, quick 3; 0 = all rows)")
    p.add_argument("--seed", type=int, default=0, help="which balanced subset")
    p.add_argument(
        "--ids-from",
        help="a JSON with row_ids (a result of this script, or data/ids-holdout.json): only those rows",
    )
    p.add_argument("--systems", default="faithtrace,deepeval,ragas", help="comma list; length is always run")
    p.add_argument("--judge-model", help="litellm model for every system (default: the embedded local judge)")
    p.add_argument("--detector-model", help="the detector model directory for --systems detector")
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
    p.add_argument("--resume", action="store_true", help="keep rows already in the per-row file")
    p.add_argument(
        "--rescore",
        default="",
        help="with --resume: comma list of systems whose stored rows are dropped and scored again "
        "(e.g. faithtrace after a pipeline change, next to the peers' stored rows)",
    )
    p.add_argument(
        "--note",
        action="append",
        default=[],
        help="a line for the result's notes, e.g. how stored rows from another run were made (repeatable)",
    )
    p.add_argument(
        "--out", help="JSON output (default results/accuracy.json, --quick: results/accuracy-quick.json)"
    )
    args = p.parse_args(argv)

    data = Path(args.data)
    if not data.exists():
        print(f"no data at {data}: pass --data FILE.jsonl", file=sys.stderr)
        return 2
    per_label = args.limit if args.limit is not None else (3 if args.quick else 6)
    only = set(json.loads(Path(args.ids_from).read_text())["row_ids"]) if args.ids_from else None
    rows, subset = load_rows(data, per_label, args.seed, only)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    out_path = Path(args.out) if args.out else _common.default_out("accuracy", args.quick)
    rows_out = out_path.with_name(out_path.stem + "_rows.jsonl")
    rows_out.parent.mkdir(parents=True, exist_ok=True)
    done = _load_done(rows_out, {r["id"] for r in rows}) if args.resume else {}
    rescore = {s.strip() for s in args.rescore.split(",") if s.strip()}
    if rescore:
        # The per-row file is append-only history; the rescored rows are simply appended after the old ones
        # (``_load_done`` keeps the last record per system and row).
        done = {key: rec for key, rec in done.items() if key[0] not in rescore}
    if not args.resume:
        rows_out.write_text("")
    print(f"{len(rows)} rows from {data} ({subset}); per-row results -> {rows_out}", flush=True)

    notes_extra: dict[str, str] = {}
    python = Path(args.peers_python)
    for system in ("deepeval", "ragas"):
        stored = all((system, r["id"]) in done for r in rows)
        if system in systems and not python.exists():
            if stored:  # nothing left to run: the stored rows are reported without the peers' venv
                notes_extra[system] = f"all rows from the stored per-row file ({rows_out.name})"
                continue
            systems.remove(system)
            notes_extra[system] = f"not installed (no {python}; see benchmarks/setup_peers.sh)"
    detector_options = None
    if "detector" in systems:
        import faithtrace

        if not args.detector_model:
            print("--systems detector needs --detector-model DIR", file=sys.stderr)
            return 2
        detector_options = faithtrace.ScoringOptions.from_env(
            verdict_source="detector", detector_model=args.detector_model
        )
        notes_extra["detector"] = f"model {args.detector_model}"
    if set(systems) - {"detector"}:
        judge, endpoint, judge_name = resolve_judge(args)
        print(f"judge: {judge_name} ({endpoint['api_base'] or 'provider default'})", flush=True)
    else:
        judge, endpoint, judge_name = None, {}, "none (detector only)"
    peers: dict[str, PeerProcess] = {}

    def write(final: bool) -> tuple[dict[str, Any], dict[str, str]]:
        summary, notes = summarise(rows, done, systems)
        notes.update(notes_extra)
        notes.update({f"note {i + 1}": text for i, text in enumerate(args.note)})
        doc = {
            "data": str(data),
            "subset": subset,
            "row_ids": [r["id"] for r in rows],
            "judge": judge_name,
            "complete": final and "partial" not in notes,
            "systems": summary,
            "notes": notes,
            "rows_file": str(rows_out),
        }
        _common.write_results("accuracy", doc, str(out_path))
        return summary, notes

    try:
        # Row by row, every system in turn: a run cut short still compares the systems on the same rows.
        for row in rows:
            for system in systems:
                if (system, row["id"]) in done:
                    continue
                if system == "faithtrace":
                    rec = score_faithtrace(row, judge)
                elif system == "detector":
                    rec = score_faithtrace(row, judge, detector_options, system="detector")
                else:
                    if system not in peers:
                        peers[system] = PeerProcess(system, python, endpoint)
                    rec = peers[system].score(row)
                done[(system, row["id"])] = rec
                _append(rows_out, rec)
            write(final=False)
    finally:
        for proc in peers.values():
            proc.close()
    summary, notes = write(final=True)
    _print_table(summary, notes, f"accuracy on {data.name}, {subset}, judge {judge_name}")
    print(f"\nwrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
