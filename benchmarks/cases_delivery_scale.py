"""Delivery reports at campaign scale, on the deployment of the delivery cases (PostgreSQL).

- Group commit on against off: the same reports posted to API server 0 (group commit on, the default)
  and to a second API server started with ``[sms] delivery_report_group_commit = 1`` (each report its
  own commit), alternately, by the same clients.
- The campaign summary (what the sensor polls) of a campaign of 1,000,000 numbers (a tenth of them
  with a "sent" report before their final one) against one of 10,000, through the API server; and its
  first page of failed numbers.
  The reports are stored by the receiver's own write (``benchmarks.report_loader``) and put in batches by
  the API server's flusher, whose pace is reported.
- The scheduler's memory while one run of the DAG scheduled on the asset consumes a 100,000-report
  campaign's events: it must stay near its memory at rest (docs/performance.md has the figures).
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from benchmarks.deployment_tools import asset_events, deployment_child, interleaved_medians, vacuum_analyze
from benchmarks.harness import NO_BASELINE, REPORT, Record, Target, record
from benchmarks.http_load import SIGNATURE, post_reports, report_bodies

if TYPE_CHECKING:
    from tests.deployment.harness import Deployment

DAG_ID = "sms_on_delivery_reports"
BIG_CAMPAIGN, SMALL_CAMPAIGN, MEMORY_CAMPAIGN = 8_100_001, 8_100_002, 8_100_003
# The summary's campaigns are received for a connection whose asset no DAG declares.
BIG_CONN_ID = "sms_unscheduled"
SUMMARY_CALLS = 40
# Group commit is kept only if it is faster than a commit per report.
GROUP_COMMIT_TARGET = Target(1.0)
SUMMARY_TARGET = Target(20, kind="bound")  # ms per call at 1,000,000 numbers
SUMMARY_FLAT_TARGET = Target(1.5)  # the same cost at 1,000,000 numbers as at 10,000
SCHEDULER_MEMORY_TARGET = Target(1.5)  # peak while the run is made and consumes, against at rest
MB = 1024 * 1024


def group_commit_records(deployment: Deployment, count: int) -> list[Record]:
    """Wall time per report with group commit against a commit per report (no asset event)."""
    off_server = 1
    deployment.start_api_server(off_server, AIRFLOW__SMS__DELIVERY_REPORT_GROUP_COMMIT="1")
    try:
        urls = {
            "on": f"{deployment.api_url(0)}/sms/delivery-reports/sms_unscheduled",
            "off": f"{deployment.api_url(off_server)}/sms/delivery-reports/sms_unscheduled",
        }
        post_reports(urls["off"], report_bodies(200, first=50 * count))  # warm up the new server
        elapsed = {"on": 0.0, "off": 0.0}
        first = 20 * count
        half = count // 2
        for side in ("off", "on", "on", "off"):  # alternately, so that drift weighs on both
            seconds, _, statuses = post_reports(urls[side], report_bodies(half, first=first))
            if statuses != {200: half}:
                raise RuntimeError(f"group commit {side}: answers were not all 200: {statuses}")
            elapsed[side] += seconds
            first += half
    finally:
        deployment.stop_api_server(off_server)
    return [
        record(
            "receive delivery reports, group commit on against off",
            2 * half,
            elapsed["on"] / (2 * half) * 1000,
            elapsed["off"] / (2 * half) * 1000,
            GROUP_COMMIT_TARGET,
            baseline_name="the same POSTs to a second API server with delivery_report_group_commit = 1",
            unit="ms",
            note=(
                f"{2 * half / elapsed['on']:.0f} reports/s with one INSERT and commit shared by the calls "
                f"under way; baseline: a second API server with delivery_report_group_commit = 1 "
                f"({2 * half / elapsed['off']:.0f}/s), the same clients, alternately"
            ),
        )
    ]


def load_campaign(deployment: Deployment, conn_id: str, campaign_id: int, numbers: int, prefix: str) -> int:
    """Store a campaign's reports through the receiver's write; how many were stored."""
    args = (conn_id, str(campaign_id), str(numbers), prefix)
    return int(deployment_child(deployment, "benchmarks.report_loader", *args)["stored"])


def wait_none_left(
    deployment: Deployment, count_sql: str, timeout: float, waiting_for: str, **params: Any
) -> float:
    """Seconds until ``count_sql`` (one count, on the metadata database) reads 0; RuntimeError naming
    ``waiting_for`` after ``timeout``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        ((left,),) = deployment.query(count_sql, **params)
        if left == 0:
            return time.monotonic() - began
        time.sleep(0.5)
    raise RuntimeError(f"{waiting_for} after {timeout:.0f} s")


