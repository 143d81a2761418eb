"""``[core] hostname_callable`` of the deployment: each Celery worker names itself.

Both workers run on one machine, so the default (the machine's FQDN) would not tell them apart; a task
instance's ``hostname`` (REST API) is what the scenarios read to know which worker ran a try.
"""

from __future__ import annotations

import os
import socket


def worker_name() -> str:
    """``SMS_DEPLOYMENT_WORKER`` (set for each worker by the harness), else the machine's FQDN."""
    return os.environ.get("SMS_DEPLOYMENT_WORKER") or socket.getfqdn()
