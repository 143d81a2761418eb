"""The campaigns page's JSON API at scale, on the deployment of the delivery cases (PostgreSQL).

10,000 campaigns are left as the send tasks leave them: one run of each of four send DAGs is triggered
(the DAGs are paused: nothing runs) and copied in SQL into 2,500 finished runs a DAG, each with its
``send`` task instance and its campaign record (the XCom ``sms_campaign``, a ``CampaignRecord`` of 1 to
3 batches, sent over the last 90 days); the API server's own indexer copies them into the provider's
table. Each batch's ticket gets the delivery counts the flusher keeps, so the list computes delivery.
One of the campaigns is the 1,000,000-number campaign of the summary case (its reports stored by the
receiver's write and batched by the flusher).

- Page 1 of the list (``GET .../campaigns``: the 50 newest with their delivery) and that campaign's page
  (``GET .../campaigns/{id}``: counts, delivery over time, failures by status and country, the first 100
  failed numbers), each against the route's own authenticated floor, the list of one campaign of one DAG
  for the same user (the token's check, one question to the auth manager, one indexed statement); and
  each against Airflow's own list of DAG runs (50 of as many runs as campaigns), which it must stay
  below. One client, as an admin (who may edit: numbers in full), every GET in turn, median of 40 rounds.
- For scale, in the same rounds: Airflow's own lists of DAG runs and of DAGs against the same floor, and
  the floor against the receiver's no-op ``GET .../_health`` (no login: the floor of any request there).
- The indexer's look (every 5 s on each API server) with the 10,000 records kept in XCom, against the
  same look before they were pushed.
"""

from __future__ import annotations

import json
import os
import random
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from benchmarks.deployment_tools import deployment_child, interleaved_medians, vacuum_analyze
from benchmarks.harness import REPORT, Record, Target, record, skipped

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sqlalchemy.engine import Connection

    from tests.deployment.harness import Deployment

# The send DAGs of the deployment whose runs carry the campaigns (each has a task "send").
DAGS = ("sms_first_campaign", "sms_weekly_campaign", "sms_triggered_by_data", "deployment_send")
SEND_TASK = "send"
RUN_PREFIX = "bench_campaigns__"
# The campaigns' connection and the first ticket (campaign id) of their batches.
CONN_ID, FIRST_TICKET = "sms_default", 9_000_000
# Sent over the last 90 days: page 1 holds campaigns still being delivered and finished ones.
SPREAD = timedelta(days=90)
# Rounds of the three GETs, and looks of the indexer, each side's median kept.
CALLS, LOOKS = 40, 40
# Against the route's floor: what page 1 and a campaign's page add to the cheapest authenticated call.
PAGE_TARGET = Target(1.5)
CAMPAIGN_TARGET = Target(1.5)
# Against Airflow's own list of DAG runs: each of our pages costs less than it.
BELOW_AIRFLOW_RUNS = Target(1.0)
API = "/sms/campaigns/api/v1/campaigns"
PAGE = 50  # campaigns on page 1 (the API's default)
HEALTH = "/sms/delivery-reports/_health"
NOOP_GET = "the receiver's no-op GET .../_health on the same API server, in the same rounds"
FLOOR = (
    "the route's floor: GET .../campaigns?limit=1&dag_id=<one DAG> (one campaign of one DAG) for the same "
    "user, in the same rounds"
)
AIRFLOW_RUNS_LIST = (
    "Airflow's own GET /api/v2/dags/~/dagRuns (the 50 newest of as many runs as campaigns) for the same "
    "user, in the same rounds"
)
LOOK_BEFORE = "the same look before the records were pushed"
# The route's floor: the token's check, one question to the auth manager (one DAG), one statement, one
# campaign.
FLOOR_PARAMS = {"limit": "1", "dag_id": DAGS[0]}
# Airflow's own lists behind the same login, for scale: the DAG runs (as many as campaigns) and the DAGs.
AIRFLOW_RUNS = "/api/v2/dags/~/dagRuns"
AIRFLOW_DAGS = "/api/v2/dags"