def wait_batched(deployment: Deployment, conn_id: str, timeout: float) -> float:
    """Seconds until no report of ``conn_id`` waits for a batch (the API server's flusher)."""
    return wait_none_left(
        deployment,
        "SELECT count(*) FROM sms_delivery_report WHERE conn_id = :conn_id AND batch IS NULL",
        timeout,
        f"reports of {conn_id} still wait for a batch",
        conn_id=conn_id,
    )


def wait_runs_done(deployment: Deployment, dag_id: str, timeout: float) -> float:
    """Seconds until ``dag_id`` has no run queued on its assets' events and none queued or running."""
    return wait_none_left(
        deployment,
        "SELECT (SELECT count(*) FROM asset_dag_run_queue WHERE target_dag_id = :dag_id)"
        " + (SELECT count(*) FROM dag_run WHERE dag_id = :dag_id AND state IN ('queued', 'running'))",
        timeout,
        f"{dag_id} still has runs to make or finish",
        dag_id=dag_id,
    )


def summary_times(url: str, headers: dict[str, str], campaigns: list[int], failed: bool) -> dict[int, float]:
    """Median milliseconds of the summary of each campaign, the campaigns' calls interleaved."""
    flag = "true" if failed else "false"
    gets = {campaign: (url, {"campaign_id": str(campaign), "failed": flag}) for campaign in campaigns}
    return interleaved_medians(gets, headers, SUMMARY_CALLS)


def summary_records(deployment: Deployment, big: int, small: int) -> list[Record]:
    """The summary's cost at ``big`` numbers against ``small``, and the flusher's pace on the way."""
    from airflow_provider_sms.delivery_reports.settings import read_key

    began = time.monotonic()
    stored = load_campaign(deployment, BIG_CONN_ID, BIG_CAMPAIGN, big, "336")
    stored += load_campaign(deployment, BIG_CONN_ID, SMALL_CAMPAIGN, small, "337")
    # The flusher has been at it since the loader's first commit; what it has left is timed.
    tail = wait_batched(deployment, BIG_CONN_ID, timeout=1800)
    pace = stored / (time.monotonic() - began)
    vacuum_analyze(deployment)
    url = f"{deployment.api_url(0)}/sms/delivery-reports/{BIG_CONN_ID}/summary"
    headers = {"Authorization": f"Bearer {read_key(deployment.token)}"}
    plain = summary_times(url, headers, [BIG_CAMPAIGN, SMALL_CAMPAIGN], failed=False)
    with_failed = summary_times(url, headers, [BIG_CAMPAIGN, SMALL_CAMPAIGN], failed=True)
    big_summary = httpx.get(url, params={"campaign_id": BIG_CAMPAIGN}, headers=headers, timeout=60).json()
    return [
        record(
            f"delivery summary of a {big:,}-number campaign, per call",
            big,
            plain[BIG_CAMPAIGN],
            None,
            SUMMARY_TARGET,
            baseline_name=NO_BASELINE,
            unit="ms",
            note=(
                f"GET .../summary through the API server (the sensor's poke), median of {SUMMARY_CALLS}; "
                f"{big_summary['reported']:,} numbers reported, {big_summary['failed_count']:,} failed "
                f"(before: 1,137 ms, a window over every report)"
            ),
        ),
        record(
            f"delivery summary, {big:,} numbers against {small:,}",
            big,
            plain[BIG_CAMPAIGN],
            plain[SMALL_CAMPAIGN],
            SUMMARY_FLAT_TARGET,
            baseline_name=f"the same GET .../summary of a {small:,}-number campaign of the same table",
            unit="ms",
            note=f"the same call for a {small:,}-number campaign of the same table (before: 71x)",
        ),
        record(
            f"delivery summary with the first page of failed numbers, {big:,} numbers",
            big,
            with_failed[BIG_CAMPAIGN],
            with_failed[SMALL_CAMPAIGN],
            REPORT,
            baseline_name=f"the same GET .../summary?failed=true of a {small:,}-number campaign",
            unit="ms",
            note=(
                f"failed=true: the counts and the first 10,000 failed numbers (before: 4.3 s, every "
                f"number); baseline: the {small:,}-number campaign's ({with_failed[SMALL_CAMPAIGN]:.0f} ms)"
            ),
        ),
        record(
            "reports stored and put in batches per second",
            stored,
            pace,
            None,
            REPORT,
            baseline_name=NO_BASELINE,
            unit="count",
            note=(
                f"{stored:,} reports stored by the receiver's write in chunks of 5,000 while the API "
                f"server's flusher put them in batches; it finished {tail:.0f} s after the last commit "
                f"(the service delivers a campaign's reports at about 280/s)"
            ),
        ),
    ]


