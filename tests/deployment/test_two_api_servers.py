"""Scenarios 6 and 7: delivery reports at campaign scale, across an API server's crash and a database outage.

A (two API servers): a second ``airflow api-server`` (same database and configuration, its own port)
and the first behind the harness's round-robin load balancer; the sandbox posts a 20,000-number
campaign's reports through it, four at once; API server 2 is killed with SIGKILL in the middle and
started again. The balancer answers 502 for it meanwhile and never retries: the sandbox's own retries
bring those reports.

B (PostgreSQL down): PostgreSQL is stopped (``pg_ctl stop -m fast``) for 10 s while a campaign's
reports arrive at the API server, then started again. The receiver answers 503 with Retry-After, and
the sandbox's retries bring everything. The scheduler, the dag-processor and the triggerer exit when
the database goes away (Airflow's own behaviour); they are started again as a supervisor would.

Both compare the receiver's table with the sandbox's ground truth (its ledger of every report posted
and its answers): every report the sandbox saw acknowledged is stored exactly once, nothing else is
stored for the campaign, and the deferred SmsDeliveryReportsSensor's counts equal the truth. A also
checks the asset events: every stored report is in exactly one event (whichever API server's flusher
made its batch, across the kill), no event carries a phone number, and the DAG scheduled on the asset
read each of the campaign's batches in exactly one run and counted every report of them.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.models import DELIVERY_STATUSES
from tests.deployment.harness import wait_for

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.sandbox.server import InspectionClient
    from tests.deployment.harness import AirflowApi, Deployment, RoundRobinProxy

pytestmark = pytest.mark.deployment

RECEIVER = "/sms/delivery-reports/sms_default"
SIGNATURE = "sb-sig-1"  # the sandbox's signature of DLR webhook "1"
ASSET = "sms_delivery_reports/sms_default"
WAIT_DAG = "deployment_delivery_wait"
CONSUMER_DAG = "sms_on_delivery_reports"
# 8 delivered, 1 not delivered, 1 expired in every 10 numbers: all final, so the sensor waits for all.
STATUSES = [3, 3, 3, 3, 3, 3, 3, 3, 2, 12]
# Enough for a report to outlast an outage: the backoff doubles from 0.2 s to the sandbox's 5 s cap.
TRIES = 60
# Reports posted at once by the sandbox, as the service does (one at a time: 174/s on 2 cores; four: 246/s).
POSTERS = 4
# The campaigns' tickets, below the clock's numbering of the other scenarios, and their numbers:
# French mobiles of their own, none blacklisted, NPAI or unreachable in the sandbox.
TICKET_A, TICKET_B = 7_000_001, 7_100_001
PREFIX_A, PREFIX_B = "3365", "3366"
NUMBERS_A, NUMBERS_B = 20_000, 10_000
# Bounds of each wait: the scenario stops by itself.
POSTING_TIMEOUT = 420.0
OUTAGE = 10.0


# ------------------------------------------------------------------------------------- helpers


@pytest.fixture
def balancer(deployment: Deployment) -> Iterator[RoundRobinProxy]:
    """API servers 0 and 1 behind a round-robin load balancer; API server 1 stopped after the test."""
    deployment.start_api_server(1)
    proxy = deployment.start_load_balancer((0, 1))
    yield proxy
    proxy.stop()
    deployment.stop_api_server(1)


def numbers_of(prefix: str, count: int) -> list[str]:
    """``count`` numbers of 11 digits starting with ``prefix`` (4 digits)."""
    return [f"{prefix}{index:07d}" for index in range(count)]


def send_campaign(
    deployment: Deployment,
    sandbox: InspectionClient,
    monkeypatch: pytest.MonkeyPatch,
    receiver_url: str,
    ticket: int,
    numbers: list[str],
) -> None:
    """Send ``numbers`` as campaign ``ticket``; the sandbox posts their reports to ``receiver_url``."""
    sandbox.set_webhook("1", url=receiver_url + RECEIVER)
    sandbox.set_credits(len(numbers) * 2)
    sandbox.set_next_ticket(ticket)
    sandbox.set_delivery_reports(True, statuses=STATUSES, tries=TRIES, concurrency=POSTERS)
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", deployment.connection(deployment.sandbox_url))
    sent = SmsHook("sms_default").send({"text": "Your parcel is on its way.", "pushtype": "alert"}, numbers)
    assert (sent.ticket, sent.sent) == (str(ticket), len(numbers))


def wait_acknowledged(sandbox: InspectionClient, count: int) -> dict[str, Any]:
    """The sandbox's counts once at least ``count`` reports are acknowledged."""
    counts: list[dict[str, Any]] = []
    wait_for(
        f"{count} reports to be acknowledged",
        lambda: counts.append(sandbox.delivery_report_counts()) or counts[-1]["acknowledged"] >= count,
        POSTING_TIMEOUT,
        interval=0.5,
    )
    return counts[-1]


