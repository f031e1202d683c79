"""Never break the host: hostile calls, each run undecorated and decorated, compared by identity.

The battery is every combination of:

* the four function forms: sync, async, sync generator, async generator (a generator's consumer reads it to
  the end, or closes it after the first chunk);
* a hostile input in one of the three places faithtrace reads (the query, a retrieved context, the answer or
  a streamed chunk): an int too large to print, an object whose ``__str__`` raises, a dict whose ``get``
  raises, a LlamaIndex-style node whose ``get_content()`` raises, and kinds of our own: an object whose
  ``__class__`` raises (``isinstance`` raises on it), a dict whose ``__contains__`` raises, a ``text``
  property that raises, ``str``/``bytes``/``int`` subclasses whose every method raises, a list whose
  ``__iter__`` raises, a sequence claiming 10^12 items, a ``MagicMock``; or none;
* the app's own span processor raising in ``on_start``, ``_on_ending`` or ``on_end`` (once with an exception
  whose ``__str__`` raises too), or not at all;
* the function returning, raising an exception, raising one whose ``__str__`` raises, or raising a
  ``BaseException`` subclass of the app's.

Each combination runs in three modes: production; inside a host's own pytest run (``PYTEST_CURRENT_TEST``
set, as in any app's test suite, with faithtrace's strict switch off as it is there); and faithtrace's own
strict mode, where a faithtrace bug would raise into the call and show as a difference.

Per case: the caller gets the very same objects (result, chunks, generator return value, exception) as from
the undecorated function, and the call is recorded with the outcome that says whose fault it was: on its span
(when the app's processors let it be exported) and in ``faithtrace.evaluations``. Per run: no internal error.
Scoring is ``remote`` (the span carries the texts, nothing is judged here): the request path is under test.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import View
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import StatusCode

import faithtrace
from faithtrace import trace_faithfulness
from faithtrace._common import safety
from faithtrace._telemetry import names as n
from faithtrace.testing import FaithtraceCapture, capturing

CONTEXT = "Paris is the capital of France."
QUESTION = "What is the capital of France?"
CHUNKS = ("The capital of France ", "is Paris.")
ANSWER = "".join(CHUNKS)
INPUT, CAPTURE = n.OUTCOME_INPUT_ERROR, n.OUTCOME_CAPTURE_ERROR
READ = None  # the value is read as text: the call is handed on to be scored


# --- hostile values ----------------------------------------------------------------------------------------
class Boom(Exception):
    pass


class Unprintable(Exception):
    """An exception whose ``__str__`` raises (another of itself). Its ``repr`` works, for pytest's report."""

    def __str__(self) -> str:
        raise Unprintable()

    def __repr__(self) -> str:
        return "Unprintable()"


class HostAbort(BaseException):
    """The app's own BaseException: never faithtrace's to swallow or replace."""


def _raise(*_args: Any, **_kwargs: Any) -> Any:
    raise Unprintable()


class StrRaises:
    __str__ = __repr__ = _raise


class ClassRaises:
    @property
    def __class__(self) -> type:  # type: ignore[override]
        raise Boom("__class__")


class GetRaises(dict[str, str]):
    get = _raise  # type: ignore[assignment]


class ContainsRaises(dict[str, str]):
    __contains__ = _raise  # type: ignore[assignment]


class NodeRaises:
    """Looks like a LlamaIndex node to faithtrace; its ``get_content()`` raises."""

    get_content = _raise


NodeRaises.__module__ = "llama_index.core.schema"


class TextPropertyRaises:
    @property
    def text(self) -> str:
        raise Boom("text")


class HostileStr(str):
    __getitem__ = __len__ = __iter__ = __str__ = __contains__ = __add__ = _raise  # type: ignore[assignment]
    lower = upper = strip = split = replace = encode = startswith = _raise  # type: ignore[assignment]


class HostileBytes(bytes):
    __bytes__ = __getitem__ = __len__ = __iter__ = __str__ = decode = _raise  # type: ignore[assignment]


class HostileInt(int):
    __str__ = __repr__ = __format__ = __index__ = _raise  # type: ignore[assignment]


class IterRaises(list[str]):
    __iter__ = _raise  # type: ignore[assignment]


class HugeSequence(Sequence[str]):
    def __len__(self) -> int:
        return 10**12

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int) and 0 <= index < 10**12:
            return f"document {index}"
        raise IndexError(index)


