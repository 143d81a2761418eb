"""The claim store: which send of a campaign may go, decided by one transaction in the provider's tables.
Not public API.

Airflow gives tasks no compare-and-set (Variables, XCom and task state are last writer wins), so "never
twice" is decided here, in Airflow's metadata database, where a transaction can decide it:

- ``sms_claim``: one row per send (a task instance's claim): the connection, its **scope** (what makes
  two sends the same but their delivery time and, per number, their audience), the claimant, the
  delivery time, the state (``sending``, then ``sent`` with the tickets). A row is never rewritten by
  another send, so no write erases another's.
- ``sms_claim_chunk``: for a send to numbers, the numbers it claimed, one row per chunk of up to
  :data:`MAX_NUMBERS_PER_CALL`: their keyed digests (never the numbers), packed end to end, and where the
  chunk starts among the send's numbers (a chunk claimed again, by a retry or a call whose answer was
  lost, is the same row). A chunk is one row, not thousands of them.
- ``sms_claim_lock``: one row per scope. Every decision first takes this row's lock (one statement
  that inserts or updates it, the lock held until the commit), then reads the claims of the scope and
  writes its own: two claims of one scope are decided one after the other, whatever either claimant's
  timing. The window (two delivery times closer than ``window_seconds``) is checked under that lock,
  so it is exact, not rounded to slots.

A claimant is a task instance (dag_id, task_id, run_id, map_index): the same claimant asking again (a
retry, or a call whose answer was lost) finds its own claim, which is how a lost answer is found again.

The same store folds ``SmsNotifier``'s alerts (:func:`fold`), so that a burst of them does not reach the
service's anti-flood filter:

- ``sms_alert_fold``: per connection and number (its keyed digest), when the last alert went to it and
  the alerts held since (how many, and the start of the first few texts). Each decision takes the
  connection's lock row in ``sms_claim_lock`` first, so two alerts to a number are decided one after the
  other.

Both paths use these functions: the provider's route on the API server (:mod:`.claims_api`), which the
workers call, and a task that runs in-process with the metadata database (``airflow dags test``).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import pendulum
from airflow.models.base import ID_LEN
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator
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
    and_,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import mysql

from airflow_provider_sms._task_arguments import MAX_FOLD_INTERVAL
from airflow_provider_sms.delivery_reports.store import insert_ignoring_duplicates, upsert
from airflow_provider_sms.delivery_reports.tables import CONN_ID_LENGTH, ReportId, Timestamp, metadata

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from sqlalchemy.engine import Row
    from sqlalchemy.orm import Session
    from sqlalchemy.sql.elements import ColumnElement

# Where the routes are, under the provider's app (``/sms``).
CLAIMS_PATH = "/claims/{conn_id}"
FOLD_PATH = "/claims/{conn_id}/fold"
CLAIM_NUMBERS_PATH = "/claims/{conn_id}/{claim_id}/numbers"
CLAIM_SENT_PATH = "/claims/{conn_id}/{claim_id}/sent"
CLAIM_RELEASE_PATH = "/claims/{conn_id}/{claim_id}/release"
# A number's digest: 16 bytes of a keyed BLAKE2b (two different numbers never meet by accident).
NUMBER_KEY_BYTES = 16
# The most numbers one request claims (a batch is claimed in requests of at most this many): one chunk.
MAX_NUMBERS_PER_CALL = 20_000
# Claims deleted in one statement: within every database's limit on bound parameters.
_IDS_PER_STATEMENT = 5000
ClaimState = Literal["sending", "sent"]
# A chunk's digests, packed: MySQL's BLOB holds 64 KiB, a MEDIUMBLOB the largest chunk.
PackedKeys = LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql")
_Item = TypeVar("_Item")
# What a held alert keeps of its text: the start, which the alert that carries it quotes.
HELD_TEXT_LENGTH = 50
# The held alerts' texts a number keeps (the count goes on beyond them).
HELD_TEXTS_KEPT = 5

claim_table = Table(
    "sms_claim",
    metadata,
    Column("id", ReportId, primary_key=True, autoincrement=True),
    Column("conn_id", String(CONN_ID_LENGTH), nullable=False),
    Column("scope", String(64), nullable=False),
    # A send to numbers: its conflicts are decided number by number (sms_claim_chunk).
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

claim_chunk_table = Table(
    "sms_claim_chunk",
    metadata,
    Column("claim_id", BigInteger, primary_key=True),
    # Where the chunk starts among its send's numbers.
    Column("chunk_start", BigInteger, primary_key=True),
    Column("numbers", Integer, nullable=False),
    Column("number_keys", PackedKeys, nullable=False),
)

claim_lock_table = Table(
    "sms_claim_lock",
    metadata,
    Column("scope", String(64), primary_key=True),
    # How many decisions took the lock: the UPDATE that takes it needs a column to write.
    Column("decisions", BigInteger, nullable=False),
)

fold_table = Table(
    "sms_alert_fold",
    metadata,
    Column("conn_id", String(CONN_ID_LENGTH), primary_key=True),
    # The number's keyed digest (hex), as a claim keeps it: never the number.
    Column("number_key", String(2 * NUMBER_KEY_BYTES), primary_key=True),
    # When the last alert went to the number: its fold interval starts there.
    Column("sent_at", Timestamp, nullable=False),
    # The alerts held for it since, and the first few of them (JSON: [[time, start of text], ...]).
    Column("held", Integer, nullable=False),
    Column("held_texts", Text, nullable=False),
)

TABLES = (claim_table, claim_chunk_table, claim_lock_table, fold_table)

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
    numbers: NumberChunk | None = None

    @model_validator(mode="after")
    def _numbers_per_number(self) -> ClaimRequest:
        if self.numbers is not None and not self.per_number:
            raise ValueError("numbers: only a send to numbers (per_number) claims numbers")
        return self


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
    :param numbers: the answer for the chunk of numbers the request carried, when the send may go.
    """

    outcome: Literal["won", "resumed", "duplicate", "undecidable"]
    claim: ClaimView | None = None
    earlier: list[ClaimView] = []
    numbers: NumbersAnswer | None = None


