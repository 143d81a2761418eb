"""The provider's metrics module: names Airflow accepts, both names of a metric, nothing raised."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_sms import metrics
from airflow_provider_sms.models import CampaignResult
from tests.metrics_recorder import MetricsRecorder


def calls(recorder: MetricsRecorder) -> list[tuple[str, str, float, dict[str, str] | None]]:
    """What ``Stats`` received, as tuples."""
    return [(sent.method, sent.name, sent.value, sent.tags) for sent in recorder.sent]


@pytest.mark.parametrize("metric", list(metrics.METRICS.values()), ids=list(metrics.METRICS))
def test_every_name_passes_airflows_rule(metric: metrics.Metric) -> None:
    assert metrics.NAME_RULE.match(metric.full_name)
    assert metric.full_name.startswith("sms.")
    assert len(metric.full_name) + 41 * len(metric.in_name) <= metrics.MAX_NAME
    assert set(metric.in_name) <= set(metric.tags)


def test_a_metric_goes_out_with_its_tags_and_under_a_name_for_plain_statsd(
    metrics_recorder: MetricsRecorder,
) -> None:
    metrics.count("send.filtered", 3, conn_id="sms_default", dag_id="d", task_id="t", reason="flood")

    assert calls(metrics_recorder) == [
        (
            "incr",
            "sms.send.filtered",
            3,
            {"conn_id": "sms_default", "dag_id": "d", "task_id": "t", "reason": "flood"},
        ),
        ("incr", "sms.send.filtered.sms_default.flood", 3, None),
    ]


def test_a_tag_value_in_a_name_keeps_to_airflows_characters_and_one_level(
    metrics_recorder: MetricsRecorder,
) -> None:
    metrics.gauge("credits_left", 10, conn_id="team.a:sms/eu")

    names = [name for _, name, _, _ in calls(metrics_recorder)]
    assert names == ["sms.credits_left", "sms.credits_left.team_a_sms_eu"]


def test_a_tag_the_metric_does_not_declare_is_not_sent(metrics_recorder: MetricsRecorder) -> None:
    metrics.count("receiver.refused", reason="size", destination="33612345678")

    assert calls(metrics_recorder)[0][3] == {"reason": "size"}
    assert "33612345678" not in repr(calls(metrics_recorder))


def test_legacy_names_off_sends_only_the_tagged_name(
    metrics_recorder: MetricsRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__METRICS__LEGACY_NAMES_ON", "False")

    metrics.count("send.sent", 2, conn_id="sms_default")

    assert [name for _, name, _, _ in calls(metrics_recorder)] == ["sms.send.sent"]


def test_a_timer_is_sent_in_milliseconds(metrics_recorder: MetricsRecorder) -> None:
    metrics.timing("send.duration", 1.5, conn_id="c")

    assert calls(metrics_recorder)[0][:3] == ("timing", "sms.send.duration", 1500.0)


def test_a_zero_count_sends_nothing(metrics_recorder: MetricsRecorder) -> None:
    metrics.count("send.sent", 0, conn_id="c")

    assert calls(metrics_recorder) == []


@pytest.mark.parametrize(
    ("name", "stats"),
    [
        pytest.param("send.sent", lambda: (_ for _ in ()).throw(OSError("no route")), id="Stats raises"),
        pytest.param("no.such.metric", MetricsRecorder, id="unknown metric name"),
    ],
)
def test_emitting_never_raises(
    name: str, stats: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(metrics, "_stats", stats)
    caplog.set_level("DEBUG", logger=metrics.__name__)

    metrics.count(name, 1, conn_id="c")

    assert [record.getMessage().split(":")[0] for record in caplog.records] == [f"Metric {name} not sent"]


def test_a_send_answer_counts_each_figure_once(metrics_recorder: MetricsRecorder) -> None:
    answer = CampaignResult(
        status=1, message="OK", ticket="7", cost=4, credits=96, total=5, sent=2, blacklisted=1, flood=2
    )

    metrics.send_answer(answer, conn_id="sms_default")

    tagged = {
        (name, (tags or {}).get("reason")): value for _, name, value, tags in calls(metrics_recorder) if tags
    }
    assert tagged == {
        ("sms.send.batches", None): 1,
        ("sms.send.numbers", None): 5,
        ("sms.send.sent", None): 2,
        ("sms.send.filtered", "blacklisted"): 1,
        ("sms.send.filtered", "flood"): 2,
        ("sms.send.credits_spent", None): 4,
        ("sms.credits_left", None): 96,
    }
