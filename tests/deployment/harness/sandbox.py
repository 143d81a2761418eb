"""The SMS service the deployment talks to: the sandbox's command line, and connections to it."""

from __future__ import annotations

import json
import sys
from typing import Any

# The one line the sandbox's command prints on stdout once it accepts connections, before its URL.
LISTENING = "SMS sandbox listening on "


def sandbox_command(token: str) -> list[str]:
    """The sandbox on a free port of 127.0.0.1, taking ``token`` as its access token."""
    return [sys.executable, "-m", "airflow_provider_sms.sandbox", "--port", "0", "--token", token]


def listening_url(output: str) -> str | None:
    """The sandbox's URL, once its output says it listens; None before."""
    if LISTENING not in output:
        return None
    return output.split(LISTENING, 1)[1].split()[0]


def connection_json(url: str, token: str, **extra: Any) -> str:
    """An sms connection (JSON form) to ``url`` with ``token``.

    It receives the sandbox's delivery reports (DLR webhook "1") from 127.0.0.1; ``extra`` adds to or
    replaces the connection's extra.
    """
    extra = {"format": "json", "dlr_webhook_id": "1", "dlr_allowed_callers": ["127.0.0.1"], **extra}
    return json.dumps({"conn_type": "sms", "host": url, "password": token, "extra": extra})