class NumberChunk(WireModel):
    """A chunk of a send's numbers, as keyed digests (:data:`NUMBER_KEY_BYTES` each, concatenated,
    base64).

    :param start: where the chunk starts among the send's numbers (the same chunk asked again is
        claimed once).
    """

    start: int = Field(ge=0, le=2**63 - 1)
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
    def of(cls, start: int, keys: Sequence[bytes]) -> NumberChunk:
        """The chunk of ``keys`` (each :data:`NUMBER_KEY_BYTES` long) at ``start``."""
        return cls(start=start, keys=base64.b64encode(b"".join(keys)).decode())

    def digests(self) -> list[bytes]:
        """The digests, in the order given."""
        raw = base64.b64decode(self.keys, validate=True)
        return [raw[at : at + NUMBER_KEY_BYTES] for at in range(0, len(raw), NUMBER_KEY_BYTES)]


class NumbersRequest(WireModel):
    """A chunk of a claim's numbers (the chunks after the first, which comes with the claim)."""

    claimant: Claimant
    chunk: NumberChunk

    @classmethod
    def of(cls, claimant: Claimant, start: int, keys: Sequence[bytes]) -> NumbersRequest:
        """The request for ``keys``, the chunk at ``start``."""
        return cls(claimant=claimant, chunk=NumberChunk.of(start, keys))


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


class FoldRequest(WireModel):
    """An alert asks whether it goes to its numbers now or is held, to be folded into the next alert.

    :param numbers: the alert's numbers, as keyed digests (``start`` 0).
    :param interval_seconds: the notifier's fold interval: an alert within it after the last one to a
        number is held for that number.
    :param text: the start of the alert's text, which the alert that carries it quotes.
    """

    numbers: NumberChunk
    interval_seconds: float = Field(gt=0, le=MAX_FOLD_INTERVAL.total_seconds())
    text: str = Field(max_length=HELD_TEXT_LENGTH)


class HeldAlert(WireModel):
    """An alert held for a number: when, and the start of its text."""

    at: AwareDatetime
    text: str