def wait_posted(sandbox: InspectionClient, reports: int) -> dict[str, Any]:
    """The sandbox's counts once each of the ``reports`` reports is acknowledged or given up."""
    counts: list[dict[str, Any]] = []
    wait_for(
        f"the sandbox to finish posting {reports} reports",
        lambda: (
            counts.append(sandbox.delivery_report_counts())
            or (counts[-1]["reports"] == reports and counts[-1]["in_progress"] == 0)
        ),
        POSTING_TIMEOUT,
        interval=1.0,
    )
    return counts[-1]


Key = tuple[int, str, int]


def acknowledged_keys(sandbox: InspectionClient, ticket: int) -> set[Key]:
    """The ground truth: (campaign, number, status) of the reports of ``ticket`` answered with a 2xx."""
    return {
        (row["campaign_id"], row["destination"], row["status"])
        for row in sandbox.delivery_report_ledger()
        if row["campaign_id"] == ticket and row["acknowledged"]
    }


def stored_keys(deployment: Deployment, ticket: int) -> Counter[Key]:
    """How many rows the receiver's table holds for each (campaign, number, status) of ``ticket``."""
    rows = deployment.query(
        "SELECT campaign_id, destination, status, count(*) FROM sms_delivery_report "
        "WHERE conn_id = 'sms_default' AND campaign_id = :ticket GROUP BY campaign_id, destination, status",
        ticket=ticket,
    )
    return Counter(
        {(int(campaign), str(number), int(status)): int(n) for campaign, number, status, n in rows}
    )


def trigger_wait(api: AirflowApi, ticket: int, expected: int) -> str:
    """A run of the sensor DAG waiting for every message of ``ticket``; its run id."""
    return api.trigger(WAIT_DAG, {"campaign_id": ticket, "expected": expected})


def assert_stored_exactly_once(deployment: Deployment, truth: set[Key], ticket: int) -> None:
    """Every acknowledged report stored once: nothing lost, nothing twice, nothing never acknowledged."""
    stored = stored_keys(deployment, ticket)
    twice = {key: n for key, n in stored.items() if n > 1}
    assert twice == {}, f"{len(twice)} report(s) stored more than once, e.g. {list(twice.items())[:5]}"
    lost = truth - stored.keys()
    assert not lost, f"{len(lost)} acknowledged report(s) not stored, e.g. {sorted(lost)[:5]}"
    unacknowledged = stored.keys() - truth
    assert not unacknowledged, (
        f"{len(unacknowledged)} stored but never acknowledged: {sorted(unacknowledged)[:5]}"
    )


def assert_sensor_counts_the_truth(api: AirflowApi, run_id: str, truth: set[Key]) -> None:
    """The sensor's run succeeded and its counts are the ground truth's."""
    assert api.wait_run(WAIT_DAG, run_id, timeout=POSTING_TIMEOUT) == "success"
    delivery = api.xcom(WAIT_DAG, run_id, "wait_for_delivery")
    assert delivery["by_status"] == Counter(DELIVERY_STATUSES[status] for _, _, status in truth)
    assert (delivery["reported"], delivery["final"], delivery["complete"]) == (len(truth), len(truth), True)
    failed = sorted(number for _, number, status in truth if status != 3)
    assert (delivery["failed_count"], delivery["failed"]) == (len(failed), failed)


def assert_each_report_in_exactly_one_event(
    deployment: Deployment, events: list[dict[str, Any]], ticket: int
) -> Counter[str]:
    """Every stored report of ``ticket`` is in a batch, and each of those batches has exactly one event
    whose count is its reports'; returns the statuses of every report those events name."""
    wait_for(
        "the flusher to put every report in a batch",
        lambda: (
            not deployment.query(
                "SELECT count(*) FROM sms_delivery_report WHERE conn_id = 'sms_default' AND batch IS NULL"
            )[0][0]
        ),
        60,
        interval=0.5,
    )
    batches = {
        int(batch)
        for (batch,) in deployment.query(
            "SELECT DISTINCT batch FROM sms_delivery_report WHERE conn_id = 'sms_default' "
            "AND campaign_id = :ticket",
            ticket=ticket,
        )
    }
    named = Counter(int(event["extra"]["batch"]) for event in events if "batch" in (event["extra"] or {}))
    assert {batch: named[batch] for batch in batches} == dict.fromkeys(batches, 1)
    sizes = dict(
        deployment.query(
            "SELECT batch, count(*) FROM sms_delivery_report WHERE conn_id = 'sms_default' "
            "AND batch IS NOT NULL GROUP BY batch"
        )
    )
    for event in events:
        if "batch" in (event["extra"] or {}):
            assert event["extra"]["reports"] == sizes[event["extra"]["batch"]], event["extra"]
    statuses = deployment.query(
        "SELECT status, count(*) FROM sms_delivery_report WHERE conn_id = 'sms_default' "
        "AND batch IN (SELECT DISTINCT batch FROM sms_delivery_report WHERE campaign_id = :ticket) "
        "GROUP BY status",
        ticket=ticket,
    )
    return Counter({DELIVERY_STATUSES[int(status)]: int(n) for status, n in statuses})


