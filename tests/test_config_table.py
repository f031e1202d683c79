"""The option table: every option model and env read goes through it, and the docs' table is generated."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from _trace_fixtures import clean_env  # noqa: F401  (autouse)
from faithtrace import CaptureOptions, JudgeSettings, SamplingOptions, ScoringOptions, WorkerOptions
from faithtrace._config import doc, options
from faithtrace._config.settings import build_settings

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "faithtrace"
MODELS = {
    "judge": JudgeSettings,
    "scoring": ScoringOptions,
    "sampling": SamplingOptions,
    "capture": CaptureOptions,
    "worker": WorkerOptions,
}


def test_the_docs_table_is_generated_from_the_option_table() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert doc.render(page) == page, "run: python -m faithtrace._config.doc --write"
    for option in options.OPTIONS.values():
        for var in option.env:
            assert f"`{var}`" in page


def test_serve_help_and_the_docs_table_come_from_the_option_table(capsys: pytest.CaptureFixture[str]) -> None:
    from faithtrace.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    serve = list(options.group("serve"))
    assert len(serve) >= 15
    for o in serve:
        assert f"{o.flag} " in shown, o.key
        assert " ".join(o.doc.split()) in shown, o.key
        assert f"`faithtrace serve {o.flag}`" in page, o.key
        for var in o.env:
            assert var.startswith("FAITHTRACE_SERVE_")
            assert var in shown
            assert f"`{var}`" in page


def test_serve_options_come_from_the_flag_then_the_variable_then_the_table() -> None:
    import argparse

    from faithtrace import ConfigError
    from faithtrace.serve.limits import Limits
    from faithtrace.serve.main import add_arguments, serve_options

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    env = {
        "FAITHTRACE_SERVE_SETTLE": "5",
        "FAITHTRACE_SERVE_KAFKA_OPTIONS": "a=1; b=2",
        "FAITHTRACE_SERVE_HOLD": "x",
    }
    got = serve_options(parser.parse_args([]), env)
    assert (got.settle_s, got.kafka_option, got.grpc_port, got.max_pending) == (
        5.0,
        ("a=1", "b=2"),
        4317,
        None,
    )
    assert got.hold_s == Limits().hold_s == 0.5  # an invalid variable: the default, which Limits shares
    got = serve_options(parser.parse_args(["--settle", "7", "--kafka-option", "x=y"]), env)
    assert (got.settle_s, got.kafka_option) == (7.0, ["x=y"])
    with pytest.raises(ConfigError, match="grpc_port: must be <= 65535"):
        serve_options(parser.parse_args(["--grpc-port", "70000"]), {})


def test_configure_takes_the_settings_build_settings_resolves() -> None:
    """configure() hands its arguments to build_settings as they are: one signature, apart from the
    providers it installs with and the environment build_settings reads in tests."""
    import inspect

    from faithtrace import configure
    from faithtrace._config.settings import build_settings

    def shape(fn: object, drop: set[str]) -> list[tuple[str, object, object]]:
        params = inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
        return [(p.name, p.annotation, p.default) for p in params if p.name not in drop]

    assert shape(configure, {"tracer_provider", "meter_provider"}) == shape(build_settings, {"environ"})
    documented = inspect.getdoc(configure) or ""
    for name in inspect.signature(configure).parameters:
        assert f"    {name}: " in documented, name


def test_the_check_fails_on_a_stale_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "configuration.md"
    page.write_text(f"# x\n{doc.BEGIN}\n| stale |\n{doc.END}\nafter\n", encoding="utf-8")
    assert doc.main(["--page", str(page), "--check"]) == 1
    assert doc.main(["--page", str(page), "--write"]) == 0
    assert doc.main(["--page", str(page), "--check"]) == 0
    text = page.read_text(encoding="utf-8")
    assert "`FAITHTRACE_SAMPLE_RATE`" in text
    assert text.endswith("after\n")
    assert "| stale |" not in text


@pytest.mark.parametrize("group", sorted(MODELS))
def test_every_model_field_is_one_table_row_and_back(group: str) -> None:
    model = MODELS[group]
    rows = {o.name: o for o in options.group(group)}
    assert set(model.model_fields) == set(rows)
    instance = model()
    for name, option in rows.items():
        assert getattr(instance, name) == option.default_value() or (
            # enums compare equal to their value; redact's None default and secrets stay as they are
            str(getattr(instance, name)) == str(option.default_value())
        ), name
        assert model.model_fields[name].description == option.doc
        assert f"    {name}: {option.doc}" in (model.__doc__ or "")


@pytest.mark.parametrize("group", sorted(MODELS))
def test_env_and_arguments_share_the_bounds(group: str, caplog: pytest.LogCaptureFixture) -> None:
    """For each bounded option with a variable: a value out of bounds is refused both ways."""
    model = MODELS[group]
    for option in options.group(group):
        bad = None
        if option.ge is not None:
            bad = option.ge - 1
        elif option.gt is not None:
            bad = option.gt
        elif option.le is not None:
            bad = option.le + 1
        if bad is None:
            continue
        bad = type(option.default)(bad) if isinstance(option.default, int | float) else bad
        with pytest.raises(ValueError, match=option.name):
            model(**{option.name: bad})
        for var in option.env:
            with caplog.at_level(logging.WARNING, logger="faithtrace"):
                assert option.name not in options.env_values(group, {var: str(bad)})
            assert any(var in r.getMessage() for r in caplog.records)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="rato"):
        SamplingOptions(rato=0.5)  # type: ignore[call-arg]


def test_worker_concurrency_was_merged_into_the_judge_setting() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        WorkerOptions(concurrency=2)  # type: ignore[call-arg]
    # The former variable still works, the judge's own name wins.
    hosted = {"FAITHTRACE_JUDGE_MODEL": "openai/x"}
    assert build_settings(environ={**hosted, "FAITHTRACE_CONCURRENCY": "3"}).concurrency == 3
    both = {**hosted, "FAITHTRACE_CONCURRENCY": "3", "FAITHTRACE_JUDGE_CONCURRENCY": "5"}
    assert build_settings(environ=both).concurrency == 5
    # The embedded judge computes one request at a time, whatever is asked.
    assert build_settings(environ={"FAITHTRACE_JUDGE_CONCURRENCY": "5"}).concurrency == 1


def test_otlp_variables_follow_the_otel_spec() -> None:
    from faithtrace._telemetry.setup import _url

    s = build_settings(
        environ={
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://metrics:9999/custom",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        }
    )
    assert (s.otlp_traces_protocol, s.otlp_metrics_protocol) == ("http/protobuf", "grpc")
    assert _url(s, "traces") == "http://collector:4318/v1/traces"
    assert _url(s, "metrics") == "http://metrics:9999/custom"  # a signal's own endpoint is used as it is
    only_traces = build_settings(environ={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/v1/traces"})
    assert only_traces.exports_otlp
    assert _url(only_traces, "traces") == "http://t:4318/v1/traces"


def test_the_embedded_judge_reads_its_variables_through_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from faithtrace.judge.local import endpoint as local
    from faithtrace.judge.local import process as _server

    monkeypatch.setenv("FAITHTRACE_LOCAL_JUDGE_N_CTX", "4096")
    monkeypatch.setenv("FAITHTRACE_LOCAL_JUDGE_THREADS", "3")
    monkeypatch.setenv("FAITHTRACE_LOCAL_JUDGE_IDLE_TIMEOUT", "-5")  # invalid: the default, with a warning
    assert (_server.n_ctx(), _server.n_threads(), local.idle_timeout_s()) == (4096, 3, 900.0)


# Reads of the environment outside the option table, each for a reason that is not an option of ours.
_ENV_READS_ALLOWED = {
    "_config/options.py": "the table's reader",
    "judge/local/process.py": "the environment handed to the judge server's process",
    "judge/local/server.py": "runs inside the judge server's own process",
    "judge/local/model.py": "XDG_CACHE_HOME, the base-directory convention",
    "judge/llm/_litellm.py": "restores the environment around litellm's import",
    "_common/host_state.py": "snapshots and restores the host's environment around a library's import",
    "judge/local/endpoint.py": "NO_PROXY for loopback (see bypass_proxy_for_loopback)",
}


def test_no_module_reads_the_environment_outside_the_table() -> None:
    offenders, readers = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            reads = (
                isinstance(node, ast.Attribute)
                and node.attr in ("environ", "getenv")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            )
            if reads:
                readers.add(rel)
                if rel not in _ENV_READS_ALLOWED:
                    offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"read these through faithtrace._config.options: {offenders}"
    assert readers == set(_ENV_READS_ALLOWED)  # an exception no longer needed leaves the list


def test_a_configure_argument_is_checked_against_the_table() -> None:
    from faithtrace import ConfigError

    env = {"FAITHTRACE_PROMETHEUS_PORT": "9999"}
    assert options.resolve("configure.prometheus_port", None, env) == 9999
    assert options.resolve("configure.prometheus_port", 8000, env) == 8000
    assert options.resolve("configure.prometheus_port", None, {}) is None
    with pytest.raises(ConfigError, match="prometheus_port: must be <= 65535"):
        options.resolve("configure.prometheus_port", 70000, env)
    with pytest.raises(ConfigError, match="traces_protocol: expected one of"):
        options.resolve("otel.traces_protocol", "carrier-pigeon")