class FoldGroup(WireModel):
    """Numbers the alert goes to now, carrying the same held alerts.

    :param positions: their positions in the request.
    :param held: how many alerts were held for them since their last one.
    :param texts: the first of those (at most :data:`HELD_TEXTS_KEPT`), oldest first.
    """

    positions: list[int]
    held: int = 0
    texts: list[HeldAlert] = []


class FoldAnswer(WireModel):
    """What the store decided for an alert.

    :param send: the numbers it goes to now, grouped by what they carry.
    :param held: the positions of the numbers it is held for.
    :param since: the latest time an alert went to one of those.
    :param until: when the last of their intervals ends: the next alert after it carries this one.
    """

    send: list[FoldGroup] = []
    held: list[int] = []
    since: AwareDatetime | None = None
    until: AwareDatetime | None = None


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
        answer = ClaimAnswer(outcome="resumed", claim=_view(own[-1]))
        return _with_first_chunk(session, answer, own[-1], rows, request.numbers)
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
    row = SimpleNamespace(id=inserted.inserted_primary_key[0], **values)  # type: ignore[index]
    answer = ClaimAnswer(outcome="won", claim=_view(row), earlier=earlier)
    return _with_first_chunk(session, answer, row, rows, request.numbers)


def _with_first_chunk(
    session: Session, answer: ClaimAnswer, own: Any, rows: Sequence[Any], chunk: NumberChunk | None
) -> ClaimAnswer:
    """``answer`` with the claim of the send's first chunk of numbers, when the request carried one
    (under the lock :func:`claim` holds; ``rows`` are the scope's claims it read)."""
    if chunk is None:
        return answer
    window = dt.timedelta(seconds=own.window_seconds)
    delivery = _utc(own.delivery)
    others = [row.id for row in rows if row.id != own.id and abs(_utc(row.delivery) - delivery) < window]
    answer.numbers = _claim_chunk(session, own.id, own.forced, others, chunk)
    return answer


def claim_numbers(session: Session, conn_id: str, claim_id: int, request: NumbersRequest) -> NumbersAnswer:
    """Claim a chunk of numbers for claim ``claim_id`` (the caller commits): see :func:`_claim_chunk`.

    :raises ClaimNotFound: no such claim of this claimant on this connection.
    """
    own = _own_claim(session, conn_id, claim_id, request.claimant)
    if not own.per_number:
        raise ClaimNotFound(f"claim {claim_id} is a send to lists: it claims no numbers")
    _lock(session, own.scope)
    window = dt.timedelta(seconds=own.window_seconds)
    delivery = _utc(own.delivery)
    holding = claim_table.c
    near = (holding.delivery > delivery - window) & (holding.delivery < delivery + window)
    others = session.scalars(
        select(holding.id).where(holding.scope == own.scope, holding.id != claim_id, near)
    ).all()
    return _claim_chunk(session, claim_id, own.forced, others, request.chunk)


def _claim_chunk(
    session: Session, claim_id: int, forced: bool, others: Sequence[int], chunk: NumberChunk
) -> NumbersAnswer:
    """Claim a chunk of numbers: each goes to claim ``claim_id`` unless one of ``others`` (the other
    claims of its scope within the window) holds it; with ``forced``, numbers others hold are claimed
    too, and still reported taken. A chunk the claim already holds (at the same start) is kept as it
    is: asked again, the answer is the same. The scope's lock is held: what the others hold is final.
    """
    keys = chunk.digests()
    holder = _holders(session, others, set(keys)) if others else {}
    taken = [position for position, key in enumerate(keys) if key in holder]
    new = keys if forced else [key for key in keys if key not in holder]
    if new:
        columns = claim_chunk_table.c
        statement = insert_ignoring_duplicates(
            session, claim_chunk_table, [columns.claim_id.name, columns.chunk_start.name]
        )
        values = {"claim_id": claim_id, "chunk_start": chunk.start, "numbers": len(new)}
        session.execute(statement, {**values, "number_keys": b"".join(new)})
    holders = [holder[keys[position]] for position in taken]
    return NumbersAnswer(taken=taken, holders=holders, earlier=_views(session, set(holders)))


