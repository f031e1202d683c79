"""The shipped alert rules and Alertmanager config: promtool/amtool checks, the rules' unit tests, and proof
that those unit tests catch a rule that never fires or one that fires too readily."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import pytest
import yaml

from _prom_fixtures import (
    ALERTMANAGER_CONFIG,
    PROMETHEUS_CONFIG,
    RULE_TESTS_FILE,
    RULES_FILE,
    backend_binary,
    promql_refs,
)
from faithtrace._telemetry import names


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES_FILE.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


ALERTS = [rule["alert"] for rule in _rules()]
QUALITY_ALERTS = {"FaithfulnessScoreBelowFloor", "FaithfulnessScoreDropped", "FaithfulnessFailShareHigh"}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


# --- shape of every rule -----------------------------------------------------------------------------------
def test_the_issue_s_alerts_all_exist() -> None:
    assert set(ALERTS) == QUALITY_ALERTS | {
        "FaithfulnessEvaluationErrors",
        "FaithfulnessEvaluationsDropped",
        "FaithfulnessNoEvaluations",
    }


@pytest.mark.parametrize("alert", ALERTS)
def test_rule_has_for_labels_and_next_steps(alert: str) -> None:
    rule = next(r for r in _rules() if r["alert"] == alert)
    assert re.fullmatch(r"\d+[mh]", rule["for"]), "every rule waits before firing"
    assert rule["labels"]["severity"] in {"critical", "warning"}
    refs = promql_refs(rule["expr"])
    # The function and the service survive aggregation, so the alert names them.
    assert {"job", prom_label(names.FUNCTION)} <= refs.grouping_labels
    annotations = rule["annotations"]
    assert "{{ $labels.faithtrace_function }}" in annotations["summary"]
    assert len(annotations["description"]) > 80, "the description says what to look at next"
    links = {k: v for k, v in annotations.items() if k.startswith("jaeger_")}
    # A quality alert links to the failing requests (their RAG spans carry the label) and to the failing
    # evaluations filed in traces of their own under "<service>-faithtrace" (faithtrace serve, linked, late).
    want = {"jaeger_failing_traces", "jaeger_failing_evaluations"} if alert in QUALITY_ALERTS else None
    assert len(links) == (2 if want else 1)
    if want:
        assert set(links) == want
    for key, link in links.items():
        url = urlparse(link.replace("{{ ", "").replace(" }}", ""))
        query = parse_qs(url.query)
        assert url.path == "/search"
        tags = unquote(query["tags"][0])
        assert f'"{names.FUNCTION}":"$labels.faithtrace_function | urlquery"' in tags
        own = key in ("jaeger_failing_evaluations", "jaeger_failed_evaluations")
        suffix = names.OWN_TRACES_SUFFIX if own else ""
        assert query["service"] == ["$labels.job | urlquery" + suffix]
        assert query.get("operation") == ([names.EVALUATION_SPAN] if own else None)
        if alert in QUALITY_ALERTS:
            assert f'"{names.GEN_AI_EVALUATION_SCORE_LABEL}":"{names.LABEL_FAIL}"' in tags


def prom_label(attribute: str) -> str:
    return attribute.replace(".", "_")


def _alert_tests() -> list[dict[str, Any]]:
    return list(yaml.safe_load(RULE_TESTS_FILE.read_text())["tests"])


def _functions_in(series: list[dict[str, Any]]) -> set[str]:
    return {m for s in series for m in re.findall(r'faithtrace_function="([^"]+)"', s["series"])}


@pytest.mark.parametrize("alert", ALERTS)
def test_every_rule_has_unit_tests_that_fire_and_that_stay_silent(alert: str) -> None:
    fired_for: set[str] = set()
    silent_functions: set[str] = set()
    silent_checks = 0
    for case in _alert_tests():
        checks = [c for c in case.get("alert_rule_test", []) if c["alertname"] == alert]
        if not checks:
            continue
        firing = {a["exp_labels"]["faithtrace_function"] for c in checks for a in c["exp_alerts"]}
        fired_for |= firing
        silent_functions |= _functions_in(case["input_series"]) - firing
        silent_checks += sum(1 for c in checks if not c["exp_alerts"])
    assert fired_for, f"no unit test where {alert} fires"
    assert silent_functions, f"no series in {alert}'s tests for which it must stay silent"
    assert silent_checks, f"no evaluation time at which {alert} must not have fired yet"


# --- promtool / amtool -----------------------------------------------------------------------------------
@pytest.mark.backend
def test_promtool_check_config() -> None:
    result = _run(
        [backend_binary("promtool"), "check", "config", PROMETHEUS_CONFIG.name], PROMETHEUS_CONFIG.parent
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.backend
def test_promtool_check_rules() -> None:
    result = _run([backend_binary("promtool"), "check", "rules", str(RULES_FILE)], RULES_FILE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout


@pytest.mark.backend
def test_promtool_unit_tests_pass() -> None:
    result = _run([backend_binary("promtool"), "test", "rules", RULE_TESTS_FILE.name], RULE_TESTS_FILE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.backend
def test_amtool_check_config() -> None:
    result = _run(
        [backend_binary("amtool"), "check-config", str(ALERTMANAGER_CONFIG)], ALERTMANAGER_CONFIG.parent
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.backend
@pytest.mark.parametrize("alert", ALERTS)
def test_every_alert_routes_to_the_webhook(alert: str) -> None:
    rule = next(r for r in _rules() if r["alert"] == alert)
    labels = [f"{k}={v}" for k, v in {"alertname": alert, **rule["labels"]}.items()]
    result = _run(
        [
            backend_binary("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={ALERTMANAGER_CONFIG}",
            *labels,
        ],
        ALERTMANAGER_CONFIG.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "faithtrace-webhook"


# --- the unit tests can fail -------------------------------------------------------------------------------
def _mutated(tmp_path: Path, alert: str, mutate: Any) -> Path:
    """A copy of the rules and of the unit tests that concern ``alert``, with ``alert``'s expr mutated."""
    rules = yaml.safe_load(RULES_FILE.read_text())
    for group in rules["groups"]:
        group["rules"] = [r for r in group["rules"] if r["alert"] == alert]
        for rule in group["rules"]:
            rule["expr"] = mutate(rule["expr"])
    rules["groups"] = [g for g in rules["groups"] if g["rules"]]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    tests = yaml.safe_load(RULE_TESTS_FILE.read_text())
    tests["rule_files"] = ["rules.yml"]
    tests["tests"] = [
        {**case, "alert_rule_test": [c for c in case["alert_rule_test"] if c["alertname"] == alert]}
        for case in tests["tests"]
        if any(c["alertname"] == alert for c in case["alert_rule_test"])
    ]
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    return tmp_path / "tests.yml"


