"""Every metric and label the alert rules and the dashboard query is one faithtrace really serves.

The reference is not a second list of names: a decorated function runs (in its own process) against a
scripted judge with ``configure(prometheus=...)``, and its ``/metrics`` page is parsed: the OTel Prometheus
exporter's own spelling, unit and type suffixes included. Each served name must in turn come from a METRIC_*
constant in names.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
import yaml

from _ports import free_port
from _prom_fixtures import (
    FAITHFUL_ANSWER,
    GRAFANA,
    RULES_FILE,
    SCRAPE_LABELS,
    WRONG_ANSWER,
    PromqlRefs,
    app_argv,
    label_values_refs,
    metric_constants,
    names_constant_for,
    parse_exposition,
    promql_refs,
    serve_scripted_judge,
)
from faithtrace._telemetry import names
from faithtrace.scoring.models import Outcome

# An app in a fresh interpreter serves the metrics that every test here reads.
pytestmark = pytest.mark.slow

OUTCOMES = {o.value for o in Outcome} | {
    v for k, v in vars(names).items() if k.startswith("OUTCOME_") and isinstance(v, str) and "." not in v
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Sample name -> label names, from faithtrace's /metrics after passing and failing answers."""
    with serve_scripted_judge() as judge:
        argv = app_argv(
            judge,
            mode="batch",
            port=free_port(),
            service="collector-names",
            function="names-probe",
            answer_file=str(tmp_path_factory.mktemp("app") / "answer.txt"),
            answers=[FAITHFUL_ANSWER, WRONG_ANSWER],
            rounds=3,
        )
        app = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert app.returncode == 0, app.stderr[-3000:]
    return parse_exposition(app.stdout)


def _ours(served: dict[str, set[str]]) -> dict[str, set[str]]:
    return {k: v for k, v in served.items() if k.startswith(("faithtrace_", "gen_ai_"))}


def test_every_served_metric_comes_from_the_names_module(served: dict[str, set[str]]) -> None:
    ours = _ours(served)
    assert ours
    unknown = [name for name in ours if names_constant_for(name) is None]
    assert not unknown, f"served but not in names.py: {unknown}"
    missing = set(metric_constants()) - {names_constant_for(name) for name in ours}
    assert not missing, f"in names.py but never served after scored answers: {missing}"


def _rule_exprs() -> list[tuple[str, str]]:
    doc = yaml.safe_load(RULES_FILE.read_text())
    return [(rule["alert"], rule["expr"]) for group in doc["groups"] for rule in group["rules"]]


def _dashboard_queries() -> list[tuple[str, PromqlRefs]]:
    queries: list[tuple[str, PromqlRefs]] = []
    for path in sorted((GRAFANA / "dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        stack: list[Any] = list(dashboard["panels"])
        while stack:
            panel = stack.pop()
            stack.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                if "expr" in target:
                    queries.append((panel["title"], promql_refs(target["expr"])))
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                queries.append((f"${variable['name']}", label_values_refs(variable["query"]["query"])))
        for annotation in dashboard["annotations"]["list"]:
            if "expr" in annotation:
                queries.append((annotation["name"], promql_refs(annotation["expr"])))
    return queries


def _alert_labels() -> set[str]:
    """Labels the ALERTS series of our rules carry: the rules' own labels and what their expressions keep."""
    doc = yaml.safe_load(RULES_FILE.read_text())
    rules = [rule for group in doc["groups"] for rule in group["rules"]]
    kept = set().union(*(promql_refs(rule["expr"]).grouping_labels for rule in rules))
    return kept | {label for rule in rules for label in rule["labels"]}


def _check(where: str, refs: PromqlRefs, served: dict[str, set[str]]) -> list[str]:
    problems = []
    builtin = {"ALERTS": {"alertname", "alertstate", *_alert_labels()}}
    known = {**{k: v | SCRAPE_LABELS for k, v in served.items()}, **builtin}
    for metric in refs.metrics:
        if metric not in known:
            problems.append(f"{where}: {metric} is not served")
    for metric, label in refs.selector_labels:
        if metric in known and label not in known[metric]:
            problems.append(f"{where}: {metric} has no label {label} (it has {sorted(known[metric])})")
    available = set().union(*(known.get(m, set()) for m in refs.metrics)) | {"le"}
    for label in refs.grouping_labels - available:
        problems.append(f"{where}: grouping by {label}, which none of {sorted(refs.metrics)} carries")
    return problems


def test_alert_rules_query_served_metrics_and_labels(served: dict[str, set[str]]) -> None:
    problems = [p for alert, expr in _rule_exprs() for p in _check(alert, promql_refs(expr), served)]
    assert not problems, "\n".join(problems)


def test_dashboard_queries_served_metrics_and_labels(served: dict[str, set[str]]) -> None:
    problems = [p for where, refs in _dashboard_queries() for p in _check(where, refs, served)]
    assert not problems, "\n".join(problems)


def _matcher_values(expr: str, label: str) -> set[str]:
    values: set[str] = set()
    for op, value in re.findall(rf'\b{label}\s*(=~|!~|!=|=)\s*"([^"]*)"', expr):
        values |= set(value.split("|")) if op.endswith("~") else {value}
    return values


def test_label_values_in_queries_are_values_faithtrace_emits() -> None:
    exprs = [expr for _, expr in _rule_exprs()]
    for path in sorted((GRAFANA / "dashboards").glob("*.json")):
        exprs += re.findall(r'"expr": "((?:[^"\\]|\\.)*)"', path.read_text())
    exprs = [e.replace('\\"', '"') for e in exprs]
    outcomes = set().union(*(_matcher_values(e, "faithtrace_outcome") for e in exprs))
    labels = set().union(*(_matcher_values(e, "gen_ai_evaluation_score_label") for e in exprs))
    assert outcomes
    assert outcomes <= OUTCOMES, outcomes - OUTCOMES
    assert labels == {names.LABEL_PASS, names.LABEL_FAIL}