@dataclass(frozen=True)
class Kind:
    """A hostile value, and what reading it is per place: INPUT (it raised), CAPTURE (no text), READ."""

    name: str
    value: Any
    query: str | None
    contexts: str | None
    answer: str | None
    container: bool = False  # passed as the contexts themselves, not as one of them

    def contexts_arg(self) -> Any:
        return self.value if self.container else [CONTEXT, self.value]


KINDS = (
    Kind("big_int", 10**5000, INPUT, INPUT, INPUT),
    Kind("str_raises", StrRaises(), CAPTURE, CAPTURE, CAPTURE),
    Kind("class_raises", ClassRaises(), INPUT, INPUT, INPUT),
    Kind("get_raises", GetRaises(text="x"), INPUT, INPUT, INPUT),
    Kind("contains_raises", ContainsRaises(), CAPTURE, CAPTURE, INPUT),
    Kind("node_raises", NodeRaises(), INPUT, INPUT, INPUT),
    Kind("text_property_raises", TextPropertyRaises(), CAPTURE, CAPTURE, CAPTURE),
    Kind("hostile_str", HostileStr(ANSWER), READ, READ, READ),
    Kind("hostile_bytes", HostileBytes(ANSWER.encode()), READ, READ, READ),
    Kind("hostile_int", HostileInt(42), READ, READ, READ),
    Kind("magic_mock", mock.MagicMock(), CAPTURE, CAPTURE, CAPTURE),
    Kind("iter_raises", IterRaises([CONTEXT]), CAPTURE, INPUT, CAPTURE, container=True),
    Kind("huge_sequence", HugeSequence(), CAPTURE, READ, CAPTURE, container=True),
)
PLACES = ("query", "contexts", "answer")


# --- the app's span processor ------------------------------------------------------------------------------
class HostileProcessor(SpanProcessor):
    """The app's own processor, raising at the hook each case asks for, for that case's span (by its name: a
    span of a returned call ends on faithtrace's worker, after the call). The SDK calls it unguarded."""

    def __init__(self) -> None:
        self.modes: dict[str, str] = {}

    def _maybe(self, hook: str, span: Any) -> None:
        mode = self.modes.get(span.name, "none")
        if mode == hook:
            raise Boom(f"the app's processor, {hook}")
        if mode == hook + "_unprintable":
            raise Unprintable()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._maybe("on_start", span)

    def _on_ending(self, span: Any) -> None:
        self._maybe("on_ending", span)

    def on_end(self, span: ReadableSpan) -> None:
        self._maybe("on_end", span)


PROCESSOR_MODES = ("none", "on_start", "on_ending", "on_end", "on_end_unprintable")


# --- one case ----------------------------------------------------------------------------------------------
RETURNED = object()  # a generator's return value, compared by identity too
# Each case raises an exception of its own (the same object in its undecorated and its decorated run).
ENDINGS: dict[str, Callable[[], BaseException] | None] = {
    "returns": None,
    "raises": lambda: Boom("the app's own failure"),
    "raises_unprintable": Unprintable,
    "raises_base": HostAbort,
}
FORMS = ("sync", "async", "sync_gen", "async_gen")


@dataclass
class Case:
    form: str
    kind: Kind | None
    place: str | None
    processor: str
    ending: str
    close_early: bool = False

    @property
    def name(self) -> str:
        where = f"{self.kind.name}@{self.place}" if self.kind else "plain"
        closing = ".closed_early" if self.close_early else ""
        return f"battery.{self.form}.{where}.{self.processor}.{self.ending}{closing}"

    def arguments(self) -> tuple[Any, Any]:
        query: Any = QUESTION
        contexts: Any = [CONTEXT]
        if self.kind is not None and self.place == "query":
            query = self.kind.value
        if self.kind is not None and self.place == "contexts":
            contexts = self.kind.contexts_arg()
        return query, contexts

    def answer(self) -> Any:
        return self.kind.value if self.kind is not None and self.place == "answer" else ANSWER

    def chunks(self) -> tuple[Any, ...]:
        return (self.kind.value,) if self.kind is not None and self.place == "answer" else CHUNKS

    def function(self) -> Callable[..., Any]:
        """The app's function for this case, undecorated."""
        make = ENDINGS[self.ending]
        error, answer, chunks = make() if make else None, self.answer(), self.chunks()

        def sync(question: Any, contexts: Any) -> Any:
            if error is not None:
                raise error
            return answer

        async def async_(question: Any, contexts: Any) -> Any:
            if error is not None:
                raise error
            return answer

        def sync_gen(question: Any, contexts: Any) -> Iterator[Any]:
            yield from chunks
            if error is not None:
                raise error
            return RETURNED

        async def async_gen(question: Any, contexts: Any) -> AsyncIterator[Any]:
            for chunk in chunks:
                yield chunk
            if error is not None:
                raise error

        return {"sync": sync, "async": async_, "sync_gen": sync_gen, "async_gen": async_gen}[self.form]

    def expected_outcome(self) -> str | None:
        """Whose fault it is that the call is not scored (``faithtrace.evaluations``); None: handed on."""
        if self.processor == "on_start":
            return n.OUTCOME_PROCESSOR_ERROR
        if self.ending != "returns" and not self.close_early:
            return n.OUTCOME_CALL_FAILED
        if self.kind is None or self.place is None:
            return READ
        outcome: str | None = getattr(self.kind, self.place)
        return outcome

    def exported(self) -> bool:
        """The app's processors let the span reach the exporter (``_on_ending`` raising stops ``on_end``)."""
        return self.processor not in ("on_start", "on_ending")


