"""The Metrics page lists every metric the provider emits, as :data:`~airflow_provider_sms.metrics.METRICS`
declares it, no more, no less."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_sms.metrics import METRICS, Metric

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def row(metric: Metric) -> str:
    """The page's table row of ``metric``."""
    tags = ", ".join(f"`{tag}`" for tag in metric.tags) or "none"
    return (
        f"| `{metric.full_name}` | {metric.kind} | {metric.unit} | {tags} | `{metric.statsd_name}` | "
        f"{metric.component} | {metric.when} |"
    )


def test_the_page_has_one_row_per_metric_as_declared() -> None:
    rows = [line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("| `sms.")]

    assert rows == [row(metric) for metric in METRICS.values()]
