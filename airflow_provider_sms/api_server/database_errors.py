"""What a database error tells the provider's app on the API server: whether its tables are missing,
which waiting does not cure. Not public API.
"""

from __future__ import annotations

from airflow_provider_sms.db_manager import registration_hint

MIGRATE_HINT = (
    "the delivery-report tables are missing from Airflow's metadata database: run `airflow db migrate` "
    "with the provider installed (see the Delivery reports page)"
)


def migrate_hint() -> str:
    """What to do about the missing tables: :data:`MIGRATE_HINT`, and, where Airflow would not run the
    provider's DB manager (3.0 and 3.1 without it in ``[database] external_db_managers``), what to set."""
    return MIGRATE_HINT + registration_hint()


def tables_missing(exc: BaseException) -> bool:
    """Whether a database error says a table is not there (PostgreSQL, MySQL, SQLite)."""
    from sqlalchemy.exc import OperationalError, ProgrammingError

    text = str(exc).lower()
    return isinstance(exc, (ProgrammingError, OperationalError)) and (
        "no such table" in text or "does not exist" in text or "doesn't exist" in text
    )
