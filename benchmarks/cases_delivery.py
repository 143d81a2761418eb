"""Delivery reports received by the API server of the real deployment (tests/deployment/harness).

10,000 distinct reports are posted to ``/sms/delivery-reports/sms_default`` by 16 concurrent clients,
as the service posts them; each is checked and stored (group commit) before its 200, and the API
server's flusher puts them in asset events (an unpaused DAG of the deployment schedules on the asset)
meanwhile. Measured beside it, in the same run and through the same clients: the same number of
reports for a connection whose asset no DAG declares (stored, no asset event), and the baseline, the
receiver's ``GET .../_health`` on the same API server (it looks at the database at most every 5 s: the
floor of any request there), and the same POSTs refused at their signature (the floor of a POST with
its body). Then the asset events the 10,000 reports made are counted, the delay from a report's 200 to
the consuming task is timed, and the cases at campaign scale run on the same deployment
(:mod:`benchmarks.cases_delivery_scale`). The load generator runs on the same two cores as the API
server, PostgreSQL and the rest of the deployment.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import cases_campaigns_page, cases_delivery_scale
from benchmarks.deployment_tools import asset_events
from benchmarks.harness import NO_BASELINE, REPORT, Record, Target, record, skipped
from benchmarks.http_load import CONCURRENCY, SIGNATURE, get_noop, post_reports, report_bodies

# Wall time per report against the no-op GET: with a DAG on the asset, and without.
PER_REPORT_TARGET = Target(1.5)
NO_EVENT_TARGET = Target(1.3)
# Asset events per 10,000 reports (batches of up to 1,000, a partial one every 5 s at most).
EVENTS_TARGET = Target(20, kind="bound")
NOOP_GET = "the receiver's no-op GET .../_health on the same API server, through the same clients"


def settled_events(api: Any, timeout: float = 60.0) -> int:
    """The asset's event count once the flusher has caught up (unchanged for twice its interval)."""
    deadline = time.monotonic() + timeout
    count, since = asset_events(api), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = asset_events(api)
        if now != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since >= 11:
            break
    return count


def delivery_delays(api_url: str, api: Any, token: str, count: int = 300, rate: float = 10.0) -> list[float]:
    """Seconds from each report's 200 to the end of the consuming DAG's task that read it.

    ``count`` reports are posted one by one, ``rate`` a second (a campaign's reports trickling in);
    each run of the DAG scheduled on the asset names its triggering events (Airflow's REST API), each
    event its batch, and each batch its reports (the receiver's batch endpoint).
    """
    from airflow_provider_sms.delivery_reports.client import ReceiverAccess, fetch_batch
    from airflow_provider_sms.delivery_reports.settings import read_key

    started = time.time()
    acknowledged: dict[str, float] = {}
    bodies = report_bodies(count, first=10_000_000)
    headers = {"Content-Type": "application/json", "X-SMSFactor-Signature": SIGNATURE}
    with httpx.Client(timeout=30) as client:
        for index, body in enumerate(bodies):
            answer = client.post(f"{api_url}/sms/delivery-reports/sms_default", content=body, headers=headers)
            answer.raise_for_status()
            acknowledged[json.loads(body)["destination"]] = time.time()
            time.sleep(max(0.0, started + (index + 1) / rate - time.time()))
    access = ReceiverAccess("sms_default", {"dlr_api_url": api_url}, read_key(token))
    seen: dict[str, float] = {}
    runs_read: set[str] = set()
    deadline = time.monotonic() + 120
    while len(seen) < count and time.monotonic() < deadline:
        time.sleep(2)
        runs = api.call("GET", "/dags/sms_on_delivery_reports/dagRuns", params={"limit": 100})["dag_runs"]
        for run in runs:
            if run["state"] != "success" or run["dag_run_id"] in runs_read:
                continue
            runs_read.add(run["dag_run_id"])
            task = api.task_instances("sms_on_delivery_reports", run["dag_run_id"])["count_statuses"]
            ended = timestamp_of(task["end_date"])
            if ended < started:
                continue
            path = f"/dags/sms_on_delivery_reports/dagRuns/{run['dag_run_id']}/upstreamAssetEvents"
            for event in api.call("GET", path)["asset_events"]:
                if "batch" in (event.get("extra") or {}):
                    for report in fetch_batch(access, int(event["extra"]["batch"])):
                        if report.destination in acknowledged:
                            seen[report.destination] = ended
    return [seen[number] - at for number, at in acknowledged.items() if number in seen]