def consumed(api: AirflowApi, since: str) -> tuple[Counter[int], Counter[str]]:
    """Of the consuming DAG's successful runs queued since ``since``: how many times each batch
    triggered one, and the statuses their tasks counted, added up."""
    batches: Counter[int] = Counter()
    counted: Counter[str] = Counter()
    after = datetime.fromisoformat(since)
    runs = api.call("GET", f"/dags/{CONSUMER_DAG}/dagRuns", params={"limit": 1000})["dag_runs"]
    for run in runs:
        queued = run.get("queued_at")
        if (
            run["state"] != "success"
            or not queued
            or datetime.fromisoformat(queued.replace("Z", "+00:00")) < after
        ):
            continue
        counted.update(api.xcom(CONSUMER_DAG, run["dag_run_id"], "count_statuses"))
        path = f"/dags/{CONSUMER_DAG}/dagRuns/{run['dag_run_id']}/upstreamAssetEvents"
        for event in api.call("GET", path)["asset_events"]:
            if "batch" in (event.get("extra") or {}):
                batches[int(event["extra"]["batch"])] += 1
    return batches, counted


def statuses_of_batches(deployment: Deployment, batches: set[int]) -> Counter[str]:
    """The statuses of every report in ``batches``."""
    if not batches:
        return Counter()
    rows = deployment.query(
        "SELECT status, count(*) FROM sms_delivery_report WHERE conn_id = 'sms_default' "
        f"AND batch IN ({', '.join(str(int(b)) for b in batches)}) GROUP BY status"
    )
    return Counter({DELIVERY_STATUSES[int(status)]: int(n) for status, n in rows})


def assert_no_number_in_events(api: AirflowApi, since: str, numbers: list[str]) -> list[dict[str, Any]]:
    """The asset's events since ``since`` name no phone number of the campaign (anyone who may read assets
    reads them); returns the events."""
    events = api.asset_events(ASSET, since=since)
    found = set(re.findall(r"\d{11}", json.dumps([event["extra"] for event in events]))) & set(numbers)
    assert not found, f"phone numbers in asset events: {sorted(found)[:5]}"
    return events


# ------------------------------------------------------------------------------------- scenarios


