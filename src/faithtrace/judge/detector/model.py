"""A detector model directory, loaded and verified: ``model.onnx``, ``tokenizer.json`` and ``detector.json``.

``detector.json`` holds at least ``max_length`` (tokens the model reads at once, special tokens included) and
``files``, the sha256 of every file the model is made of (``{"model.onnx": "<hex>", "tokenizer.json": ...}``);
``training/`` writes it with the rest of what the model was trained on.
Every file is hashed at load and compared: a model file swapped or damaged on disk would otherwise score
answers silently wrong. Hashing a 110 MB int8 model takes well under a second, once per process.

onnxruntime and tokenizers come with the ``detector`` extra (no torch at run time): onnxruntime runs the
exported graph on the CPU and releases the GIL while it computes, so the host's threads keep running;
tokenizers reads the very tokenizer the model was trained with and gives each token's character offsets,
which is how flagged tokens become spans of the answer's text.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from faithtrace._common.errors import DetectorError
from faithtrace.judge.detector.inputs import INPUT_NAMES, OUTPUT_NAME

__all__ = ["METADATA_FILE", "MODEL_FILE", "TOKENIZER_FILE", "DetectorModel", "load"]

MODEL_FILE: Final = "model.onnx"
TOKENIZER_FILE: Final = "tokenizer.json"
METADATA_FILE: Final = "detector.json"
INSTALL_HINT: Final = "pip install 'faithtrace[detector]'"
_REQUIRED_FILES: Final = (MODEL_FILE, TOKENIZER_FILE)
_CHUNK: Final = 8 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _metadata(directory: Path) -> dict[str, Any]:
    path = directory / METADATA_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DetectorError(f"{directory} is not a detector model: it has no {METADATA_FILE}") from None
    except (OSError, ValueError) as exc:
        raise DetectorError(f"cannot read {path}: {exc}") from exc
    if not isinstance(meta, dict):
        raise DetectorError(f"{path} must hold a JSON object")
    max_length = meta.get("max_length")
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 16:
        raise DetectorError(f"{path}: max_length must be an integer of at least 16, not {max_length!r}")
    hashes = meta.get("files")
    if not isinstance(hashes, dict) or not all(isinstance(v, str) for v in hashes.values()):
        raise DetectorError(f"{path}: files must map each of the model's files to its sha256 hex digest")
    missing = [name for name in _REQUIRED_FILES if name not in hashes]
    if missing:
        raise DetectorError(f"{path}: files has no sha256 for {', '.join(missing)}")
    return meta


def _verify(directory: Path, hashes: Mapping[str, str]) -> None:
    for name, expected in hashes.items():
        if Path(name).name != name:  # only files of this directory: the metadata names, it does not point
            raise DetectorError(f"{directory / METADATA_FILE}: {name!r} is not a file name")
        path = directory / name
        if not path.is_file():
            raise DetectorError(f"{path} is missing (listed in {METADATA_FILE})")
        actual = _sha256(path)
        if actual != expected.lower():
            raise DetectorError(
                f"{path} does not match its sha256 in {METADATA_FILE} (expected {expected}, found {actual}): "
                "the file was changed or damaged; reinstall or re-export the model"
            )


def _imports() -> tuple[Any, Any]:
    try:
        import onnxruntime
        import tokenizers
    except ImportError as exc:
        raise DetectorError(f"the detector needs onnxruntime and tokenizers: {INSTALL_HINT}") from exc
    return onnxruntime, tokenizers


@dataclass
class DetectorModel:
    """A loaded detector: the ONNX session, its tokenizer and its metadata. Safe to share between threads."""

    directory: Path
    max_length: int
    metadata: dict[str, Any]
    tokenizer: Any
    session: Any
    threads: int
    # onnxruntime allows concurrent run() calls, but on a small CPU two windows computed at once only share
    # the same cores and both finish later; one at a time keeps each evaluation's latency predictable.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        """What the results call this model: the metadata's ``name``, else the directory's."""
        name = self.metadata.get("name")
        return str(name) if name else self.directory.name

    def hallucination_probabilities(self, input_ids: list[int]) -> np.ndarray:
        """P(not supported) for every position of one model input (special tokens and context included)."""
        ids = np.asarray([input_ids], dtype=np.int64)
        feed = {INPUT_NAMES[0]: ids, INPUT_NAMES[1]: np.ones_like(ids)}
        with self._lock:
            (logits,) = self.session.run([OUTPUT_NAME], feed)
        scores = np.asarray(logits, dtype=np.float64)[0]
        # A softmax over two classes is the logistic of their difference (and cannot overflow).
        return np.asarray(1.0 / (1.0 + np.exp(scores[:, 0] - scores[:, 1])), dtype=np.float64)


def load(directory: str | os.PathLike[str], *, threads: int = 1) -> DetectorModel:
    """Load and verify a detector model directory; raises ``DetectorError`` saying what is wrong."""
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise DetectorError(f"detector model directory {path} does not exist")
    meta = _metadata(path)
    _verify(path, meta["files"])
    onnxruntime, tokenizers = _imports()
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(path / TOKENIZER_FILE))
    except Exception as exc:  # tokenizers raises its own Exception subclass for any bad file
        raise DetectorError(f"cannot read {path / TOKENIZER_FILE}: {exc}") from exc
    # The windows are cut here, to the model's length; a truncation or padding saved with the tokenizer
    # would cut the answer or add tokens the offsets do not account for.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # onnxruntime's warnings go to stderr, which is the host's
    try:
        session = onnxruntime.InferenceSession(
            str(path / MODEL_FILE), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime's own exception types
        raise DetectorError(f"cannot load {path / MODEL_FILE}: {exc}") from exc
    inputs = {i.name for i in session.get_inputs()}
    outputs = {o.name for o in session.get_outputs()}
    if not set(INPUT_NAMES) <= inputs or OUTPUT_NAME not in outputs:
        raise DetectorError(
            f"{path / MODEL_FILE} takes {sorted(inputs)} and returns {sorted(outputs)}; a detector takes "
            f"{list(INPUT_NAMES)} and returns {OUTPUT_NAME!r}"
        )
    return DetectorModel(path, meta["max_length"], meta, tokenizer, session, threads)


_loaded: dict[tuple[Path, int], DetectorModel] = {}
_loading = threading.Lock()


def shared(directory: str | os.PathLike[str], *, threads: int = 1) -> DetectorModel:
    """The process's one loaded copy of a model (loading takes a second and its size in memory)."""
    key = (Path(directory).expanduser().resolve(), threads)
    with _loading:
        found = _loaded.get(key)
        if found is None:
            found = _loaded[key] = load(key[0], threads=threads)
        return found
