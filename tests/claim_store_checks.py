"""The claim store's races, played on a real database: the checks the SQLite unit test and the PostgreSQL
deployment test share (:class:`ClaimRaces`). Each claimant is a thread or a process of its own with its own
connection, as workers and API servers are; nothing is mocked but the pause a test puts into one claimant.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import create_engine, event, func, select
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from airflow_provider_sms.api_server import claims
from airflow_provider_sms.api_server.claims import (
    TABLES,
    Claimant,
    ClaimRequest,
    NumbersRequest,
    claim_chunk_table,
    claim_table,
    metadata,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.engine import Engine

CONN_ID = "sms_default"
SCOPE = "ab" * 16
DELIVERY = dt.datetime(2030, 7, 1, 8, 0, tzinfo=dt.timezone.utc)
WINDOW = 3600.0
# How long a paused claimant waits while the other goes on.
PAUSE = 1.0


def fresh_engine(url: str) -> Engine:
    """An engine on ``url`` (a connection per use: each claimant its own) with the tables there, empty."""
    arguments: dict[str, Any] = {"poolclass": NullPool}
    if url.startswith("sqlite"):
        arguments["connect_args"] = {"timeout": 60, "check_same_thread": False}
    engine = create_engine(url, **arguments)
    metadata.create_all(engine, tables=list(TABLES))
    with engine.begin() as connection:
        for table in reversed(TABLES):
            connection.execute(table.delete())
    return engine


def request(
    run_id: str, *, delivery: dt.datetime = DELIVERY, per_number: bool = False, **more: Any
) -> ClaimRequest:
    """A claim of the campaign ``SCOPE`` by the task instance of run ``run_id``."""
    return ClaimRequest(
        claimant=Claimant(dag_id="campaigns", task_id="send", run_id=run_id, map_index=-1),
        scope=SCOPE,
        per_number=per_number,
        key_id="k1" if per_number else "",
        delivery=delivery,
        delayed=True,
        window_seconds=WINDOW,
        **more,
    )


def decide(engine: Engine, decision: Callable[..., Any], *args: Any) -> Any:
    """``decision(session, CONN_ID, *args)`` in one transaction, committed."""
    with Session(engine) as session, session.begin():
        return decision(session, CONN_ID, *args)


def rewind_folds(engine: Engine, by: dt.timedelta) -> None:
    """Move the last alert of every number in the alert folds back by ``by``: that much time has passed."""
    table = claims.fold_table
    with engine.begin() as connection:
        for row in connection.execute(select(table)).all():
            of_row = (table.c.conn_id == row.conn_id) & (table.c.number_key == row.number_key)
            connection.execute(table.update().where(of_row).values(sent_at=row.sent_at - by))


def outcome_of(engine: Engine, run_id: str, barrier: Any, **more: Any) -> str:
    barrier.wait()
    return str(decide(engine, claims.claim, request(run_id, **more)).outcome)


def concurrent_threads(engine: Engine, claimants: int) -> Counter[str]:
    """``claimants`` threads claim the campaign at the same instant; their outcomes counted."""
    barrier = threading.Barrier(claimants, timeout=60)
    outcomes: list[str] = []

    def one(index: int) -> None:
        outcomes.append(outcome_of(engine, f"run_{index}", barrier))

    threads = [threading.Thread(target=one, args=(index,)) for index in range(claimants)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return Counter(outcomes)


def _process_claims(url: str, first: int, count: int, barrier: Any, results: Any) -> None:
    """One process's share of the claimants: ``count`` threads, released by the processes' barrier."""
    engine = create_engine(url, poolclass=NullPool, **_sqlite_arguments(url))
    barrier.wait()
    local = threading.Barrier(count, timeout=60)
    outcomes: list[str] = []
    threads = [
        threading.Thread(target=lambda i=i: outcomes.append(outcome_of(engine, f"run_{i}", local)))
        for i in range(first, first + count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    results.put(outcomes)


def _sqlite_arguments(url: str) -> dict[str, Any]:
    return {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}


def concurrent_processes(url: str, processes: int, threads_each: int) -> Counter[str]:
    """``processes`` processes of ``threads_each`` threads claim the campaign at once (spawned: each its own
    interpreter and connections, as workers are)."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes, timeout=120)
    results = context.Queue()
    started = [
        context.Process(
            target=_process_claims, args=(url, index * threads_each, threads_each, barrier, results)
        )
        for index in range(processes)
    ]
    for process in started:
        process.start()
    outcomes: Counter[str] = Counter()
    for _ in started:
        outcomes.update(results.get(timeout=180))
    for process in started:
        process.join(timeout=60)
    return outcomes


# Where a claimant is paused: (the engine event, what its statement starts with, or None for any).
PAUSE_POINTS: dict[str, tuple[str, str | None]] = {
    "before its check": ("before_cursor_execute", "INSERT INTO sms_claim_lock"),
    "holding the lock, before its check": ("after_cursor_execute", "INSERT INTO sms_claim_lock"),
    "between its check and its claim": ("before_cursor_execute", "INSERT INTO sms_claim "),
    "before its commit": ("commit", None),
}


