"""The documentation: the API reference covers the public API by its public names.

(`make test` builds the site with ``mkdocs build --strict`` and runs the pages' snippets: docs/conftest.py.)
"""

from __future__ import annotations

import re
from pathlib import Path

import faithtrace

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_the_reference_documents_every_public_name_by_its_public_path() -> None:
    page = (DOCS / "reference.md").read_text(encoding="utf-8")
    targets = re.findall(r"^::: (\S+)$", page, re.MULTILINE)
    # Through `faithtrace.X` only: the modules behind the names may move without breaking the reference.
    assert all(re.fullmatch(r"faithtrace\.[A-Za-z]\w*", t) for t in targets), targets
    documented = {t.removeprefix("faithtrace.") for t in targets}
    public = set(faithtrace.__all__) - {"__version__"}
    assert documented == public, (public - documented, documented - public)
    assert len(targets) == len(documented), "a name is documented twice"
