"""The claim store: which send of a campaign may go, decided by one transaction in the provider's tables.
Not public API.

Airflow gives tasks no compare-and-set (Variables, XCom and task state are last writer wins), so "never
twice" is decided here, in Airflow's metadata database, where a transaction can decide it:

- ``sms_claim``: one row per send (a task instance's claim): the connection, its **scope** (what makes
  two sends the same but their delivery time and, per number, their audience), the claimant, the
  delivery time, the state (``sending``, then ``sent`` with the tickets). A row is never rewritten by
  another send, so no write erases another's.
- ``sms_claim_number``: for a send to numbers, one row per number it claimed: its scope, a keyed digest
  of the number (never the number) and the claim that holds it (whose delivery time counts).
- ``sms_claim_lock``: one row per scope. Every decision first takes this row's lock (an UPDATE, held
  until the commit), then reads the claims of the scope and writes its own: two claims of one scope are
  decided one after the other, whatever either claimant's timing. The window (two delivery times closer
  than ``window_seconds``) is checked under that lock, so it is exact, not rounded to slots.

A claimant is a task instance (dag_id, task_id, run_id, map_index): the same claimant asking again (a
retry, or a call whose answer was lost) finds its own claim, which is how a lost answer is found again.

Both paths use these functions: the provider's route on the API server (:mod:`.claims_api`), which the
workers call, and a task that runs in-process with the metadata database (``airflow dags test``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import pendulum
from airflow.models.base import ID_LEN
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    any_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.exc import IntegrityError

from airflow_provider_sms.delivery_reports.store import insert_ignoring_duplicates
from airflow_provider_sms.delivery_reports.tables import CONN_ID_LENGTH, ReportId, Timestamp, metadata

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from sqlalchemy.engine import Row
    from sqlalchemy.orm import Session
    from sqlalchemy.sql.elements import BindParameter

# Where the routes are, under the provider's app (``/sms``).
CLAIMS_PATH = "/claims/{conn_id}"
CLAIM_NUMBERS_PATH = "/claims/{conn_id}/{claim_id}/numbers"
CLAIM_SENT_PATH = "/claims/{conn_id}/{claim_id}/sent"
CLAIM_RELEASE_PATH = "/claims/{conn_id}/{claim_id}/release"
# A number's digest: 16 bytes of a keyed BLAKE2b (two different numbers never meet by accident).
NUMBER_KEY_BYTES = 16
# The most numbers one request claims (a batch is claimed in requests of at most this many).
MAX_NUMBERS_PER_CALL = 20_000
# Numbers compared in one statement: within every database's limit on bound parameters (SQLite's is
# 32,766 since 3.32).
_NUMBERS_PER_STATEMENT = 5000
ClaimState = Literal["sending", "sent"]
# A number's digest: binary; MySQL keys no BLOB, so a fixed-length VARBINARY there.
NumberKey = LargeBinary(NUMBER_KEY_BYTES).with_variant(mysql.VARBINARY(NUMBER_KEY_BYTES), "mysql")
_Item = TypeVar("_Item")

claim_table = Table(
    "sms_claim",
    metadata,
    Column("id", ReportId, primary_key=True, autoincrement=True),
    Column("conn_id", String(CONN_ID_LENGTH), nullable=False),
    Column("scope", String(64), nullable=False),
    # A send to numbers: its conflicts are decided number by number (sms_claim_number).
    Column("per_number", Boolean, nullable=False),
    # Which key digested its numbers (derived from the connection's token): digests made with another
    # key cannot be compared.
    Column("key_id", String(32), nullable=False),
    Column("dag_id", String(ID_LEN), nullable=False),
    Column("task_id", String(ID_LEN), nullable=False),
    Column("run_id", String(ID_LEN), nullable=False),
    Column("map_index", Integer, nullable=False),
    Column("delivery", Timestamp, nullable=False),
    Column("delayed", Boolean, nullable=False),
    Column("window_seconds", Float, nullable=False),
    # Made with on_duplicate="send": it claims numbers other sends of its slot hold too.
    Column("forced", Boolean, nullable=False),
    Column("state", String(16), nullable=False),
    Column("tickets", Text, nullable=False),
    Column("claimed_at", Timestamp, nullable=False),
    Index("idx_sms_claim_scope", "scope", "delivery"),
    Index("idx_sms_claim_task", "dag_id", "run_id", "task_id", "map_index"),
)

claim_number_table = Table(
    "sms_claim_number",
    metadata,
    Column("scope", String(64), primary_key=True),
    Column("number_key", NumberKey, primary_key=True),
    Column("claim_id", BigInteger, primary_key=True),
    # Rows are found by their key only: on SQLite the key is the table (no rowid beside it).
    sqlite_with_rowid=False,
)

claim_lock_table = Table(
    "sms_claim_lock",
    metadata,
    Column("scope", String(64), primary_key=True),
    # How many decisions took the lock: the UPDATE that takes it needs a column to write.
    Column("decisions", BigInteger, nullable=False),
)

TABLES = (claim_table, claim_number_table, claim_lock_table)

Identifier = Annotated[str, Field(min_length=1, max_length=ID_LEN)]


class WireModel(BaseModel):
    """The claims' bodies between a worker and the API server: strict, nothing unknown accepted."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class Claimant(WireModel):
    """The task instance that claims: its claim is found again by these four."""

    dag_id: Identifier
    task_id: Identifier
    run_id: Identifier
    map_index: int = Field(ge=-1)

    def matches(self, row: Row[Any]) -> bool:
        """Whether ``row`` (of ``sms_claim``) is this claimant's."""
        return (row.dag_id, row.task_id, row.run_id, row.map_index) == (
            self.dag_id,
            self.task_id,
            self.run_id,
            self.map_index,
        )


