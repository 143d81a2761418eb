"""Every morning, read the NPAI list (numbers that reach no one) over an XML-format connection.

What it shows:

- a second connection to the same service, ``sms_xml``, whose extra says ``{"format": "xml"}``
  (``AIRFLOW_CONN_SMS_XML`` or the UI): the hook speaks XML on the wire, the DAG code is the same;
- a ``@task`` using ``SmsHook`` directly, for a read-only call that needs no operator: the hook reads
  every page of GET /npai and returns validated models;
- a report of the entries, with the numbers that became unreachable in the 24 hours before the
  run's data interval ends (entry dates are Europe/Paris), for a CRM clean-up job to consume (XCom).
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_sms.hooks.sms import SmsHook

log = logging.getLogger(__name__)

SMS_XML_CONN_ID = "sms_xml"


@dag(
    schedule="0 6 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="Europe/Paris"),
    catchup=False,
    tags=["sms", "example"],
)
def sms_npai_hygiene() -> None:
    """Read the NPAI list (XML) and report what is new since the previous run."""

    @task
    def read_npai(data_interval_end: pendulum.DateTime | None = None) -> dict[str, Any]:
        """All NPAI entries, and the numbers of those dated in the 24 hours before the interval's end."""
        hook = SmsHook(sms_conn_id=SMS_XML_CONN_ID)
        npai = hook.get_npai()
        since = (data_interval_end or pendulum.now("UTC")).subtract(days=1)
        # paris_date reads the entry's Y-m-d H:i:s as Paris time; timestamps compare right across DST.
        new = [
            entry.destination for entry in npai.entries if entry.paris_date.timestamp() >= since.timestamp()
        ]
        entries = [entry.model_dump(mode="json") for entry in npai.entries]
        log.info(
            "Read %s NPAI entries over %s; %s new in the last 24 hours", len(entries), hook.format, len(new)
        )
        return {"format": hook.format, "count": len(entries), "new": new, "entries": entries}

    @task
    def report(npai: dict[str, Any]) -> None:
        """Log each unreachable number (a real DAG would flag them in the CRM)."""
        for entry in npai["entries"]:
            log.info(
                "NPAI %s since %s (campaign %s)",
                entry["destination"],
                entry["date"],
                entry.get("campaign_id"),
            )

    report(read_npai())


sms_npai_hygiene()