def _holders(session: Session, claim_ids: Sequence[int], wanted: set[bytes]) -> dict[bytes, int]:
    """Which of the ``wanted`` digests the claims ``claim_ids`` hold, and the first (oldest) holding each."""
    chunk = claim_chunk_table.c
    holder: dict[bytes, int] = {}
    size = NUMBER_KEY_BYTES
    chunks = session.execute(
        select(chunk.claim_id, chunk.number_keys)
        .where(chunk.claim_id.in_(claim_ids))
        .order_by(chunk.claim_id)
    )
    for held_by, packed in chunks:
        packed = bytes(packed)
        for key in (packed[at : at + size] for at in range(0, len(packed), size)):
            if key in wanted:
                holder.setdefault(key, held_by)
    return holder


def mark_sent(session: Session, conn_id: str, claim_id: int, request: SentRequest) -> None:
    """Record the tickets of claim ``claim_id``'s send (the caller commits).

    :raises ClaimNotFound: no such claim of this claimant on this connection.
    """
    recorded = session.execute(
        update(claim_table)
        .where(_is_own(conn_id, claim_id, request.claimant))
        .values(state="sent", tickets=json.dumps(request.tickets))
    )
    if not recorded.rowcount:  # type: ignore[attr-defined]  # an UPDATE's result has it
        raise ClaimNotFound(f"there is no claim {claim_id} of this task instance on connection {conn_id!r}")


def release(session: Session, conn_id: str, claim_id: int, request: ReleaseRequest) -> None:
    """Forget claim ``claim_id`` and its numbers: its send certainly sent nothing (the caller commits).
    Releasing a claim that is not there changes nothing (a release whose answer was lost, asked again)."""
    try:
        _own_claim(session, conn_id, claim_id, request.claimant)
    except ClaimNotFound:
        return
    session.execute(delete(claim_chunk_table).where(claim_chunk_table.c.claim_id == claim_id))
    session.execute(delete(claim_table).where(claim_table.c.id == claim_id))


def fold(session: Session, conn_id: str, request: FoldRequest) -> FoldAnswer:
    """Decide, number by number, whether an alert goes now or is held, and record it (the caller commits).

    A number that got no alert within the interval gets this one now, carrying the alerts held for it
    since (which are then forgotten), and its interval starts again; for one that did, the alert is held
    (counted, the start of its text kept among the first :data:`HELD_TEXTS_KEPT`). The connection's
    lock is taken first: two alerts to one number are decided one after the other, whatever their timing.
    """
    _lock(session, fold_scope(conn_id))
    keys = [key.hex() for key in request.numbers.digests()]
    columns = fold_table.c
    rows = {
        row.number_key: row
        for row in session.execute(
            select(fold_table).where(columns.conn_id == conn_id, columns.number_key.in_(set(keys)))
        )
    }
    now = dt.datetime.now(dt.timezone.utc)
    interval = dt.timedelta(seconds=request.interval_seconds)
    answer = FoldAnswer()
    groups: dict[tuple[int, str], FoldGroup] = {}
    # Each number's place in the answer (a number given twice is decided once).
    placed: dict[str, list[int]] = {}
    for position, key in enumerate(keys):
        if key not in placed:
            row = rows.get(key)
            of_number = (columns.conn_id == conn_id) & (columns.number_key == key)
            if row is not None and now - _utc(row.sent_at) < interval:
                texts = json.loads(row.held_texts)[:HELD_TEXTS_KEPT]
                if len(texts) < HELD_TEXTS_KEPT:
                    texts.append([now.isoformat(), request.text])
                session.execute(
                    update(fold_table)
                    .where(of_number)
                    .values(held=columns.held + 1, held_texts=json.dumps(texts))
                )
                answer.since = max(filter(None, (answer.since, _utc(row.sent_at))))
                answer.until = max(filter(None, (answer.until, _utc(row.sent_at) + interval)))
                placed[key] = answer.held
            else:
                held, texts = (row.held, row.held_texts) if row is not None else (0, "[]")
                group = groups.get((held, texts))
                if group is None:
                    carried = [HeldAlert(at=at, text=text) for at, text in json.loads(texts)]
                    group = groups[held, texts] = FoldGroup(positions=[], held=held, texts=carried)
                fresh = {"sent_at": now, "held": 0, "held_texts": "[]"}
                session.execute(
                    insert(fold_table).values(conn_id=conn_id, number_key=key, **fresh)
                    if row is None
                    else update(fold_table).where(of_number).values(fresh)
                )
                placed[key] = group.positions
        placed[key].append(position)
    answer.send = list(groups.values())
    return answer


