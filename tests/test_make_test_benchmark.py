"""benchmarks/suite/make_test.py: what it reads back from a `make test` run (the step log, pytest's closing
line, junit XML), the table it writes into docs/development.md, and the empty home of a cold run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.suite import make_test

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest"
 errors="0" failures="0" skipped="1" tests="5" time="12.0">
<testcase classname="tests.test_serve" name="test_a" time="4.25" />
<testcase classname="tests.test_serve" name="test_b[x]" time="1.5" />
<testcase classname="tests.test_layout" name="test_c" time="0.25" />
<testcase classname="tests.test_fleet_e2e.TestKill" name="test_d" time="9.0" />
<testcase classname="docs.getting-started.md" name="line:51,column:1" time="0.5"><skipped /></testcase>
</testsuite></testsuites>"""


def _result(**overrides: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "command": "python3 benchmarks/suite/make_test.py",
        "date": "2026-11-28T20:00:00+00:00",
        "mode": "warm",
        "machine": {"cores": 2},
        "load": {"before": 0.1, "mean": 1.5, "max": 2.0},
        "wall_s": 540.0,
        "steps_s": {"pytest": 420.0, "typecheck": 55.0, "lint": 0.5, "otelcol": 0.0},
        "pytest_summary": {"counts": {"passed": 704, "skipped": 1}, "wall_s": 418.0},
        "files": [{"file": "tests/test_serve.py", "tests": 2, "seconds": 5.8, "slowest_s": 4.2}],
        "slow_tests": 120,
        "judge_tests": 15,
        "backend_tests": 90,
    }
    result.update(overrides)
    return result


def test_pytest_summary_reads_the_closing_line() -> None:
    log = "collected 705 items\n...\n====== 704 passed, 1 skipped, 3 warnings in 512.30s (0:08:32) ======\n"
    assert make_test.pytest_summary(log) == {
        "counts": {"passed": 704, "skipped": 1, "warnings": 3},
        "wall_s": 512.3,
    }
    failed = "== 2 failed, 700 passed in 9.10s ==\n"
    assert make_test.pytest_summary(failed)["counts"] == {"failed": 2, "passed": 700}
    assert make_test.pytest_summary("make: *** [test] Error 2\n") == {}


def test_per_file_adds_up_each_files_tests_slowest_first(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    files = make_test.per_file(junit)
    assert [f["file"] for f in files] == [
        "tests/test_fleet_e2e.py",
        "tests/test_serve.py",
        "docs/getting-started.md",
        "tests/test_layout.py",
    ]
    serve = files[1]
    assert (serve["tests"], serve["seconds"], serve["slowest_s"]) == (2, 5.8, 4.2)
    assert make_test.per_file(tmp_path / "missing.xml") == []


def test_steps_are_summed_per_name_in_seconds(tmp_path: Path) -> None:
    steps = tmp_path / "steps.tsv"
    steps.write_text("llama-wheel\t377200\notelcol\t451000\nlint\t500\nlint\t700\nbroken line\n")
    assert make_test.read_steps(steps) == {"llama-wheel": 377.2, "otelcol": 451.0, "lint": 1.2}
    assert make_test.read_steps(tmp_path / "none.tsv") == {}


def test_the_table_lists_the_steps_in_order_and_the_files() -> None:
    table = make_test.render(_result())
    lines = table.splitlines()
    assert "**9.0 min** in all" in lines[0]
    assert "704 passed, 1 skipped" in lines[0]
    assert "120 tests marked `slow`, 15 `judge`, 90 `backend`" in lines[0]
    assert "load average before 0.1, mean 1.5, max 2.0" in lines[0]
    rows = [line.split("|")[1].strip() for line in lines if line.startswith("| ")]
    steps = rows[: rows.index("test file")]
    assert steps[:6] == ["step", "---", "otelcol", "lint", "typecheck", "pytest"]  # the Makefile's order
    assert "| **wall, all of `make test`** | **540** |" in lines
    assert "| `tests/test_serve.py` | 2 | 6 | 4 |" in lines


def test_write_doc_replaces_one_mode_and_keeps_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "development.md"
    doc.write_text(f"# Dev\n\ntext\n\n{make_test.BEGIN}\n{make_test.END}\n\n## After\n")
    monkeypatch.setattr(make_test, "DOC", doc)
    make_test.write_doc({"cold": "#### cold\n\ncold table"})
    make_test.write_doc({"warm": "#### warm\n\nwarm table"})
    make_test.write_doc({"warm": "#### warm\n\nnewer warm table"})
    text = doc.read_text()
    assert text.startswith("# Dev\n\ntext\n\n")
    assert text.endswith(f"{make_test.END}\n\n## After\n")
    body = text.split(make_test.BEGIN)[1].split(make_test.END)[0]
    assert body == "\n#### warm\n\nnewer warm table\n\n#### cold\n\ncold table\n"
    doc.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="no"):
        make_test.write_doc({"warm": "#### warm"})


def test_a_cold_run_gets_an_empty_home_and_no_cache_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOCACHE", "/somewhere/go-build")
    monkeypatch.setenv("PIP_CACHE_DIR", "/somewhere/pip")
    env = make_test.environment(tmp_path, cold=True)
    home = tmp_path / "home"
    assert env["HOME"] == str(home)
    assert home.is_dir()
    assert not any(home.iterdir())
    assert "GOCACHE" not in env
    assert "PIP_CACHE_DIR" not in env
    assert env["MAVEN_OPTS"] == f"-Dmaven.repo.local={home / '.m2' / 'repository'}"
    warm = make_test.environment(tmp_path / "w", cold=False)
    assert warm["GOCACHE"] == "/somewhere/go-build"
    assert warm["HOME"] == str(Path.home())
