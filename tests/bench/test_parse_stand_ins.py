"""The DAG-parse case's baseline: the same file built of Airflow's classes, with the same templated values."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks import cases_startup

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"


@pytest.mark.parametrize(
    "name",
    [
        # Its sensor waits on the send's XComArg: a stand-in must make the same dependency.
        "sms_campaign_delivery.py",
        # It imports a text constant beside the task classes: used as it is.
        "sms_approved_campaign.py",
    ],
)
def test_stand_ins_build_the_same_dags_templated_values_included(name: str) -> None:
    # dag_parse_cases raises when the stand-in parse builds other DAG ids, tasks, dependencies or
    # templated values than the provider's own parse of the file.
    rows = cases_startup.dag_parse_cases(EXAMPLES / name, reps=1)
    judged = rows[0].as_json()
    assert judged["baseline_name"] == cases_startup.STAND_INS
    assert judged["size"] > 0
    assert math.isfinite(judged["baseline"])
    assert judged["baseline"] > 0
    assert "holding the same templated values" in judged["note"]


def test_stand_ins_carry_each_operators_templated_fields() -> None:
    from airflow_provider_sms.operators.sms import SmsSendListsOperator

    found = cases_startup.stand_ins(EXAMPLES / "sms_weekly_campaign.py")
    kind, fields = found["airflow_provider_sms.operators.sms"]["SmsSendListsOperator"]
    assert kind == "operator"
    assert fields == list(SmsSendListsOperator.template_fields)
    assert "max_cost" in fields


def test_a_name_that_is_not_a_task_class_is_refused() -> None:
    with pytest.raises(ValueError, match=r"cannot stand in for airflow_provider_sms\.hooks\.sms\.SmsHook"):
        cases_startup.stand_ins(EXAMPLES / "sms_npai_hygiene.py")
