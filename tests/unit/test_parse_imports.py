"""DAG files import the operators, sensors and notifier: those must not load the provider's heavy parts.

The DAG processor parses every DAG file again and again; the models (pydantic classes), the codec,
the hook (requests), the triggers (``airflow.triggers.base``) and the send guard are imported when a
task runs. ``make bench`` measures what this saves; this test keeps it from regressing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

# What a DAG file may load of the provider when it imports the task classes.
ALLOWED = {
    "airflow_provider_sms",
    # Only with a literal delay (``delay`` raises its errors) or a wrong argument: see the test below.
    "airflow_provider_sms.exceptions",
    "airflow_provider_sms._task_arguments",
    # get_provider_info(), which Airflow reads to know the provider: the connection form's definition
    # (dataclasses, no dependency).
    "airflow_provider_sms.connection_form",
    # Literal messages and delays are checked at parse time: the short-URL marker rule (a few lines,
    # no dependency) and the delay's form (pendulum, which Airflow has already loaded).
    "airflow_provider_sms.short_urls",
    "airflow_provider_sms.delay",
    "airflow_provider_sms.operators",
    "airflow_provider_sms.operators.sms",
    # The send operators' extra link (a URL built when the task ends) and the version check it makes.
    "airflow_provider_sms.campaigns",
    "airflow_provider_sms.campaigns.link",
    "airflow_provider_sms._compat",
    "airflow_provider_sms.sensors",
    "airflow_provider_sms.sensors.sms",
    "airflow_provider_sms.notifications",
    "airflow_provider_sms.notifications.sms",
}
HEAVY_THIRD_PARTY = ("requests", "airflow.triggers.base", "holidays", "defusedxml")

_CHILD = """
import json, sys
from airflow.sdk import DAG, BaseOperator
# What Airflow loads for any operator is not the provider's doing (3.0: airflow.triggers.base).
with DAG("baseline", schedule=None):
    BaseOperator(task_id="plain")
before = set(sys.modules)
from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSendOperator, SmsSimulateOperator
from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor, SmsNpaiSensor, SmsWebhookSensor
from airflow_provider_sms.notifications.sms import SmsNotifier
from airflow.sdk import DAG
with DAG("parse_imports", schedule=None):
    SmsSimulateOperator(task_id="simulate", message="Hi", lists=[1], delay="{{ ds }} 10:00:00")
    SmsSendListsOperator(task_id="send_lists", message="Hi", lists=[1], on_cost_exceeded="skip")
    SmsWebhookSensor(task_id="webhook", webhook_id="1", deferrable=True)
    SmsNpaiSensor(task_id="npai", campaign_id="{{ ti.xcom_pull('send')['ticket'] }}", min_entries=2)
    SmsDeliveryReportsSensor(task_id="delivery", campaign="{{ ti.xcom_pull('send') }}", deferrable=True)
    SmsNotifier(text="failed", recipients=["33612345678"])
    right_arguments = sorted(sys.modules)
    SmsSendOperator(
        task_id="send", message="Hi", recipients=["33612345678"], max_cost=10, delay="2030-01-07 10:00:00"
    )
new = sorted(set(sys.modules) - before)
print(json.dumps({"new": new, "all": sorted(sys.modules), "right": right_arguments}))
"""


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    """Modules loaded by a fresh interpreter that imports the task classes and builds a DAG with them."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_dag_files_load_only_the_light_provider_modules(loaded: dict[str, list[str]]) -> None:
    ours = {name for name in loaded["all"] if name.split(".")[0] == "airflow_provider_sms"}
    assert ours <= ALLOWED, f"loaded at parse time: {sorted(ours - ALLOWED)}"


def test_right_arguments_do_not_load_the_exceptions(loaded: dict[str, list[str]]) -> None:
    """Every task class built with right arguments (templated delays): the errors are not imported.

    The DAG processor imports the task classes at every parse of every DAG file that uses them; the
    exceptions are imported when an argument is wrong, or with ``delay`` for a literal delay.
    """
    assert "airflow_provider_sms.exceptions" not in loaded["right"]
    assert "airflow_provider_sms.exceptions" in loaded["all"]  # the literal delay, built last


@pytest.mark.parametrize("module", HEAVY_THIRD_PARTY)
def test_dag_files_do_not_load_heavy_libraries(loaded: dict[str, list[str]], module: str) -> None:
    assert module not in loaded["new"]


def test_parse_time_checks_still_fail_bad_arguments() -> None:
    """Validation kept at parse time (without the models): a bad value fails when the DAG is parsed."""
    from airflow_provider_sms.exceptions import SmsValidationError
    from airflow_provider_sms.operators.sms import SmsSendOperator
    from airflow_provider_sms.sensors.sms import SmsNpaiSensor

    with pytest.raises(SmsValidationError, match=r"batch_size=0: must be an integer >= 1"):
        SmsSendOperator(task_id="a", message="Hi", recipients=["33612345678"], batch_size=0)
    with pytest.raises(SmsValidationError, match=r"send_window='later'"):
        SmsSendOperator(task_id="b", message="Hi", recipients=["33612345678"], send_window="later")
    with pytest.raises(SmsValidationError, match=r"min_entries=0: must be an integer of at least 1"):
        SmsNpaiSensor(task_id="c", min_entries=0)
    from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor

    with pytest.raises(SmsValidationError, match=r"min_final_share=1.5: must be a share of the messages"):
        SmsDeliveryReportsSensor(task_id="d", campaign=1, expected=10, min_final_share=1.5)
    with pytest.raises(SmsValidationError, match=r"deadline=6: must be a positive timedelta"):
        SmsDeliveryReportsSensor(task_id="e", campaign=1, expected=10, deadline=6)


def test_a_delivery_wait_without_a_count_is_refused_when_the_dag_is_parsed() -> None:
    import pendulum
    from airflow.sdk import DAG

    from airflow_provider_sms.exceptions import SmsValidationError
    from airflow_provider_sms.operators.sms import SmsSendOperator
    from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor

    with DAG("count", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), schedule=None):
        send = SmsSendOperator(task_id="send", message="Hi", recipients=["33612345678"])
        hint = r"gives campaign ids but not how many messages were sent; pass campaign=send.output"
        with pytest.raises(
            SmsValidationError, match=r"expected: an XCom of key 'ticket' \(e\.g\. send.output"
        ):
            SmsDeliveryReportsSensor(task_id="by_ticket", campaign=send.output["ticket"])
        for campaign in (5000001, "5000001", [5000001, 5000002]):
            refused = re.escape(f"expected: campaign={campaign!r}") + " " + hint
            with pytest.raises(SmsValidationError, match=refused):
                SmsDeliveryReportsSensor(task_id="by_id", campaign=campaign)
        # What carries the count, a count given, or a template known only when the task runs: accepted.
        SmsDeliveryReportsSensor(task_id="result", campaign=send.output)
        SmsDeliveryReportsSensor(task_id="counted", campaign=send.output["ticket"], expected=10)
        SmsDeliveryReportsSensor(task_id="ids", campaign=[5000001], expected="{{ params.sent }}")
        SmsDeliveryReportsSensor(task_id="templated", campaign="{{ ti.xcom_pull('send') }}")
