"""The claim store on PostgreSQL (a cluster of its own, the ``postgres`` fixture): the races of
tests/unit/test_claim_store.py, where PostgreSQL's row locks and READ COMMITTED decide them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests import claim_store_checks as checks

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


@pytest.fixture
def url(postgres: Engine) -> str:
    return postgres.url.render_as_string(hide_password=False)


@pytest.fixture
def engine(url: str) -> Engine:
    return checks.fresh_engine(url)


def test_fifty_threads_claim_one_campaign_and_exactly_one_wins(engine):
    assert checks.concurrent_threads(engine, 50) == {"won": 1, "duplicate": 49}
    assert checks.rows(engine) == (1, 0)


def test_fifty_claimants_in_five_processes_and_exactly_one_wins(engine, url):
    assert checks.concurrent_processes(url, processes=5, threads_each=10) == {"won": 1, "duplicate": 49}
    assert checks.rows(engine) == (1, 0)


@pytest.mark.parametrize("step", list(checks.PAUSE_POINTS))
def test_a_claimant_paused_at_any_step_still_leaves_one_winner(url, step):
    outcomes = checks.paused_and_prompt(url, step)
    assert sorted(outcomes.values()) == ["duplicate", "won"]
    assert outcomes["a" if step != "before its check" else "b"] == "won"


def test_two_slots_of_one_content_claimed_at_once_keep_both_rows(engine):
    assert checks.two_slots_at_once(engine) == ["won", "won"]
    assert checks.rows(engine) == (2, 0)


def test_two_sends_overlapping_by_half_give_each_number_to_one(engine):
    won_a, won_b = checks.overlapping_numbers(engine)
    assert not won_a & won_b
    assert won_a | won_b == set(range(1500))
    assert checks.rows(engine) == (2, 1500)
