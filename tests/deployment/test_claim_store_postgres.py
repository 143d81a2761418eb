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


class TestClaimRacesOnPostgresql(checks.ClaimRaces):
    """The races of :class:`~tests.claim_store_checks.ClaimRaces`, on PostgreSQL."""
