"""Each benchmark runs end to end on a tiny input and writes the JSON it promises (no timing assertions).

The scripts run as subprocesses with this interpreter, as ``make bench`` runs them. The judge is the
benchmarks' own loopback stand-in (an OpenAI-compatible server), so litellm's and faithtrace's real parsing
paths run; the peers' venv is not used here (``--no-peers`` / ``--systems faithtrace``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(ROOT))  # `benchmarks.*`

from benchmarks import report  # noqa: E402
from benchmarks._page import plots as _page_plots  # noqa: E402
from benchmarks._page import results  # noqa: E402
from benchmarks._shared import common as _common  # noqa: E402
from benchmarks._shared import fakejudge as _fakejudge  # noqa: E402
from benchmarks._shared import metrics as _accuracy_metrics  # noqa: E402
from benchmarks.request_path import faults as _faults  # noqa: E402


def _run(script: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture
def fake_judge_url() -> Iterator[str]:
    with _common.fake_judge(0.01, max_seconds=300) as url:
        yield url


@pytest.mark.slow
def test_overhead_runs_and_reports_every_faithtrace_mode(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    proc = _run(
        "request_path/overhead.py", "--calls", "50", "--rounds", "2", "--lead-in", "20", "--no-peers",
        "--out", str(out),
    )  # fmt: skip
    data = json.loads(out.read_text())
    rows = {r["variant"]: r for r in data["results"]}
    for name in (
        "bare function",
        "otel span (floor)",
        *(f"faithtrace {m}" for m in ("disabled", "sampled out", "sampled in")),
    ):
        assert rows[name]["ns_per_call_median"] is not None, (name, rows[name])
    assert rows["otel span (floor)"]["ratio_to_otel_floor"] == pytest.approx(1.0)
    assert rows["langfuse @observe"]["note"] == "skipped (--no-peers)"
    # The sampled-in variant really produced spans (a benchmark of a no-op would prove nothing): per call the
    # RAG span and, with content captured, its zero-length "retrieved documents" child for Phoenix.
    assert data["checks"]["faithtrace sampled in"] == "6 spans for 3 calls"
    assert "x OTel floor" in proc.stdout
    assert data["lead_in_calls"] == 20
    low, high = data["targets"]["sampled_in_ratio_to_floor"]["per_round_quartiles"]
    assert 0 < low <= high


@pytest.mark.slow
def test_throughput_runs_scores_and_reports_latency(tmp_path: Path) -> None:
    out = tmp_path / "throughput.json"
    _run(
        "request_path/throughput.py",
        "--latency", "0.02",
        "--concurrency", "2",
        "--per-worker", "2",
        "--queue-size", "8",
        "--overload-concurrency", "2",
        "--host-rate", "50",
        "--host-seconds", "0.5",
        "--overload-seconds", "1.5",
        "--interleaved-rounds", "1",
        "--out", str(out),
    )  # fmt: skip
    data = json.loads(out.read_text())
    (row,) = data["sweep"]
    assert row["evaluations"] == row["jobs"] == 4
    assert row["scored"] == 4
    assert row["errors"] == 0
    assert row["judge_calls_per_eval"] >= 1  # the verdict call at least, over loopback HTTP
    over = data["overload"]
    assert set(over["host_latency"]) == {
        "undecorated, worker idle",
        "decorated + sampled in, worker saturated",
        "undecorated, worker saturated",
    }
    side = over["host_latency_interleaved"]["conditions"]
    assert set(side) == {"undecorated", "OTel span by hand (floor)", "faithtrace, sampled in"}
    assert all(v["calls"] > 0 for v in side.values())
    assert over["gc_during_overload"]["gen0"]["collections"] > 0  # the recorder saw the collector run
    assert over["dropped_during_overload"] > 0  # the queue was full: calls were dropped, not blocked
    assert over["memory_over_time"]


@pytest.mark.slow
def test_eval_cpu_scores_every_call_in_process_and_none_remote(tmp_path: Path) -> None:
    out = tmp_path / "eval-cpu.json"
    _run("request_path/eval_cpu.py", "--per-round", "10", "--rounds", "2", "--out", str(out))
    modes = {m["mode"]: m for m in json.loads(out.read_text())["modes"]}
    local, remote = modes["in-process"], modes["remote"]
    assert local["errors"] == []
    assert remote["errors"] == []
    assert local["spans"]["scored"] == 40  # 20 warm-up + 2 x 10: every call was really scored
    assert local["judge_calls_per_call"] >= 1
    assert local["cpu_ms_per_call_median"] > 0
    # remote: every call recorded with its texts for `faithtrace serve`, nothing scored in the host
    assert remote["spans"]["remote_rag_spans"] == 40
    assert remote["spans"]["evaluations"] == 0
    assert remote["judge_calls_per_call"] == 0


@pytest.mark.slow
def test_faults_runs_each_fault_in_a_host_process_and_reports_what_it_saw(tmp_path: Path) -> None:
    out = tmp_path / "faults.json"
    faults = "none,judge_500,otlp_refused,app_processor_on_end"
    # A host that hangs is reported by name, with its threads' stacks, well before this test's own timeout.
    proc = _run(
        "request_path/faults.py",
        "--calls",
        "5",
        "--faults",
        faults,
        "--host-timeout",
        "100",
        "--out",
        str(out),
    )
    data = json.loads(out.read_text())
    rows = {r["fault"]: r for r in data["results"]}
    assert list(rows) == faults.split(",")
    for row in rows.values():
        assert row["calls"] == 5  # the host process ran and reported
        assert row["host_exceptions"] == 0
        assert row["results_changed"] == 0
        assert 0 <= row["shutdown_s"] < 6.5  # shutdown(5) keeps its deadline (plus its grace)
    assert data["summary"]["judge_and_exporter_faults"] == 2
    assert "shutdown(5)" in proc.stdout


def test_a_hung_fault_process_is_stopped_at_its_bound_with_its_stacks_and_its_children() -> None:
    """What `faults.py` does with a host process that does not exit: it asks for its threads' stacks, kills
    it with the children that hold its pipes, and returns within the bound."""
    hung = (
        "import faulthandler, signal, subprocess, time\n"
        "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
        "child = subprocess.Popen(['sleep', '600'])\n"  # inherits the pipes
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    started = time.monotonic()
    code, out, err = _faults.run_bounded([sys.executable, "-c", hung], None, 2.0)
    assert time.monotonic() - started < 15
    assert code is None
    assert "most recent call first" in err  # the stacks faulthandler wrote
    child = int(out.split()[0])
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and "zombie" not in _state(child):
        assert time.monotonic() < deadline, "the hung process's child is still running"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


@pytest.mark.slow
def test_accuracy_runs_on_a_two_row_fixture(tmp_path: Path, fake_judge_url: str) -> None:
    data_file = tmp_path / "rows.jsonl"
    rows = [
        {"id": "a", "question": "Refund window?", "contexts": ["Refunds within 30 days."],
         "answer": "Refunds are accepted within 30 days.", "label": "faithful"},
        {"id": "b", "question": "Refund window?", "contexts": ["Refunds within 30 days."],
         "answer": " ".join(["Refunds take ninety days."] * 40), "label": "hallucinated"},
    ]  # fmt: skip
    data_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "accuracy.json"
    _run(
        "judgment/accuracy.py",
        "--data", str(data_file),
        "--limit", "1",
        "--systems", "faithtrace",
        "--judge-model", "openai/bench-fake",
        "--api-base", fake_judge_url,
        "--api-key", "sk-test",
        "--structured-output", "json_schema",
        "--out", str(out),
    )  # fmt: skip
    data = json.loads(out.read_text())
    assert data["row_ids"] == ["a", "b"]
    length = data["systems"]["length rule (>130 words)"]
    assert length["balanced_accuracy"] == 1.0
    assert length["auroc"] == 1.0
    ft = data["systems"]["faithtrace"]
    assert ft["rows"] == 2
    assert ft["invalid_rate"] == 0.0
    assert ft["llm_calls_per_eval"] >= 1
    assert ft["input_tokens_per_eval"] > 0
    rows_file = tmp_path / "accuracy_rows.jsonl"
    per_row = [json.loads(x) for x in rows_file.read_text().splitlines()]
    assert [r["id"] for r in per_row] == ["a", "b"]
    assert all(r["outcome"] == "scored" for r in per_row)
    assert data["complete"] is True

    # --resume keeps finished rows: nothing is scored again, the figures are the same.
    before = rows_file.read_text()
    _run("judgment/accuracy.py", "--data", str(data_file), "--limit", "1", "--systems", "faithtrace",
         "--resume", "--judge-model", "openai/bench-fake", "--api-base", fake_judge_url,
         "--out", str(out))  # fmt: skip
    assert rows_file.read_text() == before
    assert json.loads(out.read_text())["systems"]["faithtrace"] == ft


def test_metrics_match_hand_computed_values() -> None:
    labels = [True, True, False, False]
    assert _accuracy_metrics.auroc(labels, [0.9, 0.4, 0.4, 0.1]) == pytest.approx(0.875)
    assert _accuracy_metrics.auroc([True, False], [0.5, 0.5]) == 0.5
    assert _accuracy_metrics.auroc([True, True], [0.1, 0.2]) is None
    assert _accuracy_metrics.balanced_accuracy(labels, [True, False, False, False]) == pytest.approx(0.75)


def test_accuracy_ranks_by_the_claims_final_verdicts_and_the_judges_confidence() -> None:
    from benchmarks.judgment import accuracy

    claims = [
        ["Proven.", "yes", None, "proof", None],
        ["Judged.", "yes", None, "judge", 0.8],
        # The judge said yes (P 0.9); the checks lowered it to idk: it counts as the checks' idk.
        ["Lowered.", "idk", "the judge said yes; the checks say idk", "check", 0.9],
        ["No confidence.", "no", None, "judge", None],
    ]
    rec = {"score": 0.5, "passed": False, "outcome": "scored", "claims": claims}
    assert accuracy.faithtrace_record(rec, "hallucinated")["risk"] == pytest.approx(1 - (1 + 0.8 + 0 + 0) / 4)
    assert accuracy.faithtrace_record({**rec, "claims": []}, "faithful")["risk"] == pytest.approx(0.5)


def test_paired_bootstrap_brackets_the_observed_difference() -> None:
    labels = [i % 2 == 0 for i in range(40)]
    perfect = [{"risk": float(y), "predicted": y} for y in labels]
    coin = [{"risk": 0.5, "predicted": i % 4 < 2} for i in range(40)]  # right on half of each class
    same = _accuracy_metrics.paired_bootstrap(labels, perfect, perfect, resamples=200)
    assert same["auroc_diff_95"] == [0.0, 0.0]
    better = _accuracy_metrics.paired_bootstrap(labels, perfect, coin, resamples=200)
    assert better["auroc_diff_95"] == [0.5, 0.5]  # 1.0 against ties everywhere, whatever the resample
    low, high = better["balanced_accuracy_diff_95"]
    assert 0.3 < low <= 0.5 <= high < 0.7
    assert better["resamples"] == 200


def test_fake_judge_fills_the_requested_schema() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "verdicts": {
                "type": "array",
                "minItems": 2,
                "maxItems": 2,
                "items": {"$ref": "#/$defs/V"},
            }
        },
        "$defs": {
            "V": {
                "type": "object",
                "properties": {
                    "verdict": {"enum": ["yes", "no", "idk"]},
                    "claim": {"type": "integer", "minimum": 1},
                },
            }
        },
    }
    body = {
        "messages": [{"role": "user", "content": "Fake claim 1 about x. Fake claim 2 about y."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "verdicts", "schema": schema}},
    }
    text, tool, _ = _fakejudge.reply_for(body, default_items=3)
    assert not tool
    assert json.loads(text) == {"verdicts": [{"verdict": "yes", "claim": 1}, {"verdict": "no", "claim": 2}]}


def test_claim_level_labels_claims_by_the_labelled_spans(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    docs = ["Preheat the oven to 200 degrees. Bake for 20 minutes."]
    row = {"id": "r", "question": "How?", "contexts": docs, "answer": "x", "label": "hallucinated",
           "spans": [{"text": "cover with foil"}]}  # fmt: skip
    data.write_text(json.dumps(row) + "\n")
    rows = tmp_path / "acc_rows.jsonl"
    claims = [
        ["Preheat the oven to 200 degrees.", "yes", None, "proof", None],
        ["Bake it for twenty minutes.", "yes", None, "judge", 0.9],
        ["Bake it and cover with foil.", "yes", None, "judge", 0.6],
    ]
    rows.write_text(json.dumps({"system": "faithtrace", "id": "r", "score": 1.0, "claims": claims}) + "\n")
    out = _run("judgment/claim_level.py", str(rows), "--data", str(data)).stdout
    assert "{'proof': [1, 0], 'judge': [2, 1]}" in out
    assert "judged claims: 2, labelled false: 1" in out
    assert "claim-level AUROC of 1 - P(supported): 1.0" in out
    # Re-decided under strict, the added "foil" sentence (two of its three words unknown) no longer counts.
    assert "rows 1, as run: balanced accuracy None" in out
    assert "rows 1, as run: balanced accuracy None, AUROC None, mean 1.0" in out
    assert "rows 1, strict: balanced accuracy None, AUROC None, mean 0.666" in out


@pytest.mark.judge
def test_judge_speed_prints_prompt_and_decode_times_from_the_real_model() -> None:
    # One claim: the verdict reply goes through the same grammar, sampling and log-probability code as with
    # eight, in half the output tokens of two (llama-cpp-python's own code spends ~0.5 s on each here).
    # tests/test_local_judge_server.py compares the patched and unpatched replies token by token at length.
    args = ("--tokens", "48", "--decode", "2", "--threads", "1", "--claims", "1")
    out = _run("judgment/judge_speed.py", *args).stdout
    assert "48 prompt tokens" in out
    assert "verdict reply for 1 claims," in out
    for line in ("logits for every position:", "logits for the last only:", "ms per token", "verdict reply"):
        assert line in out
    # It exits 1, and says NO, when the server's patches change the reply.
    assert "same reply and tokens: yes" in out
    assert out.count("ms per output token") == 2


def test_budget_counts_evaluations_over_the_limits_and_compares_runs(tmp_path: Path) -> None:
    def row(rid: str, tokens: tuple[int, int], seconds: float, p: float | None) -> dict[str, object]:
        claims = [["A claim.", "yes", None, "judge", p]]
        return {"system": "faithtrace", "id": rid, "llm_calls": 1 if tokens[0] else 0,
                "input_tokens": tokens[0], "output_tokens": tokens[1], "seconds": seconds,
                "claims": claims}  # fmt: skip

    ours, theirs = tmp_path / "a_rows.jsonl", tmp_path / "b_rows.jsonl"
    mine = [row("1", (1000, 50), 9.0, 0.9), row("2", (1200, 60), 16.0, 0.8), row("3", (0, 0), 0.0, None)]
    other = [row("1", (1000, 50), 12.0, 0.9), row("2", (1200, 60), 20.0, 0.5)]
    ours.write_text("".join(json.dumps(r) + "\n" for r in mine))
    theirs.write_text("".join(json.dumps(r) + "\n" for r in other))
    out = _run("judgment/budget.py", str(ours), "--against", str(theirs)).stdout
    assert "2 of 3 evaluations called the judge" in out
    assert "judge tokens: mean 1155.0, median 1155.0, 90th percentile 1260.0, max 1260.0; over 1,100: 1" in (
        out
    )
    assert "seconds:      mean 12.5, median 12.5, 90th percentile 16.0, max 16.0; over 15: 1" in out
    assert "within both:  1" in out
    assert "2 rows in both; identical claim lists 1; verdicts changed 0 of 2;" in out
    assert "largest P(yes) change 0.3000" in out
    assert "same tokens 2; mean seconds 12.50 against 16.00" in out


def test_the_benchmarks_page_and_its_plots_are_rendered_from_the_results() -> None:
    """docs/benchmarks.md and its SVGs are report.py's rendering of results/ as they are: nothing on them is
    hand-copied, and every result file is on the page, a section for it or not."""
    assert report.main(["--check"]) == 0, "run: python benchmarks/report.py"
    page = report.PAGE.read_text(encoding="utf-8")
    results = sorted((BENCH / "results").glob("*.json"))
    assert {p.stem for p in results} >= {"overhead", "throughput", "eval-cpu", "fleet", "accuracy", "probes"}
    for path in results:
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert f"`{doc['command']}`" in page, path.name
    # The overhead's spread per variant, the judges' ROC, the fleet's scaling against its ideal.
    for name in ("overhead.svg", "roc.svg", "fleet-scaling.svg"):
        assert f"(images/benchmarks/{name})" in page
        assert (report.IMAGES / name).read_text(encoding="utf-8").startswith("<?xml")


def test_the_check_fails_on_a_changed_plot_and_on_a_plot_no_result_draws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page, images = report.render(results.load())
    monkeypatch.setattr(report, "PAGE", tmp_path / "benchmarks.md")
    monkeypatch.setattr(report, "IMAGES", tmp_path / "images")
    report.PAGE.write_text(page, encoding="utf-8")
    report.IMAGES.mkdir()
    for name, svg in images.items():
        (report.IMAGES / name).write_text(svg, encoding="utf-8")
    assert report.stale(page, images) == []
    (report.IMAGES / "roc.svg").write_text(images["roc.svg"].replace("AUROC", "AUC"), encoding="utf-8")
    assert report.stale(page, images) == [str(report.IMAGES / "roc.svg")]
    (report.IMAGES / "roc.svg").write_text(images["roc.svg"], encoding="utf-8")
    (report.IMAGES / "old.svg").write_text("<svg/>", encoding="utf-8")
    assert report.stale(page, images) == [str(report.IMAGES / "old.svg")]


def test_the_plots_are_the_same_bytes_from_the_same_results() -> None:
    first = report.render(results.load())[1]
    assert report.render(results.load())[1] == first
    for svg in first.values():
        assert "<dc:date>" not in svg  # no timestamp: a rerun on unchanged results changes no image


def _headline_rows(page: str) -> dict[str, list[str]]:
    table = page.split("## At a glance", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in table.splitlines() if line.startswith("| ")][2:]
    return {cells[0].strip(): [c.strip() for c in cells] for cells in rows}


def test_the_headline_figures_equal_the_results_files() -> None:
    """Each headline figure, read again straight from its results file by the keys the page cites, is the
    number on the page; the row's date is its newest source's."""
    rows = _headline_rows(report.PAGE.read_text(encoding="utf-8"))
    headlines = report.headlines(results.load())
    assert len(headlines) >= 10
    assert set(rows) == {h.question for h in headlines}
    for h in headlines:
        _, answer, date, section = rows[h.question]
        assert section == f"[{h.anchor}](#{h.anchor})"
        assert f"{{#{h.anchor}}}" in report.PAGE.read_text(encoding="utf-8")
        days = set()
        for figure in h.figures:
            doc = json.loads(figure.run.path.read_text(encoding="utf-8"))
            value = doc
            for key in figure.keys:
                value = value[key]
            assert value == figure.value, (h.question, figure.keys)
            assert results.fmt(value, figure.digits) in answer, (h.question, figure.keys)
            days.add(doc["date"][:10])
        assert date == max(days), h.question


def test_the_headline_reads_each_judge_and_fleet_path_from_its_latest_run() -> None:
    by_question = {h.question: h for h in report.headlines(results.load())}
    faithtrace = by_question["Accuracy on 120 RAGTruth dev rows: faithtrace, embedded judge"]
    accuracy_runs = [json.loads(p.read_text()) for p in (BENCH / "results").glob("accuracy*.json")]
    newest = max((d for d in accuracy_runs if "faithtrace" in d["systems"]), key=lambda d: d["date"])
    assert {f.run.doc["date"] for f in faithtrace.figures} == {newest["date"]}
    assert any(q.startswith("Accuracy on 120 RAGTruth dev rows: DeepEval") for q in by_question)
    for path in ("load-balancing", "Kafka"):
        assert f"Evaluations/s against replicas, {path} path (judge 300 ms)" in by_question
        assert f"Faults survived, {path} path" in by_question


def test_latest_keeps_the_newest_run_of_each_setting(tmp_path: Path) -> None:
    def run(name: str, date: str) -> results.Run:
        return results.Run(tmp_path / name, {"benchmark": "x", "date": date})

    old, new = run("a.json", "2026-01-01T00:00:00+00:00"), run("b.json", "2026-02-01T00:00:00+00:00")
    kept = results.latest([("kill", new, 1), ("kill", old, 2), ("restart", old, 3)])
    assert kept == {"kill": (new, 1), "restart": (old, 3)}


def test_the_roc_curves_enclose_the_auroc_the_results_report() -> None:
    """The ROC plot is drawn from the per-row figures the results keep; its area is the table's AUROC."""
    for path in (BENCH / "results").glob("accuracy*.json"):
        for name, s in json.loads(path.read_text())["systems"].items():
            if "per_row" in s:
                points = _page_plots.roc_points(s["per_row"])
                assert _accuracy_metrics.area(points) == pytest.approx(s["auroc"]), (path.name, name)


def test_roc_points_step_through_ties_diagonally() -> None:
    labels, scores = [True, False, True, False], [0.9, 0.5, 0.5, 0.1]
    points = _accuracy_metrics.roc_points(labels, scores)
    assert points == [(0.0, 0.0), (0.0, 0.5), (0.5, 1.0), (1.0, 1.0)]
    assert _accuracy_metrics.area(points) == pytest.approx(_accuracy_metrics.auroc(labels, scores))


def test_a_result_without_a_section_is_still_listed(tmp_path: Path) -> None:
    doc = {"benchmark": "new_thing", "date": "2026-01-01", "command": "python benchmarks/new_thing.py"}
    doc["machine"] = {"cpu": "x", "cores": 2, "loadavg_1m": 0.0, "python": "3.11"}
    (tmp_path / "new-thing.json").write_text(json.dumps(doc))
    page, _ = report.render(results.load(tmp_path))
    assert "### new_thing" in page
    assert "`python benchmarks/new_thing.py`" in page
    assert "benchmarks/results/new-thing.json" in page
