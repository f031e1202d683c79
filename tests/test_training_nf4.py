"""How the detector's weights travel to and from the GPU machine (training/nf4.py): 4-bit NormalFloat with
8-bit scales. Error bounds checked on numpy arrays; the files around them need the training environment."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training import nf4  # noqa: E402


def _roundtrip(x: np.ndarray) -> np.ndarray:
    return nf4.dequantise(nf4.quantise("w", x), "w", list(x.shape))  # type: ignore[no-any-return]


def test_normal_weights_come_back_within_a_tenth_of_their_spread_at_about_half_a_byte_each() -> None:
    w = (np.random.default_rng(0).standard_normal((768, 1024)) * 0.04).astype(np.float32)
    stored = nf4.quantise("w", w)
    rebuilt = nf4.dequantise(stored, "w", list(w.shape))
    relative = float(np.sqrt(((w - rebuilt) ** 2).mean() / (w**2).mean()))
    assert 0.03 < relative < 0.12
    assert sum(a.nbytes for a in stored.values()) / w.size < 0.52
    # Packing is deterministic: the GPU machine and this one rebuild the same start.
    again = nf4.quantise("w", w)
    assert all(np.array_equal(stored[k], again[k]) for k in stored)


def test_no_weight_is_clipped_and_an_outlier_keeps_its_value() -> None:
    w = (np.random.default_rng(1).standard_normal((64, 512)) * 0.02).astype(np.float32)
    w[3, 7] = 1.5  # an outlier far beyond its neighbours, and beyond every other group's scale
    w[40, 0:64] = 0.0  # an all-zero group
    rebuilt = _roundtrip(w)
    assert rebuilt[3, 7] == pytest.approx(1.5, rel=1e-6)
    assert np.all(rebuilt[40, 0:64] == 0)
    assert np.all(np.abs(rebuilt) <= np.abs(w).max() * (1 + 1e-6))
    # Each group's largest weight is rebuilt at least as large: its scale was rounded up, never down.
    group_max = np.abs(w).reshape(-1, nf4.GROUP).max(axis=1)
    assert np.all(np.abs(rebuilt).reshape(-1, nf4.GROUP).max(axis=1) >= group_max * (1 - 1e-6))


def test_changes_travel_with_an_error_relative_to_the_change_not_to_the_weight() -> None:
    rng = np.random.default_rng(2)
    start = (rng.standard_normal((256, 768)) * 0.04).astype(np.float32)
    trained = start + (rng.standard_normal(start.shape) * 0.001).astype(np.float32)
    rebuilt = start + _roundtrip(trained - start)
    change_error = float(np.sqrt(((rebuilt - trained) ** 2).mean() / ((trained - start) ** 2).mean()))
    assert change_error < 0.12
    weight_error = float(np.sqrt(((rebuilt - trained) ** 2).mean() / (trained**2).mean()))
    assert weight_error < 0.005
    assert np.array_equal(start + _roundtrip(np.zeros_like(start)), start)


def test_the_fingerprint_tells_two_starts_apart() -> None:
    a = {"x": np.ones((64, 64), dtype=np.float32), "y": np.zeros(3, dtype=np.float32)}
    b = {"x": a["x"].copy(), "y": np.ones(3, dtype=np.float32)}
    assert nf4.fingerprint(a, ["x"]) == nf4.fingerprint(b, ["x"])  # only the named tensors count
    b["x"][5, 5] = np.float32(1.0001)
    assert nf4.fingerprint(a, ["x"]) != nf4.fingerprint(b, ["x"])
