"""benchmarks/detector/against_default.py: a trained detector against today's default on the same rows.

The inputs are the files the real runs write (``training/train.py finish --scores``, the model's
``detector.json``, an ``accuracy.py`` result with its per-row file), built here by hand so that each figure is
known: the gate must pass only when the detector's AUROC on the gate's rows is the margin above the default's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "detector" / "against_default.py"

# Eight held-out answers, hallucinated on the even ones; short faithful and long hallucinated answers, so the
# length rule ranks them too.
IDS = [f"r{i}" for i in range(8)]
HALLUCINATED = {i: i % 2 == 0 for i in range(8)}


def _write(tmp: Path, detector_risk: list[float], default_support: list[float]) -> list[str]:
    rows = [
        {"id": IDS[i], "answer": "word " * (200 if HALLUCINATED[i] else 20), "label": _label(i)}
        for i in range(8)
    ]
    (tmp / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = tmp / "model"
    model.mkdir()
    meta: dict[str, Any] = {
        "figures": {"validation": {"validation_threshold": 0.5}},
        "training": {
            "freeze_below": 11,
            "trained_parameters": 7,
            "best_epoch": 1,
            "epochs": 1,
            "history": [],
        },
    }
    (model / "detector.json").write_text(json.dumps(meta))
    scores = [
        {"part": "heldout", "id": IDS[i], "origin": "ragtruth", "hallucinated": HALLUCINATED[i], "risk": r}
        for i, r in enumerate(detector_risk)
    ]
    scores.append({"part": "validation", "id": "v", "origin": "ragtruth", "hallucinated": True, "risk": 0.9})
    (tmp / "scores.jsonl").write_text("".join(json.dumps(s) + "\n" for s in scores))
    default = {"row_ids": IDS, "systems": {"faithtrace": {"decision_rule": "score < 0.7"}}}
    (tmp / "acc.json").write_text(json.dumps(default))
    per_row = [
        {
            "system": "faithtrace",
            "id": IDS[i],
            "score": s,
            "passed": s >= 0.7,
            "outcome": "scored",
            "claims": [],
        }
        for i, s in enumerate(default_support)
    ]
    (tmp / "acc_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in per_row))
    return [
        sys.executable,
        str(SCRIPT),
        "--model",
        str(model),
        "--scores",
        str(tmp / "scores.jsonl"),
        "--rows",
        str(tmp / "rows.jsonl"),
        "--default",
        f"heldout={tmp / 'acc.json'}",
        "--out",
        str(tmp / "out.json"),
    ]


def _label(i: int) -> str:
    return "hallucinated" if HALLUCINATED[i] else "faithful"


def _run(cmd: list[str], tmp: Path) -> dict[str, Any]:
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, timeout=120)
    doc: dict[str, Any] = json.loads((tmp / "out.json").read_text())
    return doc


def test_a_detector_that_ranks_better_than_the_default_passes_the_gate(tmp_path: Path) -> None:
    perfect = [0.9 if HALLUCINATED[i] else 0.1 for i in range(8)]
    # The default ranks one pair wrong: r0 (hallucinated) gets the best support, r1 (faithful) the worst.
    default = [1.0, 0.0, 0.2, 0.9, 0.3, 0.8, 0.1, 0.95]
    doc = _run(_write(tmp_path, perfect, default), tmp_path)
    same = doc["parts"]["heldout"]["same_rows_as_default"]
    assert same["rows"] == 8
    assert same["detector"]["auroc"] == 1.0
    assert same["detector"]["balanced_accuracy"] == 1.0
    assert same["default"]["auroc"] == 1 - 7 / 16  # 16 pairs; r0 under all 4 faithful, r1 over 3 hallucinated
    assert same["length rule"]["auroc"] == 1.0
    assert doc["gate"] == {"part": "heldout", "margin": 0.05, "passed": True, "auroc_diff": 0.4375}


def test_a_detector_no_better_than_the_default_fails_the_gate(tmp_path: Path) -> None:
    ranked = [0.9 if HALLUCINATED[i] else 0.1 for i in range(8)]
    default = [0.0 if HALLUCINATED[i] else 1.0 for i in range(8)]  # the default ranks perfectly too
    doc = _run(_write(tmp_path, ranked, default), tmp_path)
    assert doc["gate"]["passed"] is False
    assert doc["gate"]["auroc_diff"] == 0.0
