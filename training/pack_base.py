"""Shrink a base model folder to travel to the GPU machine in one call, and rebuild it there in fp32.

What one call to the GPU machine carries is capped at 64 MiB, and all-mpnet-base-v2 is 438 MB in fp32 (110 MB
even at int8 per row). Packed here: each large 2-D weight in 4-bit NormalFloat (the 16 levels QLoRA uses for
normally distributed weights) with one 8-bit scale per 64 weights (``training.nf4``), everything else in
fp16: 54.5 MiB. The
unpacked weights are the start of fine-tuning, not the shipped model, and every weight is then trained in
fp32; ``measure`` reports what packing costs before any training (weight error and sentence-embedding cosine
against the original on real answers).

    python -m training.pack_base pack BASE_DIR PACKED_DIR
    python -m training.pack_base unpack PACKED_DIR BASE_DIR
    python -m training.pack_base measure BASE_DIR PACKED_DIR --data FILE
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from training.fetch_base import BASES, sha256_file
from training.nf4 import GROUP, MIN_PACKED, dequantise, fingerprint, quantise

_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def pack(base: Path, out: Path) -> None:
    tensors = load_file(str(base / "model.safetensors"))
    stored: dict[str, np.ndarray] = {}
    manifest: dict[str, Any] = {"group": GROUP, "code": "nf4", "tensors": {}}
    for name, tensor in tensors.items():
        if tensor.ndim == 2 and tensor.size >= MIN_PACKED and tensor.size % GROUP == 0:
            stored.update(quantise(name, tensor))
            manifest["tensors"][name] = {"shape": list(tensor.shape), "packed": True}
        else:
            stored[name] = tensor.astype(np.float16)
            manifest["tensors"][name] = {"shape": list(tensor.shape), "packed": False}
    out.mkdir(parents=True, exist_ok=True)
    save_file(stored, str(out / "packed.safetensors"))
    weights_sha = sha256_file(base / "model.safetensors")
    known = {b.weights_sha256: b for b in BASES.values()}
    manifest["source"] = {
        "name": known[weights_sha].name if weights_sha in known else base.name,
        "weights_sha256": weights_sha,
        "packed_sha256": sha256_file(out / "packed.safetensors"),
    }
    for name in _FILES:
        if (base / name).exists():
            shutil.copy(base / name, out / name)
    (out / "pack.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"packed {len(tensors)} tensors into {out}: {size / 2**20:.1f} MiB")


def unpack(packed_dir: Path, out: Path) -> None:
    manifest = json.loads((packed_dir / "pack.json").read_text())
    got = sha256_file(packed_dir / "packed.safetensors")
    if got != manifest["source"]["packed_sha256"]:
        sys.exit(f"packed weights damaged in transit: sha256 {got} != {manifest['source']['packed_sha256']}")
    stored = load_file(str(packed_dir / "packed.safetensors"))
    tensors: dict[str, np.ndarray] = {}
    for name, info in manifest["tensors"].items():
        if info["packed"]:
            tensors[name] = dequantise(stored, name, info["shape"])
        else:
            tensors[name] = stored[name].astype(np.float32)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    for name in _FILES:
        if (packed_dir / name).exists():
            shutil.copy(packed_dir / name, out / name)
    # What the trained model's detector.json names as its base: the original weights, and how they travelled.
    (out / "detector-base.json").write_text(
        json.dumps(
            {
                "name": manifest["source"]["name"],
                "weights_sha256": manifest["source"]["weights_sha256"],
                "packed_sha256": manifest["source"]["packed_sha256"],
                "transport": f"4-bit NormalFloat, groups of {manifest['group']}, 8-bit scales "
                "(training/pack_base.py)",
            },
            indent=1,
        )
        + "\n"
    )
    print(f"unpacked {len(tensors)} tensors into {out}")


def measure(base: Path, packed_dir: Path, data: Path, n: int) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    original = load_file(str(base / "model.safetensors"))
    with_loss = Path(packed_dir.parent / (packed_dir.name + ".unpacked"))
    unpack(packed_dir, with_loss)
    rebuilt = load_file(str(with_loss / "model.safetensors"))
    num = sum(float(((original[k] - rebuilt[k]) ** 2).sum()) for k in original)
    den = sum(float((original[k] ** 2).sum()) for k in original)
    print(f"weights: relative RMS error {np.sqrt(num / den):.4f}")
    texts = [json.loads(line)["answer"] for line in data.open()][:n]
    tok = AutoTokenizer.from_pretrained(str(base))
    batch = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    embeddings = []
    for folder in (base, with_loss):
        model = AutoModel.from_pretrained(str(folder)).eval()
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        embeddings.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1))
    cosine = (embeddings[0] * embeddings[1]).sum(-1)
    print(
        f"mean-pooled embeddings of {len(texts)} answers, original vs packed: "
        f"cosine mean {cosine.mean():.4f}, "
        f"min {cosine.min():.4f}"
    )
    shutil.rmtree(with_loss)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=("pack", "unpack", "measure"))
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--data", type=Path)
    parser.add_argument("-n", type=int, default=64)
    args = parser.parse_args(argv)
    if args.action == "pack":
        pack(args.source, args.target)
    elif args.action == "unpack":
        unpack(args.source, args.target)
    else:
        measure(args.source, args.target, args.data, args.n)


if __name__ == "__main__":
    main()


# --- the trained weights' way back ---------------------------------------------------------------------
# What comes back from the GPU machine is capped too (16 MiB a file, 64 MiB a call), and the trained model is
# 110 MB even in int8. Fine-tuning moves each weight a little from where it started, and the start (the
# unpacked base) is rebuilt bit for bit here from the packed base. So large weights travel as 4-bit
# NormalFloat *changes* from that start (their error is a fraction of the change, not of the weight); small
# tensors (LayerNorm, biases, the new classifier head) travel whole in fp32. The GPU run measures the model
# rebuilt this way on its validation part before it returns, and the ONNX figures are computed again here,
# from the rebuilt model.

SHARD_BYTES = 15 * 2**20


def save_transfer(
    state: dict[str, np.ndarray],
    reference: dict[str, np.ndarray] | None,
    out: Path,
    extra: dict[str, Any],
    *,
    exact: bool = False,
) -> None:
    """Write ``state`` into ``out`` in shards; big tensors as 4-bit changes from ``reference``.

    ``exact``: tensors that equal ``reference`` are named, not stored (the finishing step takes them from the
    same base), and every other tensor is stored whole: for weights trained where they are finished, which
    need not travel.
    """
    out.mkdir(parents=True, exist_ok=True)
    code = "exact" if exact else "nf4-delta"
    manifest: dict[str, Any] = {"group": GROUP, "code": code, "tensors": {}, "shards": [], **extra}
    shard: dict[str, np.ndarray] = {}
    size = 0

    def flush() -> None:
        nonlocal shard, size
        if shard:
            name = f"weights-{len(manifest['shards']):02d}.safetensors"
            save_file(shard, str(out / name))
            manifest["shards"].append({"file": name, "sha256": sha256_file(out / name)})
            shard, size = {}, 0

    for name, tensor in state.items():
        ref = reference.get(name) if reference is not None else None
        stored: dict[str, np.ndarray]
        if exact and ref is not None and np.array_equal(ref, tensor):
            manifest["tensors"][name] = {"shape": list(tensor.shape), "delta": False, "from_base": True}
            continue
        if (
            not exact
            and ref is not None
            and ref.shape == tensor.shape
            and tensor.ndim == 2
            and tensor.size >= MIN_PACKED
            and tensor.size % GROUP == 0
        ):
            stored = quantise(name, tensor.astype(np.float32) - ref.astype(np.float32))
            manifest["tensors"][name] = {"shape": list(tensor.shape), "delta": True}
        else:
            stored = {name: np.ascontiguousarray(tensor)}
            manifest["tensors"][name] = {"shape": list(tensor.shape), "delta": False}
        for key, value in stored.items():
            if size + value.nbytes > SHARD_BYTES:
                flush()
            shard[key] = value
            size += value.nbytes
    flush()
    deltas = [n for n, info in manifest["tensors"].items() if info["delta"] or info.get("from_base")]
    manifest["reference_fingerprint"] = fingerprint(reference, deltas) if reference is not None else None
    (out / "transfer.json").write_text(json.dumps(manifest, indent=1) + "\n")


def load_transfer(
    folder: Path, reference: dict[str, np.ndarray] | None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The state written by :func:`save_transfer`, rebuilt on ``reference``; and the manifest."""
    manifest = json.loads((folder / "transfer.json").read_text())
    want = manifest["reference_fingerprint"]
    deltas = [n for n, info in manifest["tensors"].items() if info["delta"] or info.get("from_base")]
    if want is not None and (reference is None or fingerprint(reference, deltas) != want):
        sys.exit(
            "the base weights here differ from those the model was trained from: unpack the same packed base"
        )
    stored: dict[str, np.ndarray] = {}
    for shard in manifest["shards"]:
        got = sha256_file(folder / shard["file"])
        if got != shard["sha256"]:
            sys.exit(f"{shard['file']} damaged in transit: sha256 {got} != {shard['sha256']}")
        stored.update(load_file(str(folder / shard["file"])))
    state: dict[str, np.ndarray] = {}
    for name, info in manifest["tensors"].items():
        if info.get("from_base"):
            assert reference is not None
            state[name] = reference[name]
        elif info["delta"]:
            assert reference is not None
            delta = dequantise(stored, name, info["shape"])
            state[name] = reference[name].astype(np.float32) + delta
        else:
            state[name] = stored[name]
    return state, manifest
