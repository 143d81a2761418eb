"""The provider's DB manager: its one migration makes exactly what the table definitions declare, and
Airflow finds it (by the provider's info, or by either dotted path in its configuration).

``airflow db migrate`` creates the tables from the definitions on a new database and runs the
migration on one that has them: both must give the same tables, or a migrated deployment would differ
from a new one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sqlalchemy import create_engine

from airflow_provider_sms import db_manager, get_provider_info
from airflow_provider_sms.db_manager import (
    DB_MANAGER_PATH,
    TABLE_NAMES,
    SmsProviderDBManager,
    registration_hint,
)
from airflow_provider_sms.delivery_reports.db import SmsDeliveryReportsDBManager
from tests.db_migration import check_up_and_down

if TYPE_CHECKING:
    from pathlib import Path


def test_the_migration_makes_the_tables_the_definitions_declare_and_drops_them(tmp_path: Path) -> None:
    check_up_and_down(create_engine(f"sqlite:///{tmp_path / 'metadata.db'}"))


def test_one_migration_holds_every_table_and_the_provider_version_names_it() -> None:
    script = SmsProviderDBManager(session=None).get_script_object()
    revisions = list(script.walk_revisions())
    assert [revision.down_revision for revision in revisions] == [None]
    assert set(SmsProviderDBManager.revision_heads_map.values()) == set(script.get_heads())
    assert set(TABLE_NAMES) == set(SmsProviderDBManager.metadata.tables)
    assert SmsProviderDBManager.version_table_name == "alembic_version_sms_delivery_reports"


def test_airflow_finds_the_manager_by_the_providers_info_and_by_its_earlier_path() -> None:
    assert get_provider_info()["db-managers"] == [DB_MANAGER_PATH]
    assert SmsDeliveryReportsDBManager is SmsProviderDBManager


@pytest.mark.parametrize(
    ("airflow_version", "named", "hint"),
    [
        ("3.2.0", "", False),
        ("3.1.3", "", True),
        ("3.0.2", "other.Manager", True),
        ("3.0.2", f"other.Manager, {DB_MANAGER_PATH}", False),
        ("3.1.3", "airflow_provider_sms.delivery_reports.db.SmsDeliveryReportsDBManager", False),
    ],
)
def test_the_hint_says_what_to_set_when_airflow_would_not_run_the_manager(
    monkeypatch: pytest.MonkeyPatch, airflow_version: str, named: str, hint: bool
) -> None:
    import airflow

    monkeypatch.setattr(airflow, "__version__", airflow_version)
    monkeypatch.setenv("AIRFLOW__DATABASE__EXTERNAL_DB_MANAGERS", named)
    expected = (
        f"; Airflow {airflow_version} migrates them only when [database] external_db_managers names "
        f"{db_manager.DB_MANAGER_PATH}: add it there (AIRFLOW__DATABASE__EXTERNAL_DB_MANAGERS) for every "
        "Airflow component, then run `airflow db migrate`"
    )
    assert registration_hint() == (expected if hint else "")


def test_the_api_servers_answer_on_missing_tables_ends_with_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import airflow

    from airflow_provider_sms.api_server.database_errors import MIGRATE_HINT, migrate_hint

    monkeypatch.setattr(airflow, "__version__", "3.1.3")
    monkeypatch.setenv("AIRFLOW__DATABASE__EXTERNAL_DB_MANAGERS", "")
    assert migrate_hint() == MIGRATE_HINT + registration_hint()
    assert migrate_hint().startswith(f"{MIGRATE_HINT}; Airflow 3.1.3 migrates them only when")
