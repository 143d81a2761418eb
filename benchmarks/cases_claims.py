"""Claims at once through the deployment's API server: many sends of few campaigns, one winner each.

1,000 claims of 100 campaigns (ten sends of each, their claims side by side in the queue so that they
are in flight together) are posted to ``/sms/claims/sms_default`` by 16 concurrent clients, as 1,000
task instances starting at once would. Each campaign must have exactly one winner, or the case fails.
Reported against the receiver's no-op ``GET .../_health`` on the same API server through the same
clients: the floor of any request there.
"""

from __future__ import annotations

import hashlib
import secrets
import statistics
from collections import Counter
from typing import TYPE_CHECKING

import pendulum

from benchmarks.harness import REPORT, Record, record, skipped
from benchmarks.http_load import CONCURRENCY, get_noop, post_bodies

if TYPE_CHECKING:
    from tests.deployment.harness import Deployment

CLAIMS = 1_000
CAMPAIGNS = 100
NAME = f"{CLAIMS:,} concurrent claims of {CAMPAIGNS} campaigns through the API server (PostgreSQL)"
NOOP_GET = "the receiver's no-op GET .../_health on the same API server, through the same clients"


def skipped_records(reason: str) -> list[Record]:
    return [skipped(NAME, CLAIMS, REPORT, reason, baseline_name=NOOP_GET, unit="ms")]


def claim_bodies(claims: int, campaigns: int) -> list[bytes]:
    """``claims`` claims of ``campaigns`` campaigns to lists (a campaign's claims next to each other),
    each by a task instance of its own; scopes no earlier run used."""
    from airflow_provider_sms.api_server.claims import Claimant, ClaimRequest

    nonce = secrets.token_hex(8)
    now = pendulum.now("UTC")
    per_campaign = claims // campaigns
    return [
        ClaimRequest(
            claimant=Claimant(
                dag_id="bench_claims", task_id="send", run_id=f"run_{nonce}_{index}", map_index=-1
            ),
            scope=hashlib.blake2b(f"{nonce} {index // per_campaign}".encode(), digest_size=32).hexdigest(),
            per_number=False,
            key_id="",
            delivery=now,
            delayed=False,
            window_seconds=3600,
            force=False,
        )
        .model_dump_json()
        .encode()
        for index in range(claims)
    ]


def concurrent_claims_records(
    deployment: Deployment, claims: int = CLAIMS, campaigns: int = CAMPAIGNS
) -> list[Record]:
    """The claims' wall time per claim against the no-op GET's; fails unless each campaign has one winner."""
    from airflow_provider_sms.api_server.claims import ClaimAnswer
    from airflow_provider_sms.api_server.claims_api import claim_key

    api = deployment.api_url()
    bodies = claim_bodies(claims, campaigns)
    headers = {"Authorization": f"Bearer {claim_key(deployment.token)}"}
    get_noop(f"{api}/sms/delivery-reports/_health", CONCURRENCY)  # the clients' first connections
    elapsed, latencies, answers = post_bodies(f"{api}/sms/claims/sms_default", bodies, headers)
    statuses = Counter(answer.status_code for answer in answers)
    if statuses != {200: claims}:
        raise AssertionError(f"the claims were not all answered 200: {dict(statuses)}")
    decided = [ClaimAnswer.model_validate_json(answer.content) for answer in answers]
    outcomes = Counter(answer.outcome for answer in decided)
    per_campaign = claims // campaigns
    winners = Counter(
        index // per_campaign for index, answer in enumerate(decided) if answer.outcome == "won"
    )
    if outcomes != {"won": campaigns, "duplicate": claims - campaigns} or set(winners.values()) != {1}:
        raise AssertionError(f"not one winner per campaign: {dict(outcomes)}, winners per campaign {winners}")
    floor, _ = get_noop(f"{api}/sms/delivery-reports/_health", claims)
    return [
        record(
            NAME,
            claims,
            elapsed / claims * 1000,
            floor / claims * 1000,
            REPORT,
            baseline_name=NOOP_GET,
            unit="ms",
            note=f"{claims / elapsed:.0f} claims/s, {outcomes['won']} won and {outcomes['duplicate']} "
            "refused as duplicates (exactly one winner per campaign, checked); median latency "
            f"{statistics.median(latencies) * 1000:.1f} ms; {CONCURRENCY} concurrent clients, ten claims of "
            "each campaign next to each other in the queue; the no-op GET "
            f"{claims / floor:.0f}/s",
        )
    ]
