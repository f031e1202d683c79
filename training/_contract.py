"""faithtrace's detector input contract, importable where faithtrace's own dependencies are not installed.

The GPU machine that trains the detector has torch but not opentelemetry or litellm, and cannot download them,
so importing the ``faithtrace`` package there fails. ``inputs.py`` itself needs only the standard library:
where the package cannot be imported, the module is loaded from the repository's source file, so training
always uses the runtime's own :func:`context_segment` and names, never a copy.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

__all__ = ["inputs"]


def _load() -> ModuleType:
    try:
        from faithtrace.judge.detector import inputs
    except ImportError:
        path = Path(__file__).resolve().parents[1] / "src" / "faithtrace" / "judge" / "detector" / "inputs.py"
        spec = importlib.util.spec_from_file_location("_faithtrace_detector_inputs", path)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return inputs


if TYPE_CHECKING:
    from faithtrace.judge.detector import inputs
else:
    inputs = _load()