def _without_guards(expr: str) -> str:
    # Cut at the first set operator: what remains is the rule's condition without its minimum-volume guard
    # (or, for the no-evaluations rule, without the "unless evaluations happened" part).
    cut = re.split(r"\n\s*(?:and|unless) on", expr, maxsplit=1)
    assert len(cut) == 2, expr
    return cut[0]


@pytest.mark.backend
@pytest.mark.parametrize("alert", ALERTS)
@pytest.mark.parametrize(
    ("mutation", "mutate"),
    [
        pytest.param("never fires", lambda expr: "vector(1) > 2", id="never-fires"),
        pytest.param("no guard", _without_guards, id="no-guard"),
    ],
)
def test_unit_tests_catch_a_broken_rule(tmp_path: Path, alert: str, mutation: str, mutate: Any) -> None:
    promtool = backend_binary("promtool")
    # The unmutated subset passes, so a failure below is the mutation's doing.
    baseline = _mutated(tmp_path, alert, lambda expr: expr)
    assert _run([promtool, "test", "rules", baseline.name], tmp_path).returncode == 0
    broken = _mutated(tmp_path, alert, mutate)
    result = _run([promtool, "test", "rules", broken.name], tmp_path)
    assert result.returncode != 0, f"{alert} with '{mutation}' still passes its unit tests:\n{result.stdout}"
    assert "FAILED" in result.stdout + result.stderr
