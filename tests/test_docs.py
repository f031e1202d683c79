"""The documentation: a short README whose example is tested, and an API reference by public names.

(`make test` builds the site with ``mkdocs build --strict`` and runs the pages' snippets: docs/conftest.py.)
"""

from __future__ import annotations

import re
import tomllib
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


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


def test_the_readme_fits_on_two_screens() -> None:
    """What a visitor needs and links into docs/; everything else lives in the docs."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 150, f"README.md has {len(lines)} lines: move the new content into docs/"


def test_the_readme_example_is_the_one_the_docs_run() -> None:
    """The README's snippets are not run themselves: each must be one the docs' snippet tests run."""
    readme = _python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    skipped = re.sub(r"<!-- skip: next -->\n```python\n.*?^```$", "", page, flags=re.MULTILINE | re.DOTALL)
    tested = _python_blocks(skipped)
    assert readme
    for block in readme:
        assert block in tested, block


def test_every_readme_link_into_the_repository_resolves() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = [t for t in re.findall(r"\]\(([^)#]+)[^)]*\)", readme) if "://" not in t]
    assert links
    missing = [t for t in links if not (ROOT / t).exists()]
    assert not missing, missing


def test_getting_started_names_every_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    paragraph = page[page.index("Extras: ") :].split("\n\n")[0]
    named = set(re.findall(r"`([a-z]+)`", paragraph))
    missing = set(project["optional-dependencies"]) - named
    assert not missing, f"getting-started.md's Extras paragraph does not name {missing}"