class ClaimRequest(WireModel):
    """A send asks to go.

    :param scope: what makes two sends the same but their delivery time (and, with ``per_number``,
        their audience): a hex digest the worker computes.
    :param per_number: decide per number (:func:`claim_numbers`), not per campaign.
    :param key_id: which key digested the numbers ("" for a send to lists).
    :param delivery: the delay, or the time of the send.
    :param window_seconds: two delivery times closer than this are the same slot.
    :param force: ``on_duplicate="send"``: claim even when another send holds the slot.
    """

    claimant: Claimant
    scope: str = Field(pattern=r"^[0-9a-f]{32,64}$")
    per_number: bool
    key_id: str = Field(max_length=32)
    delivery: AwareDatetime
    delayed: bool
    window_seconds: float = Field(gt=0, le=366 * 24 * 3600)
    force: bool = False


class ClaimView(WireModel):
    """A claim as a refusal describes it."""

    id: int
    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    delivery: dt.datetime
    delayed: bool
    state: ClaimState
    tickets: list[str]

    def describe(self) -> str:
        """Who sent it, and what is known of the outcome, e.g. ``DAG 'd', run 'r', task 't' sent it
        (ticket 101), at 2030-07-01 10:00:00 Europe/Paris``."""
        who = f"DAG {self.dag_id!r}, run {self.run_id!r}, task {self.task_id!r}"
        if self.map_index >= 0:
            who += f" (map index {self.map_index})"
        if self.state == "sent":
            what = f"sent it (ticket{'s' if len(self.tickets) > 1 else ''} {', '.join(self.tickets)})"
        else:
            what = "is sending it, or may have sent it (no ticket recorded yet)"
        paris = pendulum.instance(self.delivery).in_tz("Europe/Paris").format("YYYY-MM-DD HH:mm:ss")
        timing = "for delivery at" if self.delayed else "at"
        return f"{who} {what}, {timing} {paris} Europe/Paris"


class ClaimAnswer(WireModel):
    """What the store decided.

    :param outcome: ``won`` (a new claim), ``resumed`` (this claimant's own, from an earlier attempt),
        ``duplicate`` (another send holds the slot: nothing was written) or ``undecidable`` (another send
        of the slot digested its numbers with another key: they cannot be compared; nothing was written).
    :param claim: this send's claim, when it may go.
    :param earlier: the other sends of the same slot (for a refusal, or the warning of a forced send).
    """

    outcome: Literal["won", "resumed", "duplicate", "undecidable"]
    claim: ClaimView | None = None
    earlier: list[ClaimView] = []


