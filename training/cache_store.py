"""The frozen lower layers' outputs on disk: fp16 shards, resumable, tied to the examples they were made from.

Training only the top layers of the encoder on a CPU pays for the frozen lower layers once: their output for
every example is computed a single time and kept here, then read back every epoch. One shard holds
:data:`SHARD_EXAMPLES` consecutive examples of one part (``train``, ``validation``...), their tokens
concatenated, one ``.npy`` file per cached layer. A shard's index (its examples' keys and lengths) is written
after its arrays and renamed into place, so a cache cut short by a crash or a kill resumes at the first shard
without an index, and a shard is either whole or absent.

Each example's key is a hash of its token ids, so reading checks that the cache holds exactly the examples
asked for, in order: data prepared with other settings, or a different tokenizer, is refused rather than
trained on misaligned rows. ``cache.json`` names what the outputs were computed from (the base weights, the
layers, the data settings); a cache made from anything else is refused as a whole.

Only numpy: the test suite checks these rules without torch.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SHARD_EXAMPLES", "CacheError", "Store", "example_key"]

SHARD_EXAMPLES = 64
MANIFEST = "cache.json"
# fp16 holds values up to 65504; a LayerNorm output is far below that, and anything else means a broken model.
_FP16_LIMIT = 60000.0


class CacheError(Exception):
    """The cache cannot serve this request: another model or data, or an incomplete part."""


def example_key(ids: Sequence[int]) -> str:
    """A short, stable name of one example's token ids."""
    return hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()[:20]


def _write_atomic(path: Path, write: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        write(f)
    os.replace(tmp, path)


class Store:
    """One cache folder: ``identity`` says what every output in it was computed from."""

    def __init__(self, root: Path, identity: Mapping[str, Any], levels: Sequence[int]) -> None:
        self.root = root
        self.levels = sorted(set(levels))
        self.identity = dict(identity)
        path = root / MANIFEST
        if path.exists():
            found = json.loads(path.read_text())
            if found["identity"] != self.identity:
                changed = sorted(
                    k
                    for k in set(found["identity"]) | set(self.identity)
                    if found["identity"].get(k) != self.identity.get(k)
                )
                raise CacheError(
                    f"{root} holds outputs of another model or data (differs in {', '.join(changed)}): "
                    "use another cache folder or delete this one"
                )
            self.levels = list(found["levels"])
            missing = sorted(set(levels) - set(self.levels))
            if missing:
                raise CacheError(f"{root} caches layers {self.levels}, not {missing}")
        else:
            root.mkdir(parents=True, exist_ok=True)
            doc = {"identity": self.identity, "levels": self.levels, "costs": {}}
            path.write_text(json.dumps(doc, indent=1) + "\n")

    # --- writing -----------------------------------------------------------------------------------------

    def _index_path(self, part: str, shard: int) -> Path:
        return self.root / part / f"{shard:05d}.json"

    def _array_path(self, part: str, shard: int, level: int) -> Path:
        return self.root / part / f"{shard:05d}.L{level}.npy"

    def shards(self, n_examples: int) -> int:
        return (n_examples + SHARD_EXAMPLES - 1) // SHARD_EXAMPLES

    def has_shard(self, part: str, shard: int, keys: Sequence[str]) -> bool:
        """Whether this shard is complete and holds exactly ``keys`` (a stale one is rewritten)."""
        path = self._index_path(part, shard)
        if not path.exists():
            return False
        return bool(json.loads(path.read_text())["keys"] == list(keys))

    def write_shard(
        self, part: str, shard: int, keys: Sequence[str], outputs: Mapping[int, Sequence[np.ndarray]]
    ) -> None:
        """Store one shard: ``outputs[level]`` is one ``[tokens, hidden]`` array per example, in key order."""
        if set(outputs) != set(self.levels):
            raise ValueError(f"a shard needs every cached layer {self.levels}, got {sorted(outputs)}")
        lengths = [int(a.shape[0]) for a in outputs[self.levels[0]]]
        if len(lengths) != len(keys):
            raise ValueError("one output per key")
        (self.root / part).mkdir(parents=True, exist_ok=True)
        for level in self.levels:
            arrays = outputs[level]
            if [int(a.shape[0]) for a in arrays] != lengths:
                raise ValueError("every layer's outputs must have the examples' lengths")
            joined = np.concatenate(arrays, axis=0)
            peak = float(np.abs(joined).max()) if joined.size else 0.0
            if not np.isfinite(peak) or peak > _FP16_LIMIT:
                raise ValueError(f"layer {level} outputs reach {peak}: not storable in fp16")
            half = joined.astype(np.float16)
            _write_atomic(self._array_path(part, shard, level), lambda f, a=half: np.save(f, a))
        index = json.dumps({"keys": list(keys), "lengths": lengths}).encode()
        _write_atomic(self._index_path(part, shard), lambda f: f.write(index))

    def record_cost(self, part: str, cost: Mapping[str, Any]) -> None:
        """What computing a part cost (seconds, tokens, machine load), kept beside the outputs."""
        path = self.root / MANIFEST
        doc = json.loads(path.read_text())
        doc["costs"][part] = dict(cost)
        path.write_text(json.dumps(doc, indent=1) + "\n")

    def costs(self) -> dict[str, Any]:
        costs: dict[str, Any] = json.loads((self.root / MANIFEST).read_text())["costs"]
        return costs

    # --- reading -----------------------------------------------------------------------------------------

    def read(self, part: str, level: int, keys: Sequence[str]) -> list[np.ndarray]:
        """Each example's ``[tokens, hidden]`` fp16 outputs at ``level``, memory-mapped, in ``keys`` order."""
        if level not in self.levels:
            raise CacheError(f"{self.root} caches layers {self.levels}, not {level}")
        out: list[np.ndarray] = []
        for shard in range(self.shards(len(keys))):
            want = list(keys[shard * SHARD_EXAMPLES : (shard + 1) * SHARD_EXAMPLES])
            path = self._index_path(part, shard)
            if not path.exists():
                raise CacheError(f"{self.root}: {part} is incomplete (no shard {shard}): run the cache phase")
            index = json.loads(path.read_text())
            if index["keys"] != want:
                raise CacheError(
                    f"{self.root}: {part} shard {shard} holds other examples than the data prepared now "
                    "(another split, seed or tokenizer): use another cache folder or delete this one"
                )
            joined = np.load(self._array_path(part, shard, level), mmap_mode="r")
            bounds = np.cumsum([0, *index["lengths"]])
            if joined.shape[0] != bounds[-1]:
                raise CacheError(f"{self.root}: {part} shard {shard} is damaged ({joined.shape[0]} tokens)")
            out.extend(joined[a:b] for a, b in itertools.pairwise(bounds))
        return out
