"""The dashboard and the alert rules of the Metrics page (docs/grafana/): the metrics and labels their
queries read, as Prometheus names them once Airflow's OpenTelemetry export reaches it (dots become
underscores; a counter ends in ``_total``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from airflow_provider_sms.metrics import METRICS, Metric

GRAFANA = Path(__file__).resolve().parents[1] / "docs" / "grafana"
DASHBOARD = GRAFANA / "sms-campaigns-dashboard.json"
RULES = GRAFANA / "sms-alert-rules.yml"
# Airflow's prefix ([metrics] otel_prefix), then the provider's.
NAME = re.compile(r"\bairflow_sms_[a-z_]+\b")
LABELS = re.compile(r"\bby \(([^)]*)\)|\{([^}]*)\}")


def prometheus_name(metric: Metric) -> str:
    """What Prometheus calls ``metric`` (OpenTelemetry's rules for a metric's name)."""
    name = "airflow_" + metric.full_name.replace(".", "_")
    return name + "_total" if metric.kind == "counter" else name


def queries() -> list[str]:
    """Every query of the dashboard's panels and the alert rules."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    found = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    found += [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    return found


def queried_metrics() -> list[Metric]:
    """The metrics those queries read (an unknown name fails: it is no metric of the provider)."""
    by_name = {prometheus_name(metric): metric for metric in METRICS.values()}
    names = sorted({name for query in queries() for name in NAME.findall(query)})
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise AssertionError(
            f"the dashboard or the rules query metrics the provider does not emit: {unknown}"
        )
    return [by_name[name] for name in names]


def labels_used(query: str) -> set[str]:
    """The labels a query groups by or selects on."""
    used: set[str] = set()
    for grouped, selected in LABELS.findall(query):
        used |= {label.strip() for label in grouped.split(",") if label.strip()}
        used |= {match.group(1) for match in re.finditer(r"(\w+)\s*[=!]~?", selected)}
    return used