def paused_and_prompt(url: str, step: str) -> dict[str, str]:
    """Claimant A pauses at ``step`` for :data:`PAUSE`; claimant B claims the same campaign meanwhile.
    Returns each one's outcome."""
    paused, prompt = fresh_engine(url), fresh_engine(url)
    # A claim of another slot days before: the message's lock row exists, as it does after its first send.
    decide(prompt, claims.claim, request("run_days_before", delivery=DELIVERY - dt.timedelta(days=2)))
    name, starts = PAUSE_POINTS[step]
    reached = threading.Event()

    def pause(*args: Any) -> None:
        statement = args[2] if len(args) > 2 else None
        if starts is None or (isinstance(statement, str) and statement.lstrip().startswith(starts)):
            reached.set()
            threading.Event().wait(PAUSE)

    event.listen(paused, name, pause)
    outcomes: dict[str, str] = {}
    no_barrier = threading.Barrier(1)
    first = threading.Thread(target=lambda: outcomes.update(a=outcome_of(paused, "run_a", no_barrier)))
    first.start()
    assert reached.wait(30), f"claimant A never reached {step}"
    second = threading.Thread(target=lambda: outcomes.update(b=outcome_of(prompt, "run_b", no_barrier)))
    second.start()
    first.join(timeout=60)
    second.join(timeout=60)
    return outcomes


def two_slots_at_once(engine: Engine) -> list[str]:
    """Two sends of one content for slots two hours apart, claimed at the same instant; both outcomes."""
    barrier = threading.Barrier(2, timeout=60)
    outcomes: list[str] = []
    later = DELIVERY + dt.timedelta(hours=2)
    threads = [
        threading.Thread(target=lambda: outcomes.append(outcome_of(engine, "run_a", barrier))),
        threading.Thread(
            target=lambda: outcomes.append(outcome_of(engine, "run_b", barrier, delivery=later))
        ),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def overlapping_numbers(engine: Engine, numbers: int = 1000, chunk: int = 100) -> tuple[set[int], set[int]]:
    """Two sends claim ``numbers`` numbers each, overlapping by half, chunk by chunk at the same time.
    Returns the numbers each one won."""
    keys = [index.to_bytes(16, "big") for index in range(numbers * 3 // 2)]
    mine = {"run_a": range(0, numbers), "run_b": range(numbers // 2, numbers * 3 // 2)}
    won: dict[str, set[int]] = {"run_a": set(), "run_b": set()}
    barrier = threading.Barrier(2, timeout=60)

    def send(run_id: str) -> None:
        answer = decide(engine, claims.claim, request(run_id, per_number=True))
        claim_id, claimant = answer.claim.id, request(run_id).claimant
        barrier.wait()
        wanted = list(mine[run_id])
        for start in range(0, len(wanted), chunk):
            part = wanted[start : start + chunk]
            taken = decide(
                engine,
                claims.claim_numbers,
                claim_id,
                NumbersRequest.of(claimant, start, [keys[index] for index in part]),
            ).taken
            left_out = set(taken)
            won[run_id].update(index for position, index in enumerate(part) if position not in left_out)

    threads = [threading.Thread(target=send, args=(run_id,)) for run_id in mine]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return won["run_a"], won["run_b"]


def held(engine: Engine) -> list[tuple[int, bytes]]:
    """Every claimed number's digest, with the claim holding it (unpacked from the claims' chunks)."""
    size = claims.NUMBER_KEY_BYTES
    with engine.connect() as connection:
        chunks = connection.execute(select(claim_chunk_table.c.claim_id, claim_chunk_table.c.number_keys))
        return [
            (claim_id, bytes(packed[at : at + size]))
            for claim_id, packed in chunks
            for at in range(0, len(packed), size)
        ]


def rows(engine: Engine) -> tuple[int, int]:
    """How many claims and claimed numbers the store holds; and checks no number is held twice in a
    scope (no test here forces a send)."""
    with engine.connect() as connection:
        scopes = {
            row.id: row.scope for row in connection.execute(select(claim_table.c.id, claim_table.c.scope))
        }
        count = connection.scalar(select(func.count()).select_from(claim_table)) or 0
    numbers = held(engine)
    doubles = Counter((scopes.get(claim_id), key) for claim_id, key in numbers)
    assert [pair for pair, times in doubles.items() if times > 1] == []
    return count, len(numbers)


class ClaimRaces:
    """The races every database decides the same way: a test module subclasses this class as ``Test...``
    and gives the fixtures ``url`` (the database) and ``engine`` (:func:`fresh_engine` on it)."""

    def test_fifty_threads_claim_one_campaign_and_exactly_one_wins(self, engine: Engine) -> None:
        assert concurrent_threads(engine, 50) == {"won": 1, "duplicate": 49}
        assert rows(engine) == (1, 0)

    def test_fifty_claimants_in_five_processes_and_exactly_one_wins(self, engine: Engine, url: str) -> None:
        assert concurrent_processes(url, processes=5, threads_each=10) == {"won": 1, "duplicate": 49}
        assert rows(engine) == (1, 0)

    @pytest.mark.parametrize("step", list(PAUSE_POINTS))
    def test_a_claimant_paused_at_any_step_still_leaves_one_winner(self, url: str, step: str) -> None:
        outcomes = paused_and_prompt(url, step)
        assert sorted(outcomes.values()) == ["duplicate", "won"]
        # Paused before taking the lock, A is overtaken; holding it, A is waited for.
        assert outcomes["a" if step != "before its check" else "b"] == "won"

    def test_two_slots_of_one_content_claimed_at_once_keep_both_rows(self, engine: Engine) -> None:
        assert two_slots_at_once(engine) == ["won", "won"]
        assert rows(engine) == (2, 0)

    def test_two_sends_overlapping_by_half_give_each_number_to_one(self, engine: Engine) -> None:
        won_a, won_b = overlapping_numbers(engine)
        assert not won_a & won_b
        assert won_a | won_b == set(range(1500))
        assert rows(engine) == (2, 1500)
