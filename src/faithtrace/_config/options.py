"""The option table's API: every option model and every environment read goes through here.

The option models (``SamplingOptions``, ``CaptureOptions``, ``WorkerOptions``, ``JudgeSettings``,
``ScoringOptions``) take their defaults, bounds and docstrings from the table in ``table``
(``field``, ``docstring``); ``build_settings`` and the models' ``from_env`` read the environment with
``env_values``; the embedded judge reads its variables with ``read``; the docs' configuration table is
generated from it (``python -m faithtrace._config.doc``). Nothing else parses ``FAITHTRACE_*`` or ``OTEL_*``
variables.

An invalid environment value logs one warning and falls back to the default: an ops typo must never take a
service down. An invalid explicit argument is a programming error and raises (pydantic's validation, with the
same bounds).

Adding an option: one ``Option`` in ``table.OPTIONS_LIST`` (its group is the model it belongs to);
on the model, ``name: type = field("group.name")``; a ``configure()`` argument of its own is read with
``resolve("configure.name", argument, environ)`` in ``build_settings``, an env-only option with ``read``;
then ``python -m faithtrace._config.doc --write`` updates docs/configuration.md (a test fails until it does).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any, Final

from pydantic import Field

from faithtrace._common.errors import ConfigError
from faithtrace._config.option import UNSET, Option
from faithtrace._config.table import OPTIONS_LIST

logger = logging.getLogger("faithtrace")

OPTIONS: Final[dict[str, Option]] = {o.key: o for o in OPTIONS_LIST}

# Where each group's options live, for docs: the option model, or where an env-only option is read.
GROUPS: Final = {
    "configure": "configure()",
    "judge": "JudgeSettings",
    "scoring": "ScoringOptions",
    "sampling": "SamplingOptions",
    "capture": "CaptureOptions",
    "worker": "WorkerOptions",
    "otel": "OTLP exporters faithtrace sets up (environment only)",
    "local_judge": "the embedded judge (environment only)",
    "serve": "faithtrace serve",
}


def group(name: str) -> Iterator[Option]:
    return (o for o in OPTIONS_LIST if o.group == name)


def field(key: str) -> Any:
    """The pydantic field of option ``key``: its default and bounds, from the table."""
    o = OPTIONS[key]
    if o.default_factory is not None:
        return Field(default_factory=o.default_factory, ge=o.ge, gt=o.gt, le=o.le, description=o.doc)
    # validate_default: a default written as a plain value ("penalize") becomes the field's type (an enum).
    return Field(default=o.default, ge=o.ge, gt=o.gt, le=o.le, description=o.doc, validate_default=True)


def _from_env(o: Option, env: Mapping[str, str]) -> Any:
    """The value of ``o`` in ``env``; UNSET when not set, or set but invalid (which warns)."""
    for name in o.env:
        raw = env.get(name)
        if raw is None or not raw.strip():
            continue
        try:
            value = o.parse(raw.strip())
            problem = o.check(value)
        except (ValueError, TypeError) as exc:
            problem = str(exc)
        if problem is None:
            return value
        logger.warning(
            "faithtrace: ignoring %s=%r (%s); using the default %r", name, raw, problem, o.default_value()
        )
        return UNSET
    return UNSET


def env_values(group_name: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The valid values the environment sets for the options of ``group_name``, by field name."""
    env = os.environ if environ is None else environ
    found = {}
    for o in group(group_name):
        value = _from_env(o, env)
        if value is not UNSET:
            found[o.name] = value
    return found


def values(group_name: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every option of ``group_name``: from the environment, else its default (groups no model holds)."""
    found = {o.name: o.default_value() for o in group(group_name)}
    found.update(env_values(group_name, environ))
    return found


def read(key: str, environ: Mapping[str, str] | None = None) -> Any:
    """Option ``key`` from the environment, else its default."""
    o = OPTIONS[key]
    value = _from_env(o, os.environ if environ is None else environ)
    return o.default_value() if value is UNSET else value


def resolve(key: str, explicit: Any, environ: Mapping[str, str] | None = None) -> Any:
    """A ``configure()`` argument for option ``key``: the explicit value (checked against the table's bounds
    and choices; ``ConfigError`` when it fails), or when None the environment's value, else the default."""
    if explicit is None:
        return read(key, environ)
    problem = OPTIONS[key].check(explicit)
    if problem is not None:
        raise ConfigError(f"{OPTIONS[key].name}: {problem}, got {explicit!r}")
    return explicit


def default(key: str) -> Any:
    """Option ``key``'s default, as the table writes it (for code that needs it outside a model)."""
    return OPTIONS[key].default_value()


def local_defaults(group_name: str) -> dict[str, Any]:
    """The defaults that differ with the embedded local judge, by field name."""
    return {o.name: o.local_default for o in group(group_name) if o.local_default is not UNSET}


def shown_default(o: Option) -> str:
    """The default as docs show it."""
    if o.shown_default is not None:
        text = o.shown_default
    elif o.default is None:
        text = "—"
    elif isinstance(o.default, bool):
        text = str(o.default).lower()
    elif isinstance(o.default, float):
        text = f"{o.default:g}"
    else:
        text = str(o.default)
    if o.local_default is not UNSET:
        text += f" ({o.local_default:g} with the embedded judge)"
    return text


def docstring(summary: str, group_name: str) -> str:
    """A model's docstring: ``summary`` and an Args section generated from the table."""
    lines = [summary, "", "Args:"]
    for o in group(group_name):
        env = f" Env: {', '.join(o.env)}." if o.env else ""
        lines.append(f"    {o.name}: {o.doc}{env} Default: {shown_default(o)}.")
    return "\n".join(lines)
