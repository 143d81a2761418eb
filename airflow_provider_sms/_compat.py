"""Helpers common-compat gained after 1.20, its last release for Python 3.10. Not public API.

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