def cases(form: str) -> list[Case]:
    found = []
    inputs: list[tuple[Kind | None, str | None]] = [(None, None)]
    inputs += [(kind, place) for kind in KINDS for place in PLACES]
    closings = (False, True) if form.endswith("gen") else (False,)
    for (kind, place), processor, ending, close in itertools.product(
        inputs, PROCESSOR_MODES, ENDINGS, closings
    ):
        found.append(Case(form, kind, place, processor, ending, close))
    return found


# --- running one case as the app would ---------------------------------------------------------------------
Observed = tuple[str, list[Any], Any]  # how it ended, the chunks seen, the result / return value / exception


def _sync(fn: Callable[..., Any], args: tuple[Any, Any]) -> Observed:
    try:
        return "returned", [], fn(*args)
    except BaseException as exc:
        return "raised", [], exc


async def _async(fn: Callable[..., Any], args: tuple[Any, Any]) -> Observed:
    try:
        return "returned", [], await fn(*args)
    except BaseException as exc:
        return "raised", [], exc


def _sync_gen(fn: Callable[..., Any], args: tuple[Any, Any], close_early: bool) -> Observed:
    seen: list[Any] = []
    gen = fn(*args)
    try:
        while True:
            seen.append(next(gen))
            if close_early:
                gen.close()
                return "closed", seen, None
    except StopIteration as stop:
        return "ended", seen, stop.value
    except BaseException as exc:
        return "raised", seen, exc


async def _async_gen(fn: Callable[..., Any], args: tuple[Any, Any], close_early: bool) -> Observed:
    seen: list[Any] = []
    gen = fn(*args)
    try:
        while True:
            seen.append(await gen.__anext__())
            if close_early:
                await gen.aclose()
                return "closed", seen, None
    except StopAsyncIteration:
        return "ended", seen, None
    except BaseException as exc:
        return "raised", seen, exc


