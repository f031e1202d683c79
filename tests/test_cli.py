# ruff: noqa: F811  (fixtures are imported into this module by name)
"""The ``faithtrace`` command: eval (bad rows, resume, summary), score, plain output without rich."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from _scoring_fixtures import (
    FakeJudge,
    fake_judge,  # noqa: F401  (fixture, imported by name: see conftest)
    verdicts_json,
)
from faithtrace.cli import main

ROWS = [
    {
        "id": "a",
        "question": "Capital of France?",
        "contexts": ["Paris is the capital of France."],
        "answer": "Paris is the capital of France.",
        "label": "faithful",
    },
    {
        "id": "b",
        "question": "Capital of Spain?",
        "contexts": "Madrid is the capital of Spain.",
        "answer": "Barcelona is the capital of Spain.",
        "label": "hallucinated",
    },
    {
        "question": "Capital of Italy?",
        "contexts": ["Rome is the capital of Italy."],
        "answer": "Rome is the capital of Italy.",
    },
]


def verdict_for(body: dict[str, Any]) -> str:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return verdicts_json("no" if "Barcelona" in prompt.split("<claims>")[1] else "yes")


def claims_for(body: dict[str, Any]) -> str:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    answer = prompt.split("<answer>\n")[1].split("\n</answer>")[0]
    return json.dumps({"claims": [answer]})


@pytest.fixture
def judged(fake_judge: FakeJudge, monkeypatch: pytest.MonkeyPatch) -> FakeJudge:
    monkeypatch.setenv("FAITHTRACE_JUDGE_API_BASE", fake_judge.url)
    monkeypatch.setenv("FAITHTRACE_JUDGE_API_KEY", "sk-test")
    fake_judge.on("claims", claims_for)
    fake_judge.on("verdicts", verdict_for)
    fake_judge.on("reason", json.dumps({"reason": "Barcelona is not the capital."}))
    return fake_judge


def write_dataset(path: Path) -> Path:
    lines = [
        json.dumps(ROWS[0]),
        "{not json",
        json.dumps(ROWS[1]),
        json.dumps({"question": "q", "contexts": []}),
        "",
        json.dumps(ROWS[2]),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_eval_scores_rows_reports_bad_lines_and_resumes(
    judged: FakeJudge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_dataset(tmp_path / "data.jsonl")
    out = tmp_path / "out.jsonl"

    code = main(["eval", str(data), "--out", str(out), "--judge", "openai/fake-judge", "--plain"])

    captured = capsys.readouterr()
    assert code == 0
    assert "line 2: invalid JSON" in captured.err
    assert "line 4: missing field(s) answer" in captured.err
    records = read_jsonl(out)
    assert sorted(r["id"] for r in records) == ["a", "b", "line-6"]
    by_id = {r["id"]: r for r in records}
    assert by_id["a"]["score"] == 1.0
    assert by_id["a"]["line"] == 1
    assert by_id["a"]["label"] == "faithful"
    assert by_id["b"]["score"] == 0.0
    assert by_id["b"]["claims"][0]["verdict"] == "no"
    assert by_id["b"]["usage"]["llm_calls"] == 1  # claims split in code, reason from a template
    assert "balanced accuracy" in captured.out
    assert "AUROC" in captured.out
    assert "confusion matrix" in captured.out
    requests_after_first_run = len(judged.requests)

    # A rerun with the same --out skips what is done: no judge calls, same file, same summary.
    code = main(["eval", str(data), "--out", str(out), "--judge", "openai/fake-judge", "--plain"])
    captured = capsys.readouterr()
    assert code == 0
    assert "resuming: 3 of 3 rows already scored" in captured.out
    assert len(judged.requests) == requests_after_first_run
    assert len(read_jsonl(out)) == 3
    assert "1.000" in captured.out  # balanced accuracy from the stored records


def test_eval_resumes_a_partial_run_and_retries_errors(
    judged: FakeJudge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_dataset(tmp_path / "data.jsonl")
    out = tmp_path / "out.jsonl"
    # Every claim judged: the test counts the judge's calls.
    args = [
        "eval",
        str(data),
        "--out",
        str(out),
        "--judge",
        "openai/fake-judge",
        "--plain",
        "--no-prove-support",
    ]
    main(args)
    records = read_jsonl(out)
    # Simulate an interrupted run: keep row "a", turn "b" into an error, drop the third, leave a torn line.
    kept = [r for r in records if r["id"] == "a"]
    failed = {**next(r for r in records if r["id"] == "b"), "outcome": "error", "score": None}
    out.write_text("\n".join(json.dumps(r) for r in [*kept, failed]) + '\n{"id": "line-6", "outc')
    before = len(judged.requests_for("verdicts"))

    code = main(args)

    assert code == 0
    assert len(judged.requests_for("verdicts")) - before == 2  # "b" (was an error) and "line-6"
    assert "resuming: 1 of 3" in capsys.readouterr().out


def test_eval_limit_and_rich_output(
    judged: FakeJudge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_dataset(tmp_path / "data.jsonl")
    code = main(
        [
            "eval",
            str(data),
            "--limit",
            "1",
            "--judge",
            "openai/fake-judge",
            "--threshold",
            "0.5",
            "--no-prove-support",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert len(judged.requests_for("verdicts")) == 1
    assert "summary" in captured.out
    assert "evaluations" in captured.out


def test_eval_without_rich_falls_back_to_plain_text(
    judged: FakeJudge, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "rich" or m.startswith("rich.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "rich", None)  # makes `import rich` raise ImportError
    data = write_dataset(tmp_path / "data.jsonl")

    code = main(["eval", str(data), "--judge", "openai/fake-judge"])

    captured = capsys.readouterr()
    assert code == 0
    assert "[3/3]" in captured.out
    assert "balanced accuracy" in captured.out


def test_eval_unreadable_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(tmp_path / "missing.jsonl"), "--judge", "openai/x"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_bad_arguments_exit_with_usage_error() -> None:
    with pytest.raises(SystemExit) as info:
        main(["eval", "x.jsonl", "--concurrency", "0"])
    assert info.value.code == 2
    with pytest.raises(SystemExit):
        main(["score", "--context", "c"])  # --answer is required


def test_score_prints_claims_and_verdicts(judged: FakeJudge, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "score",
            "--question",
            "Capital of Spain?",
            "--context",
            "Madrid is the capital of Spain.",
            "--context",
            "Spain is in Europe.",
            "--answer",
            "Barcelona is the capital of Spain.",
            "--judge",
            "openai/fake-judge",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "Barcelona is the capital of Spain." in out
    assert "no" in out
    assert "score: 0.000" in out
    assert "faithfulness: 0.000" in out
    assert 'Unsupported: "Barcelona is the capital of Spain." (contradicted' in out  # the template reason
    assert "tokens:" in out
    prompt = next(m["content"] for m in judged.requests_for("verdicts")[0]["messages"] if m["role"] == "user")
    assert "Spain is in Europe." in prompt


def test_score_json(judged: FakeJudge, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "score",
            "--context",
            "Paris is the capital of France.",
            "--answer",
            "Paris is the capital of France.",
            "--judge",
            "openai/fake-judge",
            "--json",
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert result["outcome"] == "scored"
    assert result["score"] == 1.0
    (claim,) = result["claims"]
    # Contained in the document: proven in code, the judge not asked.
    assert (claim["text"], claim["verdict"], claim["decided_by"]) == (
        "Paris is the capital of France.",
        "yes",
        "proof",
    )
    assert judged.requests_for("verdicts") == []


def test_judge_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["judge", "status"]) == 0
    assert "local judge" in capsys.readouterr().out  # a table, or "no local judge is registered"


def test_scoring_options_reach_the_pipeline_from_flags(
    judged: FakeJudge, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fake judge says "no" to Barcelona. Every word of the claim is in the documents: the lexical check
    # would say "yes", and that disagreement is recorded, but no policy lets it raise the judge's "no". The
    # judge-written reason costs its own call.
    base = ["score", "--context", "Madrid and Barcelona are cities of Spain; Madrid is its capital."]
    base += ["--answer", "Barcelona is the capital of Spain.", "--judge", "openai/fake-judge", "--json"]

    assert main([*base, "--verdict-policy", "strict"]) == 0
    strict = json.loads(capsys.readouterr().out)
    assert main([*base, "--judge-reason"]) == 0
    judged_no = json.loads(capsys.readouterr().out)

    assert [(c["verdict"], c["check_verdict"]) for c in strict["claims"]] == [("no", "yes")]
    assert strict["score"] == 0.0
    assert [c["verdict"] for c in judged_no["claims"]] == ["no"]
    assert judged_no["reason"].startswith("Barcelona is not the capital.")
    assert len(judged_no["calls"]) == 2


def test_a_judge_token_budget_from_the_command_line_leaves_claims_unjudged(
    judged: FakeJudge, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = (
        "Preheat the oven to 350 degrees. Place the roast in a large pan. Pour one cup of water into the pan."
    )
    answer = doc + " Serve the roast with mashed potatoes and warm cornbread."
    judged.on("verdicts", lambda body: verdicts_json("idk"))  # one claim asked: the added sentence
    base = [
        "score",
        "--context",
        doc,
        "--answer",
        answer,
        "--judge",
        "openai/fake-judge",
        "--no-prove-support",
    ]
    assert main([*base, "--judge-token-budget", "1"]) == 0
    out = capsys.readouterr().out
    assert (
        out.count("not judged") >= 3
    )  # the three document sentences: rows of the claims table, and the reason
    assert "score: 0.000" in out
    assert len(judged.requests_for("verdicts")) == 1
    with pytest.raises(SystemExit):
        main([*base, "--judge-token-budget", "-1"])


_PLAN_DOC = (
    "The plan costs 9 euros a month. It includes 50 GB of storage. Support answers within one day. The plan "
    "can be cancelled at any time."
)
_PLAN_ANSWER = (
    "The plan costs 9 euros per month. The plan includes 50 GB of storage. Support replies within a day. "
    "The plan cannot be cancelled during the first year."
)


def _one_no(body: dict[str, Any]) -> str:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    block = prompt.split("<claims>\n")[1].split("\n</claims>")[0]
    claims = [line for line in block.splitlines() if line[:1].isdigit()]
    return verdicts_json(*("no" if "cannot" in c else "yes" for c in claims))


def test_score_and_eval_fail_an_answer_for_one_contradicted_claim(
    fake_judge: FakeJudge, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAITHTRACE_JUDGE_API_BASE", fake_judge.url)
    monkeypatch.setenv("FAITHTRACE_JUDGE_API_KEY", "sk-test")
    fake_judge.on("verdicts", _one_no)
    args = ["--judge", "openai/fake-judge", "--no-prove-support"]
    assert main(["score", "--context", _PLAN_DOC, "--answer", _PLAN_ANSWER, *args]) == 0
    out = capsys.readouterr().out
    assert "no (contradicted)" in out
    assert "yes (supported)" in out
    assert "score: 0.750" in out
    assert "passed: False" in out
    assert (
        'reason: The answer fails because the retrieved context contradicts this claim: "The plan cannot'
        in out
    )

    assert main(["score", "--context", _PLAN_DOC, "--answer", _PLAN_ANSWER, "--json", *args]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["score"], result["passed"]) == (0.75, False)
    assert [c["status"] for c in result["claims"]] == ["supported"] * 3 + ["contradicted"]

    data = tmp_path / "plan.jsonl"
    data.write_text(
        json.dumps({"id": "p", "question": None, "contexts": [_PLAN_DOC], "answer": _PLAN_ANSWER}) + "\n"
    )
    assert main(["eval", str(data), "--out", str(tmp_path / "out.jsonl"), *args]) == 0
    assert "pass 0, fail 1 (1 for a contradicted claim alone)" in capsys.readouterr().out
