"""The send guard: what a send task has sent, kept where a dead worker cannot lose it. Internal.

Before each POST /send (or /send/lists) the operator records the batch as ``sending``; after the
answer it records ``sent`` with the ticket and figures. The record lives in one Airflow Variable per
task instance, written through the Task SDK (the API server's database), so it survives the worker
and works on every executor (local, Celery, Kubernetes, edge). On a retry of the same task instance:

- a batch recorded ``sent`` is not sent again; its recorded result is used;
- a batch recorded ``sending`` may have reached the service (the worker died, or the answer was
  lost): the task fails, saying so, unless the DAG author set ``allow_resend=True``.

Variable key: ``sms_send_guard:<dag_id>:<task_id>:<run_id>:<map_index>`` (characters other than
letters, digits and ``_.:+-`` become ``_``, and a hash of the exact identity is appended when that
changed anything or the key would be too long). The value is JSON, readable in the Variables page.
To send a campaign again on purpose, delete the Variable (``airflow variables delete KEY``); to resend
only a batch recorded ``sending`` after checking it did not go out, set ``allow_resend=True`` or
remove that batch's entry from the Variable.

A record in the guard can only stop a send, so it is trusted as read: nothing in it grants one. (An
approval is Airflow's own record of the answer: see :mod:`._approval`.)
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import AirflowFailException, Variable
from pydantic import ValidationError

from airflow_provider_sms.models import CampaignResult
from airflow_provider_sms.operators._variable_records import RECORD_STATES, RecordState, record_from

PREFIX = "sms_send_guard"
# The Variable key column holds 250 characters.
_MAX_KEY = 250
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:+\-]")

# What the person on call may write in a guard, said whenever a guard cannot be read.
GUARD_FORMAT = (
    'It must be JSON {"dag_id": ..., "task_id": ..., "run_id": ..., "map_index": ..., "batches": {...}}, '
    'each batch under its 0-based index as a string: {"state": "sending" or "sent", "fingerprint": ..., '
    '"started": ..., "result": {...}, "note": ...}. state "sending" means the batch may have been sent (it '
    'is not sent again unless allow_resend=True); "sent" needs its "result" with at least "status": 1, '
    '"message", "ticket", "cost", "credits", "total" and "sent" (it is never sent again). To send the whole '
    "campaign again, delete the Variable"
)


@dataclass
class BatchRecord:
    """What the guard knows of one batch.

    :param state: ``sending`` (the POST may have been made) or ``sent`` (the ticket is known).
    :param fingerprint: digest of the message and recipients of the batch.
    :param result: the service's answer, once sent.
    :param note: when the outcome is unknown, why (e.g. the error of the POST).
    """

    state: RecordState
    fingerprint: str
    started: str
    result: dict[str, Any] | None = None
    note: str | None = None

    @property
    def ticket(self) -> str | None:
        """The campaign's ticket, once known."""
        return (self.result or {}).get("ticket")

    def campaign_result(self) -> CampaignResult:
        """The recorded answer as a :class:`CampaignResult`."""
        return CampaignResult.model_validate(self.result)


def guard_key(dag_id: str, task_id: str, run_id: str, map_index: int) -> str:
    """The Variable key of a task instance's guard (see the module docstring)."""
    identity = f"{dag_id}:{task_id}:{run_id}:{map_index}"
    safe = _UNSAFE.sub("_", identity)
    key = f"{PREFIX}:{safe}"
    if safe != identity or len(key) > _MAX_KEY:
        # Two identities that differ only by replaced characters must not share a guard.
        suffix = hashlib.sha256(identity.encode()).hexdigest()[:16]
        key = f"{PREFIX}:{safe[: _MAX_KEY - len(PREFIX) - len(suffix) - 3]}~{suffix}"
    return key


class SendGuard:
    """The guard of one task instance, stored in one Airflow Variable.

    :param key: the Variable key (:func:`guard_key`).
    :param identity: dag_id, task_id, run_id and map_index, written into the record for humans.
    """

    def __init__(self, key: str, identity: dict[str, Any]) -> None:
        self.key = key
        self.identity = identity
        self._batches: dict[int, BatchRecord] = {}

    @classmethod
    def for_task_instance(cls, ti: Any) -> SendGuard:
        """The guard of the running task instance (``context["ti"]``), loaded from its Variable."""
        map_index = getattr(ti, "map_index", -1)
        map_index = -1 if map_index is None else map_index
        identity = {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id, "map_index": map_index}
        guard = cls(guard_key(ti.dag_id, ti.task_id, ti.run_id, map_index), identity)
        guard.load()
        return guard

    def load(self) -> None:
        """Read the Variable (absent means nothing was ever sent by this task instance).

        A guard that cannot be read (not JSON, a state the provider does not know, a ``sent`` batch
        without its result) fails the task before any request: a guard fails closed.
        """
        raw = Variable.get(self.key, default=None)
        try:
            document = json.loads(raw) if raw else {}
            self._batches = _batches(document)
        except (ValueError, TypeError, ValidationError) as exc:
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise AirflowFailException(
                f"The send guard (Airflow Variable {self.key!r}) cannot be read ({problem}), so what this "
                f"task instance already sent is unknown. Not sending. {GUARD_FORMAT}."
            ) from None

    @property
    def batches(self) -> dict[int, BatchRecord]:
        """The recorded batches, by 0-based index."""
        return self._batches

    def begin(self, index: int, digest: str) -> None:
        """Record that batch ``index`` is about to be POSTed (written before the request)."""
        self._batches[index] = BatchRecord("sending", digest, pendulum.now("UTC").isoformat())
        self._save()

    def confirm(self, index: int, result: CampaignResult) -> None:
        """Record the ticket and figures of batch ``index`` (written after the answer)."""
        record = self._batches[index]
        record.state = "sent"
        record.result = result.model_dump(exclude_none=True)
        record.note = None
        self._save()

    def unknown(self, index: int, note: str) -> None:
        """Keep batch ``index`` as ``sending`` and write down why its outcome is unknown."""
        self._batches[index].note = note[:500]
        self._save()

    def release(self, index: int) -> None:
        """Forget batch ``index``: its request certainly created nothing (refused, or never sent)."""
        self._batches.pop(index, None)
        self._save()

    def _save(self) -> None:
        document: dict[str, Any] = {
            **self.identity,
            "batches": {str(index): vars(record) for index, record in sorted(self._batches.items())},
        }
        Variable.set(
            self.key,
            json.dumps(document, separators=(",", ":")),
            description="SMS send guard: what this task instance already sent. Delete it to send again.",
        )


def _batches(document: object) -> dict[int, BatchRecord]:
    """The batch records of a guard's JSON document, each checked (ValueError names what is wrong)."""
    if not isinstance(document, dict) or not isinstance(document.get("batches", {}), dict):
        raise ValueError("it is not an object with a 'batches' object")
    batches: dict[int, BatchRecord] = {}
    for index, record in document.get("batches", {}).items():
        where = f"batch {index!r}"
        if not str(index).isdigit():
            raise ValueError(f"{where}: a batch index is a number (0 for the first batch)")
        batch = record_from(BatchRecord, record, where, RECORD_STATES)
        if not isinstance(batch.fingerprint, str) or not batch.fingerprint:
            raise ValueError(f"{where}: no fingerprint")
        if batch.state == "sent":
            if not isinstance(batch.result, dict) or not batch.result.get("ticket"):
                raise ValueError(f"{where}: state 'sent' without its result and ticket")
            batch.campaign_result()
        batches[int(index)] = batch
    return batches