def names(campaigns: int, big: int) -> dict[str, str]:
    """The cases' names: page 1 and the big campaign's page against the floor and against Airflow's list
    of DAG runs, the indexer's look, Airflow's own two lists, the floor."""
    return {
        "page": f"campaigns page 1 ({PAGE} of {campaigns:,} campaigns), against the route's floor",
        "campaign": f"a campaign of {big:,} numbers on its page, against the route's floor",
        "page_runs": (
            f"campaigns page 1 ({PAGE} of {campaigns:,} campaigns), against Airflow's own list of DAG runs"
        ),
        "campaign_runs": f"a campaign of {big:,} numbers on its page, against Airflow's own list of DAG runs",
        "look": f"campaign indexer, one look with {campaigns:,} records kept in XCom",
        "runs": (
            f"Airflow's own GET /api/v2/dags/~/dagRuns ({PAGE} of {campaigns:,} runs), "
            "against the route's floor"
        ),
        "dags": f"Airflow's own GET /api/v2/dags (the {len(DAGS)} DAGs), against the route's floor",
        "floor": "campaigns list of 1 campaign of one DAG (the route's floor), against the no-op GET",
    }


def rows(campaigns: int, big: int) -> dict[str, tuple[int, Target, str]]:
    """Each case's size, target and baseline, by the keys of :func:`names` and in the table's order."""
    return {
        "page": (campaigns, PAGE_TARGET, FLOOR),
        "campaign": (big, CAMPAIGN_TARGET, FLOOR),
        "page_runs": (campaigns, BELOW_AIRFLOW_RUNS, AIRFLOW_RUNS_LIST),
        "campaign_runs": (big, BELOW_AIRFLOW_RUNS, AIRFLOW_RUNS_LIST),
        "look": (campaigns, REPORT, LOOK_BEFORE),
        "runs": (campaigns, REPORT, FLOOR),
        "dags": (len(DAGS), REPORT, FLOOR),
        "floor": (1, REPORT, NOOP_GET),
    }


def skipped_records(campaigns: int, big: int, reason: str) -> list[Record]:
    """Every case of the campaigns page, skipped with ``reason``."""
    title = names(campaigns, big)
    return [
        skipped(title[key], size, target, reason, baseline_name=baseline, unit="ms")
        for key, (size, target, baseline) in rows(campaigns, big).items()
    ]


def campaign_page_cases(
    deployment: Deployment, campaigns: int, big: int, big_conn_id: str, big_campaign: int
) -> list[Record]:
    """:func:`campaign_page_records`, or the cases skipped with the reason when they cannot be made (the
    other delivery cases of the run stand)."""
    import requests
    from httpx import HTTPError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return campaign_page_records(deployment, campaigns, big, big_conn_id, big_campaign)
    except (RuntimeError, HTTPError, requests.RequestException, SQLAlchemyError) as exc:
        return skipped_records(campaigns, big, f"{type(exc).__name__}: {str(exc)[:300]}")


