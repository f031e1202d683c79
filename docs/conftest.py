"""Runs the Python snippets of these pages as tests, so that no example in the docs rots.

Sybil (not pytest-examples) because a page's snippets build on each other in one namespace (the example
defines ``answer``, the next block calls it), a page can hold hidden set-up (``<!-- invisible-code-block:
python -->``) and a marked skip for a snippet that needs a service the suite does not run for docs, and its
pytest plugin collects the pages with the rest of the suite: ``pytest docs`` or the whole ``make test``.

The judge is the test suite's scripted fake judge (an OpenAI-compatible server on 127.0.0.1, its replies
parsed on faithtrace's real path), named through the ordinary ``FAITHTRACE_JUDGE_*`` variables, and spans
and metrics go to in-memory readers: no network, no API key, no local model.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

# The fake judge lives with the tests; a run of `pytest docs` alone has not put that folder on sys.path.
TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from _fake_judge import MODEL, running_fake_judge  # noqa: E402
from faithtrace._common import safety  # noqa: E402
from faithtrace.testing import FaithtraceCapture, capturing  # noqa: E402

# The pages' snippets run in faithtrace's own strict mode, as its tests do: a faithtrace bug fails the page.
safety.raise_internal_errors = True


@pytest.fixture(scope="module")
def docs_judge() -> Iterator[FaithtraceCapture]:
    """One page: a fake judge in the environment, faithtrace configured with in-memory readers."""
    with running_fake_judge() as fake, pytest.MonkeyPatch.context() as env:
        # The pages' snippets read the environment as an app would: start from a clean one.
        for var in list(os.environ):
            if var.startswith(("FAITHTRACE_", "OTEL_")):
                env.delenv(var)
        env.setenv("FAITHTRACE_JUDGE_MODEL", MODEL)
        env.setenv("FAITHTRACE_JUDGE_API_BASE", fake.base_url + "/v1")
        env.setenv("FAITHTRACE_JUDGE_API_KEY", "x")
        with capturing() as capture:
            yield capture


def check_json(example: Example) -> None:
    """A JSON block must parse; a list of span conventions must be one `faithtrace serve --mapping` takes."""
    from faithtrace.sources.conventions import Convention

    value = json.loads(example.parsed)
    if isinstance(value, list) and all(isinstance(item, dict) and "marker" in item for item in value):
        for item in value:
            Convention.model_validate(item)


pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(), CodeBlockParser(language="json", evaluator=check_json), SkipParser()],
    patterns=["*.md"],
    fixtures=["docs_judge"],
).pytest()
