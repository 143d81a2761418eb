"""Delivery reports received by the API server of the real deployment (tests/deployment/harness).

10,000 distinct reports are posted to ``/sms/delivery-reports/sms_default`` by 16 concurrent clients,
as the service posts them; each is checked and stored (group commit) before its 200, and the API
server's flusher puts them in asset events (an unpaused DAG of the deployment schedules on the asset)
meanwhile. Measured beside it, in the same run, through the same clients and in the same rounds: the
same number of reports for a connection whose asset no DAG declares (stored, no asset event); the
baseline of both, the same POSTs refused at their signature (the floor of any POST with its body
through Airflow's API server: nothing decoded or stored); and the receiver's ``GET .../_health`` (it
looks at the database at most every 5 s: the floor of any request there), against which the refused
POST is reported. Then the asset events the 10,000 reports made are counted, the delay from a report's
200 to the consuming task is timed, and the cases at campaign scale run on the same deployment
(:mod:`benchmarks.cases_delivery_scale`). The load generator runs on the same two cores as the API
server, PostgreSQL and the rest of the deployment.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from benchmarks import (
    cases_campaign,
    cases_campaigns_page,
    cases_claims,
    cases_delivery_scale,
    cases_send_cost,
)
from benchmarks.claim_path import API_SERVER
from benchmarks.deployment_tools import asset_events
from benchmarks.harness import NO_BASELINE, REPORT, Record, Target, record, skipped
from benchmarks.http_load import CONCURRENCY, SIGNATURE, get_noop, post_reports, report_bodies

if TYPE_CHECKING:
    from tests.deployment.harness import Deployment

# Wall time per stored report against a POST refused at its signature: with a DAG on the asset, and
# without (what the receiver adds to the floor of a POST through Airflow's API server).
PER_REPORT_TARGET = Target(1.3)
NO_EVENT_TARGET = Target(1.2)
# Asset events per 10,000 reports (batches of up to 1,000, a partial one every 5 s at most).
EVENTS_TARGET = Target(20, kind="bound")
# The ingest sides take turns in this many rounds (the order reversed every other round), so that drift
# in the machine's load weighs on each alike; each round waits for the flusher to batch what it stored.
ROUNDS = 8
# Calls a side for each report the group is sized with: the refused POST, the floor, moves more from
# round to round than a stored report, and only a longer measurement averages that out.
INGEST_CALLS_PER_REPORT = 2
REFUSED_POST = (
    "the same POSTs refused at their signature (403: body read, nothing decoded or stored), on the same "
    "API server through the same clients, in the same rounds"
)
NOOP_GET = "the receiver's no-op GET .../_health on the same API server, through the same clients"
# Numbers of the send claimed through the deployment's API server, per report of the ingest cases.
SEND_PER_REPORT = 100
# The DAG scheduled on sms_default's asset.
CONSUMING_DAG = "sms_on_delivery_reports"
NAMES = {
    "dag": "receive delivery reports, DAG on the asset, against a POST refused at its signature",
    "stored": "receive delivery reports, no asset event, against a POST refused at its signature",
    "refused": "POST of a delivery report refused at its signature, against the no-op GET",
}


def skipped_records(count: int, reason: str) -> list[Record]:
    """The ingest cases with targets (and the floor's row), and the claims' cases on the deployment,
    skipped with ``reason``."""
    calls = INGEST_CALLS_PER_REPORT * count
    return [
        skipped(NAMES["dag"], calls, PER_REPORT_TARGET, reason, baseline_name=REFUSED_POST, unit="ms"),
        skipped(NAMES["stored"], calls, NO_EVENT_TARGET, reason, baseline_name=REFUSED_POST, unit="ms"),
        skipped(NAMES["refused"], calls, REPORT, reason, baseline_name=NOOP_GET, unit="ms"),
        *cases_send_cost.skipped_records(API_SERVER, reason),
        *cases_campaign.skipped_records(SEND_PER_REPORT * count, API_SERVER, reason),
        *cases_claims.skipped_records(reason),
    ]


@dataclass
class IngestSide:
    """One ingest side's calls over every round: the wall times, each call's latency, the answers."""

    rounds: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    answers: dict[int, int] = field(default_factory=dict)

    def per_call_ms(self, calls: int, *, best: bool = False) -> float:
        """Milliseconds per call over all rounds of ``calls`` calls, or with ``best`` in the best one.

        The rows take all rounds: under concurrent load the cheap baseline's best round drops further
        than a stored side's, so a ratio of best rounds swings more than the cost it compares.
        """
        seconds = min(self.rounds) if best else sum(self.rounds) / len(self.rounds)
        return seconds / calls * 1000


def ingest_rounds(deployment: Deployment, receiver: str, count: int) -> dict[str, IngestSide]:
    """Each side's figures over :data:`ROUNDS` rounds of ``count // ROUNDS`` calls: reports for
    sms_default (a DAG on its asset), reports for sms_unscheduled (no DAG), the latter refused at their
    signature, and the no-op GET.

    After a side that stored reports, the round waits until the flusher has batched them (and made their
    asset events) and, after the DAG side, until the runs those events queued are done, so that its work
    does not fall on the next side's calls.
    """
    chunk = count // ROUNDS

    def call(side: str, first: int) -> tuple[float, list[float], dict[int, int]]:
        if side == "dag":
            done = post_reports(f"{receiver}/sms_default", report_bodies(chunk, first=first))
            cases_delivery_scale.wait_batched(deployment, "sms_default", timeout=120)
            # The runs the asset events queue are the DAG side's work, not the next side's.
            cases_delivery_scale.wait_runs_done(deployment, CONSUMING_DAG, timeout=300)
        elif side == "stored":
            done = post_reports(f"{receiver}/sms_unscheduled", report_bodies(chunk, first=count + first))
            cases_delivery_scale.wait_batched(deployment, "sms_unscheduled", timeout=120)
        elif side == "refused":
            # Reports that are not stored: the same bodies as the stored side's, a wrong signature.
            bodies = report_bodies(chunk, first=count + first)
            done = post_reports(f"{receiver}/sms_unscheduled", bodies, signature="not-it")
        else:
            elapsed, latencies = get_noop(f"{receiver}/_health", chunk)
            done = (elapsed, latencies, {200: chunk})
        return done

    sides = {side: IngestSide() for side in ("dag", "stored", "refused", "noop")}
    order = list(sides)
    for round_ in range(ROUNDS):
        for side in order if round_ % 2 == 0 else reversed(order):
            elapsed, latencies, statuses = call(side, round_ * chunk)
            figures = sides[side]
            figures.rounds.append(elapsed)
            figures.latencies.extend(latencies)
            for code, number in statuses.items():
                figures.answers[code] = figures.answers.get(code, 0) + number
    return sides


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


def delivery_report_cases(count: int, campaigns: int, send_reps: int, cost_reps: int) -> list[Record]:
    """The receiver's throughput and p99 latency on the deployment, then the cases at campaign scale, the
    campaigns page with ``campaigns`` campaigns, and the claims through the API server (a send's fixed
    cost, ``cost_reps`` runs; a send of ``SEND_PER_REPORT * count`` numbers, ``send_reps`` runs; claims
    at once); skipped when it cannot start."""
    try:
        from tests.deployment.harness import DeploymentError, running_deployment
    except ImportError as exc:
        return skipped_records(count, f"the deployment harness is not importable ({exc})")
    from airflow_provider_sms.sandbox.testing import TEST_TOKEN

    calls = INGEST_CALLS_PER_REPORT * count
    with tempfile.TemporaryDirectory(prefix="bench-deployment-") as root:
        try:
            with running_deployment(Path(root), TEST_TOKEN) as deployment:
                api = f"http://127.0.0.1:{deployment.ports['api']}"
                assert deployment.api is not None
                # A DAG schedules on sms_default's asset, so that every report also records an asset event.
                deployment.api.unpause(CONSUMING_DAG)
                receiver = f"{api}/sms/delivery-reports"
                # Warm up every side: each connection's first calls (its settings read, its writer) are
                # not what a report costs.
                post_reports(f"{receiver}/sms_default", report_bodies(200, first=calls * 2))
                post_reports(f"{receiver}/sms_unscheduled", report_bodies(200, first=calls * 3))
                post_reports(
                    f"{receiver}/sms_unscheduled", report_bodies(200, first=calls * 3), signature="not-it"
                )
                get_noop(f"{receiver}/_health", 200)
                events_before = settled_events(deployment.api)
                sides = ingest_rounds(deployment, receiver, calls)
                events = settled_events(deployment.api) - events_before
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
                    *cases_send_cost.api_server_send_cost_cases(deployment, cost_reps),
                    *cases_campaign.api_server_send_cases(deployment, SEND_PER_REPORT * count, send_reps),
                    *cases_claims.concurrent_claims_records(deployment),
                ]
        except DeploymentError as exc:
            return skipped_records(count, f"the deployment did not start ({exc})")
    answers = {side: figures.answers for side, figures in sides.items()}
    size = calls // ROUNDS * ROUNDS
    expected = {"dag": {200: size}, "stored": {200: size}, "refused": {403: size}, "noop": {200: size}}
    if answers != expected:
        return skipped_records(count, f"answers were not all as expected: {answers}")
    per_call = {side: figures.per_call_ms(size // ROUNDS) for side, figures in sides.items()}
    best = {side: figures.per_call_ms(size // ROUNDS, best=True) for side, figures in sides.items()}
    how = (
        f"{CONCURRENCY} concurrent clients, {ROUNDS} rounds of {size // ROUNDS:,} calls a side, the sides in "
        "turn (the order reversed every other round), each round's stored reports batched (and the DAG runs "
        "they queued done) before the next side's calls"
    )

    def round_figures(side: str) -> str:
        per_round = ", ".join(
            f"{ours / refused:.2f}"
            for ours, refused in zip(sides[side].rounds, sides["refused"].rounds, strict=True)
        )
        return f"each side's best round {best[side] / best['refused']:.2f}x; round by round {per_round}"

    def against_get(side: str) -> str:
        return f"{per_call[side] / per_call['noop']:.2f}x the no-op GET _health"

    per_10k = events * 10_000 / size
    return [
        record(
            NAMES["dag"],
            size,
            per_call["dag"],
            per_call["refused"],
            PER_REPORT_TARGET,
            baseline_name=REFUSED_POST,
            unit="ms",
            note=(
                f"{1000 / per_call['dag']:.0f} reports/s, each checked, decoded and stored (group commit) "
                f"before its 200 while the flusher makes the asset events (a DAG scheduled on the asset); "
                f"baseline: the same POSTs refused at their signature, {1000 / per_call['refused']:.0f}/s; "
                f"{round_figures('dag')}; {against_get('dag')}; {how}"
            ),
        ),
        record(
            NAMES["stored"],
            size,
            per_call["stored"],
            per_call["refused"],
            NO_EVENT_TARGET,
            baseline_name=REFUSED_POST,
            unit="ms",
            note=(
                f"{1000 / per_call['stored']:.0f} reports/s for a connection whose asset no DAG declares "
                f"(stored only); {round_figures('stored')}; {against_get('stored')}"
            ),
        ),
        record(
            NAMES["refused"],
            size,
            per_call["refused"],
            per_call["noop"],
            REPORT,
            baseline_name=NOOP_GET,
            unit="ms",
            note=(
                f"{1000 / per_call['refused']:.0f}/s: the API server's cost of a POST with its body (read "
                "through Airflow's middlewares) and the receiver's checks, nothing decoded or stored, plus a "
                "log line per refusal: the baseline of the two cases above; the no-op GET "
                f"{1000 / per_call['noop']:.0f}/s"
            ),
        ),
        record(
            "asset events per 10,000 delivery reports",
            size,
            per_10k,
            None,
            EVENTS_TARGET,
            baseline_name=NO_BASELINE,
            unit="count",
            note=f"{events} event(s) for {size} reports (batches of up to 1,000; before: one per report)",
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
            size,
            p99(sides["dag"].latencies) * 1000,
            p99(sides["noop"].latencies) * 1000,
            REPORT,
            baseline_name="the 99th percentile of the no-op GET _health",
            unit="ms",
            note="99th percentile of one report's round trip (with its asset event), against the no-op's",
        ),
        *scale,
    ]
