"""The tiny detector in tests/data/tiny-detector is what training/run.sh --tiny writes, and says it is tiny.

The runtime's own tests (tests/test_detector.py) load and run it; this checks the folder's promises without
onnxruntime: every file hashed in detector.json, figures for every part, a card marked as a test model.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from faithtrace.judge.detector.inputs import INPUT_NAMES, OUTPUT_NAME

TINY = Path(__file__).resolve().parent / "data" / "tiny-detector"


def test_the_tiny_model_folder_matches_its_metadata() -> None:
    meta = json.loads((TINY / "detector.json").read_text())
    assert meta["tiny"] is True
    assert meta["base_model"] is None  # random weights: only the tokenizer is borrowed
    assert (meta["inputs"], meta["output"]) == (list(INPUT_NAMES), OUTPUT_NAME)
    assert meta["onnx"]["opset"] == 17
    assert meta["onnx"]["max_abs_diff_vs_torch"]["fp32"] < 1e-3
    assert set(meta["files"]) == {"model.onnx", "tokenizer.json", "MODEL_CARD.md"}
    for name, digest in meta["files"].items():
        assert hashlib.sha256((TINY / name).read_bytes()).hexdigest() == digest, name
    assert sum(p.stat().st_size for p in TINY.iterdir()) < 4_000_000
    # Honest figures for every part, none of them tuned on except validation.
    assert set(meta["figures"]) == {"validation", "heldout", "dev", "heldout_synthetic"}
    assert meta["figures"]["dev"]["answers"] == 120
    splits = meta["training"]["splits"]
    assert splits["dev_siblings_excluded"] > 0
    card = (TINY / "MODEL_CARD.md").read_text()
    assert card.startswith("# TINY TEST MODEL - not for use")
    assert "RAGTruth" in card
    assert "MIT" in card
