"""The Grafana dashboard shipped in the chart (charts/walras/dashboards/walras.json).

Every series a panel or variable queries must be one the controller exposes. What it exposes is
read from the metric objects in ``walras.operator.metrics`` (read-only) and the Prometheus text
exposition format's naming: a counter ``c`` is scraped as ``c_total``, a histogram ``h`` as
``h_bucket`` (with label ``le``), ``h_sum`` and ``h_count``, a gauge under its own name. Label
names a query groups by, matches on or prints in a legend must be the metric's own, ``le`` of a
histogram bucket, or a target label Prometheus adds to every scraped series (``job``,
``instance``).

The chart must lint and template with the dashboard on, as a ConfigMap carrying the dashboard
sidecar's label and the JSON unchanged; off by default.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from walras.operator import metrics

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "walras"
DASHBOARD = CHART / "dashboards" / "walras.json"
KUBE_VERSION = "1.36.0"  # the apiserver the project runs, as in test_chart_render
TARGET_LABELS = {"job", "instance"}  # added by Prometheus to every scraped series

# PromQL words that are not metric names: aggregation operators and their modifiers, set and
# comparison keywords. (Functions are recognised by the "(" that follows them.)
PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan",
}  # fmt: skip

# Topics the dashboard promises: each must be queried by some panel.
REQUIRED_SERIES = {
    "walras_rounds_total": "rounds",
    "walras_round_seconds_bucket": "round time",
    "walras_solve_seconds_bucket": "solve time",
    "walras_duality_gap": "duality gap",
    "walras_price": "prices per GPU type",
    "walras_allocated_share": "utilisation",
    "walras_pending_jobs": "pending by reason",
    "walras_preemptions_total": "preemptions",
    "walras_bindings_total": "bindings",
}


def exposed_series() -> dict[str, set[str]]:
    """Series name -> label names, for every metric object of walras.operator.metrics."""
    out: dict[str, set[str]] = {}
    for obj in vars(metrics).values():
        if not isinstance(obj, Counter | Gauge | Histogram):
            continue
        # prometheus_client keeps a metric's name and label names only in these attributes.
        name: str = obj._name
        labels = set(obj._labelnames)
        if isinstance(obj, Counter):
            out[f"{name}_total"] = labels
        elif isinstance(obj, Histogram):
            out[f"{name}_bucket"] = labels | {"le"}
            out[f"{name}_sum"] = labels
            out[f"{name}_count"] = labels
        else:
            out[name] = labels
    return out


def _panels(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in node.get("panels", []):
        yield panel
        yield from _panels(panel)  # a collapsed row keeps its panels inside it


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries(dash: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(where, PromQL expression, legend format) for every panel target and query variable."""
    out = []
    for panel in _panels(dash):
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"], target.get("legendFormat", "")))
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            out.append((f"variable {var['name']}", query, ""))
    return out


def parse(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) that a PromQL expression (or label_values call) refers to.

    A small tokenizer, enough for the dashboard's queries: string literals and range/offset
    brackets are dropped; names inside ``{...}`` before an operator, inside ``by (...)`` /
    ``without (...)`` / ``on (...)`` and the second argument of ``label_values`` are labels; a
    name followed by ``(`` is a function; any other name is a metric.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\[[^\]]*\]", "", text)
    labels: set[str] = set()
    for body in re.findall(r"\{([^}]*)\}", text):
        labels |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", body))
    text = re.sub(r"\{[^}]*\}", "", text)
    for body in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", text):
        labels |= {w.strip() for w in body.split(",") if w.strip()}
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)
    label_values = re.match(r"\s*label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*$", text)
    if label_values:
        return {label_values.group(1)}, labels | {label_values.group(2)}
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        word, call = match.group(1), match.group(2)
        if not call and word.lower() not in PROMQL_KEYWORDS:
            names.add(word)
    return names, labels