class NumbersRequest(WireModel):
    """A claim's numbers, as keyed digests (:data:`NUMBER_KEY_BYTES` each, concatenated, base64)."""

    claimant: Claimant
    keys: str

    @field_validator("keys")
    @classmethod
    def _whole_digests(cls, value: str) -> str:
        size = len(value) * 3 // 4 - value.count("=", -2)
        if size % NUMBER_KEY_BYTES or size // NUMBER_KEY_BYTES > MAX_NUMBERS_PER_CALL:
            raise ValueError(
                f"keys: {NUMBER_KEY_BYTES}-byte digests, at most {MAX_NUMBERS_PER_CALL} in one call"
            )
        return value

    @classmethod
    def of(cls, claimant: Claimant, keys: Sequence[bytes]) -> NumbersRequest:
        """The request for ``keys`` (each :data:`NUMBER_KEY_BYTES` long)."""
        return cls(claimant=claimant, keys=base64.b64encode(b"".join(keys)).decode())

    def digests(self) -> list[bytes]:
        """The digests, in the order given."""
        raw = base64.b64decode(self.keys, validate=True)
        return [raw[at : at + NUMBER_KEY_BYTES] for at in range(0, len(raw), NUMBER_KEY_BYTES)]


class NumbersAnswer(WireModel):
    """Which of a request's numbers another send holds for the slot.

    :param taken: their positions in the request.
    :param holders: the claim holding each (parallel to ``taken``).
    :param earlier: those claims.
    """

    taken: list[int] = []
    holders: list[int] = []
    earlier: list[ClaimView] = []


class SentRequest(WireModel):
    """A claim's send is done: its tickets."""

    claimant: Claimant
    tickets: list[Annotated[str, Field(max_length=64)]]


class ReleaseRequest(WireModel):
    """A claim's send certainly sent nothing: forget it."""

    claimant: Claimant


class ClaimNotFound(LookupError):
    """No claim of that id, connection and claimant (released, or pruned)."""


def claim(session: Session, conn_id: str, request: ClaimRequest) -> ClaimAnswer:
    """Decide whether a send may go, and record its claim when it may (the caller commits).

    :param conn_id: the connection the send uses (every claim belongs to one).
    """
    _lock(session, request.scope)
    rows = session.execute(
        select(claim_table).where(claim_table.c.scope == request.scope, claim_table.c.conn_id == conn_id)
    ).all()
    own = [row for row in rows if request.claimant.matches(row)]
    if own:
        return ClaimAnswer(outcome="resumed", claim=_view(own[-1]))
    window = dt.timedelta(seconds=request.window_seconds)
    near = [row for row in rows if abs(_utc(row.delivery) - request.delivery) < window]
    earlier = [_view(row) for row in near]
    if not request.force:
        if request.per_number and any(row.key_id != request.key_id for row in near):
            return ClaimAnswer(outcome="undecidable", earlier=earlier)
        if not request.per_number and near:
            return ClaimAnswer(outcome="duplicate", earlier=earlier)
    now = pendulum.now("UTC")
    values = {
        "conn_id": conn_id,
        "scope": request.scope,
        "per_number": request.per_number,
        "key_id": request.key_id,
        **request.claimant.model_dump(),
        "delivery": request.delivery,
        "delayed": request.delayed,
        "window_seconds": request.window_seconds,
        "forced": request.force,
        "state": "sending",
        "tickets": "[]",
        "claimed_at": now,
    }
    inserted = session.connection().execute(insert(claim_table).values(values))
    claim_id = inserted.inserted_primary_key[0]  # type: ignore[index]  # set after every insert
    row = session.execute(select(claim_table).where(claim_table.c.id == claim_id)).one()
    return ClaimAnswer(outcome="won", claim=_view(row), earlier=earlier)


