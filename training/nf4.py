"""4-bit NormalFloat with double-quantised scales: how the base weights and the trained changes travel.

Only numpy: the test suite checks the error bounds without torch or safetensors (see training/pack_base.py for
the files these arrays go into).
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["GROUP", "MIN_PACKED", "NF4", "SCALE_GROUP", "dequantise", "fingerprint", "quantise"]

GROUP = 64
SCALE_GROUP = 256
# Tensors smaller than this stay fp16: they are a rounding error of the size and carry LayerNorm/bias detail.
MIN_PACKED = 65536
NF4 = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)
_MIDPOINTS = (NF4[1:] + NF4[:-1]) / 2


def quantise(name: str, weight: np.ndarray) -> dict[str, np.ndarray]:
    """4-bit NormalFloat codes (two per byte) and their scales, themselves stored in 8 bits.

    One absmax scale per :data:`GROUP` weights; the scales are quantised again (QLoRA's "double
    quantisation"), in 8 bits against one fp32 maximum per :data:`SCALE_GROUP` scales and rounded up, so no
    weight is clipped: 1.6 MiB less to carry for mpnet-base.
    """
    groups = weight.astype(np.float32).reshape(-1, GROUP)
    scales = np.abs(groups).max(axis=1)
    scales[scales == 0] = np.float32(1e-12)
    padded = np.pad(scales, (0, -len(scales) % SCALE_GROUP), constant_values=scales.max())
    top = padded.reshape(-1, SCALE_GROUP).max(axis=1)
    ratio = padded.reshape(-1, SCALE_GROUP) / top[:, None]
    scale_codes = np.clip(np.ceil(ratio * 255), 1, 255).astype(np.uint8)
    # The scale actually used is the one rebuilt from its code: weights are coded against what unpacking sees.
    used = (scale_codes.astype(np.float32) / 255 * top[:, None]).reshape(-1)[: len(scales)]
    codes = np.searchsorted(_MIDPOINTS, groups / used[:, None]).astype(np.uint8).reshape(-1)
    return {
        f"{name}.q": (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8),
        f"{name}.s": scale_codes.reshape(-1)[: len(scales)],
        f"{name}.m": top.astype(np.float32),
    }


def dequantise(stored: dict[str, np.ndarray], name: str, shape: list[int]) -> np.ndarray:
    packed, scale_codes, top = stored[f"{name}.q"], stored[f"{name}.s"], stored[f"{name}.m"]
    codes = np.empty(packed.size * 2, dtype=np.uint8)
    codes[0::2] = packed & 0x0F
    codes[1::2] = packed >> 4
    padded = np.pad(scale_codes, (0, -len(scale_codes) % SCALE_GROUP), constant_values=255)
    scales = (padded.reshape(-1, SCALE_GROUP).astype(np.float32) / 255 * top[:, None]).reshape(-1)
    values = NF4[codes].reshape(-1, GROUP) * scales[: len(scale_codes), None]
    return values.reshape(shape)


def fingerprint(tensors: dict[str, np.ndarray], names: list[str]) -> str:
    """A sha256 over the named tensors, to prove two machines rebuild changes on the same weights."""
    digest = hashlib.sha256()
    for name in sorted(names):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(tensors[name], dtype=np.float32).tobytes())
    return digest.hexdigest()
