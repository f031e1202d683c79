"""The detector recipe's data rules (training/prep.py): rows, grouped splits and token labels.

Pure Python: these run in the suite without torch. The recipe's torch half (training/train.py) is exercised by
``training/run.sh --tiny`` (training/README.md), not here.
"""

from __future__ import annotations

import gzip
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from faithtrace.judge.detector.inputs import context_segment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from training import prep  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "ragtruth_qa_train.jsonl"


def _row(
    i: int, source: str, *, spans: list[dict[str, Any]] | None = None, dev: bool = False
) -> dict[str, Any]:
    return {
        "id": f"r{i}",
        "source_id": source,
        "question": f"question {source}?",
        "contexts": [f"Passage one of {source}.", "", f"Passage two of {source}."],
        "answer": "The answer is forty-two.",
        "spans": spans or [],
        "in_dev_set": dev,
    }


def _write(path: Path, rows: list[Any]) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_load_rows_counts_every_unusable_row_by_reason(tmp_path: Path) -> None:
    good = _row(1, "a", spans=[{"start": 4, "end": 10}])
    missing = {k: v for k, v in _row(2, "b").items() if k != "answer"}
    bad_span = _row(3, "c", spans=[{"start": 5, "end": 999}])
    test_split = {**_row(4, "d"), "split": "test"}
    empty = {**_row(5, "e"), "answer": "  "}
    path = tmp_path / "rows.jsonl"
    _write(path, [good, missing, "{not json", bad_span, test_split, empty, ""])
    skipped: dict[str, int] = {}
    rows = prep.load_rows(path, skipped)
    assert [r["id"] for r in rows] == ["r1"]
    assert skipped == {
        "missing_answer": 1,
        "bad_json": 1,
        "bad_span": 1,
        "not_train_split": 1,
        "empty_answer": 1,
    }


def test_load_rows_reads_gzip(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(json.dumps(_row(1, 7)) + "\n")  # type: ignore[arg-type]
    (row,) = prep.load_rows(path)
    assert row["source_id"] == "7"  # numeric ids become strings so that grouping compares like with like


def test_split_keeps_each_question_in_one_part_and_dev_out_of_training() -> None:
    rows = [_row(i * 4 + m, f"q{i}") for i in range(50) for m in range(4)]
    rows[0]["in_dev_set"] = True  # one answer to q0 is a dev row: the other three answers to q0 go nowhere
    splits = prep.split_rows(rows, validation_fraction=0.2, heldout_fraction=0.1, seed=3)
    parts = {"train": splits.train, "validation": splits.validation, "heldout": splits.heldout}
    groups = {name: {r["source_id"] for r in part} for name, part in parts.items()}
    for a, b in itertools.combinations(groups, 2):
        assert not groups[a] & groups[b], (a, b)
    assert "q0" not in set().union(*groups.values())
    assert [r["id"] for r in splits.dev] == ["r0"]
    assert sorted(r["id"] for r in splits.dev_siblings) == ["r1", "r2", "r3"]
    assert (len(groups["heldout"]), len(groups["validation"]), len(groups["train"])) == (5, 10, 34)
    again = prep.split_rows(rows, validation_fraction=0.2, heldout_fraction=0.1, seed=3)
    assert [r["id"] for r in again.train] == [r["id"] for r in splits.train]
    other = prep.split_rows(rows, validation_fraction=0.2, heldout_fraction=0.1, seed=4)
    assert {r["source_id"] for r in other.heldout} != groups["heldout"]
    summary = splits.summary()
    assert summary["train"]["questions"] == 34
    assert summary["dev_siblings_excluded"] == 3


def test_split_rejects_fractions_that_leave_no_training_part() -> None:
    with pytest.raises(ValueError, match="fraction"):
        prep.split_rows([_row(1, "a")], validation_fraction=0.5, heldout_fraction=0.5)


def test_examples_read_the_runtime_context_segment() -> None:
    row = _row(1, "a", spans=[{"start": 14, "end": 23}, {"start": 0, "end": 3}])
    (example,) = prep.examples_from_rows([row])
    assert example.context == context_segment(row["question"], row["contexts"])
    assert example.spans == ((0, 3), (14, 23))
    assert example.hallucinated
    assert example.origin == "ragtruth"


def test_token_labels_ignore_context_and_special_tokens_and_mark_overlapping_answer_tokens() -> None:
    #          [CLS]    ctx      ctx      [SEP]    "The"   " answer" " is"     " forty"  "-two"    [SEP]
    # (empty)
    offsets = [
        (0, 0),
        (0, 7),
        (8, 11),
        (0, 0),
        (0, 3),
        (4, 10),
        (11, 13),
        (14, 19),
        (19, 23),
        (0, 0),
        (23, 23),
    ]
    seq_ids = [None, 0, 0, None, 1, 1, 1, 1, 1, None, 1]
    # One span covering "forty", one ending exactly where "is" starts (touching is not overlapping).
    labels = prep.token_labels(offsets, seq_ids, [(16, 17), (10, 11)])
    ig = prep.IGNORE
    assert labels == [ig, ig, ig, ig, 0, 0, 0, 1, 0, ig, ig]
    assert prep.token_labels(offsets, seq_ids, []) == [ig, ig, ig, ig, 0, 0, 0, 0, 0, ig, ig]
    with pytest.raises(ValueError, match="length"):
        prep.token_labels(offsets, seq_ids[:-1], [])


@pytest.mark.skipif(not DATA.exists(), reason="RAGTruth-QA train file not beside the repo")
def test_the_real_file_splits_without_dev_rows_or_shared_questions_in_training() -> None:
    skipped: dict[str, int] = {}
    rows = prep.load_rows(DATA, skipped)
    assert not skipped
    splits = prep.split_rows(rows)
    assert len(splits.dev) == 120
    dev_groups = {r["source_id"] for r in splits.dev}
    trained = {r["source_id"] for r in splits.train}
    evaluated = {r["source_id"] for r in splits.validation + splits.heldout}
    assert not trained & (dev_groups | evaluated)
    assert not any(r["in_dev_set"] for r in splits.train + splits.validation + splits.heldout)
    assert len(splits.train) + len(splits.validation) + len(splits.heldout) + len(
        splits.dev_siblings
    ) + 120 == len(rows)
