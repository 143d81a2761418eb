"""One campaign whose two runs start at the same moment, run by tests/dags/test_never_twice.py.

With ``SMS_TEST_PAUSE_CLAIM`` set (seconds), this process pauses inside its claim's transaction, between
the check and the claim (before it inserts its claim row), as a loaded worker or a slow database would;
``SMS_TEST_PAUSED_FLAG`` names a file it touches when the pause begins.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airflow.sdk import DAG
from sqlalchemy import event
from sqlalchemy.engine import Engine

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

PAUSE = float(os.environ.get("SMS_TEST_PAUSE_CLAIM", "0"))

if PAUSE:

    @event.listens_for(Engine, "before_cursor_execute")
    def _pause_between_check_and_claim(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().startswith("INSERT INTO sms_claim "):
            Path(os.environ["SMS_TEST_PAUSED_FLAG"]).touch()
            time.sleep(PAUSE)


with DAG("sms_claim_race", **dag_arguments(schedule=None, doc_md=__doc__)):
    SmsSendOperator(
        task_id="send",
        message=alert("Your parcel arrives tomorrow between 10:00 and 12:00"),
        recipients=["33612000301", "33612000302"],
        delay="2030-12-02 10:00:00",
    )