def claim_numbers(session: Session, conn_id: str, claim_id: int, request: NumbersRequest) -> NumbersAnswer:
    """Claim numbers for claim ``claim_id``: each goes to this claim unless another claim of the scope
    holds it within the window (the caller commits). Numbers this claim already holds stay its own (a
    resumed send); with ``force``, numbers others hold are claimed too, and still reported taken.

    :raises ClaimNotFound: no such claim of this claimant on this connection.
    """
    own = _own_claim(session, conn_id, claim_id, request.claimant)
    if not own.per_number:
        raise ClaimNotFound(f"claim {claim_id} is a send to lists: it claims no numbers")
    _lock(session, own.scope)
    keys = request.digests()
    window = dt.timedelta(seconds=own.window_seconds)
    delivery = _utc(own.delivery)
    numbers = claim_number_table.c
    holding = claim_table.c
    postgresql = session.get_bind().dialect.name == "postgresql"
    near = (holding.delivery > delivery - window) & (holding.delivery < delivery + window)
    others = select(holding.id).where(holding.scope == own.scope, holding.id != claim_id, near).limit(1)
    if session.execute(others).first() is None:
        # No other send of the message in the slot, and none can claim meanwhile (the lock is held):
        # every number is this claim's (those it holds already, a resumed send, are skipped).
        _insert_numbers(session, own.scope, claim_id, keys, postgresql=postgresql)
        return NumbersAnswer()
    mine: set[bytes] = set()
    holder: dict[bytes, int] = {}
    for chunk in [keys] if postgresql else _chunks(keys, _NUMBERS_PER_STATEMENT):
        # PostgreSQL takes the keys as one array parameter; elsewhere an IN list within the parameter limit.
        among = (
            numbers.number_key == any_(_binary_array(chunk)) if postgresql else numbers.number_key.in_(chunk)
        )
        held = session.execute(
            select(numbers.number_key, numbers.claim_id)
            .join(claim_table, holding.id == numbers.claim_id)
            .where(numbers.scope == own.scope, among, near)
        )
        for key, held_by in held:
            if held_by == claim_id:
                mine.add(bytes(key))
            else:
                holder.setdefault(bytes(key), held_by)
    taken = [position for position, key in enumerate(keys) if key in holder and key not in mine]
    new = [key for key in keys if key not in mine and (own.forced or key not in holder)]
    _insert_numbers(session, own.scope, claim_id, new, postgresql=postgresql)
    holders = [holder[keys[position]] for position in taken]
    return NumbersAnswer(taken=taken, holders=holders, earlier=_views(session, set(holders)))


def mark_sent(session: Session, conn_id: str, claim_id: int, request: SentRequest) -> None:
    """Record the tickets of claim ``claim_id``'s send (the caller commits).

    :raises ClaimNotFound: no such claim of this claimant on this connection.
    """
    _own_claim(session, conn_id, claim_id, request.claimant)
    session.execute(
        update(claim_table)
        .where(claim_table.c.id == claim_id)
        .values(state="sent", tickets=json.dumps(request.tickets))
    )


def release(session: Session, conn_id: str, claim_id: int, request: ReleaseRequest) -> None:
    """Forget claim ``claim_id`` and its numbers: its send certainly sent nothing (the caller commits).
    Releasing a claim that is not there changes nothing (a release whose answer was lost, asked again)."""
    try:
        own = _own_claim(session, conn_id, claim_id, request.claimant)
    except ClaimNotFound:
        return
    numbers = claim_number_table.c
    session.execute(
        delete(claim_number_table).where(numbers.scope == own.scope, numbers.claim_id == claim_id)
    )
    session.execute(delete(claim_table).where(claim_table.c.id == claim_id))