def test_two_api_servers_one_killed_in_the_middle_store_every_acknowledged_report_once(
    deployment: Deployment,
    api: AirflowApi,
    sandbox: InspectionClient,
    balancer: RoundRobinProxy,
    monkeypatch: pytest.MonkeyPatch,
    timings: dict[str, float],
) -> None:
    api.unpause(CONSUMER_DAG)
    api.unpause(WAIT_DAG)
    since = datetime.now(timezone.utc).isoformat()
    numbers = numbers_of(PREFIX_A, NUMBERS_A)
    began = time.monotonic()
    send_campaign(deployment, sandbox, monkeypatch, balancer.url, TICKET_A, numbers)
    run_id = trigger_wait(api, TICKET_A, NUMBERS_A)

    at_kill = wait_acknowledged(sandbox, NUMBERS_A // 3)
    deployment.kill_api_server(1)
    served_before_kill = balancer.tallies()[1].answers.get(200, 0)
    killed = time.monotonic()
    # Down long enough for the balancer to send it requests (answered 502), then started again.
    time.sleep(3)
    deployment.start_api_server(1)
    timings["two API servers: API server 2 down (kill to ready)"] = time.monotonic() - killed
    counts = wait_posted(sandbox, NUMBERS_A)
    timings["two API servers: 20,000 reports posted"] = time.monotonic() - began

    assert at_kill["acknowledged"] < NUMBERS_A  # killed while reports were still arriving
    assert (counts["acknowledged"], counts["given_up"]) == (NUMBERS_A, 0)
    assert counts["answers"].get("502", 0) > 0  # the dead API server's share, retried by the sandbox
    first, second = balancer.tallies()
    assert first.failed == 0
    assert first.answers.get(200, 0) > 0
    assert second.failed > 0  # requests sent to it while it was down, or under way when it died
    assert 0 < served_before_kill < second.answers.get(200, 0)  # it served before the kill, and after
    truth = acknowledged_keys(sandbox, TICKET_A)
    assert len(truth) == NUMBERS_A
    assert_stored_exactly_once(deployment, truth, TICKET_A)
    assert_sensor_counts_the_truth(api, run_id, truth)
    timings["two API servers: until the sensor's counts"] = time.monotonic() - began
    # Each stored report is in exactly one asset event, whichever API server's flusher made its batch.
    events = assert_no_number_in_events(api, since, numbers)
    in_events = assert_each_report_in_exactly_one_event(deployment, events, TICKET_A)
    campaign_batches = {
        int(batch)
        for (batch,) in deployment.query(
            "SELECT DISTINCT batch FROM sms_delivery_report WHERE campaign_id = :ticket", ticket=TICKET_A
        )
    }
    assert in_events == Counter(DELIVERY_STATUSES[status] for _, _, status in truth)
    # The DAG scheduled on the asset counted each report once. Airflow hands the events recorded while
    # its scheduler makes a run to the next run, which the next event starts: one more report (another
    # campaign's) ends the burst.
    extra = {"date": "2026-11-25T12:00:00+01:00", "status": 9, "destination": "33699000019", "campaign_id": 2}
    answer = httpx.post(
        balancer.url + RECEIVER,
        content=json.dumps(extra).encode(),
        headers={"Content-Type": "application/json", "X-SMSFactor-Signature": SIGNATURE},
        timeout=30,
    )
    assert answer.status_code == 200
    wait_for(
        "the consuming DAG to read every batch of the campaign",
        lambda: campaign_batches <= set(consumed(api, since)[0]),
        POSTING_TIMEOUT,
        interval=2,
    )
    batches, counted = consumed(api, since)
    assert {batch: batches[batch] for batch in campaign_batches} == dict.fromkeys(campaign_batches, 1)
    # What the runs' tasks counted is every report of the batches they were handed, once.
    assert counted == statuses_of_batches(deployment, set(batches))
    timings["two API servers: until the consuming DAG counted every report"] = time.monotonic() - began


def test_postgres_stopped_during_ingest_is_503_with_retry_after_and_nothing_is_lost(
    deployment: Deployment,
    api: AirflowApi,
    sandbox: InspectionClient,
    monkeypatch: pytest.MonkeyPatch,
    timings: dict[str, float],
) -> None:
    api.unpause(WAIT_DAG)
    numbers = numbers_of(PREFIX_B, NUMBERS_B)
    began = time.monotonic()
    send_campaign(deployment, sandbox, monkeypatch, deployment.api_url(0), TICKET_B, numbers)

    at_stop = wait_acknowledged(sandbox, NUMBERS_B // 4)
    stopped = time.monotonic()
    # The scheduler, the dag-processor and the triggerer exit without their database: a supervisor
    # would start them again, and so does the harness after the block (the sensor's run needs them).
    with deployment.postgres_down() as revived:
        wait_for(
            "the receiver to refuse reports while PostgreSQL is down",
            lambda: sandbox.delivery_report_counts()["answers"].get("503", 0) > 0,
            OUTAGE,
            interval=0.2,
        )
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - stopped)))
    timings["postgres down: from the stop to every component back"] = time.monotonic() - stopped
    # The API server, whose receiver answered 503 meanwhile, must not have needed it.
    assert "api-server" not in revived, deployment.processes["api-server"].log()[-3000:]
    run_id = trigger_wait(api, TICKET_B, NUMBERS_B)
    counts = wait_posted(sandbox, NUMBERS_B)
    timings["postgres down: 10,000 reports posted"] = time.monotonic() - began

    assert at_stop["acknowledged"] < NUMBERS_B  # stopped while reports were still arriving
    assert (counts["acknowledged"], counts["given_up"]) == (NUMBERS_B, 0)
    # The receiver's refusals: a database outage is a 503, nothing else, and each carries Retry-After.
    # Calls unanswered within the sandbox's 5 s ("0") are not refusals: the API server can be that slow
    # while the components that lost the database start again on two cores; they are retried too.
    refused = {code: n for code, n in counts["answers"].items() if code != "0" and not code.startswith("2")}
    assert set(refused) == {"503"}, counts["answers"]
    assert counts["retry_after"] == refused
    truth = acknowledged_keys(sandbox, TICKET_B)
    assert len(truth) == NUMBERS_B
    assert_stored_exactly_once(deployment, truth, TICKET_B)
    assert_sensor_counts_the_truth(api, run_id, truth)
    timings["postgres down: until the sensor's counts"] = time.monotonic() - began
