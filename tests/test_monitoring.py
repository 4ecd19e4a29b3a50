"""docs/monitoring.md, its alert rules (docs/monitoring/alerts.yml) and its Grafana dashboard
name only metrics that exist, list every one, and aggregate the store's figures (the same from
every process) with max(), never sum()."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from bot import metrics as bot_metrics
from store.metrics import StoreFigures
from tests.conftest import ROOT
from worker import metrics as worker_metrics

DOC = ROOT / "docs" / "monitoring.md"
ALERTS = ROOT / "docs" / "monitoring" / "alerts.yml"
DASHBOARD = ROOT / "docs" / "monitoring" / "grafana-dashboard.json"
SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
AGGREGATIONS = {"sum", "max", "min", "avg", "count", "topk", "bottomk", "quantile"}
_METRIC = re.compile(r"\bhandoff_[a-z_]+\b")


def _store_families() -> dict[str, str]:
    empty = StoreFigures({}, {}, {}, {}, {}, 0, 0, 0.0, {}, 0)
    families = {m.name: m.type for m in worker_metrics.store_metrics(empty)}
    return {**families, "handoff_store_up": "gauge"}


def _process_families() -> dict[str, str]:
    families = {}
    for module in (worker_metrics, bot_metrics):
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                for metric in value.describe():
                    families[metric.name] = metric.type
    return families


STORE = _store_families()
PROCESS = _process_families()


def series(families: dict[str, str]) -> set[str]:
    """The names of the samples each family exposes (``x_total``, ``x_bucket``...)."""
    return {name + suffix for name, kind in families.items() for suffix in SUFFIXES[kind]}


def documented_metrics() -> set[str]:
    """The metrics named in the first column of docs/monitoring.md's tables."""
    rows = re.findall(r"^\| `(handoff_[a-z_]+)` \|", DOC.read_text(), re.MULTILINE)
    return set(rows)


def alert_rules() -> list[dict[str, object]]:
    return [
        rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]
    ]


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def all_exprs() -> list[str]:
    return [str(rule["expr"]) for rule in alert_rules()] + dashboard_exprs()


def test_the_doc_lists_every_metric_and_nothing_else() -> None:
    exposed = {}
    for name, kind in {**STORE, **PROCESS}.items():
        exposed[name + ("_total" if kind == "counter" else "")] = kind
    assert documented_metrics() == set(exposed)


def test_the_doc_shows_the_alert_rules_of_the_file() -> None:
    blocks = re.findall(r"```yaml\n(groups:.*?)```", DOC.read_text(), re.DOTALL)
    assert len(blocks) == 1
    assert yaml.safe_load(blocks[0]) == yaml.safe_load(ALERTS.read_text())


def test_every_alert_has_a_severity_a_summary_and_a_description() -> None:
    rules = alert_rules()
    assert {"HandoffResumesFailed", "HandoffOutboxNotDispatched", "HandoffDeliveriesFailed"} <= {
        rule["alert"] for rule in rules
    }
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule  # type: ignore[index]
        assert {"summary", "description"} <= set(rule["annotations"]), rule  # type: ignore[arg-type]


@pytest.mark.parametrize("expr", all_exprs())
def test_every_expression_names_only_metrics_that_exist(expr: str) -> None:
    known = series(STORE) | series(PROCESS)
    named = set(_METRIC.findall(expr))
    assert named and named <= known, named - known


@pytest.mark.parametrize("expr", all_exprs())
def test_the_stores_figures_are_aggregated_with_max_never_summed(expr: str) -> None:
    store_series = series(STORE)
    for match in _METRIC.finditer(expr):
        if match.group() in store_series:
            assert innermost_aggregation(expr, match.start()) in ("max", "min"), expr


def test_the_aggregation_finder_reads_grouping_clauses() -> None:
    expr = "sum(max without (instance, job) (increase(handoff_created_total[15m])))"
    assert innermost_aggregation(expr, expr.index("handoff_")) == "max"
    expr = "sum by (type) (rate(handoff_created_total[5m]))"
    assert innermost_aggregation(expr, expr.index("handoff_")) == "sum"
    assert innermost_aggregation("handoff_pending", 0) is None


def test_every_dashboard_panel_reads_the_chosen_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    assert dashboard["templating"]["list"][0]["query"] == "prometheus"
    for panel in panels:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]


def innermost_aggregation(expr: str, position: int) -> str | None:
    """The aggregation operator whose argument holds ``expr[position]``: walk out through
    the enclosing parentheses, skipping functions (``rate(...)``) and reading past a grouping
    clause (``max without (a, b) (...)``)."""
    depth = 0
    i = position - 1
    while i >= 0:
        char = expr[i]
        if char == ")":
            depth += 1
        elif char == "(":
            if depth:
                depth -= 1
            else:
                word, before = _word_before(expr, i)
                if word is None and before >= 0 and expr[before] == ")":
                    # A grouping clause: "(labels)" after "by" or "without".
                    start = _matching_open(expr, before)
                    clause, before = _word_before(expr, start)
                    if clause in ("by", "without"):
                        word, _ = _word_before(expr, before + 1)
                if word in AGGREGATIONS:
                    return word
        i -= 1
    return None


def _word_before(expr: str, index: int) -> tuple[str | None, int]:
    """The identifier ending just before ``expr[index]`` (spaces skipped), and the index of
    the last character before it (or of the non-word character found instead)."""
    j = index - 1
    while j >= 0 and expr[j] == " ":
        j -= 1
    end = j
    while j >= 0 and (expr[j].isalnum() or expr[j] == "_"):
        j -= 1
    word = expr[j + 1 : end + 1]
    return (word or None), (j if word else end)


def _matching_open(expr: str, close: int) -> int:
    depth = 0
    for i in range(close, -1, -1):
        if expr[i] == ")":
            depth += 1
        elif expr[i] == "(":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced: {expr}")
