"""Nothing hostile answered 503 (issue 29), on the real API server and PostgreSQL.

Reports the table cannot hold used to pass the model and fail the insert on PostgreSQL (an integer out
of range, a message_id longer than its column, a NUL in a text, a date outside what a timestamp holds):
503, which the service retries for ever. Each is now 422 naming the field, nothing is stored, and a
message_id exactly as long as its column is stored. Every name that receives no reports gets the same 404.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import create_engine, text

from airflow_provider_sms.delivery_reports.connections import NOT_RECEIVING
from airflow_provider_sms.models import MESSAGE_ID_MAX_LENGTH
from tests.deployment.test_delivery_reports import post
from tests.unit.test_delivery_report_bounds import UNSTORABLE

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sqlalchemy.engine import Engine

    from tests.deployment.harness import Deployment

pytestmark = pytest.mark.deployment

CAMPAIGN = 990029
REPORT = {
    "date": "2026-11-24T10:00:00+01:00",
    "status": 3,
    "destination": "33699002901",
    "campaign_id": CAMPAIGN,
    "country_code": "FR",
}


@pytest.fixture(scope="module")
def database(deployment: Deployment) -> Iterator[Engine]:
    """The deployment's PostgreSQL metadata database, read directly."""
    engine = create_engine(f"postgresql+psycopg2://airflow@127.0.0.1:{deployment.ports['postgres']}/airflow")
    yield engine
    engine.dispose()


def rows(database: Engine, where: str = "TRUE", **params: Any) -> int:
    with database.connect() as connection:
        return int(connection.scalar(text(f"SELECT count(*) FROM sms_delivery_report WHERE {where}"), params))


def test_reports_postgresql_cannot_hold_are_422_naming_the_field_and_nothing_is_stored(
    deployment: Deployment, database: Engine
) -> None:
    before = rows(database)

    answers = {
        name: post(deployment, json.dumps({**REPORT, **fields}).encode())
        for name, (fields, _, _) in UNSTORABLE.items()
    }

    assert {name: answer.status_code for name, answer in answers.items()} == dict.fromkeys(UNSTORABLE, 422)
    for name, (_, field, rule) in UNSTORABLE.items():
        detail = answers[name].json()["detail"]
        assert f"report.{field}:" in detail, (name, detail)
        assert rule in detail, (name, detail)
    assert rows(database) == before


def test_a_message_id_as_long_as_its_column_is_stored(deployment: Deployment, database: Engine) -> None:
    message_id = "m" * MESSAGE_ID_MAX_LENGTH
    body = json.dumps({**REPORT, "message_id": message_id, "destination": "33699002902"}).encode()

    answer = post(deployment, body)

    assert (answer.status_code, answer.json()) == (200, {"outcome": "recorded"})
    assert (
        rows(
            database,
            "campaign_id = :campaign AND message_id = :message_id",
            campaign=CAMPAIGN,
            message_id=message_id,
        )
        == 1
    )


def test_every_name_that_receives_no_reports_gets_the_same_404(deployment: Deployment) -> None:
    body = json.dumps(REPORT).encode()

    # No such connection, and a name longer than a connection id can be (refused without a lookup).
    answers = [post(deployment, body, conn_id=name) for name in ("nobody", "x" * 251)]

    assert {(answer.status_code, answer.json()["detail"]) for answer in answers} == {(404, NOT_RECEIVING)}
