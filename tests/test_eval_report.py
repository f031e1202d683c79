# ruff: noqa: F811  (fixtures are imported into this module by name)
"""``faithtrace eval --report / --json / --fail-under / --max-fail-rate`` and ``faithtrace report``.

The curves and the pass-mark sweep against hand-worked values and against the summary's own figures; the
gate's exit statuses; bad lines counted with their line numbers; the figures of ``--json``, of ``report``
and of the HTML page agreeing. The judge is the scripted fake on 127.0.0.1 (replies only; litellm, parsing
and the pipeline are real). The page in a real browser: tests/test_eval_report_browser.py.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from _eval_report_data import BAD_LINES, DOCUMENT, INJECTED, ROWS, SCORES, script_judge, write_dataset
from _scoring_fixtures import FakeJudge, fake_judge  # noqa: F401  (fixture)
from faithtrace.cli import curves, main
from faithtrace.cli.metrics import auroc, summarise

JUDGE = ["--judge", "openai/fake-judge", "--plain"]


@pytest.fixture
def judged(fake_judge: FakeJudge, monkeypatch: pytest.MonkeyPatch) -> FakeJudge:
    monkeypatch.setenv("FAITHTRACE_JUDGE_API_BASE", fake_judge.url)
    monkeypatch.setenv("FAITHTRACE_JUDGE_API_KEY", "sk-test")
    return script_judge(fake_judge)


def _random_rows(n: int, seed: int) -> tuple[list[float], list[bool]]:
    rng = random.Random(seed)
    positives = [rng.random() < 0.4 for _ in range(n)]
    # Scores as the pipeline makes them: shares of a few claims, so that ties are common.
    scores = [rng.randint(0, k) / k for k in (rng.randint(1, 6) for _ in range(n))]
    scores = [min(1.0, s + (0.0 if p else 0.3)) for s, p in zip(scores, positives, strict=True)]
    return scores, positives


def test_the_roc_curve_area_is_the_summary_auroc_and_the_sweep_is_its_confusion() -> None:
    scores, positives = _random_rows(300, seed=3)
    roc = curves.roc_curve(scores, positives)
    assert roc is not None
    # The area under the drawn points (ties move together: a diagonal step) is Mann-Whitney's AUROC.
    assert curves.trapezoid(roc) == pytest.approx(auroc([-s for s in scores], positives), abs=1e-12)
    assert (roc.x[0], roc.y[0], roc.x[-1], roc.y[-1]) == (0.0, 0.0, 1.0, 1.0)
    records = [
        {"score": s, "label": "hallucinated" if p else "faithful"}
        for s, p in zip(scores, positives, strict=True)
    ]
    sweep = curves.sweep(scores, positives)
    for mark in (0.0, 0.29, 0.5, 0.57, 0.7, 1.0):  # 0.29 and 0.57: x 100 is not a whole number in floats
        c = summarise(records, mark).confusion
        assert c is not None
        assert sweep[curves.MARKS.index(mark)] == c, mark
        assert curves.rates_at(scores, positives, mark) == c


def test_average_precision_matches_a_hand_worked_example() -> None:
    # scikit-learn's documented example (y_score 0.1, 0.4, 0.35, 0.8 for y_true 0, 0, 1, 1: AP 0.8333), with
    # our orientation: a low score flags, so score = 1 - y_score.
    pr = curves.pr_curve([0.9, 0.6, 0.65, 0.2], [False, False, True, True])
    assert pr is not None
    assert curves.average_precision(pr) == pytest.approx(0.8333333, abs=1e-6)
    assert pr.x == [0.5, 0.5, 1.0, 1.0]
    assert pr.y == pytest.approx([1.0, 0.5, 2 / 3, 0.5])


def test_the_best_pass_mark_is_in_the_gap_and_its_interval_is_seeded() -> None:
    scores = [0.2, 0.3, 0.4, 0.8, 0.9, 1.0]
    positives = [True, True, True, False, False, False]
    sweep = curves.sweep(scores, positives)
    best = curves.best_mark(sweep)
    assert best is not None
    # Every mark from 0.41 to 0.80 separates them perfectly: the middle of that run.
    assert curves.MARKS[best] == 0.60
    assert sweep[best].balanced_accuracy == 1.0
    assert sweep[curves.MARKS.index(0.40)].balanced_accuracy < 1.0

    many, labels = _random_rows(200, seed=5)
    state = random.getstate()
    first = curves.bootstrap_best_mark(many, labels, seed=7)
    assert random.getstate() == state  # its own generator: the global one is untouched
    assert first == curves.bootstrap_best_mark(many, labels, seed=7)
    assert first is not None
    assert first.resamples == curves.BOOTSTRAP_RESAMPLES
    best_many = curves.best_mark(curves.sweep(many, labels))
    assert best_many is not None
    assert first.low <= curves.MARKS[best_many] <= first.high
    others = {curves.bootstrap_best_mark(many, labels, seed=s, resamples=60) for s in range(8)}
    assert len(others) > 1  # the seed matters
    # One class only: no balanced accuracy, no best mark, no interval.
    assert curves.best_mark(curves.sweep([0.1, 0.9], [True, True])) is None
    assert curves.bootstrap_best_mark([0.1, 0.9], [True, True], seed=0, resamples=20) is None


def _eval_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict[str, Any], str]:
    data = write_dataset(tmp_path / "data.jsonl")
    code = main(["eval", str(data), "--out", str(tmp_path / "scored.jsonl"), "--json", *JUDGE, *extra])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_eval_json_figures_count_bad_lines_and_match_the_rows(
    judged: FakeJudge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, figures, err = _eval_json(tmp_path, capsys)

    assert code == 0
    # stdout is the JSON alone; the progress and the skipped lines went to stderr.
    assert f"[{len(ROWS)}/{len(ROWS)}]" in err
    skipped = {s["line"]: s["reason"] for s in figures["input"]["skipped"]}
    assert sorted(skipped) == sorted(BAD_LINES)
    for line, reason in BAD_LINES.items():
        assert reason in skipped[line], skipped
        assert f"line {line}: " in err
    assert figures["input"]["rows"] == len(ROWS)
    assert figures["run"]["evaluations"] == len(ROWS)
    records = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    assert {r["id"]: r["score"] for r in records} == pytest.approx(SCORES)
    # The file alone makes the report: texts and settings ride with each result.
    injected = next(r for r in records if r["id"] == "h-injected")
    assert INJECTED in injected["answer"]
    assert injected["contexts"] == [DOCUMENT]
    assert injected["options"]["threshold"] == 0.7
    scores = figures["scores"]
    assert scores["mean"] == pytest.approx(sum(SCORES.values()) / len(SCORES))
    labelled = {k for k, (_, label) in ROWS.items() if label}
    failed = {r["id"] for r in records if r["passed"] is False}
    assert failed == {k for k, s in SCORES.items() if s < 0.7} | {"h-contradiction-above"}
    assert scores["failed"] == len(failed)
    assert scores["failed_for_contradiction"] == 1
    assert scores["fail_rate"] == pytest.approx(len(failed) / len(ROWS))
    assert figures["verdicts"] == {"failed": len(failed), "false_alarms": 1, "misses": 1}
    labels = figures["labels"]
    assert labels["labelled"] == len(labelled)
    at = labels["at_pass_mark"]
    # The score alone: "h-contradiction-above" (0.8) is not flagged here, though it failed.
    hallucinated = {k for k in labelled if ROWS[k][1] == "hallucinated"}
    flagged = {k for k in labelled if SCORES[k] < 0.7}
    assert at["tp"] == len(flagged & hallucinated)
    assert at["fp"] == len(flagged - hallucinated)
    assert at["precision"] == pytest.approx(at["tp"] / (at["tp"] + at["fp"]))
    assert at["recall"] == pytest.approx(at["tp"] / len(hallucinated))
    assert len(labels["roc"]["fpr"]) == len({SCORES[k] for k in labelled}) + 1
    assert len(labels["sweep"]["pass_marks"]) == 101
    best = labels["best"]
    assert best["balanced_accuracy"] == max(v for v in labels["sweep"]["balanced_accuracy"] if v is not None)
    assert best["interval"]["low"] <= best["pass_mark"] <= best["interval"]["high"]
    assert best["interval"]["seed"] == 0
    assert figures["gate"] is None


def test_report_of_the_results_file_has_the_figures_of_the_eval(
    judged: FakeJudge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, figures, _ = _eval_json(tmp_path, capsys)
    scored, data = tmp_path / "scored.jsonl", tmp_path / "data.jsonl"

    assert main(["report", str(scored), "--data", str(data), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == figures

    # Without the input: the results file's own lines only; a torn last line (an interrupted run) and a
    # foreign line are counted skips; a row scored again counts once, with its latest result.
    lines = scored.read_text().splitlines()
    again = json.loads(lines[0])
    again["score"], again["passed"] = 0.0, False
    broken = {**json.loads(lines[1]), "usage": "lots", "id": "broken"}
    odd_claims = {**json.loads(lines[1]), "claims": [1, 2], "id": "odd-claims"}
    odd_spans = {**json.loads(lines[1]), "id": "odd-spans", "detector": {"spans": [{"text": "x", "p": "hi"}]}}
    extra = ['["not a record"]', json.dumps(again), json.dumps(broken), json.dumps(odd_claims)]
    extra += [json.dumps(odd_spans), '{"id": "x", "outc']
    scored.write_text("\n".join([*lines, *extra]) + "\n")
    assert main(["report", str(scored), "--json", "--output", str(tmp_path / "r.html")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["input"]["rows"] is None
    skipped = {s["line"] - len(lines): s["reason"] for s in out["input"]["skipped"]}
    assert sorted(skipped) == [1, 3, 4, 6]
    assert "JSON object" in skipped[1]
    assert "'usage' must be an object" in skipped[3]
    assert "'claims'" in skipped[4]
    assert "invalid JSON" in skipped[6]
    # A detector span it cannot read is left unmarked; the record is counted and listed.
    assert out["run"]["evaluations"] == len(ROWS) + 1
    assert 'data-id="odd-spans"' in (tmp_path / "r.html").read_text()
    assert again["id"] == "f-all-three"  # was 1.0, passed
    assert out["scores"]["failed"] == figures["scores"]["failed"] + 1
    assert out["scores"]["passed"] == figures["scores"]["passed"]  # one less, and odd-spans (passed) more


def test_the_gate_exit_status(judged: FakeJudge, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_dataset(tmp_path / "data.jsonl")
    scored = tmp_path / "scored.jsonl"
    assert main(["eval", str(data), "--out", str(scored), *JUDGE, "--fail-under", "0.5"]) == 0
    mean = sum(SCORES.values()) / len(SCORES)
    capsys.readouterr()

    def gate(*flags: str) -> tuple[int, list[str]]:
        code = main(["report", str(scored), "--json", *flags])
        captured = capsys.readouterr()
        figures = json.loads(captured.out)
        lines = [line for line in captured.err.splitlines() if "gate failed" in line]
        assert figures["gate"]["passed"] is (code == 0)
        return code, lines

    assert gate("--fail-under", f"{mean - 0.01:.3f}") == (0, [])
    above = f"{mean + 0.01:.3f}"
    code, lines = gate("--fail-under", above)
    assert code == 1
    assert lines == [
        f"faithtrace report: gate failed: mean score {mean:.3f} is under --fail-under {float(above):g}"
    ]
    failed = len([s for s in SCORES.values() if s < 0.7]) + 1
    assert gate("--max-fail-rate", "0.9") == (0, [])
    code, lines = gate("--max-fail-rate", "0.2", "--fail-under", "0.99")
    assert code == 1
    assert len(lines) == 1  # both misses, on one line
    assert f"{failed} of {len(ROWS)} answers failed" in lines[0]
    assert "--fail-under 0.99" in lines[0]
    # A missed gate still writes the report, which says so at the top.
    html = tmp_path / "gated.html"
    assert main(["report", str(scored), "--output", str(html), "--plain", "--fail-under", "0.99"]) == 1
    page = html.read_text(encoding="utf-8")
    assert '<div id="gate" class="gate fail" data-passed="false">' in page
    assert f"Gate failed: mean score {mean:.3f} is under --fail-under 0.99" in page
    capsys.readouterr()
    # Through eval itself: a resumed run scores nothing more and gates on every row.
    assert main(["eval", str(data), "--out", str(scored), *JUDGE, "--max-fail-rate", "0.1"]) == 1
    assert capsys.readouterr().err.count("gate failed") == 1


def test_usage_and_input_errors_exit_2(
    judged: FakeJudge, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for argv in (
        ["eval", "x.jsonl", "--fail-under", "1.5"],
        ["eval", "x.jsonl", "--max-fail-rate", "-0.1"],
        ["report"],
        ["report", "x.jsonl", "--report-answers", "0"],
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv
    bad_only = tmp_path / "bad.jsonl"
    bad_only.write_text('{"question": "q"}\nnot json\n')
    assert main(["eval", str(bad_only), *JUDGE]) == 2
    assert "has no row to score" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["report", str(bad_only)]) == 2
    assert "no result records" in capsys.readouterr().err
    data = write_dataset(tmp_path / "data.jsonl")
    assert main(["eval", str(data), *JUDGE, "--report", str(tmp_path / "no" / "such" / "r.html")]) == 2
    assert "no folder" in capsys.readouterr().err
    # Without the report extra: said before any scoring, with the command that installs it.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["eval", str(data), *JUDGE, "--report", str(tmp_path / "r.html")]) == 2
    assert "pip install 'faithtrace[report]'" in capsys.readouterr().err
    assert judged.requests == []


def test_the_report_escapes_the_data_and_lists_the_skips(
    judged: FakeJudge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_dataset(tmp_path / "data.jsonl")
    report = tmp_path / "report.html"
    assert main(["eval", str(data), *JUDGE, "--report", str(report), "--report-answers", "4"]) == 0
    assert f"report: {report.resolve()}" in capsys.readouterr().out
    html = report.read_text(encoding="utf-8")
    assert "<script>window.__pwned" not in html
    assert "<img src=" not in html
    assert len(html) < 400_000
    for line in BAD_LINES:
        assert f'data-line="{line}"' in html
    assert html.count('<article class="answer"') == 4
    assert "Listing the 4 worst of 13 answers" in html

    # No labels: the scores, no curves.
    unlabelled = tmp_path / "unlabelled.jsonl"
    unlabelled.write_text(
        "\n".join(
            json.dumps({k: v for k, v in json.loads(line).items() if k != "label"})
            for line in data.read_text().splitlines()
            if line.startswith('{"id": "f-')
        )
    )
    assert main(["eval", str(unlabelled), *JUDGE, "--report", str(report)]) == 0
    html = report.read_text(encoding="utf-8")
    assert 'data-plot="histogram"' in html
    assert 'data-plot="roc"' not in html
    assert 'id="labels"' not in html


@pytest.mark.slow
def test_the_accuracy_benchmarks_rows_make_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """benchmarks/judgment/accuracy_as_eval.py (the docs' pictures): stored results joined with the texts."""
    import subprocess

    data = write_dataset(tmp_path / "data.jsonl")
    unsure = ["The Voltaro City weighs 19 kg.", "idk", "the judge was unsure (P(yes) 0.61)", "judge", 0.61]
    rows = [
        {
            "system": "faithtrace",
            "id": "f-one",
            "score": 1.0,
            "passed": True,
            "outcome": "scored",
            "claims": [[ROWS["f-one"][0][0], "yes", None, "proof", None]],
            "seconds": 2.0,
            "llm_calls": 0,
        },
        {
            "system": "faithtrace",
            "id": "h-none",
            "score": 0.0,
            "passed": False,
            "outcome": "scored",
            "claims": [unsure],
            "seconds": 4.0,
            "llm_calls": 1,
            "input_tokens": 500,
            "output_tokens": 20,
        },
        {"system": "length rule", "id": "h-none", "score": 0.2},
    ]
    stored = tmp_path / "accuracy_rows.jsonl"
    stored.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "accuracy.json").write_text(json.dumps({"judge": "faithtrace-local/test"}))
    out = tmp_path / "scored.jsonl"
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "judgment" / "accuracy_as_eval.py"
    done = subprocess.run(
        [sys.executable, str(script), str(stored), "--data", str(data), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr

    assert main(["report", str(out), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["run"]["judge_models"] == {"faithtrace-local/test": 2}
    assert figures["labels"]["at_pass_mark"]["tp"] == 1
    assert figures["run"]["seconds"]["mean"] == 3.0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["f-one", "h-none"]
    assert records[1]["answer"] == ROWS["h-none"][0][0]
    assert records[1]["line"] == 8
    # An "idk" the judge wrote as an unsure "yes" reads "not confirmed", not "not in the documents".
    assert records[1]["claims"][0]["status"] == "not_confirmed"
    assert records[0]["claims"][0]["status"] == "supported"