def campaign_page_records(
    deployment: Deployment, campaigns: int, big: int, big_conn_id: str, big_campaign: int
) -> list[Record]:
    """Page 1 with ``campaigns`` campaigns and the page of the ``big``-number campaign (``big_campaign``
    of ``big_conn_id``, already stored and batched), against the no-op GET; the indexer's look."""
    title = names(campaigns, big)
    before = deployment_child(deployment, "benchmarks.indexer_look", "--looks", str(LOOKS))
    began = time.monotonic()
    runs = make_runs(deployment, campaigns)
    records = campaign_records(runs, big, big_conn_id, big_campaign)
    push_records(deployment, runs, records)
    made = time.monotonic() - began
    indexed = wait_indexed(deployment, campaigns, timeout=900)
    after = deployment_child(deployment, "benchmarks.indexer_look", "--looks", str(LOOKS))
    vacuum_analyze(deployment)  # as autovacuum would after the load

    ((big_row,),) = deployment.query(
        "SELECT id FROM sms_campaign WHERE conn_id = :conn_id AND run_id LIKE :prefix",
        conn_id=big_conn_id,
        prefix=RUN_PREFIX + "%",
    )
    assert deployment.api is not None
    headers = {"Authorization": deployment.api.session.headers["Authorization"]}
    base = deployment.api_url(0)
    _, detail = check_answers(base, headers, big_row, big)
    medians = interleaved_medians(
        {
            "page": (f"{base}{API}", {}),
            "health": (f"{base}{HEALTH}", {}),
            "campaign": (f"{base}{API}/{big_row}", {}),
            "airflow_runs": (f"{base}{AIRFLOW_RUNS}", {"limit": PAGE, "order_by": "-run_after"}),
            "airflow_dags": (f"{base}{AIRFLOW_DAGS}", {"limit": PAGE}),
            "floor": (f"{base}{API}", FLOOR_PARAMS),
        },
        headers,
        CALLS,
    )
    delivery = detail["campaign"]["delivery"]
    how = (
        f"median of {CALLS}, one client, every GET of the case in turn; load average "
        f"{os.getloadavg()[0]:.1f} after them"
    )
    page_note = (
        f"GET {API} as an admin: the {PAGE} newest with their delivery (kept on their rows: their tickets' "
        f"counts summed) ({len(DAGS)} DAGs, 1-3 batches a campaign)"
    )
    campaign_note = (
        f"GET {API}/{{id}}: {sum(delivery['by_status'].values()):,} numbers reported, "
        f"{delivery['failed']:,} failed; {len(detail['timeline'])} points of delivery over time, failures by "
        f"status and country, the first {len(detail['failed']['numbers'])} failed numbers"
    )

    def against(key: str) -> str:
        return f"{medians[key] / medians['health']:.2f}x the no-op GET _health"

    # ours, baseline and note of each case, by the keys of rows().
    figures = {
        "page": (medians["page"], medians["floor"], f"{page_note}; {against('page')}; {how}"),
        "campaign": (medians["campaign"], medians["floor"], f"{campaign_note}; {against('campaign')}; {how}"),
        "page_runs": (
            medians["page"],
            medians["airflow_runs"],
            f"page 1 as above, against Airflow's list of the {PAGE} newest runs of {campaigns:,}; {how}",
        ),
        "campaign_runs": (
            medians["campaign"],
            medians["airflow_runs"],
            f"the campaign's page as above, against Airflow's list of the {PAGE} newest runs; {how}",
        ),
        "look": (
            after["median_ms"],
            before["median_ms"],
            f"index_records() in its own transaction (nothing new to copy), median of {LOOKS} looks "
            f"(min {after['min_ms']:.1f} ms); baseline: the same look before the records were pushed "
            f"(min {before['min_ms']:.1f} ms); each API server looks every 5 s. The {campaigns:,} runs "
            f"and records were made in {made:.0f} s, copied by the API server's indexer in "
            f"{indexed:.0f} s",
        ),
        "runs": (
            medians["airflow_runs"],
            medians["floor"],
            f"the {PAGE} newest DAG runs of every DAG, as an admin (Airflow's list of this size), for "
            f"scale; {against('airflow_runs')}; {how}",
        ),
        "dags": (
            medians["airflow_dags"],
            medians["floor"],
            f"the DAGs page's list, as an admin, for scale; {against('airflow_dags')}; {how}",
        ),
        "floor": (
            medians["floor"],
            medians["health"],
            f"GET {API}?limit=1&dag_id={DAGS[0]}: the token's check (with Airflow's revoked-token "
            f"lookup), one question to the auth manager about one DAG, one indexed statement, one "
            f"campaign in JSON: what any route of this API pays, the baseline of the pages above; the "
            f"no-op GET needs no login; {how}",
        ),
    }
    return [
        record(
            title[key],
            size,
            figures[key][0],
            figures[key][1],
            target,
            baseline_name=baseline,
            unit="ms",
            note=figures[key][2],
        )
        for key, (size, target, baseline) in rows(campaigns, big).items()
    ]


