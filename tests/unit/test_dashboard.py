"""The dashboard and the alert rules query only metrics the provider emits, by labels those metrics
carry. That a real run emits each of them is checked on the deployment (tests/deployment/test_metrics.py)."""

from __future__ import annotations

import pytest

from airflow_provider_sms.metrics import METRICS
from tests.dashboard import NAME, labels_used, prometheus_name, queried_metrics, queries


def test_the_dashboard_and_the_rules_read_the_metrics_the_issue_names() -> None:
    read = {metric.name for metric in queried_metrics()}

    assert {
        "campaigns",
        "send.sent",
        "send.filtered",
        "delivery.delivered_share",
        "send.credits_spent",
        "credits_left",
        "receiver.refused",
        "notifier.not_delivered",
    } <= read


@pytest.mark.parametrize("query", queries())
def test_each_query_selects_by_labels_its_metric_carries(query: str) -> None:
    by_name = {prometheus_name(metric): metric for metric in METRICS.values()}
    carried = set.intersection(*(set(by_name[name].tags) for name in NAME.findall(query)))

    assert labels_used(query) <= carried, query


def test_the_labels_of_a_query_are_those_it_groups_by_and_selects_on() -> None:
    assert labels_used('sum by (a, b) (increase(x_total{c="1", d=~"$d"}[5m])) / y{e!="2"}') == set("abcde")
