# ruff: noqa: F811  (fixtures are imported into this module by name)
"""In a real browser: the HTML report of ``faithtrace eval --report`` for a labelled file.

The report comes from the real command (litellm, the pipeline and the fake judge's scripted replies through
the real parsing path) and opens from disk in Debian's Chromium, driven headless by playwright-core (``make
backends`` installs both). The page is read through its DOM: the figures it shows against the command's own
``--json``, the curves' drawn points against the figures' points, what each filter leaves visible, the marked
unsupported text, the skipped lines; and every request it makes, which must be none. The screenshot is kept
in ``test-artifacts/`` for a human to look at.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from _browser_fixtures import BrowserSession, browser, browser_tools  # noqa: F401  (fixtures)
from _eval_report_data import (
    BAD_LINES,
    INJECTED,
    INJECTED_SENTENCE,
    NEVER,
    ROWS,
    SCORES,
    T1,
    WEIGHT,
    script_judge,
    write_dataset,
)
from _scoring_fixtures import FakeJudge, fake_judge  # noqa: F401  (fixture)
from faithtrace.cli import main

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("FAITHTRACE_ARTIFACTS", ROOT / "test-artifacts"))
BROWSER_SCRIPT = "eval_report.cjs"  # what the `browser` fixture runs (each page in a fresh context)
# Figures every labelled report shows.
SHOWN = {
    "run.evaluations",
    "input.rows",
    "input.skipped",
    "run.seconds.p50",
    "run.seconds.p95",
    "run.input_tokens",
    "scores.mean",
    "scores.failed",
    "scores.fail_rate",
    "labels.auroc",
    "labels.average_precision",
    "labels.at_pass_mark.balanced_accuracy",
    "labels.at_pass_mark.precision",
    "labels.at_pass_mark.recall",
    "labels.at_pass_mark.tp",
    "labels.at_pass_mark.fp",
    "labels.best.pass_mark",
    "labels.best.balanced_accuracy",
    "labels.best.interval.low",
    "labels.best.interval.high",
    "verdicts.failed",
    "verdicts.false_alarms",
    "verdicts.misses",
}


@pytest.fixture
def report(
    fake_judge: FakeJudge, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[Path, dict[str, Any]]:
    """The report of the labelled dataset, and the figures the same command printed with --json."""
    monkeypatch.setenv("FAITHTRACE_JUDGE_API_BASE", fake_judge.url)
    monkeypatch.setenv("FAITHTRACE_JUDGE_API_KEY", "sk-test")
    script_judge(fake_judge)
    data = write_dataset(tmp_path / "data.jsonl")
    html = tmp_path / "report.html"
    argv = ["eval", str(data), "--report", str(html), "--json", "--judge", "openai/fake-judge", "--plain"]
    assert main([*argv, "--fail-under", "0.5"]) == 0
    return html, json.loads(capsys.readouterr().out)


def _at(figures: dict[str, Any], key: str) -> Any:
    value: Any = figures
    for part in key.split("."):
        value = value[part]
    return len(value) if key == "input.skipped" else value


def _shown_as(text: str, value: Any) -> bool:
    """The text is the value, rounded to the digits shown."""
    if value is None:
        return text == "n/a"
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(float(text) - value) <= 0.5 * 10**-decimals + 1e-12


def test_the_report_shows_the_commands_figures_curves_filters_and_marks(
    report: tuple[Path, dict[str, Any]], browser: BrowserSession
) -> None:
    html, figures = report
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "eval-report.png"
    page = browser.request(url=html.as_uri(), screenshot=str(screenshot), fullPage=True)
    assert page["errors"] == [], page["log"]
    assert screenshot.stat().st_size > 20_000

    # The figures: each one shown is the command's own, exactly in data-value and rounded in the text.
    shown = page["figures"]
    assert set(shown) >= SHOWN, SHOWN - set(shown)
    for key, cell in shown.items():
        assert cell["value"] == _at(figures, key), key
        assert _shown_as(cell["text"], cell["value"]), (key, cell)
    assert "Gate passed" in page["gate"]

    # The curves: drawn through exactly the figures' points (ROC: one per distinct score and the origin; PR:
    # steps, two vertices a point but the first; the sweep: 101 pass marks).
    labels = figures["labels"]
    assert page["curves"]["roc-curve"] == {"vertices": len(labels["roc"]["fpr"]), "moves": 1}
    assert page["curves"]["pr-curve"] == {"vertices": 2 * len(labels["pr"]["recall"]) - 1, "moves": 1}
    assert page["curves"]["sweep-balanced-accuracy"] == {"vertices": 101, "moves": 1}
    plots = page["plots"]
    assert set(plots) == {"histogram", "roc", "pr", "sweep"}
    assert {"roc-curve", "roc-chance", "roc-pass-mark", "roc-best"} <= set(plots["roc"]["ids"])
    assert {"sweep-best", "sweep-interval", "sweep-pass-mark", "sweep-recall"} <= set(plots["sweep"]["ids"])
    assert {"hist-faithful", "hist-hallucinated", "hist-unlabelled"} <= set(plots["histogram"]["ids"])
    assert all(p["width"] > 200 for p in plots.values())

    # The answers, worst first; each filter leaves what the figures count.
    answers = page["answers"]
    assert [a["id"] for a in answers] == [a["id"] for a in sorted(answers, key=lambda a: float(a["score"]))]
    assert float(answers[0]["score"]) == min(SCORES.values())
    filters = page["filters"]
    assert len(filters["all"]["visible"]) == len(ROWS)
    failed = {a["id"] for a in answers if a["failed"] == "true"}
    assert set(filters["failed"]["visible"]) == failed
    assert len(failed) == figures["verdicts"]["failed"] == figures["scores"]["failed"]
    assert filters["false-alarm"]["visible"] == ["false-alarm"]
    assert filters["miss"]["visible"] == ["miss"]
    assert filters["miss"]["pressed"] == "true"
    assert filters["miss"]["shown"] == f"Showing 1 of the {len(ROWS)} answers listed."

    # The unsupported text, marked in the answer where it stands, in colour; the supported text is not.
    marks = {(m["answer"], m["text"]): m for m in page["marks"]}
    weight = marks[("h-none", WEIGHT)]
    assert weight["classes"] == "unsupported not-in-documents"
    assert weight["claim"] == "1"
    assert weight["background"] not in ("rgba(0, 0, 0, 0)", "transparent")
    assert marks[("h-contradicted", NEVER)]["classes"] == "unsupported contradicted"
    assert not any(T1 in m["text"] for m in page["marks"])
    # The claim's list entry, with the passage it was matched to.
    h_third = next(a for a in answers if a["id"] == "h-third")
    weight_claim = next(c for c in h_third["claims"] if WEIGHT in c["text"])
    assert weight_claim["verdict"] == "idk"
    assert weight_claim["passage"] == T1  # the one document sentence sharing its words

    # Markup in an answer is text: shown as written, not run, not loaded.
    injected = next(a for a in answers if a["id"] == "h-injected")
    assert INJECTED in injected["answer"]
    assert marks[("h-injected", INJECTED_SENTENCE)]["classes"].startswith("unsupported")
    assert page["pwned"] is None
    assert page["scripts"] == 2  # the figures' JSON block and the filter script

    # The skipped lines, with their line numbers and why.
    skipped = {int(line): why for line, why in page["skipped"]}
    assert sorted(skipped) == sorted(BAD_LINES)
    for line, why in BAD_LINES.items():
        assert why in skipped[line]


def test_the_report_makes_no_network_request(
    report: tuple[Path, dict[str, Any]], browser: BrowserSession, tmp_path: Path
) -> None:
    html, _ = report
    page = browser.request(url=html.as_uri(), screenshot=str(tmp_path / "shot.png"))
    assert page["requests"] == []
    assert page["violations"] == []  # nothing blocked either: the page asked for nothing
    assert page["errors"] == [], page["log"]

    # The same watch on a page that does load something sees it: the empty list above is not blindness.
    leaky = tmp_path / "leaky.html"
    text = html.read_text(encoding="utf-8").replace(
        "</main>", '<img src="http://127.0.0.1:9/pixel.png"></main>'
    )
    leaky.write_text(text.replace('http-equiv="Content-Security-Policy"', 'name="csp-off"'), encoding="utf-8")
    page = browser.request(url=leaky.as_uri(), screenshot=str(tmp_path / "leaky.png"))
    assert page["requests"] == ["http://127.0.0.1:9/pixel.png"]
    # With the page's policy on, the browser refuses the same image and says so; the attempt is still seen.
    leaky.write_text(text, encoding="utf-8")
    page = browser.request(url=leaky.as_uri(), screenshot=str(tmp_path / "leaky.png"))
    assert page["violations"] == ["img-src http://127.0.0.1:9/pixel.png"]
    assert page["requests"] == ["http://127.0.0.1:9/pixel.png"]