def make_runs(deployment: Deployment, count: int) -> list[tuple[int, str, str]]:
    """``count`` finished runs of the send DAGs, each with its send task instance: (id, dag_id, run_id)."""
    assert deployment.api is not None
    templates = {dag_id: deployment.api.trigger(dag_id) for dag_id in DAGS}
    per_dag = -(-count // len(DAGS))
    with database(deployment) as connection:
        for dag_id, template in templates.items():
            params = {"dag_id": dag_id, "template": template}
            run_id = f"'{RUN_PREFIX}' || lpad(g::text, 5, '0')"
            clone_rows(
                connection,
                "dag_run",
                "dag_id = :dag_id AND run_id = :template",
                {"run_id": run_id, "state": "'success'"},
                per_dag,
                params,
            )
            clone_rows(
                connection,
                "task_instance",
                f"dag_id = :dag_id AND run_id = :template AND task_id = '{SEND_TASK}'",
                {"id": "gen_random_uuid()", "run_id": run_id, "state": "'success'"},
                per_dag,
                params,
            )
        from sqlalchemy import text

        found = connection.execute(
            text("SELECT id, dag_id, run_id FROM dag_run WHERE run_id LIKE :prefix ORDER BY run_id, dag_id"),
            {"prefix": RUN_PREFIX + "%"},
        ).all()
    if len(found) < count:
        raise RuntimeError(f"{len(found)} runs made for {count} campaigns")
    return [(int(row.id), str(row.dag_id), str(row.run_id)) for row in found[:count]]


def clone_rows(
    connection: Connection,
    table: str,
    where: str,
    replace: dict[str, str],
    copies: int,
    params: dict[str, Any],
) -> None:
    """Insert ``copies`` copies of the rows of ``table`` matching ``where``: every column as it is but
    those ``replace`` gives SQL for (over ``g``, the copy's number from 1) and those PostgreSQL fills."""
    from sqlalchemy import text

    columns = [
        name
        for (name,) in connection.execute(
            text(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = :table AND is_generated = 'NEVER' AND is_identity = 'NO' "
                "AND coalesce(column_default, '') NOT LIKE 'nextval(%'"
            ),
            {"table": table},
        )
    ]
    values = ", ".join(replace.get(name, f'"{name}"') for name in columns)
    names = ", ".join(f'"{name}"' for name in columns)
    connection.execute(
        text(
            f"INSERT INTO {table} ({names}) SELECT {values} FROM {table}, generate_series(1, :copies) AS g "
            f"WHERE {where}"
        ),
        {**params, "copies": copies},
    )


def campaign_records(
    runs: list[tuple[int, str, str]], big: int, big_conn_id: str, big_campaign: int
) -> list[dict[str, Any]]:
    """One campaign record a run, oldest first, sent over the last :data:`SPREAD`; the run nearest the
    big campaign's send carries it."""
    from airflow_provider_sms.campaigns.record import CampaignRecord
    from benchmarks.report_loader import SENT_AT

    rng = random.Random(31)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    count = len(runs)
    records = []
    for index, (_, dag_id, _) in enumerate(runs):
        sent_at = now - SPREAD * (count - index) / count
        batches = 1 + index % 3
        sent = rng.randint(500, 20_000)
        filtered = {"npai": sent // 50, "duplicated": sent // 200}
        lists = dag_id == "sms_weekly_campaign"
        records.append(
            CampaignRecord(
                conn_id=CONN_ID,
                operator="SmsSendListsOperator" if lists else "SmsSendOperator",
                outcome="sent",
                pushtype="marketing" if index % 4 else "alert",
                lists=[12, 13] if lists else None,
                tickets=[FIRST_TICKET + 3 * index + batch for batch in range(batches)],
                batches=batches,
                sent_at=sent_at,
                delivery_at=sent_at,
                total=sent + sum(filtered.values()),
                sent=sent,
                filtered=filtered,
                cost=sent,
                credits=10_000_000 - 20_000 * index,
                max_cost=25_000.0,
            ).xcom_value()
        )
    # The big campaign's reports are dated from its send on (benchmarks.report_loader).
    spot = min(
        range(count), key=lambda index: abs(datetime.fromisoformat(records[index]["sent_at"]) - SENT_AT)
    )
    records[spot] = {
        **records[spot],
        "conn_id": big_conn_id,
        "tickets": [big_campaign],
        "batches": 1,
        "sent_at": SENT_AT.isoformat(),
        "delivery_at": SENT_AT.isoformat(),
        "total": big,
        "sent": big,
        "filtered": {},
        "cost": big,
    }
    return records


def push_records(
    deployment: Deployment, runs: list[tuple[int, str, str]], records: list[dict[str, Any]]
) -> None:
    """The records in XCom as the send tasks push them (a minute after their send, signed with the
    connections' token), and the kept delivery counts of their tickets (but the big campaign's, which
    the flusher made)."""
    from sqlalchemy import text

    from airflow_provider_sms.campaigns.record import CampaignRecord, TaskInstance
    from airflow_provider_sms.sandbox.testing import TEST_TOKEN

    xcoms: list[dict[str, Any]] = []
    counts: list[dict[str, Any]] = []
    arrivals: list[dict[str, Any]] = []
    now = datetime.now(timezone.utc)
    rng = random.Random(32)
    for (run_row, dag_id, run_id), value in zip(runs, records, strict=True):
        sent_at = datetime.fromisoformat(value["sent_at"])
        xcoms.append(
            {
                "dag_run_id": run_row,
                "dag_id": dag_id,
                "run_id": run_id,
                "value": json.dumps(
                    CampaignRecord.model_validate(value).signed_value(
                        TaskInstance(dag_id, run_id, SEND_TASK, -1), TEST_TOKEN
                    )
                ),
                "timestamp": sent_at + timedelta(minutes=1),
            }
        )
        if value["conn_id"] != CONN_ID:
            continue
        # A day after its send a campaign is final; before, part of it still waits for its reports.
        pending = max(0.0, 1 - (now - sent_at) / timedelta(days=1))
        for ticket in value["tickets"]:
            messages = value["sent"] // len(value["tickets"])
            waiting = int(messages * pending * rng.uniform(0.5, 1))
            final = messages - waiting
            by_status = {1: waiting, 2: final // 20, 12: final // 25}
            by_status[3] = final - by_status[2] - by_status[12]
            counts += [
                {"campaign_id": ticket, "status": status, "messages": number}
                for status, number in by_status.items()
                if number
            ]
            arrivals.append(
                {
                    "campaign_id": ticket,
                    "reports": messages + messages // 10,
                    "last_received_at": min(now, sent_at + timedelta(hours=2)),
                }
            )
    with database(deployment) as connection:
        ((cursor,),) = connection.execute(text("SELECT read_until FROM sms_campaign_indexer")).all()
        if cursor >= min(xcom["timestamp"] for xcom in xcoms):
            raise RuntimeError(f"the indexer has read past the records' times ({cursor}): it would skip them")
        connection.execute(
            text(
                "INSERT INTO xcom (dag_run_id, task_id, map_index, key, dag_id, run_id, value, timestamp) "
                f"VALUES (:dag_run_id, '{SEND_TASK}', -1, 'sms_campaign', :dag_id, :run_id, "
                "CAST(:value AS jsonb), :timestamp)"
            ),
            xcoms,
        )
        connection.execute(
            text(
                "INSERT INTO sms_delivery_count (conn_id, campaign_id, status, messages) "
                f"VALUES ('{CONN_ID}', :campaign_id, :status, :messages)"
            ),
            counts,
        )
        connection.execute(
            text(
                "INSERT INTO sms_delivery_campaign (conn_id, campaign_id, reports, last_received_at) "
                f"VALUES ('{CONN_ID}', :campaign_id, :reports, :last_received_at)"
            ),
            arrivals,
        )


def wait_indexed(deployment: Deployment, count: int, timeout: float) -> float:
    """Seconds until the API server's indexer has copied the ``count`` records."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        ((copied,),) = deployment.query(
            "SELECT count(*) FROM sms_campaign WHERE run_id LIKE :prefix", prefix=RUN_PREFIX + "%"
        )
        if copied >= count:
            return time.monotonic() - began
        time.sleep(0.5)
    raise RuntimeError(f"the indexer copied {copied} of {count} campaign records in {timeout:.0f} s")


def check_answers(base: str, headers: dict[str, str], big_row: int, big: int) -> tuple[Any, Any]:
    """Page 1 and the big campaign's page, checked to hold what the case says they compute (and the
    floor's list, to hold one campaign)."""
    import httpx

    page = httpx.get(f"{base}{API}", headers=headers, timeout=60).raise_for_status().json()
    if len(page["campaigns"]) != PAGE or page["next"] is None:
        raise RuntimeError(f"page 1 holds {len(page['campaigns'])} campaigns, next {page['next']}")
    if not all(campaign["delivery"]["by_status"] for campaign in page["campaigns"]):
        raise RuntimeError("a campaign of page 1 has no delivery counted")
    floor = httpx.get(f"{base}{API}", params=FLOOR_PARAMS, headers=headers, timeout=60).raise_for_status()
    if len(floor.json()["campaigns"]) != 1:
        raise RuntimeError(f"the floor's list holds {len(floor.json()['campaigns'])} campaigns, not 1")
    detail = httpx.get(f"{base}{API}/{big_row}", headers=headers, timeout=60).raise_for_status().json()
    reported = sum(detail["campaign"]["delivery"]["by_status"].values())
    if reported != big or not detail["timeline"] or len(detail["failed"]["numbers"]) != 100:
        raise RuntimeError(
            f"the {big:,}-number campaign's page counts {reported:,} numbers: {str(detail)[:500]}"
        )
    return page, detail


@contextmanager
def database(deployment: Deployment) -> Iterator[Connection]:
    """A connection to the deployment's metadata database, in a transaction committed at the end."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(deployment.database_url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            yield connection
    finally:
        engine.dispose()