def tree_rss(root: int) -> int:
    """Resident bytes of process ``root`` and its descendants."""
    from tests.deployment.harness import descendants

    total = 0
    for pid in (root, *descendants(root)):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


class RssSampler(threading.Thread):
    """The peak resident memory of a process tree, sampled every 0.2 s until stopped."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.samples = root, [tree_rss(root)]
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.samples.append(tree_rss(self.root))

    def stop(self) -> list[int]:
        self.done.set()
        self.join(10)
        return self.samples


def newest_run(api: Any) -> dict[str, Any] | None:
    runs = api.call("GET", f"/dags/{DAG_ID}/dagRuns", params={"order_by": "-run_after", "limit": 1})
    return runs["dag_runs"][0] if runs["dag_runs"] else None


def scheduler_memory_record(deployment: Deployment, numbers: int) -> Record:
    """The scheduler's peak memory while one asset-triggered run consumes a campaign's report events."""
    api = deployment.api
    assert api is not None
    api.pause(DAG_ID)
    last = newest_run(api)
    if last is not None and last["state"] not in ("success", "failed"):
        api.wait_run(DAG_ID, last["dag_run_id"], timeout=300)
    events_before = asset_events(api)
    reports = load_campaign(deployment, "sms_default", MEMORY_CAMPAIGN, numbers, "338")
    wait_batched(deployment, "sms_default", timeout=600)
    events = asset_events(api) - events_before
    # A fresh scheduler: its memory at rest is not what earlier cases left.
    deployment.processes["scheduler"].stop()
    scheduler = deployment.start_component("scheduler")
    assert scheduler.popen is not None
    time.sleep(10)
    rest = RssSampler(scheduler.popen.pid)
    rest.start()
    time.sleep(10)
    at_rest = statistics.median(rest.stop())
    last_id, run = (last["dag_run_id"] if last else None), None
    sampler = RssSampler(scheduler.popen.pid)
    sampler.start()
    try:
        # Airflow queues no run for a paused DAG: after unpausing, one more report's event queues it.
        api.unpause(DAG_ID)
        body = report_bodies(1, first=30_000_000)[0]
        httpx.post(
            f"{deployment.api_url(0)}/sms/delivery-reports/sms_default",
            content=body,
            headers={"Content-Type": "application/json", "X-SMSFactor-Signature": SIGNATURE},
            timeout=30,
        ).raise_for_status()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            run = newest_run(api)
            if run is not None and run["dag_run_id"] != last_id and run["state"] in ("success", "failed"):
                break
            time.sleep(1)
    finally:
        peak = max(sampler.stop())
    outcome = "did not finish within 10 minutes"
    if run is not None and run["dag_run_id"] != last_id and run["state"] == "failed":
        outcome = f"failed (run {run['dag_run_id']})"
    elif run is not None and run["dag_run_id"] != last_id and run["state"] == "success":
        outcome = f"read {sum(api.xcom(DAG_ID, run['dag_run_id'], 'count_statuses').values()):,} reports"
    succeeded = outcome.startswith("read ")
    return record(
        f"scheduler memory while one run consumes a {numbers:,}-number campaign",
        numbers,
        peak,
        at_rest,
        # A run that never starts keeps the scheduler flat: the target holds only for one that read it all.
        SCHEDULER_MEMORY_TARGET if succeeded else REPORT,
        baseline_name="the same scheduler's RSS at rest, restarted before the run (median of 10 s)",
        unit="bytes",
        note=(
            f"scheduler RSS peak {peak / MB:.0f} MB against {at_rest / MB:.0f} MB at rest; {events} asset "
            f"event(s) for {reports:,} reports; the run {outcome} "
            f"(before: an event per report, 171 MB -> 1,009 MB, and the run never started)"
        ),
    )
