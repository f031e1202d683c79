"""The docs and the code's comments speak of the product, not of how it was built: a change's story belongs
in its commit message. This catches the obvious words ("stop 30", "issue 25", "an earlier session", "now
fixed"); it reads the text as it is, so a phrase in a comment counts as much as one on a docs page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLACES = ["README.md", "Makefile", "docs", "collector", "benchmarks", "examples", "src", "tests", "training"]
SUFFIXES = {".md", ".py", ".yaml", ".yml", ".sh", ".toml", ".txt", ""}
# Generated or recorded data: results keep the command lines runs were made with, fixtures their inputs.
SKIP = {"results", "data", "__pycache__", ".venv", "node_modules", ".carry"}
# "stop N" only where it names a stage of work ("in stop 30", "stop 23's runs"): "stop 2 replicas" is fine.
HISTORY = re.compile(
    r"\b(?:in|since|after|before|until|of|from) stop \d+\b|\bstop \d+'s\b"
    r"|\bissues? #?\d+\b|\bissue's\b|\b(?:an?|the) (?:earlier|previous) session\b"
    r"|\bnow fixed\b|\bbefore the fix\b|\bafter issue\b",
    re.IGNORECASE,
)


def history_words(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Each line that uses one of the words, as ``path:line: 'words'``."""
    found = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binaries and unreadable files say nothing
        for number, line in enumerate(text.splitlines(), 1):
            if match := HISTORY.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {match.group(0)!r}")
    return found


def _files() -> list[Path]:
    files = []
    for place in PLACES:
        top = ROOT / place
        candidates = [top] if top.is_file() else top.rglob("*")
        for path in candidates:
            if path.is_file() and path.suffix in SUFFIXES and not SKIP & set(path.relative_to(ROOT).parts):
                files.append(path)
    return [f for f in files if f != Path(__file__).resolve()]


def test_docs_and_comments_use_no_work_history_words() -> None:
    files = _files()
    assert any(f.name == "benchmarks.md" for f in files)  # the walk reaches the docs
    assert history_words(files) == []


def test_the_words_are_caught(tmp_path: Path) -> None:
    sample = tmp_path / "sample.md"
    sample.write_text(
        "Stop the Collector, then stop 2 replicas? No: scale to 2.\n"
        "Rerun in stop 30 on the code after issue 25.\n"
        "As an earlier session found, it is now fixed.\n"
    )
    assert history_words([sample], tmp_path) == [
        "sample.md:2: 'in stop 30'",
        "sample.md:3: 'an earlier session'",
    ]
