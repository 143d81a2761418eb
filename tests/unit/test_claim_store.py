"""The claim store on SQLite: of any number of concurrent claims of one campaign exactly one wins,
however long a claimant pauses; no write erases another's; each number goes to one send.

The same checks run on PostgreSQL in tests/deployment/test_claim_store_postgres.py.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError

from airflow_provider_sms.api_server import claims
from airflow_provider_sms.api_server.claims import NumbersRequest, ReleaseRequest, SentRequest
from tests import claim_store_checks as checks

if TYPE_CHECKING:
    from pathlib import Path

    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'claims.db'}"


@pytest.fixture
def engine(url: str) -> Engine:
    return checks.fresh_engine(url)


class TestClaimRacesOnSqlite(checks.ClaimRaces):
    """The races of :class:`~tests.claim_store_checks.ClaimRaces`, on SQLite."""


def test_the_window_is_exact_not_rounded_to_slots(engine):
    just_before_the_hour = checks.DELIVERY.replace(minute=59) - dt.timedelta(hours=1)
    checks.decide(engine, claims.claim, checks.request("run_a", delivery=just_before_the_hour))
    across_the_hour = checks.request("run_b", delivery=just_before_the_hour + dt.timedelta(minutes=2))
    assert checks.decide(engine, claims.claim, across_the_hour).outcome == "duplicate"
    an_hour_later = checks.request("run_c", delivery=just_before_the_hour + dt.timedelta(hours=1))
    assert checks.decide(engine, claims.claim, an_hour_later).outcome == "won"


def test_a_claimant_asking_again_finds_its_own_claim(engine):
    first = checks.decide(engine, claims.claim, checks.request("run_a"))
    # Its answer lost, the same task instance asks again, even for another delivery time.
    again = checks.decide(
        engine, claims.claim, checks.request("run_a", delivery=checks.DELIVERY.replace(hour=20))
    )
    assert (first.outcome, again.outcome) == ("won", "resumed")
    assert again.claim.id == first.claim.id


def test_numbers_claimed_again_by_their_claim_stay_its_own(engine):
    answer = checks.decide(engine, claims.claim, checks.request("run_a", per_number=True))
    claimant = checks.request("run_a").claimant
    keys = [bytes([index]) * 16 for index in range(5)]
    request = NumbersRequest.of(claimant, 0, keys)
    first = checks.decide(engine, claims.claim_numbers, answer.claim.id, request)
    again = checks.decide(engine, claims.claim_numbers, answer.claim.id, request)
    assert first.taken == again.taken == []
    assert checks.rows(engine) == (1, 5)


def test_a_forced_send_claims_numbers_others_hold_and_reports_them(engine):
    a = checks.decide(engine, claims.claim, checks.request("run_a", per_number=True))
    b = checks.decide(engine, claims.claim, checks.request("run_b", per_number=True, force=True))
    keys = [bytes([index]) * 16 for index in range(3)]
    holder = checks.request("run_a").claimant
    checks.decide(engine, claims.claim_numbers, a.claim.id, NumbersRequest.of(holder, 0, keys[:2]))
    forced = checks.decide(
        engine, claims.claim_numbers, b.claim.id, NumbersRequest.of(checks.request("run_b").claimant, 0, keys)
    )
    assert forced.taken == [0, 1]
    assert [view.run_id for view in forced.earlier] == ["run_a"]
    assert sorted(claim_id for claim_id, _ in checks.held(engine)) == [a.claim.id] * 2 + [b.claim.id] * 3


def test_numbers_digested_under_another_key_cannot_be_compared(engine):
    checks.decide(engine, claims.claim, checks.request("run_a", per_number=True))
    other_key = checks.request("run_b", per_number=True).model_copy(update={"key_id": "k2"})
    answer = checks.decide(engine, claims.claim, other_key)
    assert answer.outcome == "undecidable"
    assert answer.earlier[0].run_id == "run_a"
    assert checks.rows(engine) == (1, 0)


def test_sent_release_and_prune(engine):
    claimant = checks.request("run_a").claimant
    a = checks.decide(engine, claims.claim, checks.request("run_a", per_number=True))
    checks.decide(engine, claims.claim_numbers, a.claim.id, NumbersRequest.of(claimant, 0, [b"x" * 16]))
    checks.decide(engine, claims.mark_sent, a.claim.id, SentRequest(claimant=claimant, tickets=["101"]))
    again = checks.decide(engine, claims.claim, checks.request("run_a", per_number=True))
    assert (again.claim.state, again.claim.tickets) == ("sent", ["101"])

    other = checks.request("run_b").claimant
    with pytest.raises(claims.ClaimNotFound):
        checks.decide(engine, claims.mark_sent, a.claim.id, SentRequest(claimant=other, tickets=["999"]))
    # Another task instance cannot release it: nothing changes.
    checks.decide(engine, claims.release, a.claim.id, ReleaseRequest(claimant=other))
    assert checks.rows(engine) == (1, 1)

    assert checks.decide(engine, prune, checks.DELIVERY, True) == (0, 0)
    assert checks.decide(engine, prune, checks.DELIVERY + dt.timedelta(minutes=1), False) == (1, 1)
    assert checks.rows(engine) == (0, 0)

    b = checks.decide(engine, claims.claim, checks.request("run_b", per_number=True))
    checks.decide(engine, claims.release, b.claim.id, ReleaseRequest(claimant=other))
    checks.decide(engine, claims.release, b.claim.id, ReleaseRequest(claimant=other))  # asked again: no-op
    assert checks.rows(engine) == (0, 0)


def prune(session: Session, _conn_id: str, horizon: dt.datetime, dry_run: bool) -> tuple[int, int]:
    return claims.prune(session, horizon, dry_run=dry_run)


def test_a_send_to_lists_carries_no_numbers_with_its_claim():
    chunk = claims.NumberChunk.of(0, [b"x" * 16])
    to_lists = {**checks.request("run_a").model_dump(), "numbers": chunk.model_dump()}
    with pytest.raises(ValidationError, match="numbers: only a send to numbers"):
        claims.ClaimRequest.model_validate(to_lists)


def test_the_first_chunk_claimed_with_the_claim_is_the_claims_own(engine):
    first = claims.NumberChunk.of(0, [bytes([index]) * 16 for index in range(3)])
    request = checks.request("run_a", per_number=True).model_copy(update={"numbers": first})
    answer = checks.decide(engine, claims.claim, request)
    assert (answer.outcome, answer.numbers) == ("won", claims.NumbersAnswer())
    # Another send of the slot finds them taken, in its own first chunk.
    other = checks.request("run_b", per_number=True).model_copy(update={"numbers": first})
    taken = checks.decide(engine, claims.claim, other).numbers
    assert (taken.taken, [view.run_id for view in taken.earlier]) == ([0, 1, 2], ["run_a"])
    # The first claimant asking again (its answer lost) gets the same answer, and nothing is held twice.
    again = checks.decide(engine, claims.claim, request)
    assert (again.outcome, again.numbers) == ("resumed", claims.NumbersAnswer())
    assert checks.rows(engine) == (2, 3)


# SmsNotifier's alert folds: the same store, one transaction per alert.
FOLD_INTERVAL = dt.timedelta(minutes=15)
NUMBER_A, NUMBER_B = b"A" * 16, b"B" * 16


def fold(engine: Engine, *keys: bytes, text: str = "load failed") -> claims.FoldAnswer:
    """Decide an alert to the numbers of digests ``keys`` (fold interval 15 minutes)."""
    request = claims.FoldRequest(
        numbers=claims.NumberChunk.of(0, keys), interval_seconds=FOLD_INTERVAL.total_seconds(), text=text
    )
    return checks.decide(engine, claims.fold, request)


def test_an_alert_within_the_interval_is_held_and_the_next_after_it_carries_it(engine):
    first = fold(engine, NUMBER_A, NUMBER_B, text="load failed")
    assert [(group.positions, group.held) for group in first.send] == [([0, 1], 0)]
    assert first.held == []

    second = fold(engine, NUMBER_A, NUMBER_B, text="report failed")
    assert (second.send, second.held) == ([], [0, 1])
    assert second.until - second.since == FOLD_INTERVAL
    assert fold(engine, NUMBER_A, NUMBER_B, text="export failed").held == [0, 1]

    checks.rewind_folds(engine, FOLD_INTERVAL)
    after = fold(engine, NUMBER_A, NUMBER_B, text="load failed again")
    (group,) = after.send
    assert (group.positions, group.held) == ([0, 1], 2)
    assert [alert.text for alert in group.texts] == ["report failed", "export failed"]
    assert group.texts[0].at <= group.texts[1].at
    # Its interval starts again, with nothing held.
    assert fold(engine, NUMBER_A, NUMBER_B, text="x").held == [0, 1]


def test_numbers_are_decided_one_by_one_and_grouped_by_what_they_carry(engine):
    fold(engine, NUMBER_A)
    fold(engine, NUMBER_A, text="held for A")
    # A is within its interval, B is new: the alert goes to B now, is held for A.
    mixed = fold(engine, NUMBER_A, NUMBER_B, NUMBER_B, text="to both")
    assert mixed.held == [0]
    assert [(group.positions, group.held) for group in mixed.send] == [([1, 2], 0)]

    checks.rewind_folds(engine, FOLD_INTERVAL)
    # A carries the two alerts held for it, B none (it got "to both"): two groups, two SMS.
    later = fold(engine, NUMBER_A, NUMBER_B, text="later")
    carried = {tuple(group.positions): [alert.text for alert in group.texts] for group in later.send}
    assert carried == {(0,): ["held for A", "to both"], (1,): []}


def test_prune_deletes_only_the_folds_past_the_longest_interval_that_hold_nothing(engine):
    fold(engine, NUMBER_A)
    fold(engine, NUMBER_B)
    fold(engine, NUMBER_B, text="held for B")
    checks.rewind_folds(engine, dt.timedelta(days=2))
    horizon = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)

    def prune(session: Session, _conn_id: str, dry_run: bool) -> int:
        return claims.prune_folds(session, horizon, dry_run=dry_run)

    assert checks.decide(engine, prune, True) == 1
    assert checks.decide(engine, prune, False) == 1
    # B keeps its fold: the next alert to B carries what it holds.
    (group,) = fold(engine, NUMBER_B, text="later").send
    assert [alert.text for alert in group.texts] == ["held for B"]
    assert checks.decide(engine, prune, False) == 0


def test_a_number_keeps_the_first_texts_held_and_counts_every_one(engine):
    fold(engine, NUMBER_A)
    for index in range(claims.HELD_TEXTS_KEPT + 3):
        fold(engine, NUMBER_A, text=f"alert {index}")
    checks.rewind_folds(engine, FOLD_INTERVAL)
    (group,) = fold(engine, NUMBER_A).send
    assert group.held == claims.HELD_TEXTS_KEPT + 3
    assert [alert.text for alert in group.texts] == [f"alert {i}" for i in range(claims.HELD_TEXTS_KEPT)]


def test_alerts_to_one_number_at_the_same_instant_are_decided_one_after_the_other(url):
    """Twenty workers fail at once, each with an alert to the same numbers: exactly one goes now."""
    import threading

    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    checks.fresh_engine(url)
    barrier = threading.Barrier(20, timeout=60)
    answers: list[claims.FoldAnswer] = []

    def one(index: int) -> None:
        own = create_engine(url, poolclass=NullPool, connect_args={"timeout": 60, "check_same_thread": False})
        barrier.wait()
        answers.append(fold(own, NUMBER_A, NUMBER_B, text=f"alert {index}"))

    threads = [threading.Thread(target=one, args=(index,)) for index in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert len(answers) == 20
    assert sum(1 for answer in answers if answer.send) == 1
    assert sum(1 for answer in answers if answer.held == [0, 1]) == 19


def test_a_fold_request_is_bounded():
    keys = claims.NumberChunk.of(0, [NUMBER_A])
    with pytest.raises(ValidationError, match="text"):
        claims.FoldRequest(numbers=keys, interval_seconds=60, text="x" * (claims.HELD_TEXT_LENGTH + 1))
    with pytest.raises(ValidationError, match="interval_seconds"):
        claims.FoldRequest(numbers=keys, interval_seconds=2 * 24 * 3600, text="x")
