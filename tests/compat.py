"""What differs between the Airflow releases `make test` runs the suite on (lowest declared and latest).

Only behaviour of Airflow itself is switched on here, never the provider's: each flag names the release
that changed it.
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from airflow import __version__ as AIRFLOW_VERSION
from packaging.version import Version

if TYPE_CHECKING:
    from collections.abc import Iterator

_RELEASE = Version(AIRFLOW_VERSION).release  # (3, 0, 2) for 3.0.2 and its rc or dev builds

# Task SDK 1.1 (Airflow 3.1): BaseNotifier.__call__ logs a failed notification and re-raises it;
# in 3.0 it logs it (logger.exception) and returns.
NOTIFIER_RAISES = _RELEASE >= (3, 1)
# Airflow 3.2 builds the UI connection form from the provider's ``conn-fields``; before, from the hook's
# ``get_connection_form_widgets`` (WTForms, with the FAB provider installed): text fields hold strings.
FORM_FROM_CONN_FIELDS = _RELEASE >= (3, 2)


class Failure:
    """What :func:`notification_fails` yields: ``error`` is the notification's, once the block is over."""

    error: Any = None


@contextmanager
def notification_fails(
    notifier_class: type, exc_type: type[Exception], match: str | None = None
) -> Iterator[Failure]:
    """The notification called in the block fails with ``exc_type``: raised (3.1+) or logged (3.0)."""
    failure = Failure()
    if NOTIFIER_RAISES:
        with pytest.raises(exc_type, match=match) as info:
            yield failure
        failure.error = info.value
        return
    failures: list[BaseException] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.exc_info and record.exc_info[1] is not None:
                failures.append(record.exc_info[1])

    # LoggingMixin's logger: the class's module and name.
    logger = logging.getLogger(f"{notifier_class.__module__}.{notifier_class.__name__}")
    handler = Recorder(logging.ERROR)
    logger.addHandler(handler)
    try:
        yield failure
    finally:
        logger.removeHandler(handler)
    assert failures, f"the notifier neither raised nor logged {exc_type.__name__}"
    assert isinstance(failures[-1], exc_type), repr(failures[-1])
    failure.error = failures[-1]
    if match is not None:
        assert re.search(match, str(failures[-1])), str(failures[-1])


def secrets_masker() -> Any:
    """Airflow's process-wide secrets masker, the one ``mask_secret`` registers secrets with."""
    try:
        from airflow.sdk._shared.secrets_masker.secrets_masker import _secrets_masker
    except ImportError:  # Airflow 3.0
        from airflow.sdk.execution_time.secrets_masker import _secrets_masker
    return _secrets_masker()