def fold_scope(conn_id: str) -> str:
    """The lock scope of a connection's alert folds: apart from every claim's (a content digest)."""
    return hashlib.sha256(b"alert-fold\0" + conn_id.encode()).hexdigest()


def prune(session: Session, horizon: dt.datetime, *, dry_run: bool = False) -> tuple[int, int]:
    """Delete the claims delivered before ``horizon`` and their numbers: no new send can be in their
    window once ``horizon`` is the window before now (a new send is delivered now or later).

    :returns: how many claims and numbers were (or, with ``dry_run``, would be) deleted.
    """
    old = session.scalars(select(claim_table.c.id).where(claim_table.c.delivery < horizon)).all()
    chunk = claim_chunk_table.c
    numbers = 0
    for ids in _chunks(old, _IDS_PER_STATEMENT):
        numbers += (
            session.scalar(select(func.coalesce(func.sum(chunk.numbers), 0)).where(chunk.claim_id.in_(ids)))
            or 0
        )
        if not dry_run:
            session.execute(delete(claim_chunk_table).where(chunk.claim_id.in_(ids)))
            session.execute(delete(claim_table).where(claim_table.c.id.in_(ids)))
    if not dry_run:
        live = select(claim_table.c.scope)
        session.execute(delete(claim_lock_table).where(claim_lock_table.c.scope.not_in(live)))
    return len(old), numbers


def prune_folds(session: Session, horizon: dt.datetime, *, dry_run: bool = False) -> int:
    """Delete the alert folds whose last alert went before ``horizon`` and that hold no alert: no fold
    interval reaches that far (``horizon`` is the longest interval before now). A fold that holds alerts
    is kept: the next alert to its number carries them.

    :returns: how many were (or, with ``dry_run``, would be) deleted.
    """
    stale = (fold_table.c.sent_at < horizon) & (fold_table.c.held == 0)
    count = session.scalar(select(func.count()).select_from(fold_table).where(stale)) or 0
    if not dry_run:
        session.execute(delete(fold_table).where(stale))
    return int(count)


def _lock(session: Session, scope: str) -> None:
    """Take the scope's lock row for the rest of the transaction, made on first use: one statement that
    inserts the row or, when it is there, updates it (either way the row stays locked until the commit;
    a decision making it at the same moment waits for the other's commit, then updates it)."""
    decisions = claim_lock_table.c.decisions
    session.execute(
        upsert(
            session,
            claim_lock_table,
            ["scope"],
            {"scope": scope, "decisions": 1},
            {"decisions": decisions + 1},
        )
    )


def _is_own(conn_id: str, claim_id: int, claimant: Claimant) -> ColumnElement[bool]:
    """Claim ``claim_id`` of ``claimant`` on ``conn_id``."""
    columns = claim_table.c
    return and_(
        columns.id == claim_id,
        columns.conn_id == conn_id,
        *(columns[name] == value for name, value in claimant.model_dump().items()),
    )


def _own_claim(session: Session, conn_id: str, claim_id: int, claimant: Claimant) -> Row[Any]:
    row = session.execute(select(claim_table).where(_is_own(conn_id, claim_id, claimant))).one_or_none()
    if row is None:
        raise ClaimNotFound(f"there is no claim {claim_id} of this task instance on connection {conn_id!r}")
    return row


def _views(session: Session, ids: set[int]) -> list[ClaimView]:
    if not ids:
        return []
    rows = session.execute(
        select(claim_table).where(claim_table.c.id.in_(sorted(ids))).order_by(claim_table.c.id)
    )
    return [_view(row) for row in rows]


def _view(row: Any) -> ClaimView:
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
