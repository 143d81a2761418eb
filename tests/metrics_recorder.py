"""A recording stand-in for Airflow's ``Stats``, for tests of the metrics the provider emits in this process.

The ``metrics_recorder`` fixture (a pytest plugin of the suite: tests/conftest.py lists this module) points
:mod:`airflow_provider_sms.metrics` at a :class:`MetricsRecorder` for the test, which keeps every call
Airflow's ``Stats`` would have received, in order: each metric once with its tags and, unless
``[metrics] legacy_names_on`` is off, once more under its plain-StatsD name (tags None). Code running in
threads of the test process (a receiver served by ``ThreadedServer``, the flusher) is recorded too; a
subprocess (``airflow dags test``) is not: tests/metrics_receivers.py receives those over the network.

Typical use::

    def test_refusals_are_counted(metrics_recorder: MetricsRecorder) -> None:
        ...
        assert metrics_recorder.total("receiver.refused", reason="caller") == 1
        assert metrics_recorder.personal_data(["33612345678"]) == []
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from airflow_provider_sms import metrics

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator


@dataclass(frozen=True)
class Sent:
    """One call of ``Stats``.

    :param method: ``incr``, ``gauge`` or ``timing``.
    :param name: the name sent, e.g. ``sms.receiver.refused`` or ``sms.receiver.refused.caller``.
    :param value: the value sent (milliseconds for a timer).
    :param tags: the tags sent; None for a plain-StatsD name.
    """

    method: str
    name: str
    value: float
    tags: dict[str, str] | None


class MetricsRecorder:
    """Airflow's ``Stats``, keeping what it is sent (:attr:`sent`) instead of sending it."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, str] | None = None) -> None:
        """Record a counter's increment."""
        self.sent.append(Sent("incr", stat, count, tags))

    def gauge(
        self,
        stat: str,
        value: float,
        rate: float = 1,
        delta: bool = False,
        *,
        tags: dict[str, str] | None = None,
    ) -> None:
        """Record a gauge's value."""
        self.sent.append(Sent("gauge", stat, value, tags))

    def timing(self, stat: str, dt: Any, *, tags: dict[str, str] | None = None) -> None:
        """Record a timer's value."""
        self.sent.append(Sent("timing", stat, dt, tags))

    def tagged(self, name: str, **tags: str) -> list[Sent]:
        """The calls of metric ``name`` (a key of :data:`metrics.METRICS`) under its fixed name whose tags
        include ``tags``."""
        full_name = metrics.METRICS[name].full_name
        return [
            sent
            for sent in self.sent
            if sent.name == full_name
            and sent.tags is not None
            and all(sent.tags.get(tag) == value for tag, value in tags.items())
        ]

    def total(self, name: str, **tags: str) -> float:
        """The sum of the values of metric ``name`` sent with ``tags`` (a counter's count)."""
        return sum(sent.value for sent in self.tagged(name, **tags))

    def values(self, name: str, **tags: str) -> list[float]:
        """The values of metric ``name`` sent with ``tags``, in order (a gauge's or a timer's)."""
        return [sent.value for sent in self.tagged(name, **tags)]

    def names(self) -> set[str]:
        """Every name sent, the plain-StatsD ones included."""
        return {sent.name for sent in self.sent}

    def personal_data(self, secrets: Iterable[str]) -> list[Sent]:
        """The calls whose name or tags hold one of ``secrets`` (numbers, texts, tokens, campaign ids, names
        a caller made up): what a test expects to be empty. Values are counts, shares and durations: a
        secret's digits could show in one by chance, so they are not searched."""
        wanted = [secret for secret in secrets if secret]

        def words(sent: Sent) -> Iterator[str]:
            yield sent.name
            for tag, value in (sent.tags or {}).items():
                yield tag
                yield value

        return [
            sent for sent in self.sent if any(secret in word for word in words(sent) for secret in wanted)
        ]


@pytest.fixture
def metrics_recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[MetricsRecorder]:
    """A :class:`MetricsRecorder` that the provider's metrics go to for the test (``[metrics]`` read
    afresh)."""
    recorder = MetricsRecorder()
    monkeypatch.setattr(metrics, "_stats", lambda: recorder)
    metrics._names_with_tags.cache_clear()
    yield recorder
    metrics._names_with_tags.cache_clear()
