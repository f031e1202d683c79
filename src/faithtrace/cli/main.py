"""The ``faithtrace`` command: ``eval`` a JSONL dataset, ``report`` on its results, ``score`` one answer, run
the local ``judge``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import typing
from pathlib import Path

from faithtrace._common.errors import ConfigError, FaithtraceError, LocalJudgeError
from faithtrace._config.scoring_options import ScoringOptions
from faithtrace._evaluate import get_judge
from faithtrace.cli.deliver import Deliver, report_problem
from faithtrace.cli.figures import DEFAULT_REPORT_ANSWERS, Gate
from faithtrace.cli.output import Output
from faithtrace.judge import Judge, litellm_is_ours
from faithtrace.scoring.detection import needs_judge
from faithtrace.scoring.models import STATUS_TEXT, ClaimVerdict, FaithfulnessResult, IdkPolicy
from faithtrace.scoring.pipeline import run_pipeline


def _threshold(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _add_results_args(p: argparse.ArgumentParser, *, report: bool) -> None:
    """What to do with the results: the figures as JSON, the HTML report, the CI gate."""
    if report:
        p.add_argument("--report", type=Path, metavar="HTML", help="also write a self-contained HTML report")
    p.add_argument(
        "--report-answers",
        type=_positive,
        default=DEFAULT_REPORT_ANSWERS,
        metavar="N",
        help=f"answers the report lists, worst first (default {DEFAULT_REPORT_ANSWERS}; figures count all)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON (messages go to stderr)")
    p.add_argument(
        "--fail-under",
        type=_threshold,
        metavar="SCORE",
        help="exit with status 1 when the mean score is under SCORE",
    )
    p.add_argument(
        "--max-fail-rate",
        type=_threshold,
        metavar="RATE",
        help="exit with status 1 when more than this share of the answers is labelled fail",
    )


def _gate(args: argparse.Namespace) -> Gate:
    return Gate(fail_under=args.fail_under, max_fail_rate=args.max_fail_rate)


def _add_scoring_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--judge",
        metavar="MODEL",
        help="litellm model string (default: FAITHTRACE_JUDGE_MODEL or the embedded local judge)",
    )
    p.add_argument("--threshold", type=_threshold, help="pass mark for the score (default 0.7)")
    p.add_argument("--idk-policy", choices=[p.value for p in IdkPolicy], help="how unsupported claims count")
    p.add_argument(
        "--truths",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also extract facts from each document for the verdict step",
    )
    p.add_argument("--verdict-batch-size", type=_positive, help="claims judged per LLM call")
    p.add_argument(
        "--judge-token-budget",
        type=_non_negative,
        metavar="TOKENS",
        help="estimated judge tokens per answer for its verdicts; claims beyond it, least doubted first, are "
        "not judged or counted (default 1,050 with the embedded judge, else none; 0: none)",
    )
    # The choices come from the options model, so the CLI cannot drift from the library (see ScoringOptions).
    for name, what in _CHOICE_OPTIONS.items():
        field = ScoringOptions.model_fields[name]
        choices = list(typing.get_args(field.annotation))
        p.add_argument(
            "--" + name.replace("_", "-"), choices=choices, help=f"{what} (default {field.default})"
        )
    p.add_argument(
        "--judge-reason",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="have the judge write the reason (one more call) instead of a summary written in code",
    )
    p.add_argument(
        "--detector-model",
        metavar="DIR",
        help="a trained detector model directory (default FAITHTRACE_DETECTOR_MODEL); its verdict is shown "
        "next to the judge's, or decides with --verdict-source detector",
    )
    p.add_argument(
        "--prove-support",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="settle claims contained in a document sentence without the judge (default on)",
    )


_CHOICE_OPTIONS = {
    "claim_source": "where claims come from: the answer's sentences, or the judge",
    "verdict_policy": "when the checks and the judge disagree: who may lower a yes",
    "verdict_context": "what each claim is judged against",
    "verdict_source": "who decides the verdicts: the LLM judge, or the trained detector alone",
    "detector_windows": "how the detector combines windows of a long context",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="faithtrace", description="Faithfulness scoring for RAG answers.")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("eval", help="score every row of a JSONL file and summarise")
    ev.add_argument("file", type=Path, help="JSONL rows with question, contexts, answer [, label, id]")
    ev.add_argument("--out", type=Path, help="append one result per line here; rerun to resume")
    ev.add_argument(
        "--concurrency",
        type=_positive,
        help="rows scored at once (default: 1 on the local judge, which runs one request at a time; else 4)",
    )
    ev.add_argument("--limit", type=_positive, help="only the first N valid rows")
    ev.add_argument("--plain", action="store_true", help="plain text output (no progress bar)")
    _add_results_args(ev, report=True)
    _add_scoring_args(ev)

    rp = sub.add_parser("report", help="the HTML report, figures and gate of an eval's results file")
    from faithtrace.cli.report_command import add_arguments as add_report_arguments

    add_report_arguments(rp)
    rp.add_argument(
        "--threshold", type=_threshold, help="pass mark (default: the one the results were scored at)"
    )
    rp.add_argument("--plain", action="store_true", help="plain text output")
    _add_results_args(rp, report=False)

    sc = sub.add_parser("score", help="score one answer and print its claims and verdicts")
    sc.add_argument("--question", default=None)
    sc.add_argument("--context", action="append", default=[], help="a retrieved document (repeatable)")
    sc.add_argument("--answer", required=True)
    sc.add_argument("--json", action="store_true", help="print the full result as JSON")
    _add_scoring_args(sc)

    sv = sub.add_parser("serve", help="score RAG traces received over OTLP (gRPC and HTTP)")
    from faithtrace.serve.main import add_arguments

    add_arguments(sv)

    jd = sub.add_parser("judge", help="the embedded local judge")
    jd.add_argument("action", choices=["serve", "stop", "status"])
    jd.add_argument("--port", type=int, help="serve: port on 127.0.0.1 (default: a free one)")
    return parser


def _options(args: argparse.Namespace) -> ScoringOptions:
    return ScoringOptions.from_env(
        threshold=args.threshold,
        idk_policy=args.idk_policy,
        use_truths=args.truths,
        verdict_batch_size=args.verdict_batch_size,
        judge_reason=args.judge_reason,
        prove_support=args.prove_support,
        judge_token_budget=args.judge_token_budget,
        detector_model=args.detector_model,
        **{name: getattr(args, name) for name in _CHOICE_OPTIONS},
    )


def _ready_judge(args: argparse.Namespace, out: Output) -> Judge:
    judge = get_judge(args.judge)
    if judge.settings.is_local and needs_judge(_options(args)):
        from faithtrace.judge.local.endpoint import ensure_local_judge

        # Resolved up front so that the first-run messages (assembling, starting) reach the user.
        ensure_local_judge(progress=lambda msg: out.error(f"faithtrace: {msg}"))
        judge.endpoint()
    return judge


def _detector_cell(claim: ClaimVerdict) -> str:
    if claim.detector_verdict is None:
        return ""
    spans = "; ".join(f"'{s.text}' {s.p:.2f}" for s in claim.detector_spans)
    mark = " (disagrees)" if claim.detector_disagreement else ""
    return f"{claim.detector_verdict}{mark}" + (f": {spans}" if spans else "")


def _print_result(out: Output, result: FaithfulnessResult) -> None:
    detector = result.detector
    rows = [
        [str(i + 1), f"{c.verdict} ({STATUS_TEXT[c.status]})", c.text, c.reason or ""]
        for i, c in enumerate(result.claims)
    ]
    rows += [["-", "not judged", text, "not counted in the score"] for text in result.unjudged]
    headers = ["#", "verdict", "claim", "reason"]
    if detector is not None and detector.error is None:
        headers.append("detector (flagged spans, P)")
        rows = [[*row, _detector_cell(c)] for row, c in zip(rows, result.claims, strict=False)] + [
            [*row, ""] for row in rows[len(result.claims) :]
        ]
    if rows:
        out.table("claims", headers, rows)
    c = result.counts
    score = "n/a" if result.score is None else f"{result.score:.3f}"
    faithful = "n/a" if result.faithfulness is None else f"{result.faithfulness:.3f}"
    out.line(
        f"outcome: {result.outcome}   score: {score}   faithfulness: {faithful}   "
        f"passed: {result.passed}   (yes {c.yes} / no {c.no} / idk {c.idk})"
    )
    if result.error is not None:
        out.line(f"error: {result.error.type} in step {result.error.step}: {result.error.message}")
    if result.reason:
        out.line(f"reason: {result.reason}")
    cost = "n/a" if result.cost_usd is None else f"${result.cost_usd:.6f}"
    out.line(
        f"judge: {result.judge_model}   LLM calls: {result.llm_calls}   tokens: {result.input_tokens} in / "
        f"{result.output_tokens} out   cost: {cost}   time: {result.duration_s:.1f} s"
    )
    if detector is not None:
        if detector.error:
            out.line(f"detector: {detector.model} could not run: {detector.error}")
            return
        flagged = "; ".join(f"'{s.text}' {s.p:.2f}" for s in detector.spans) or "none"
        out.line(
            f"detector: {detector.model}   windows: {detector.windows} ({detector.combine})   parts: "
            f"{detector.parts}   time: {detector.duration_s:.2f} s   flagged: {flagged}"
        )


def _cmd_score(args: argparse.Namespace, out: Output) -> int:
    judge = _ready_judge(args, out)
    result = asyncio.run(
        run_pipeline(args.question, args.context, args.answer, judge=judge, options=_options(args))
    )
    if args.json:
        out.raw(json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False))
    else:
        _print_result(out, result)
    return 0


def _cmd_judge(args: argparse.Namespace, out: Output) -> int:
    from faithtrace.judge.local import endpoint as local

    if args.action == "serve":
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is the normal way to stop it
            local.serve_foreground(port=args.port)
        return 0
    if args.action == "stop":
        out.line("local judge stopped" if local.stop_local_judge() else "no local judge was running")
        return 0
    status = local.local_judge_status()
    if status is None:
        out.line("no local judge is registered on this machine")
        return 0
    out.table("local judge", ["field", "value"], [[k, str(v)] for k, v in status.items()])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    litellm_is_ours()  # this process is the command's: litellm's process-wide settings are ours to set
    # With --json, stdout carries the JSON alone: the messages, tables and progress go to stderr.
    as_json = getattr(args, "json", False) and args.command in ("eval", "report")
    out = Output(sys.stderr if as_json else None, plain=getattr(args, "plain", False))
    try:
        if args.command == "report":
            from faithtrace.cli.report_command import run_report_command

            return run_report_command(out, args, _gate(args))
        if args.command == "eval":
            from faithtrace.cli.eval_dataset import run_eval_command

            if not args.file.is_file():
                out.error(f"faithtrace eval: cannot read {args.file}: no such file")
                return 2
            if args.report is not None and (problem := report_problem(args.report)) is not None:
                out.error(f"faithtrace eval: {problem}")
                return 2
            judge = _ready_judge(args, out)
            concurrency = args.concurrency or (1 if judge.settings.is_local else 4)
            return run_eval_command(
                out,
                args.file,
                args.out,
                judge=judge,
                options=_options(args),
                concurrency=concurrency,
                limit=args.limit,
                deliver=Deliver(
                    report=args.report, json=args.json, gate=_gate(args), report_answers=args.report_answers
                ),
            )
        if args.command == "score":
            return _cmd_score(args, out)
        if args.command == "serve":
            from faithtrace.serve.main import run

            return run(args)
        return _cmd_judge(args, out)
    except ConfigError as exc:
        out.error(f"faithtrace: {exc}")
        return 2
    except LocalJudgeError as exc:
        out.error(f"faithtrace: the local judge is unavailable: {exc}")
        return 1
    except FaithtraceError as exc:
        out.error(f"faithtrace: {exc}")
        return 1
