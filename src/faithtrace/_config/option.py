"""One configuration option as the table in ``table`` declares it, and the parsers env values use."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")


def parse_str(raw: str) -> str:
    return raw


def parse_lower(raw: str) -> str:
    return raw.lower()


def parse_list(raw: str) -> tuple[str, ...]:
    """Items separated by ``;`` (a value may hold commas: Kafka's bootstrap lists do)."""
    return tuple(item.strip() for item in raw.split(";") if item.strip())


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final[Any] = _Unset()


@dataclass(frozen=True)
class Option:
    """One option. ``key`` is ``group.field``; ``env`` lists variables in priority order (first set wins).

    ``parse``, the bounds and ``choices`` check environment values; pydantic checks arguments with the same
    bounds (``options.field``).
    """

    key: str
    doc: str
    default: Any = None
    env: tuple[str, ...] = ()
    parse: Callable[[str], Any] = parse_str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    choices: tuple[str, ...] = ()
    local_default: Any = UNSET  # the default with the embedded local judge, where it differs
    default_factory: Callable[[], Any] | None = None  # a default computed when it is read
    shown_default: str | None = None  # how the docs' table shows the default, where the value would mislead
    shown_name: str | None = None  # how the docs' table names it, where not simply a field or an argument
    metavar: str | None = None  # how a command-line flag's help names its value

    @property
    def group(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split(".", 1)[1]

    @property
    def flag(self) -> str:
        """The command-line flag: the name in dashes, without the ``_s`` of seconds (``--settle``)."""
        return "--" + self.name.removesuffix("_s").replace("_", "-")

    def check(self, value: Any) -> str | None:
        """Why ``value`` is not allowed, or None."""
        if self.choices and value not in self.choices:
            return f"expected one of {', '.join(self.choices)}"
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if self.ge is not None and value < self.ge:
            return f"must be >= {self.ge:g}"
        if self.gt is not None and value <= self.gt:
            return f"must be > {self.gt:g}"
        if self.le is not None and value > self.le:
            return f"must be <= {self.le:g}"
        return None

    def default_value(self) -> Any:
        return self.default_factory() if self.default_factory is not None else self.default