def observe(case: Case, fn: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> Observed:
    args = case.arguments()
    if case.form == "sync":
        return _sync(fn, args)
    if case.form == "async":
        return loop.run_until_complete(_async(fn, args))
    if case.form == "sync_gen":
        return _sync_gen(fn, args, case.close_early)
    return loop.run_until_complete(_async_gen(fn, args, case.close_early))


def _show(observed: Observed) -> str:
    """An observation by type and identity: the hostile values' own repr may raise."""
    how, chunks, value = observed
    seen = ", ".join(f"{type(c).__name__}@{id(c):x}" for c in chunks)
    return f"{how} [{seen}] {type(value).__name__}@{id(value):x}"


def same(bare: Observed, decorated: Observed) -> bool:
    """The very same objects: how it ended, each chunk, and the result or exception."""
    return (
        bare[0] == decorated[0]
        and len(bare[1]) == len(decorated[1])
        and all(a is b for a, b in zip(bare[1], decorated[1], strict=True))
        and bare[2] is decorated[2]
    )


# --- the battery -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def _settled_heap() -> Iterator[None]:
    """The objects alive before this module's cases, collected once and then left out of each case's
    collection (a full collection of the worker's heap takes seconds per case on a loaded machine)."""
    gc.collect()  # earlier tests' decorated functions: their counters would be observed too
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
def hostile_app(_settled_heap: None) -> Iterator[tuple[FaithtraceCapture, HostileProcessor]]:
    processor = HostileProcessor()
    gc.collect()  # the earlier cases' decorated functions, made since the freeze
    with capturing() as capture:
        capture.tracer_provider.add_span_processor(processor)
        # One series per case (each case is a function of its own): past the SDK's default of 2,000.
        capture.meter_provider.shutdown()
        capture.metric_reader = InMemoryMetricReader()
        many = View(instrument_name=n.METRIC_EVALUATIONS, aggregation_cardinality_limit=20_000)
        capture.meter_provider = MeterProvider(metric_readers=[capture.metric_reader], views=[many])
        capture.configure(scoring="remote")
        yield capture, processor


MODES = ("production", "host_pytest", "strict")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("mode", MODES)
def test_hostile_calls_get_the_very_same_objects_and_an_honest_outcome(
    hostile_app: tuple[FaithtraceCapture, HostileProcessor],
    monkeypatch: pytest.MonkeyPatch,
    form: str,
    mode: str,
) -> None:
    ft, processor = hostile_app
    monkeypatch.setattr(safety, "raise_internal_errors", mode == "strict")
    if mode == "production":
        monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    else:  # what a host's pytest sets while it runs the host's own tests
        monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_app.py::test_answer (call)")
    errors_before = safety.internal_error_count
    host_errors_before = sum(safety.host_error_counts.values())
    loop = asyncio.new_event_loop()
    problems: list[str] = []
    kept = []  # the decorated functions: their counters live as long as they do
    all_cases = cases(form)
    try:
        for case in all_cases:
            raw = case.function()
            decorated = trace_faithfulness(name=case.name)(raw)
            kept.append(decorated)
            processor.modes[case.name] = case.processor
            bare = observe(case, raw, loop)
            traced = observe(case, decorated, loop)
            if not same(bare, traced):
                problems.append(f"{case.name}: the caller got {_show(traced)}, undecorated {_show(bare)}")
    finally:
        loop.close()
    assert faithtrace.flush(60, evaluations=False)
    spans = {s.name: s for s in ft.spans()}
    outcomes: dict[str, dict[str, int]] = {}
    for point in ft.points(n.METRIC_EVALUATIONS):
        by_function = outcomes.setdefault(str(point.attributes[n.FUNCTION]), {})
        by_function[str(point.attributes[n.OUTCOME])] = int(point.value)
    for case in all_cases:
        problems.extend(_recorded_honestly(case, spans.get(case.name), outcomes.get(case.name, {})))
    assert problems == [], f"{len(problems)} of {len(all_cases)} cases:\n" + "\n".join(problems[:40])
    assert safety.internal_error_count == errors_before  # nothing was faithtrace's fault
    assert sum(safety.host_error_counts.values()) > host_errors_before  # the processors' were recorded
    assert len(kept) == len(all_cases) >= 800


def _recorded_honestly(case: Case, span: ReadableSpan | None, outcomes: dict[str, int]) -> list[str]:
    expected = case.expected_outcome()
    found: list[str] = []
    if outcomes != ({expected: 1} if expected is not None else {}):
        found.append(f"{case.name}: outcomes {outcomes}, expected {expected}")
    if not case.exported():
        if span is not None:
            found.append(f"{case.name}: exported although the app's processor stopped it")
        return found
    if span is None:
        return [*found, f"{case.name}: no span"]
    attrs = dict(span.attributes or {})
    if expected == n.OUTCOME_CALL_FAILED:
        make = ENDINGS[case.ending]
        assert make is not None
        events = [e for e in span.events if e.name == n.EXCEPTION_EVENT]
        kind = events[0].attributes.get(n.EXCEPTION_TYPE) if events and events[0].attributes else None
        if span.status.status_code is not StatusCode.ERROR or not str(kind).endswith(
            make().__class__.__name__
        ):
            found.append(f"{case.name}: the failure is not on the span ({span.status}, {kind})")
    if expected is READ:
        if attrs.get(n.SCORING_REMOTE) is not True or n.EVAL_OUTCOME in attrs:
            found.append(f"{case.name}: not handed on for scoring: {attrs}")
    elif attrs.get(n.EVAL_OUTCOME) != expected:
        found.append(f"{case.name}: span outcome {attrs.get(n.EVAL_OUTCOME)}, expected {expected}")
    elif expected in (INPUT, CAPTURE) and attrs.get(n.CAPTURE_FIELD) != case.place:
        found.append(f"{case.name}: span names field {attrs.get(n.CAPTURE_FIELD)}, expected {case.place}")
    return found
