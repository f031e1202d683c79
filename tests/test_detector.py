# ruff: noqa: F811  (fixtures are imported into this module by name)
"""The trained detector at run time, on the real ONNX runtime with the tiny model ``training/`` trained.

The tiny model's probabilities mean nothing; these tests check what holds for any model: files verified at
load, every answer token scored (windows, parts), spans mapped to claims and their characters, the verdicts
and their telemetry, and that next to a judge the detector is recorded and never applied. Thresholds of 0
(every token flagged) and above 1 (none) make the verdicts predictable without fixing any probability.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import faithtrace
from _scoring_fixtures import PROBES, FakeJudge, fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import clean_env  # noqa: F401  (fixture)
from faithtrace import DetectorError, ScoringOptions, trace_faithfulness
from faithtrace._telemetry import names as n
from faithtrace.cli import main
from faithtrace.judge.detector import model as detector_model
from faithtrace.judge.detector import windows
from faithtrace.testing import FaithtraceCapture
from test_detector_spans import judged_yes_beside
from test_scoring_honesty import oracle

TINY = Path(__file__).resolve().parent / "data" / "tiny-detector"
CONTEXT = "The Eiffel Tower was completed in 1889. It is 330 metres tall and stands in Paris."
ANSWER = "The Eiffel Tower was completed in 1889. It is 450 metres tall. Gustave Eiffel's firm built it."
ALL_FLAGGED = {"detector_threshold": 0.0, "detector_min_confidence": 0.0}
NONE_FLAGGED = {"detector_threshold": 1.0, "detector_min_confidence": 1.0}


def _options(**overrides: Any) -> ScoringOptions:
    return ScoringOptions(detector_model=str(TINY), detector_threads=1, **overrides)


@pytest.fixture(scope="module")
def tiny() -> detector_model.DetectorModel:
    return detector_model.load(TINY)


def _word_chars(text: str) -> set[int]:
    return {i for m in re.finditer(r"\w+", text) for i in range(m.start(), m.end())}


# --- loading --------------------------------------------------------------------------------------------
def test_the_tiny_model_loads_and_says_what_it_reads(tiny: detector_model.DetectorModel) -> None:
    assert tiny.max_length >= 32
    assert tiny.metadata["tiny"] is True  # never mistaken for a real model
    assert set(tiny.metadata["files"]) >= {"model.onnx", "tokenizer.json"}


def test_a_changed_file_fails_its_sha256_check(tmp_path: Path) -> None:
    copy = shutil.copytree(TINY, tmp_path / "model")
    with (copy / "tokenizer.json").open("a") as f:
        f.write(" ")
    with pytest.raises(DetectorError, match=r"tokenizer\.json does not match its sha256"):
        detector_model.load(copy)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: shutil.rmtree(d), "does not exist"),
        (lambda d: (d / "detector.json").unlink(), "has no detector.json"),
        (lambda d: (d / "model.onnx").unlink(), r"model\.onnx is missing"),
        (lambda d: _edit_meta(d, max_length="512"), "max_length must be an integer"),
        (lambda d: _edit_meta(d, files={"model.onnx": "0" * 64}), r"no sha256 for tokenizer\.json"),
        (lambda d: _edit_meta(d, files={**_meta(d)["files"], "../x": "0"}), "is not a file name"),
        (lambda d: (d / "detector.json").write_text("[]"), "must hold a JSON object"),
    ],
    ids=[
        "no-directory",
        "no-metadata",
        "no-model",
        "bad-length",
        "no-tokenizer-hash",
        "path-in-files",
        "list",
    ],
)
def test_a_broken_model_directory_says_what_is_wrong(tmp_path: Path, damage: Any, message: str) -> None:
    copy = shutil.copytree(TINY, tmp_path / "model")
    damage(copy)
    with pytest.raises(DetectorError, match=message):
        detector_model.load(copy)


def _meta(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "detector.json").read_text())
    return data


def _edit_meta(directory: Path, **changes: Any) -> None:
    (directory / "detector.json").write_text(json.dumps({**_meta(directory), **changes}))


# --- windows and parts ----------------------------------------------------------------------------------
def _long_context(tiny: detector_model.DetectorModel) -> list[str]:
    # Three passages, each about as long as the model: they cannot share one window.
    words = tiny.max_length
    return [f"Passage {i}: " + " ".join(f"fact{i}x{j} is true." for j in range(words // 3)) for i in range(3)]


def test_a_short_input_is_one_window(tiny: detector_model.DetectorModel) -> None:
    found = windows.detect(tiny, "How tall is it?", [CONTEXT], ANSWER)
    assert (found.windows, found.parts) == (1, 1)
    assert _word_chars(ANSWER) <= {i for t in found.tokens for i in range(t.start, t.end)}
    assert all(0.0 <= t.p <= 1.0 for t in found.tokens)


def test_a_long_context_is_read_in_several_windows(tiny: detector_model.DetectorModel) -> None:
    passages = _long_context(tiny)
    plan = windows.plan(tiny, "Which facts hold?", passages, ANSWER)
    assert len(plan) >= 3
    assert all(len(i.ids) <= tiny.max_length for i in plan)
    # Every passage's first and last words are in some window: nothing of the context is skipped.
    text = " ".join(tiny.tokenizer.decode(i.ids) for i in plan).lower()
    for p in passages:
        first, last = p.split()[1], p.split()[-2]
        assert first.lower().rstrip(":") in text
        assert last.lower() in text


def test_a_long_answer_is_scored_in_parts_and_never_cut(tiny: detector_model.DetectorModel) -> None:
    answer = " ".join(f"Claim number {i} says the value is {i * 7}." for i in range(tiny.max_length))
    found = windows.detect(tiny, "What values?", [CONTEXT], answer)
    assert found.parts >= 2
    covered = {i for t in found.tokens for i in range(t.start, t.end)}
    assert _word_chars(answer) <= covered  # every word of the answer was read, the last one too
    starts = [t.start for t in found.tokens]
    assert starts == sorted(starts)


def test_min_over_windows_is_never_above_max(tiny: detector_model.DetectorModel) -> None:
    passages = _long_context(tiny)
    low = windows.detect(tiny, "Which facts hold?", passages, ANSWER, "min")
    high = windows.detect(tiny, "Which facts hold?", passages, ANSWER, "max")
    assert [(t.start, t.end) for t in low.tokens] == [(t.start, t.end) for t in high.tokens]
    assert all(a.p <= b.p for a, b in zip(low.tokens, high.tokens, strict=True))
    assert low.windows == high.windows >= 3


# --- the pipeline ---------------------------------------------------------------------------------------
def test_the_detector_decides_without_any_llm_call() -> None:
    # The judge points at a closed port: any call would fail the evaluation.
    judge = faithtrace.JudgeSettings(model="openai/none", api_base="http://127.0.0.1:9", max_retries=0)
    flagged = faithtrace.evaluate(
        "How tall?",
        [CONTEXT],
        ANSWER,
        judge=judge,
        options=_options(verdict_source="detector", **ALL_FLAGGED),
    )
    assert (flagged.outcome, flagged.score, flagged.llm_calls) == ("scored", 0.0, 0)
    assert {c.verdict for c in flagged.claims} == {"idk"}  # not supported: the detector never says "no"
    assert {c.decided_by for c in flagged.claims} == {"detector"}
    first = flagged.claims[0]
    assert first.detector_spans
    assert first.reason is not None
    assert f"'{first.detector_spans[0].text}' (p = {first.detector_spans[0].p:.2f})" in first.reason
    for span in flagged.detector.spans:  # type: ignore[union-attr]
        assert ANSWER.strip()[span.start : span.end] == span.text
    assert flagged.judge_model == "tiny-detector"

    clean = faithtrace.evaluate(
        "How tall?",
        [CONTEXT],
        ANSWER,
        judge=judge,
        options=_options(verdict_source="detector", **NONE_FLAGGED),
    )
    assert (clean.score, clean.passed) == (1.0, True)
    assert all(c.verdict == "yes" and c.detector_spans == [] for c in clean.claims)
    assert clean.detector is not None
    assert clean.detector.spans == []
    assert clean.detector.windows == 1


def test_next_to_a_judge_the_detector_is_recorded_and_never_applied(fake_judge: FakeJudge) -> None:
    res = judged_yes_beside(fake_judge, _options(**ALL_FLAGGED))
    (claim,) = res.claims
    assert (claim.verdict, claim.decided_by) == ("yes", "judge")  # the judge's verdict stands
    assert claim.detector_verdict == "idk"
    assert claim.detector_disagreement
    assert res.score == 1.0
    assert res.detector is not None
    assert res.detector.error is None


def test_the_oracle_judge_still_decides_every_probe_with_a_detector_beside_it(fake_judge: FakeJudge) -> None:
    options = _options()
    wrong = []
    for probe in PROBES:
        fake_judge.on("verdicts", oracle(probe))
        res = faithtrace.evaluate(
            probe["question"],
            probe["contexts"],
            probe["answer"],
            judge=fake_judge.settings(),
            options=options,
        )
        assert res.detector is not None, probe["id"]
        assert res.detector.error is None, probe["id"]
        truth = {c.text: "no" if c.text in probe["false_sentences"] else "yes" for c in res.claims}
        if any(c.verdict != truth[c.text] or c.detector_verdict is None for c in res.claims):
            wrong.append(probe["id"])
        expected = probe["label"] == "faithful"
        if res.passed is not expected:
            wrong.append(probe["id"])
    assert wrong == []


# --- telemetry and the CLI ------------------------------------------------------------------------------
@pytest.mark.parametrize("content", [True, False])
def test_flagged_spans_are_on_the_claim_events(faithtrace_exporter: FaithtraceCapture, content: bool) -> None:
    faithtrace_exporter.configure(  # child: the evaluation span's output.value JSON is read below
        scoring=_options(verdict_source="detector", **ALL_FLAGGED),
        capture=faithtrace.CaptureOptions(content=content),
        evaluation_placement="child",
    )

    @trace_faithfulness(name="support-bot")
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    answer("How tall is it?", [CONTEXT])
    assert faithtrace_exporter.flush()
    (evaluation,) = faithtrace_exporter.evaluation_spans()
    attrs = dict(evaluation.attributes or {})
    assert attrs[n.EVAL_DETECTOR_MODEL] == "tiny-detector"
    assert attrs[n.EVAL_DETECTOR_WINDOWS] == 1
    assert attrs[n.EVAL_DETECTOR_SPANS] >= 1
    assert 0.0 <= attrs[n.EVAL_DETECTOR_MAX_P] <= 1.0
    assert attrs[n.EVAL_LLM_CALLS] == 0
    claims = [e for e in evaluation.events if n.is_claim_event(e.name)]
    assert len(claims) == 3
    for event in claims:
        ev = dict(event.attributes or {})
        assert (ev[n.CLAIM_VERDICT], ev[n.CLAIM_DECIDED_BY], ev[n.CLAIM_DETECTOR_VERDICT]) == (
            "idk",
            "detector",
            "idk",
        )
        assert ev[n.CLAIM_DETECTOR_DISAGREEMENT] is False
        starts, ends, probs = (
            ev[n.CLAIM_DETECTOR_SPAN_START],
            ev[n.CLAIM_DETECTOR_SPAN_END],
            ev[n.CLAIM_DETECTOR_SPAN_P],
        )
        assert len(starts) == len(ends) == len(probs) >= 1
        if content:
            assert list(ev[n.CLAIM_DETECTOR_SPANS]) == [
                ANSWER[a:b] for a, b in zip(starts, ends, strict=True)
            ]
        else:
            assert n.CLAIM_DETECTOR_SPANS not in ev
            assert n.CLAIM_TEXT not in ev
    output = json.loads(attrs[n.OUTPUT_VALUE])
    assert output["claims"][0]["detector_verdict"] == "idk"
    assert ("text" in output["claims"][0]["detector_spans"][0]) is content


def test_score_and_eval_print_the_flagged_spans(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAITHTRACE_DETECTOR_THRESHOLD", "0")
    monkeypatch.setenv("FAITHTRACE_DETECTOR_MIN_CONFIDENCE", "0")
    args = ["--verdict-source", "detector", "--detector-model", str(TINY)]
    assert main(["score", "--context", CONTEXT, "--answer", ANSWER, *args]) == 0
    out = capsys.readouterr().out
    assert "detector: tiny-detector" in out
    assert "flagged: '" in out
    assert "judge: tiny-detector   LLM calls: 0" in out

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"question": "How tall?", "contexts": [CONTEXT], "answer": ANSWER}) + "\n")
    results = tmp_path / "out.jsonl"
    assert main(["eval", str(rows), "--out", str(results), "--plain", *args]) == 0
    (record,) = [json.loads(line) for line in results.read_text().splitlines()]
    assert record["detector"]["model"] == "tiny-detector"
    assert record["detector"]["spans"]
    assert record["claims"][0]["detector_spans"][0]["p"] >= 0.0
    spans = len(record["detector"]["spans"])
    summary = capsys.readouterr().out
    assert f"1 evaluations read, {spans} spans flagged, 0 claims where it and the verdict differ" in summary


# --- the benchmarks run on the tiny model ---------------------------------------------------------------
BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
DEV_ROWS = [
    {"id": "a", "question": "How tall?", "contexts": [CONTEXT], "answer": ANSWER, "label": "hallucinated",
     "spans": [{"start": 46, "end": 49}]},
    {"id": "b", "question": "When?", "contexts": [CONTEXT], "answer": "It was completed in 1889.",
     "label": "faithful", "spans": []},
]  # fmt: skip


def _bench(script: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
def test_the_detector_benchmarks_run_and_say_the_model_is_tiny(tmp_path: Path) -> None:
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in DEV_ROWS))
    out = _bench("detector/detector_windows.py", "--model", str(TINY), "--data", str(data),
                 "--window-tokens", "32", "--out", str(tmp_path / "w.json"))  # fmt: skip
    assert "TINY test model" in out
    summary = json.loads((tmp_path / "w.json").read_text())["summary"]
    assert [s["combination"] for s in summary] == ["first", "min", "max"]
    assert all(s["rows"] == 2 and s["rows_with_several_windows"] >= 1 for s in summary)

    _bench("detector/detector_latency.py", "--model", str(TINY), "--data", str(data), "--limit", "2",
           "--threads", "1", "--out", str(tmp_path / "l.json"))  # fmt: skip
    systems = json.loads((tmp_path / "l.json").read_text())["systems"]
    assert [s["evaluations"] for s in systems] == [2, 2]
    assert systems[1]["system"] == "tiny-detector"
    assert systems[1]["windows_per_eval"] >= 1

    _bench("judgment/accuracy.py", "--systems", "detector", "--detector-model", str(TINY),
           "--data", str(data), "--limit", "0", "--out", str(tmp_path / "a.json"))  # fmt: skip
    detector = json.loads((tmp_path / "a.json").read_text())["systems"]["detector"]
    assert (detector["rows"], detector["llm_calls_per_eval"], detector["invalid_rate"]) == (2, 0.0, 0.0)
