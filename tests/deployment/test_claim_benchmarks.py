"""The benchmark cases of the claims through the API server (``make bench``), at a small size, on the
deployment: each runs and measures, and the claims decide as the cases check (one winner per campaign,
every number sent once). A smoke check of the cases, never a measurement."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from benchmarks import cases_campaign, cases_claims, cases_send_cost

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import InspectionClient
    from benchmarks.harness import Record
    from tests.deployment.harness import Deployment

pytestmark = pytest.mark.deployment


def measured(rows: list[Record]) -> None:
    for row in rows:
        assert (row.ours or 0) > 0, row
        assert not row.note.startswith("skipped"), row


def test_claims_at_once_through_the_api_server_have_one_winner_per_campaign(deployment: Deployment) -> None:
    (row,) = cases_claims.concurrent_claims_records(deployment, claims=100, campaigns=10)
    measured([row])
    assert "10 won and 90 refused as duplicates" in row.note


def test_a_send_claims_through_the_api_server_in_the_benchmark_child(
    deployment: Deployment, sandbox: InspectionClient
) -> None:
    rows = cases_send_cost.api_server_send_cost_cases(deployment, reps=1)
    measured(rows)
    assert {row.target for row in rows} == {"report", "<= 3", "<= 2"}
    # Every run's claim went through the API server into PostgreSQL, one row each (cold, plain, gate).
    (claims,) = deployment.query("SELECT count(*) FROM sms_claim WHERE state = 'sent'")
    assert claims == (3,)


def test_a_batched_send_claims_every_number_through_the_api_server(
    deployment: Deployment, sandbox: InspectionClient
) -> None:
    rows = cases_campaign.api_server_send_cases(deployment, recipients=2_000, reps=1)
    measured(rows)
    (held,) = deployment.query("SELECT sum(numbers) FROM sms_claim_chunk")
    assert held == (2_000,)
