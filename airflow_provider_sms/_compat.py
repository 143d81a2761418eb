"""Helpers common-compat gained after 1.20, its last release for Python 3.10, a way around a gap of
Airflow's ``dags test``, and what the running Airflow can show. Not public API.

Each is taken from common-compat where the installed release has it, else done the way common-compat
does it, so the provider keeps masking the token and the triggerer's event loop stays unblocked on
Python 3.10 (common-compat 1.20) as on newer Pythons. Imports happen when called: DAG files import
``exceptions``, which must stay light.
"""

from __future__ import annotations


def mask_secret(secret: str) -> None:
    """Register ``secret`` with Airflow's secrets masker, so logs and rendered fields show ``***``."""
    try:
        from airflow.providers.common.compat.sdk import mask_secret as register
    except ImportError:  # common-compat < 1.23
        try:
            from airflow.sdk.log import mask_secret as register
        except ImportError:  # Airflow 3.0
            from airflow.sdk.execution_time.secrets_masker import (  # type: ignore[no-redef]
                mask_secret as register,
            )
    register(secret)


def supervisor_comms_cannot_await() -> bool:
    """Whether the Task SDK's channel to its supervisor has no ``asend`` (it answers blocking calls only).

    ``airflow dags test`` (Airflow 3.1 and later) runs a deferred task's trigger in line, with
    ``InProcessSupervisorComms``, which has ``send`` but no ``asend``; ``BaseHook.aget_connection`` then
    fails inside ``ExecutionAPISecretsBackend.aget_connection``, which hides the error and reports no
    connection, so only ``AIRFLOW_CONN_*`` variables are found. The blocking lookup, run in a thread,
    reaches the metadata database through those comms. Workers and triggerers of Airflow 3.1 and later
    have ``asend``; on 3.0 the blocking lookup in a thread is what common-compat does anyway.
    """
    import sys

    comms = getattr(sys.modules.get("airflow.sdk.execution_time.task_runner"), "SUPERVISOR_COMMS", None)
    return comms is not None and not hasattr(comms, "asend")


def airflow_3_1_or_later() -> bool:
    """Whether this is Airflow 3.1 or later: the UI shows plugins' pages (``external_views``), and the
    standard provider has human-in-the-loop tasks (``HITLOperator``)."""
    from airflow import __version__
    from packaging.version import Version

    return Version(__version__).release >= (3, 1)
