"""The cached route's store of frozen-layer outputs (training/cache_store.py): resumable shards, fp16 values
read back in the examples' order, and a refusal whenever the cache does not hold exactly what is asked for.

Pure numpy: the recipe's torch half (training/cached.py) checks itself against the full model before it
trains (``CachedRoute._check``), and ``training/run.sh --cpu-partial`` runs it end to end
(training/README.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from training import cache_store, prep  # noqa: E402
from training.cache_store import SHARD_EXAMPLES, CacheError, Store, example_key  # noqa: E402

HIDDEN = 8
IDENTITY = {"base_weights_sha256": "abc", "max_length": 512, "seed": 13}


def _examples(n: int) -> list[list[int]]:
    return [[0, *range(i, i + 3 + i % 5), 2] for i in range(n)]


def _outputs(ids: list[int], level: int) -> np.ndarray:
    # A different, recognisable value per example, token and layer.
    return np.array([[t + level / 100 + h / 1000 for h in range(HIDDEN)] for t in ids], dtype=np.float32)


def _fill(store: Store, part: str, examples: list[list[int]], shards: list[int] | None = None) -> None:
    keys = [example_key(e) for e in examples]
    for shard in shards if shards is not None else range(store.shards(len(examples))):
        chunk = examples[shard * SHARD_EXAMPLES : (shard + 1) * SHARD_EXAMPLES]
        outputs = {level: [_outputs(e, level) for e in chunk] for level in store.levels}
        store.write_shard(part, shard, keys[shard * SHARD_EXAMPLES : (shard + 1) * SHARD_EXAMPLES], outputs)


def test_outputs_come_back_per_example_in_order_at_each_layer(tmp_path: Path) -> None:
    examples = _examples(SHARD_EXAMPLES + 7)  # two shards, the second partial
    store = Store(tmp_path, IDENTITY, [10, 8])
    assert store.levels == [8, 10]
    _fill(store, "train", examples)
    keys = [example_key(e) for e in examples]
    for level in (8, 10):
        got = Store(tmp_path, IDENTITY, [8]).read("train", level, keys)
        assert len(got) == len(examples)
        for ids, hidden in zip(examples, got, strict=True):
            assert hidden.dtype == np.float16
            np.testing.assert_allclose(hidden, _outputs(ids, level), rtol=1e-3)


def test_an_interrupted_cache_resumes_at_the_first_missing_shard(tmp_path: Path) -> None:
    examples = _examples(3 * SHARD_EXAMPLES)
    keys = [example_key(e) for e in examples]
    store = Store(tmp_path, IDENTITY, [8])
    _fill(store, "train", examples, shards=[0])
    # A shard whose arrays were written but whose index was not (killed in between) does not count.
    (tmp_path / "train" / "00001.L8.npy").write_bytes(b"partial")
    done = [
        s
        for s in range(3)
        if store.has_shard("train", s, keys[s * SHARD_EXAMPLES : (s + 1) * SHARD_EXAMPLES])
    ]
    assert done == [0]
    with pytest.raises(CacheError, match="incomplete"):
        store.read("train", 8, keys)
    _fill(store, "train", examples, shards=[1, 2])
    assert len(store.read("train", 8, keys)) == len(examples)


def test_other_examples_are_refused_not_misaligned(tmp_path: Path) -> None:
    examples = _examples(10)
    store = Store(tmp_path, IDENTITY, [8])
    _fill(store, "validation", examples)
    reordered = [example_key(e) for e in reversed(examples)]
    with pytest.raises(CacheError, match="other examples"):
        store.read("validation", 8, reordered)
    assert not store.has_shard("validation", 0, reordered)  # so the cache phase rewrites it
    with pytest.raises(CacheError, match="not 11"):
        store.read("validation", 11, [example_key(e) for e in examples])


def test_a_cache_of_another_model_or_data_is_refused_as_a_whole(tmp_path: Path) -> None:
    Store(tmp_path, IDENTITY, [8, 10])
    with pytest.raises(CacheError, match="differs in base_weights_sha256"):
        Store(tmp_path, {**IDENTITY, "base_weights_sha256": "other"}, [8])
    with pytest.raises(CacheError, match=r"caches layers \[8, 10\], not \[11\]"):
        Store(tmp_path, IDENTITY, [11])


def test_values_fp16_cannot_hold_are_refused(tmp_path: Path) -> None:
    store = Store(tmp_path, IDENTITY, [8])
    bad = np.full((3, HIDDEN), 1e6, dtype=np.float32)
    with pytest.raises(ValueError, match="fp16"):
        store.write_shard("train", 0, [example_key([1, 2, 3])], {8: [bad]})
    nan = np.full((3, HIDDEN), np.nan, dtype=np.float32)
    with pytest.raises(ValueError, match="fp16"):
        store.write_shard("train", 0, [example_key([1, 2, 3])], {8: [nan]})
    assert not (tmp_path / "train" / "00000.json").exists()


def test_costs_are_kept_beside_the_outputs(tmp_path: Path) -> None:
    store = Store(tmp_path, IDENTITY, [8])
    store.record_cost("train", {"seconds": 12.5, "tokens": 1000})
    assert Store(tmp_path, IDENTITY, [8]).costs() == {"train": {"seconds": 12.5, "tokens": 1000}}
    assert json.loads((tmp_path / cache_store.MANIFEST).read_text())["levels"] == [8]


def test_example_keys_tell_token_sequences_apart() -> None:
    assert example_key([0, 5, 2]) == example_key([0, 5, 2])
    assert example_key([0, 5, 2]) != example_key([0, 2, 5])
    assert example_key([0, 5]) != example_key([0, 5, 1])


def test_prep_ids_names_exactly_one_part_of_the_splits(tmp_path: Path) -> None:
    rows = [
        {
            "id": f"r{i}",
            "source_id": f"q{i // 3}",
            "question": "q?",
            "contexts": ["c"],
            "answer": "a.",
            "spans": [],
            "in_dev_set": i == 0,
        }
        for i in range(90)
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "ids.json"
    cmd = [sys.executable, "-m", "training.prep", "ids", "--data", str(data), "--part", "heldout"]
    subprocess.run([*cmd, "--out", str(out)], cwd=ROOT, check=True)
    doc = json.loads(out.read_text())
    expected = prep.split_rows(prep.load_rows(data)).heldout
    assert doc["row_ids"] == [r["id"] for r in expected]
    assert doc["row_ids"]
    assert "heldout" in doc["subset"]