def test_the_parser_finds_metrics_labels_and_ignores_functions() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, phase) (rate(walras_round_seconds_bucket{job=~"$j"}'
        "[$__rate_interval]))) * 60 + on (instance) group_left resets(other_total[1h])"
    )
    assert parse(expr) == (
        {"walras_round_seconds_bucket", "other_total"},
        {"le", "phase", "job", "instance"},
    )
    assert parse("label_values(walras_rounds_total, job)") == ({"walras_rounds_total"}, {"job"})


def test_every_queried_series_and_label_is_exposed_by_the_controller() -> None:
    exposed = exposed_series()
    found = queries(dashboard())
    assert found, "the dashboard queries nothing"
    for where, expr, legend in found:
        names, labels = parse(expr)
        assert names, f"{where}: no metric in {expr!r}"
        unknown = names - exposed.keys()
        assert not unknown, f"{where}: {sorted(unknown)} not in walras.operator.metrics ({expr})"
        known_labels = set().union(*(exposed[n] for n in names)) | TARGET_LABELS
        legend_labels = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        missing = (labels | legend_labels) - known_labels
        assert not missing, f"{where}: labels {sorted(missing)} not on {sorted(names)}"


def test_the_dashboard_covers_what_an_operator_of_walras_watches() -> None:
    queried = set().union(*(parse(expr)[0] for _, expr, _ in queries(dashboard())))
    missing = {topic for series, topic in REQUIRED_SERIES.items() if series not in queried}
    assert not missing, f"no panel for: {sorted(missing)}"
    # Restarts: a restarted controller starts its counters at zero, which resets() counts.
    assert any("resets(walras_rounds_total" in expr for _, expr, _ in queries(dashboard()))
    legends = {legend for _, _, legend in queries(dashboard())}
    assert "{{gpu_type}}" in legends, "prices are shown per GPU type"
    assert "{{reason}}" in legends, "pending jobs are shown per reason"


def test_panels_are_well_formed() -> None:
    dash = dashboard()
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "job"} <= variables
    panels = list(_panels(dash))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, f"{panel['title']} exceeds 24 columns"
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert ref_ids and len(ref_ids) == len(set(ref_ids)), panel["title"]
        assert panel.get("description"), f"{panel['title']} has no description"


# ---- the chart ----------------------------------------------------------------------------------


def _helm_path() -> str | None:
    try:
        from walras.testing import devcluster

        return str(devcluster.tool("helm"))
    except Exception:  # helm not installed by hack/install-tools.sh: look in the cache, then PATH
        cache = Path(os.environ.get("WALRAS_CACHE", Path.home() / ".cache" / "walras"))
        path = cache / "bin" / "helm"
        return str(path) if path.exists() else shutil.which("helm")


@pytest.fixture(scope="module")
def helm() -> str:
    path = _helm_path()
    if path is None:
        if os.environ.get("WALRAS_REQUIRE_APISERVER") == "1":
            pytest.fail("helm not found; run `make tools`")
        pytest.skip("helm not found; run `make tools`")
    return path


def _helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, check=False)


def _configmaps(helm: str, *values: str) -> list[dict[str, Any]]:
    sets = [arg for value in values for arg in ("--set", value)]
    proc = _helm(helm, "template", "walras", str(CHART), "--namespace", "walras-system", *sets)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "ConfigMap"]


def test_chart_lints_with_the_dashboard_on(helm: str) -> None:
    proc = _helm(helm, "lint", "--strict", str(CHART), "--set", "dashboard.enabled=true")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_chart_ships_the_dashboard_as_a_sidecar_configmap(helm: str) -> None:
    (configmap,) = _configmaps(
        helm,
        "dashboard.enabled=true",
        "dashboard.namespace=monitoring",
        "dashboard.annotations.grafana_folder=Walras",
    )
    meta = configmap["metadata"]
    assert meta["labels"]["grafana_dashboard"] == "1"
    assert meta["namespace"] == "monitoring"
    assert meta["annotations"] == {"grafana_folder": "Walras"}
    assert json.loads(configmap["data"]["walras.json"]) == dashboard()
    kubernetes_validate.validate(configmap, KUBE_VERSION, strict=True)


def test_dashboard_is_off_by_default(helm: str) -> None:
    assert _configmaps(helm) == []


def test_values_schema_rejects_an_unknown_dashboard_key(helm: str) -> None:
    proc = _helm(helm, "template", "walras", str(CHART), "--set", "dashboard.enable=true")
    assert proc.returncode != 0
    assert "enable" in proc.stderr
