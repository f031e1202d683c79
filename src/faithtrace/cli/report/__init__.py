"""The HTML report of an evaluation run: one self-contained file that opens offline.

Jinja2 renders it with autoescaping on, so that every text from the data (answers, contexts, claims, reasons,
ids) reaches the page as text, never as markup. The page has no external resource: the plots are inline SVG
from matplotlib, the style and the small filter script are inline, and a Content-Security-Policy allows
nothing else (no request of any kind, and no script but the page's own, by its hash). Needs the ``report``
extra (``pip install 'faithtrace[report]'``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from faithtrace.cli.figures import DEFAULT_REPORT_ANSWERS
from faithtrace.cli.report import plots
from faithtrace.cli.report.answers import worst_first

__all__ = ["render_report", "write_report"]


def _asset(name: str) -> str:
    return resources.files("faithtrace.cli.report").joinpath("templates", name).read_text(encoding="utf-8")


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("faithtrace.cli.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = _fmt
    return env


def _json_for_script(value: Any) -> Markup:
    """JSON that is safe inside a ``<script type="application/json">`` element: no ``</script>`` or ``<!--``
    can end it early, whatever the strings hold."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return Markup(text)


def render_report(
    figures: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    *,
    max_answers: int = DEFAULT_REPORT_ANSWERS,
) -> str:
    """The report's HTML for ``figures`` (``figures.compute``) and the result ``records`` they came from."""
    labels = figures["labels"]
    pass_mark = figures["pass_mark"]
    # Markup (not escaped) only for what this module makes: matplotlib's SVG (its texts escaped by matplotlib;
    # no data text is drawn), our CSS and script, and the escaped JSON. The data reach the page through the
    # template, escaped.
    svg = {"histogram": Markup(plots.histogram(figures["scores"], pass_mark))}
    if labels is not None and labels["roc"] is not None:
        svg["roc"] = Markup(plots.roc(labels))
        svg["pr"] = Markup(plots.precision_recall(labels))
    if labels is not None:
        svg["sweep"] = Markup(plots.sweep(labels))
    script = _asset("report.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    answers = worst_first(records, max_answers)
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            figures=figures,
            figures_json=_json_for_script(figures),
            answers=answers,
            answers_total=len(records),
            pass_mark=pass_mark,
            svg=svg,
            style=Markup(_asset("report.css")),
            script=Markup(script),
            script_hash=f"sha256-{digest}",
            generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        )
    )


def write_report(
    path: Path,
    figures: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    *,
    max_answers: int = DEFAULT_REPORT_ANSWERS,
) -> None:
    """Render the report and write it to ``path`` (replaced whole: a reader never sees half a file)."""
    html = render_report(figures, records, max_answers=max_answers)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(html, encoding="utf-8")
    partial.replace(path)
