"""Keys derived from a connection's access token, and the signatures made with them. Not public API.

Whoever holds a connection's token can derive its keys: the API server, which reads connections, and
any task that may read the connection, which in Airflow 3 is any task of the deployment (of the team and
the global ones, in multi-team mode), not only the tasks that use it. So a key proves only that its
holder could read the connection: it stops a caller who can neither run a task nor read connections,
no one else. Each key serves one purpose, so that a signature made for one kind of record is never
valid for another, and none of them reveals the token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

# The purposes; a new kind of signed record gets its own.
READ_KEY = b"airflow-provider-sms/delivery-reports/summary"
CAMPAIGN_RECORD = b"airflow-provider-sms/campaign-record/v1"
# The claim store's routes on the API server, and the key of the numbers' digests a claim keeps.
CLAIMS = b"airflow-provider-sms/claims/v1"
NUMBER_DIGEST = b"airflow-provider-sms/number-digest/v1"
# What a signature of a task instance's record covers, by purpose: the record under its name, beside
# the task instance under its own (the names are part of the signed bytes: they never change).
_TASK_FIELDS: dict[bytes, tuple[str, str]] = {
    CAMPAIGN_RECORD: ("record", "task"),
}


def derived_key(token: str, purpose: bytes) -> str:
    """The key of ``purpose`` derived from ``token`` (hex)."""
    return hmac.new(token.encode(), purpose, hashlib.sha256).hexdigest()


def canonical(document: Any) -> bytes:
    """``document`` (JSON types) as the bytes a signature covers: keys sorted, no spaces.

    :raises ValueError: a value JSON cannot hold (NaN, infinity, a type JSON has not).
    """
    try:
        return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def sign(token: str, purpose: bytes, document: Any) -> str:
    """The signature of ``document`` with ``token``'s key for ``purpose`` (hex)."""
    key = derived_key(token, purpose).encode()
    return hmac.new(key, canonical(document), hashlib.sha256).hexdigest()


def signature_valid(token: str, purpose: bytes, document: Any, signature: object) -> bool:
    """Whether ``signature`` is ``document``'s with ``token``'s key for ``purpose`` (constant time)."""
    if not isinstance(signature, str) or not signature:
        return False
    try:
        expected = sign(token, purpose, document)
    except ValueError:
        return False
    return hmac.compare_digest(expected.encode(), signature.encode())


def _task_document(purpose: bytes, record: Mapping[str, Any], task: Any) -> dict[str, Any]:
    """What a signature of ``record``, written by the task instance ``task``, covers (both together:
    a record copied to another task instance does not verify there)."""
    record_field, task_field = _TASK_FIELDS[purpose]
    return {record_field: dict(record), task_field: task}


def sign_for_task(token: str, purpose: bytes, record: Mapping[str, Any], task: Any) -> str:
    """The signature of ``record`` as written by the task instance ``task`` (JSON types)."""
    return sign(token, purpose, _task_document(purpose, record, task))


def signed_by_task(
    token: str, purpose: bytes, record: Mapping[str, Any], task: Any, signature: object
) -> bool:
    """Whether ``signature`` is the one :func:`sign_for_task` makes for ``record`` and ``task``."""
    return signature_valid(token, purpose, _task_document(purpose, record, task), signature)
