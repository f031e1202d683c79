"""How long `make test` takes, warm and cold, and where the time goes: each set-up step, the checks, pytest,
and pytest's time per test file.

    python benchmarks/suite/make_test.py              # warm: a fresh clone of HEAD, this machine's caches
    python benchmarks/suite/make_test.py --cold       # cold: a fresh clone, an empty home: every cache empty
    python benchmarks/suite/make_test.py --write-doc  # either, then the table in docs/development.md

Warm is what a contributor's second run and CI on a used machine pay: a fresh clone of this checkout's HEAD
(no ``.venv``, as CI's clean checkout) with the caches earlier runs left: ``~/.cache/faithtrace`` (the
llama.cpp wheel, the Collector, Jaeger, Kafka, Phoenix, playwright-core, the judge's model), pip's, Go's and
npm's. Cold runs the same in a new, empty HOME (and an empty Maven repository), so every download and every
build happens again: a fresh machine but for the Debian packages already installed and the Go and Java
toolchains (on a machine without them the ``apt`` step is timed too). The clone has no ``../shared``, so the
one test that reads the training data skips, as it does on any checkout without it.

Each set-up step and check reports its own time (the Makefile's STEP_TIMES); steps run side by side
(``make test`` runs them JOBS at a time), so their sum is more than the wall time before pytest. pytest's time
per file adds up every test's set-up, call and tear-down (junit XML); with two xdist workers the files' sum is
about twice pytest's wall time. The load average is sampled during the run: figures from a busy machine are
not a quiet machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "development.md"
BEGIN, END = "<!-- make-test-durations: begin -->", "<!-- make-test-durations: end -->"
# The steps in the order they are shown (the Makefile's and collector/*.sh's step names).
STEPS = [
    "apt",
    "venv",
    "dev-install",
    "llama-wheel",
    "judge-install",
    "phoenix",
    "playwright",
    "otelcol",
    "jaeger",
    "kafka",
    "serve-wheels",
    "lint",
    "typecheck",
    "docs",
    "pytest",
]
# Cold: nothing of this machine's caches may be found through the environment either.
CACHE_VARS = (
    "XDG_CACHE_HOME",
    "PIP_CACHE_DIR",
    "GOPATH",
    "GOCACHE",
    "GOMODCACHE",
    "npm_config_cache",
    "MAVEN_OPTS",
    "FAITHTRACE_CACHE",
    "FAITHTRACE_CACHE_DIR",
)


class LoadSampler:
    """The 1-minute load average every ``interval`` seconds while the run goes on."""

    def __init__(self, interval: float = 15.0) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.samples.append(os.getloadavg()[0])

    @contextmanager
    def running(self) -> Iterator[LoadSampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    def summary(self) -> dict[str, float]:
        return {
            "before": round(self.samples[0], 2),
            "mean": round(sum(self.samples) / len(self.samples), 2),
            "max": round(max(self.samples), 2),
        }


def clone(work: Path) -> Path:
    """A fresh clone of HEAD (committed work only: say so when the tree has more)."""
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    if dirty.strip():
        print("note: the working tree has uncommitted changes; the clone measures HEAD", file=sys.stderr)
    target = work / "faithtrace"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
    return target


def environment(work: Path, cold: bool) -> dict[str, str]:
    env = dict(os.environ)
    if cold:
        home = work / "home"
        home.mkdir()
        for var in CACHE_VARS:
            env.pop(var, None)
        env["HOME"] = str(home)
        # Java (and so Maven) finds its home from the password database, not $HOME.
        env["MAVEN_OPTS"] = f"-Dmaven.repo.local={home / '.m2' / 'repository'}"
    return env


def run_make(
    checkout: Path, env: dict[str, str], work: Path, jobs: int | None, pytest_args: str = ""
) -> dict[str, Any]:
    steps, junit = work / "steps.tsv", work / "junit.xml"
    # Outside the work folder, which goes away after the run.
    log = Path(tempfile.gettempdir()) / f"{work.name}.log"
    extra = f" {pytest_args}" if pytest_args else ""
    argv = ["make", "test", f"STEP_TIMES={steps}", f"PYTEST_ARGS=--junitxml={junit} --durations=40{extra}"]
    if jobs is not None:
        argv.append(f"JOBS={jobs}")
    print(f"$ {' '.join(argv)}   (in {checkout}; log: {log})", flush=True)
    sampler = LoadSampler()
    started = time.monotonic()
    with sampler.running(), log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            out.write(line)
            if line.startswith(("-- ", ">> ", "built ", "fetched ")) or " passed" in line:
                print(line, end="", flush=True)
        returncode = proc.wait()
    wall = time.monotonic() - started
    text = log.read_text(errors="replace")
    return {
        "returncode": returncode,
        "wall_s": round(wall, 1),
        "load": sampler.summary(),
        "steps_s": read_steps(steps),
        "pytest_summary": pytest_summary(text),
        "files": per_file(junit),
        "log": str(log),
    }


def read_steps(path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, ms = line.partition("\t")
            if ms.strip().isdigit():
                out[name] = round(out.get(name, 0.0) + int(ms) / 1000, 1)
    return out


def pytest_summary(text: str) -> dict[str, Any]:
    """pytest's closing line: counts of passed, failed, skipped, errors, and its own wall time."""
    found = re.findall(r"^=+ (.*) in ([\d.]+)s.*=+$", text, flags=re.M)
    if not found:
        return {}
    counts_text, seconds = found[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", counts_text)}
    return {"counts": counts, "wall_s": float(seconds)}


def per_file(junit: Path) -> list[dict[str, Any]]:
    """Per test file: tests, seconds (set-up + call + tear-down, added up), slowest test."""
    if not junit.exists():
        return []
    files: dict[str, dict[str, Any]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        seconds = float(case.get("time", 0.0))
        path = _file_of(case.get("classname", ""))
        entry = files.setdefault(path, {"file": path, "tests": 0, "seconds": 0.0, "slowest_s": 0.0})
        entry["tests"] += 1
        entry["seconds"] += seconds
        entry["slowest_s"] = max(entry["slowest_s"], seconds)
    for entry in files.values():
        entry["seconds"] = round(entry["seconds"], 1)
        entry["slowest_s"] = round(entry["slowest_s"], 1)
    return sorted(files.values(), key=lambda e: -e["seconds"])


def _file_of(classname: str) -> str:
    """junit's classname as a path: tests.test_x -> tests/test_x.py, docs.fleet.md -> docs/fleet.md."""
    if classname.endswith(".md"):
        folder, _, page = classname.partition(".")
        return f"{folder}/{page}"
    parts = classname.split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            return "/".join(parts[: i + 1]) + ".py"
    return classname


def marked(checkout: Path, env: dict[str, str], marker: str) -> int:
    """How many tests carry ``marker`` (collected again in the clone; nothing runs)."""
    done = subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), "-m", "pytest", "--collect-only", "-q", "-m", marker],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"(\d+)(?:/\d+)? tests? (?:collected|selected)", done.stdout)
    return int(match.group(1)) if match else 0


