"""The delivery-report tables' Alembic migrations make exactly what the table definitions declare.

``airflow db migrate`` creates the tables from the definitions on a new database and runs the
migrations on one that has them: both must give the same tables, or an upgraded deployment would differ
from a new one. Reports stored before the batches are counted into the summary's tables on the way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from airflow_provider_sms.delivery_reports.db import TABLE_NAMES, SmsDeliveryReportsDBManager
from airflow_provider_sms.delivery_reports.tables import metadata

if TYPE_CHECKING:
    from pathlib import Path


def test_the_migration_makes_the_table_the_orm_declares(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'metadata.db'}")
    config = SmsDeliveryReportsDBManager(session=None).get_alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "heads")
    with engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
        assert {*TABLE_NAMES, SmsDeliveryReportsDBManager.version_table_name} <= tables
        # Our tables only (the version table is Alembic's own).
        context = MigrationContext.configure(
            connection,
            opts={"include_object": lambda _o, name, kind, *_: kind != "table" or name in TABLE_NAMES},
        )
        assert compare_metadata(context, metadata) == []
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    with engine.connect() as connection:
        assert not set(TABLE_NAMES) & set(inspect(connection).get_table_names())


def test_reports_stored_before_the_batches_are_counted_and_get_no_second_event(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'metadata.db'}")
    config = SmsDeliveryReportsDBManager(session=None).get_alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "5d1f0c2a9b71")
        rows = [
            # number, status, final, reported at (hour): 2 ends delivered, 3 ends expired, 4 is still sent.
            ("33600000002", 1, False, 9),
            ("33600000002", 3, True, 10),
            ("33600000003", 12, True, 11),
            ("33600000004", 1, False, 12),
        ]
        for index, (number, status, final, hour) in enumerate(rows):
            connection.execute(
                text(
                    "INSERT INTO sms_delivery_report (conn_id, digest, campaign_id, destination, status, "
                    "final, reported_at, received_at) VALUES ('sms_default', :digest, 7, :number, :status, "
                    ":final, :at, :at)"
                ),
                {
                    "digest": str(index),
                    "number": number,
                    "status": status,
                    "final": final,
                    "at": f"2026-11-24 {hour:02d}:00:00",
                },
            )
        command.upgrade(config, "heads")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT DISTINCT batch FROM sms_delivery_report")).scalars().all() == [
            0
        ]
        messages = connection.execute(
            text("SELECT destination, status, failed FROM sms_delivery_message ORDER BY destination")
        ).all()
        assert [tuple(m) for m in messages] == [
            ("33600000002", 3, 0),
            ("33600000003", 12, 1),
            ("33600000004", 1, 0),
        ]
        counts = connection.execute(
            text("SELECT status, messages FROM sms_delivery_count ORDER BY status")
        ).all()
        assert [tuple(c) for c in counts] == [(1, 1), (3, 1), (12, 1)]
        assert tuple(connection.execute(text("SELECT reports FROM sms_delivery_campaign")).one()) == (4,)
        # Revision 0003: each campaign's first arrival, from its earliest stored report.
        arrivals = connection.execute(
            text("SELECT first_received_at, last_received_at FROM sms_delivery_campaign")
        ).one()
        assert [str(at)[:19] for at in arrivals] == ["2026-11-24 09:00:00", "2026-11-24 12:00:00"]
        assert tuple(
            connection.execute(text("SELECT last_batch, reports FROM sms_delivery_flush")).one()
        ) == (0, 4)
        # Revision 0005: the final messages by the minute of their latest report, and by country.
        timeline = connection.execute(
            text("SELECT minute, delivered, failed FROM sms_delivery_timeline ORDER BY minute")
        ).all()
        assert [(str(m)[:19], d, f) for m, d, f in timeline] == [
            ("2026-11-24 10:00:00", 1, 0),
            ("2026-11-24 11:00:00", 0, 1),
        ]
        countries = connection.execute(
            text("SELECT country_code, delivered, failed FROM sms_delivery_country")
        )
        assert [tuple(c) for c in countries] == [("", 1, 1)]


def test_the_campaigns_sent_column_is_filled_from_the_records(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'metadata.db'}")
    config = SmsDeliveryReportsDBManager(session=None).get_alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "9e4a1c7b2d68")
        for dag_id, record in (("a", '{"sent": 985, "tickets": [1]}'), ("b", '{"tickets": []}')):
            connection.execute(
                text(
                    "INSERT INTO sms_campaign (dag_id, run_id, task_id, map_index, conn_id, outcome, "
                    "sent_at, recorded_at, record) VALUES (:dag_id, 'r', 't', -1, 'sms_default', 'sent', "
                    "'2026-11-24 10:00:00', '2026-11-24 10:00:00', :record)"
                ),
                {"dag_id": dag_id, "record": record},
            )
        command.upgrade(config, "heads")
    with engine.connect() as connection:
        sent = connection.execute(text("SELECT dag_id, sent FROM sms_campaign ORDER BY dag_id")).all()
        assert [tuple(row) for row in sent] == [("a", 985), ("b", 0)]


def test_the_campaigns_delivery_totals_are_filled_from_the_kept_counts_and_dropped_on_downgrade(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'metadata.db'}")
    config = SmsDeliveryReportsDBManager(session=None).get_alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "2c7e5a9f3d14")
        # dag a: ticket 1 (reports after its send); b: ticket 2, whose first report arrived before its
        # send (a reused id); c: pruned; d: no reports.
        for dag_id, ticket, pruned in (
            ("a", 1, None),
            ("b", 2, None),
            ("c", 1, "2026-11-25 10:00:00"),
            ("d", 4, None),
        ):
            connection.execute(
                text(
                    "INSERT INTO sms_campaign (dag_id, run_id, task_id, map_index, conn_id, outcome, "
                    "sent_at, recorded_at, record, sent, reports_pruned_at) VALUES (:dag_id, 'r', 't', -1, "
                    "'sms_default', 'sent', '2026-11-24 10:00:00', '2026-11-24 10:00:00', '{}', 4, :pruned)"
                ),
                {"dag_id": dag_id, "pruned": pruned},
            )
            connection.execute(
                text(
                    "INSERT INTO sms_campaign_ticket (campaign_row, conn_id, campaign_id) SELECT id, "
                    "'sms_default', :ticket FROM sms_campaign WHERE dag_id = :dag_id"
                ),
                {"dag_id": dag_id, "ticket": ticket},
            )
        for ticket, received in ((1, "2026-11-24 10:05:00"), (2, "2026-11-24 09:00:00")):
            connection.execute(
                text(
                    "INSERT INTO sms_delivery_campaign (conn_id, campaign_id, reports, first_reported_at, "
                    "first_received_at, last_received_at) VALUES ('sms_default', :ticket, 4, :at, :at, :at)"
                ),
                {"ticket": ticket, "at": received},
            )
            for status, messages in ((1, 1), (3, 2), (12, 1)):
                connection.execute(
                    text(
                        "INSERT INTO sms_delivery_count (conn_id, campaign_id, status, messages) "
                        "VALUES ('sms_default', :ticket, :status, :messages)"
                    ),
                    {"ticket": ticket, "status": status, "messages": messages},
                )
        command.upgrade(config, "heads")
    with engine.connect() as connection:
        totals = connection.execute(
            text("SELECT dag_id, by_status, delivered, failed, reused_ids FROM sms_campaign ORDER BY dag_id")
        ).all()
        assert [tuple(row) for row in totals] == [
            ("a", '{"1": 1, "3": 2, "12": 1}', 2, 1, 0),
            ("b", "{}", 0, 0, 1),
            ("c", None, 0, 0, 0),
            ("d", "{}", 0, 0, 0),
        ]
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "2c7e5a9f3d14")
    with engine.connect() as connection:
        columns = {column["name"] for column in inspect(connection).get_columns("sms_campaign")}
        assert not {"by_status", "delivered", "failed", "reused_ids"} & columns
        assert {"sent", "reports_pruned_at"} <= columns


def test_the_campaigns_already_copied_get_no_team_and_the_column_goes_on_downgrade(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'metadata.db'}")
    config = SmsDeliveryReportsDBManager(session=None).get_alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "7f3b1d9e5a26")
        connection.execute(
            text(
                "INSERT INTO sms_campaign (dag_id, run_id, task_id, map_index, conn_id, outcome, sent_at, "
                "recorded_at, record) VALUES ('a', 'r', 't', -1, 'sms_default', 'sent', "
                "'2026-11-24 10:00:00', '2026-11-24 10:00:00', '{}')"
            )
        )
        command.upgrade(config, "heads")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT dag_id, team FROM sms_campaign")).all() == [("a", "")]
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "7f3b1d9e5a26")
    with engine.connect() as connection:
        assert "team" not in {column["name"] for column in inspect(connection).get_columns("sms_campaign")}
