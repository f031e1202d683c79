"""faithtrace modules the recipe shares, importable where faithtrace's own dependencies are not installed.

The GPU machine that trains the detector has torch but not opentelemetry or litellm, and cannot download them,
so importing the ``faithtrace`` package there fails. The modules used here need only the standard library:
where the package cannot be imported, each is loaded from the repository's source file. Either way training
uses the runtime's own input contract (:func:`context_segment`, the ONNX names) and ``faithtrace eval``'s own
metrics, never a copy.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

__all__ = ["inputs", "metrics"]

_SRC = Path(__file__).resolve().parents[1] / "src"


def _load(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        path = _SRC.joinpath(*name.split(".")).with_suffix(".py")
        spec = importlib.util.spec_from_file_location(f"_training_{name.replace('.', '_')}", path)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        # Registered before it runs: dataclasses look their module up in sys.modules.
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module


if TYPE_CHECKING:
    from faithtrace.cli import metrics
    from faithtrace.judge.detector import inputs
else:
    inputs = _load("faithtrace.judge.detector.inputs")
    metrics = _load("faithtrace.cli.metrics")