def prune(session: Session, horizon: dt.datetime, *, dry_run: bool = False) -> tuple[int, int]:
    """Delete the claims delivered before ``horizon`` and their numbers: no new send can be in their
    window once ``horizon`` is the window before now (a new send is delivered now or later).

    :returns: how many claims and numbers were (or, with ``dry_run``, would be) deleted.
    """
    old = session.execute(
        select(claim_table.c.id, claim_table.c.scope).where(claim_table.c.delivery < horizon)
    )
    by_scope: dict[str, list[int]] = {}
    for claim_id, scope in old:
        by_scope.setdefault(scope, []).append(claim_id)
    numbers = claim_number_table.c
    claims = deleted = 0
    for scope, ids in by_scope.items():
        for chunk in _chunks(ids, _NUMBERS_PER_STATEMENT):
            claims += len(chunk)
            where = (numbers.scope == scope) & numbers.claim_id.in_(chunk)
            if dry_run:
                deleted += (
                    session.scalar(select(func.count()).select_from(claim_number_table).where(where)) or 0
                )
                continue
            deleted += session.connection().execute(delete(claim_number_table).where(where)).rowcount
            session.execute(delete(claim_table).where(claim_table.c.id.in_(chunk)))
    if not dry_run:
        live = select(claim_table.c.scope)
        session.execute(delete(claim_lock_table).where(claim_lock_table.c.scope.not_in(live)))
    return claims, deleted


def _insert_numbers(
    session: Session, scope: str, claim_id: int, keys: Sequence[bytes], *, postgresql: bool
) -> None:
    """Insert ``keys`` as claim ``claim_id``'s numbers, one statement; a key it holds already is skipped
    (so is a key given twice)."""
    if not keys:
        return
    statement = insert_ignoring_duplicates(session, claim_number_table, ["scope", "number_key", "claim_id"])
    if postgresql:
        rows = select(literal(scope), func.unnest(_binary_array(keys)), literal(claim_id))
        session.execute(statement.from_select(["scope", "number_key", "claim_id"], rows))
        return
    session.execute(statement, [{"scope": scope, "number_key": key, "claim_id": claim_id} for key in keys])


def _binary_array(keys: Sequence[bytes]) -> BindParameter[Any]:
    """``keys`` as one PostgreSQL ``bytea[]`` parameter."""
    from sqlalchemy.dialects.postgresql import ARRAY, BYTEA

    return bindparam(None, list(keys), type_=ARRAY(BYTEA()))


def _lock(session: Session, scope: str) -> None:
    """Take the scope's lock row for the rest of the transaction (made on first use)."""
    lock = claim_lock_table.c
    taken = update(claim_lock_table).where(lock.scope == scope).values(decisions=lock.decisions + 1)
    if session.connection().execute(taken).rowcount:
        return
    try:
        with session.begin_nested():
            session.execute(insert(claim_lock_table).values(scope=scope, decisions=1))
    except IntegrityError:
        # Made at the same moment by another decision, now committed: take it as made.
        session.execute(taken)


def _own_claim(session: Session, conn_id: str, claim_id: int, claimant: Claimant) -> Row[Any]:
    row = session.execute(
        select(claim_table).where(claim_table.c.id == claim_id, claim_table.c.conn_id == conn_id)
    ).one_or_none()
    if row is None or not claimant.matches(row):
        raise ClaimNotFound(f"there is no claim {claim_id} of this task instance on connection {conn_id!r}")
    return row


def _views(session: Session, ids: set[int]) -> list[ClaimView]:
    if not ids:
        return []
    rows = session.execute(
        select(claim_table).where(claim_table.c.id.in_(sorted(ids))).order_by(claim_table.c.id)
    )
    return [_view(row) for row in rows]


def _view(row: Row[Any]) -> ClaimView:
    return ClaimView(
        id=row.id,
        dag_id=row.dag_id,
        task_id=row.task_id,
        run_id=row.run_id,
        map_index=row.map_index,
        delivery=_utc(row.delivery),
        delayed=row.delayed,
        state=row.state,
        tickets=json.loads(row.tickets),
    )


def _utc(value: dt.datetime) -> dt.datetime:
    """A stored time, aware (UtcDateTime gives it aware; a naive one is UTC)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)


def _chunks(items: Sequence[_Item], size: int) -> Iterable[Sequence[_Item]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