def render(result: dict[str, Any], top: int = 25) -> str:
    """The durations table for docs/development.md."""
    steps = result["steps_s"]
    summary = result.get("pytest_summary", {})
    counts = ", ".join(f"{n} {w}" for w, n in summary.get("counts", {}).items()) or "no pytest summary"
    load = result["load"]
    lines = [
        f"`{result['command']}` on {result['date'][:10]} ({result['mode']}; "
        f"{result['machine']['cores']} cores; "
        f"load average before {load['before']}, mean {load['mean']}, max {load['max']}): "
        f"**{result['wall_s'] / 60:.1f} min** in all, pytest {summary.get('wall_s', 0):.0f} s ({counts}; "
        f"{result['slow_tests']} tests marked `slow`, {result['judge_tests']} `judge`, "
        f"{result['backend_tests']} `backend`).",
        "",
        "| step | seconds |",
        "| --- | ---: |",
    ]
    for name in STEPS:
        if name in steps:
            lines.append(f"| {name} | {steps[name]:.0f} |")
    lines.append(f"| **wall, all of `make test`** | **{result['wall_s']:.0f}** |")
    lines += ["", "| test file | tests | seconds | slowest test (s) |", "| --- | ---: | ---: | ---: |"]
    for entry in result["files"][:top]:
        cells = (f"`{entry['file']}`", entry["tests"], f"{entry['seconds']:.0f}", f"{entry['slowest_s']:.0f}")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    rest = result["files"][top:]
    if rest:
        seconds = sum(e["seconds"] for e in rest)
        lines.append(f"| {len(rest)} other files | {sum(e['tests'] for e in rest)} | {seconds:.0f} | |")
    return "\n".join(lines)


def write_doc(tables: dict[str, str]) -> None:
    """Replace the block between the markers in docs/development.md (warm first, then cold)."""
    text = DOC.read_text(encoding="utf-8")
    before, _, rest = text.partition(BEGIN)
    old, found, after = rest.partition(END)
    if not found:
        raise SystemExit(f"{DOC} has no {BEGIN} ... {END} block")
    kept = _blocks(old)
    kept.update(tables)
    body = "\n\n".join(kept[k] for k in ("warm", "cold") if k in kept)
    DOC.write_text(f"{before}{BEGIN}\n{body}\n{END}{after}", encoding="utf-8")


def _blocks(text: str) -> dict[str, str]:
    out = {}
    for mode in ("warm", "cold"):
        match = re.search(rf"^#### {mode}\n.*?(?=^#### |\Z)", text, flags=re.M | re.S)
        if match:
            out[mode] = match.group(0).strip()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cold", action="store_true", help="an empty HOME: every cache empty")
    parser.add_argument("--jobs", type=int, help="the Makefile's JOBS (set-up steps at a time)")
    parser.add_argument("--keep", action="store_true", help="keep the clone (and the cold HOME) afterwards")
    parser.add_argument(
        "--pytest-args",
        default="",
        help="more for pytest, e.g. -m 'not slow' to try the script quickly (not a figure to report)",
    )
    parser.add_argument("--write-doc", action="store_true", help="put the table into docs/development.md")
    parser.add_argument("--out", help="results file (default: benchmarks/results/make-test[-cold].json)")
    args = parser.parse_args(argv)

    mode = "cold" if args.cold else "warm"
    work = Path(tempfile.mkdtemp(prefix=f"make-test-{mode}-"))
    try:
        checkout = clone(work)
        env = environment(work, args.cold)
        result = run_make(checkout, env, work, args.jobs, args.pytest_args)
        result["pytest_args"] = args.pytest_args
        result["mode"] = mode
        for marker in ("slow", "judge", "backend"):
            result[f"{marker}_tests"] = marked(checkout, env, marker)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    name = "make-test" if mode == "warm" else "make-test-cold"
    path = _common.write_results(name, result, args.out or _common.RESULTS_DIR / f"{name}.json")
    doc = json.loads(path.read_text())
    table = render(doc)
    print(f"\n#### {mode}\n\n{table}\n\nwrote {path}")
    if args.write_doc:
        write_doc({mode: f"#### {mode}\n\n{table}"})
        print(f"updated {DOC}")
    return 0 if result["returncode"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