def timestamp_of(text: str) -> float:
    """An ISO 8601 date of the REST API as a POSIX timestamp."""
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def percentile(values: list[float], share: float) -> float:
    """The value below which ``share`` of ``values`` lie (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def delivery_report_cases(count: int, campaigns: int) -> list[Record]:
    """The receiver's throughput and p99 latency on the deployment, then the cases at campaign scale and
    the campaigns page with ``campaigns`` campaigns; skipped when it cannot start."""
    name = "receive delivery reports (API server)"
    try:
        from tests.deployment.harness import DeploymentError, running_deployment
    except ImportError as exc:
        return [
            skipped(
                name,
                count,
                PER_REPORT_TARGET,
                f"the deployment harness is not importable ({exc})",
                baseline_name=NOOP_GET,
            )
        ]
    from airflow_provider_sms.sandbox.testing import TEST_TOKEN

    with tempfile.TemporaryDirectory(prefix="bench-deployment-") as root:
        try:
            with running_deployment(Path(root), TEST_TOKEN) as deployment:
                api = f"http://127.0.0.1:{deployment.ports['api']}"
                assert deployment.api is not None
                # A DAG schedules on sms_default's asset, so that every report also records an asset event.
                deployment.api.unpause("sms_on_delivery_reports")
                receiver = f"{api}/sms/delivery-reports"
                post_reports(f"{receiver}/sms_default", report_bodies(200, first=count * 2))  # warm up
                get_noop(f"{receiver}/_health", 200)
                events_before = settled_events(deployment.api)
                ours, latencies, statuses = post_reports(f"{receiver}/sms_default", report_bodies(count))
                events = settled_events(deployment.api) - events_before
                bare, _, bare_statuses = post_reports(
                    f"{receiver}/sms_unscheduled", report_bodies(count, first=count)
                )
                baseline, noop_latencies = get_noop(f"{receiver}/_health", count)
                # The same POSTs refused at the signature: request and body, nothing decoded or stored.
                floor, _, floor_statuses = post_reports(
                    f"{receiver}/sms_unscheduled", report_bodies(count, first=count), signature="not-it"
                )
                delays = delivery_delays(api, deployment.api, TEST_TOKEN)
                scale = [
                    *cases_delivery_scale.group_commit_records(deployment, count),
                    *cases_delivery_scale.summary_records(deployment, 100 * count, count),
                    # One of the campaigns is the summary's big one, stored and batched just above.
                    *cases_campaigns_page.campaign_page_cases(
                        deployment,
                        campaigns,
                        100 * count,
                        cases_delivery_scale.BIG_CONN_ID,
                        cases_delivery_scale.BIG_CAMPAIGN,
                    ),
                    cases_delivery_scale.scheduler_memory_record(deployment, 10 * count),
                ]
        except DeploymentError as exc:
            return [
                skipped(
                    name,
                    count,
                    PER_REPORT_TARGET,
                    f"the deployment did not start ({exc})",
                    baseline_name=NOOP_GET,
                )
            ]
    statuses = {
        code: statuses.get(code, 0) + bare_statuses.get(code, 0) for code in {*statuses, *bare_statuses}
    }
    if statuses != {200: 2 * count} or floor_statuses != {403: count}:
        answers = f"{statuses} (refused at the signature: {floor_statuses})"
        return [
            skipped(
                name,
                count,
                PER_REPORT_TARGET,
                f"answers were not all as expected: {answers}",
                baseline_name=NOOP_GET,
            )
        ]
    rate = count / ours
    per_10k = events * 10_000 / count
    return [
        record(
            name,
            count,
            ours / count * 1000,
            baseline / count * 1000,
            PER_REPORT_TARGET,
            baseline_name=NOOP_GET,
            unit="ms",
            note=(
                f"{rate:.0f} reports/s, stored (group commit) while the flusher makes the asset events "
                f"({CONCURRENCY} concurrent clients, a DAG scheduled on the asset); baseline: the "
                f"receiver's GET _health on the same API server, {count / baseline:.0f}/s"
            ),
        ),
        record(
            "receive delivery reports, no asset event",
            count,
            bare / count * 1000,
            baseline / count * 1000,
            NO_EVENT_TARGET,
            baseline_name=NOOP_GET,
            unit="ms",
            note=f"{count / bare:.0f} reports/s for a connection whose asset no DAG declares (stored only)",
        ),
        record(
            "POST of a delivery report refused at its signature, against the no-op GET",
            count,
            floor / count * 1000,
            baseline / count * 1000,
            REPORT,
            baseline_name=NOOP_GET,
            unit="ms",
            note=(
                f"{count / floor:.0f}/s: the API server's cost of a POST with its body (read through "
                "Airflow's middlewares) and the receiver's checks, nothing decoded or stored, plus a log "
                "line per refusal: the floor under the two cases above"
            ),
        ),
        record(
            "asset events per 10,000 delivery reports",
            count,
            per_10k,
            None,
            EVENTS_TARGET,
            baseline_name=NO_BASELINE,
            unit="count",
            note=f"{events} event(s) for {count} reports (batches of up to 1,000; before: one per report)",
        ),
        record(
            "delay from a report's 200 to the consuming DAG's task, p50",
            len(delays),
            percentile(delays, 0.5) if delays else None,
            None,
            REPORT,
            baseline_name=NO_BASELINE,
            unit="s",
            note=(
                "300 reports at 10/s; each report's 200 to the end of the task (of the DAG scheduled on the "
                f"asset) that read it; p99 {percentile(delays, 0.99) if delays else float('nan'):.1f} s; "
                f"{len(delays)} of 300 seen within 2 minutes"
            ),
        ),
        record(
            "delivery report p99 latency",
            count,
            p99(latencies) * 1000,
            p99(noop_latencies) * 1000,
            REPORT,
            baseline_name="the 99th percentile of the no-op GET _health",
            unit="ms",
            note="99th percentile of one report's round trip (with its asset event), against the no-op's",
        ),
        *scale,
    ]
