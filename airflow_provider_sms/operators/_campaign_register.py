"""The campaign register: the same campaign is not sent twice across DAG runs. Internal.

The send guard (:mod:`._send_guard`) is per task instance: it keeps a retry from sending again what
its own earlier attempt sent. This register is per campaign: before the first request of a send, the
operator looks for the same campaign already sent, or being sent, by another task instance (another
DAG run, another DAG, another map index) and refuses, skips or goes on as ``on_duplicate`` says.

**The same campaign** is the same connection, the same message (text, sender, pushtype, links), the
same recipients (as a set, whatever their order, or the same lists) and a delivery time within
:func:`duplicate_window` (default one hour) of the other's. The delivery time is the ``delay`` as sent
(after the send window), or the moment of the send when there is none: a daily reminder sent on
consecutive days is two campaigns, a scheduled run and a manual run for the same slot are one.

**Where it lives**: one Airflow Variable per campaign content, ``sms_campaign:<digest>``, written
through the Task SDK like the guard, so every worker sees it. Its value is JSON: the content's
connection and an ``entries`` list, one per send of that content (who sent it, its delivery time, its
state ``sending`` or ``sent``, its tickets). An entry whose delivery time is more than the window in
the past can no longer match a new send and is dropped at the next write; ``python -m
airflow_provider_sms prune`` deletes registers left with none.

**Two sends at the same moment**: Variables offer no compare-and-set, so a claim is written, left to
settle for :func:`settle_seconds` (default 1 s) and read back; of two claims that overlap, the one
overwritten by the other loses and is refused. Both can still pass only when one worker's read and
write of the register are further apart than the settle time (a stalled worker or API server): the
docs and the refusal say how to close that window (``max_active_runs=1``, or a one-slot pool for the
send tasks).
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import pendulum
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException, Variable, conf

from airflow_provider_sms.operators._variable_records import RECORD_STATES, RecordState, record_from

if TYPE_CHECKING:
    from airflow_provider_sms._task_arguments import OnDuplicate
    from airflow_provider_sms.send_window import Logger

PREFIX = "sms_campaign"
CONFIG_SECTION = "sms"
DEFAULT_WINDOW_MINUTES = 60.0
DEFAULT_SETTLE_SECONDS = 1.0
# Claims retried when another send of the same content (a different slot) overwrote ours.
_CLAIM_TRIES = 3
RACE_WINDOW = (
    "Two sends of one campaign that check at the same moment are told apart only if each worker reads "
    "and writes the register within {settle:g} s; to close that window, give the DAG max_active_runs=1 "
    "or the send tasks a pool of one slot"
)


def duplicate_window() -> dt.timedelta:
    """How close two delivery times must be for two sends to be the same campaign (``[sms]
    duplicate_window_minutes``, default 60)."""
    minutes = conf.getfloat(CONFIG_SECTION, "duplicate_window_minutes", fallback=DEFAULT_WINDOW_MINUTES)
    return dt.timedelta(minutes=minutes)


def settle_seconds() -> float:
    """How long a claim settles before it is read back (``[sms] duplicate_check_settle_seconds``)."""
    return float(
        conf.getfloat(CONFIG_SECTION, "duplicate_check_settle_seconds", fallback=DEFAULT_SETTLE_SECONDS)
    )


class RegisterUnreadableError(AirflowFailException):
    """A register Variable the provider cannot read: nothing is sent (a guard fails closed)."""


@dataclass
class RegisterEntry:
    """One send of a campaign content.

    :param delivery: when it is (or was) delivered, ISO 8601 in UTC: the delay, or the send time.
    :param delayed: whether ``delivery`` is a delay given to the service.
    :param state: ``sending`` (claimed; it may have been sent) or ``sent`` (tickets known).
    :param nonce: tells this claim from another of the same task instance.
    """

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    delivery: str
    delayed: bool
    state: RecordState
    claimed: str
    nonce: str
    tickets: list[str] = field(default_factory=list)

    @property
    def identity(self) -> tuple[str, str, str, int]:
        """The task instance that made this entry."""
        return (self.dag_id, self.task_id, self.run_id, self.map_index)

    def when(self) -> pendulum.DateTime:
        """The delivery time."""
        parsed = pendulum.parse(self.delivery)
        if not isinstance(parsed, pendulum.DateTime):
            raise ValueError(f"delivery {self.delivery!r} is not a date and time")
        return parsed

    def describe(self) -> str:
        """Who sent it, and what is known of the outcome, for a refusal."""
        who = f"DAG {self.dag_id!r}, run {self.run_id!r}, task {self.task_id!r}"
        if self.map_index >= 0:
            who += f" (map index {self.map_index})"
        if self.state == "sent":
            what = f"sent it (ticket{'s' if len(self.tickets) > 1 else ''} {', '.join(self.tickets)})"
        else:
            what = "is sending it, or may have sent it (no ticket recorded yet)"
        paris = self.when().in_tz("Europe/Paris").format("YYYY-MM-DD HH:mm:ss")
        timing = "for delivery at" if self.delayed else "at"
        return f"{who} {what}, {timing} {paris} Europe/Paris"


def _entry(raw: object, where: str) -> RegisterEntry:
    entry = record_from(RegisterEntry, raw, where, RECORD_STATES)
    if not isinstance(entry.map_index, int) or not isinstance(entry.tickets, list):
        raise ValueError(f"{where}: map_index must be an integer and tickets a list")
    entry.when()
    return entry


class CampaignRegister:
    """The register of one campaign content (one Variable), for the task instance that sends it.

    :param digest: the campaign's content digest (:meth:`~._campaign.Campaign.digest`).
    :param conn_id: its connection, written into the record for humans.
    :param identity: dag_id, task_id, run_id and map_index of the sending task instance.
    """

    def __init__(self, digest: str, conn_id: str, identity: tuple[str, str, str, int]) -> None:
        self.key = f"{PREFIX}:{digest}"
        self.conn_id = conn_id
        self.identity = identity
        self.mine: RegisterEntry | None = None

    def load(self) -> list[RegisterEntry]:
        """The entries recorded; an unreadable record fails closed (:class:`RegisterUnreadableError`)."""
        raw = Variable.get(self.key, default=None)
        if raw in (None, ""):
            return []
        try:
            document = json.loads(raw)
            entries = document.get("entries") if isinstance(document, dict) else None
            if not isinstance(entries, list):
                raise ValueError("it has no 'entries' list")
            return [_entry(item, f"entries[{index}]") for index, item in enumerate(entries)]
        except ValueError as exc:
            raise RegisterUnreadableError(
                f"The campaign register (Airflow Variable {self.key!r}) cannot be read ({exc}), so it "
                "cannot tell whether this campaign was already sent. Not sending. It must be JSON "
                '{"conn_id": ..., "entries": [...]}, each entry with dag_id, task_id, run_id, map_index, '
                "delivery (ISO 8601), delayed, state ('sending' or 'sent'), claimed, nonce and tickets. "
                "Fix it, or delete the Variable if no other run sent this campaign in the last hour."
            ) from None

    def claim(
        self,
        delivery: pendulum.DateTime,
        *,
        delayed: bool,
        on_duplicate: OnDuplicate,
        log: Logger,
        resuming: bool = False,
    ) -> None:
        """Record this send before its first request, or refuse it as a duplicate.

        :param delivery: the delay, or now.
        :param on_duplicate: ``fail``, ``skip`` or ``send`` when another task instance sent the same
            campaign for a delivery time within :func:`duplicate_window`.
        :param resuming: this task instance already began sending (a retry): its own campaign is not
            a duplicate; its entry is kept, or written again if it was pruned.
        :raises AirflowFailException: ``fail``, naming the earlier send.
        :raises AirflowSkipException: ``skip``.
        """
        settle = settle_seconds()
        mine = RegisterEntry(
            *self.identity,
            delivery=delivery.in_tz("UTC").isoformat(),
            delayed=delayed,
            state="sending",
            claimed=pendulum.now("UTC").isoformat(),
            nonce=uuid.uuid4().hex,
        )
        if resuming:
            # Its own entry, kept; written again if it was pruned. No check: it is not a duplicate.
            entries = self.load()
            own = [entry for entry in entries if entry.identity == self.identity]
            self.mine = own[-1] if own else mine
            if not own:
                self._save([*entries, mine])
            return
        warned = False
        for _ in range(_CLAIM_TRIES):
            entries = self.load()
            earlier = self._same_campaign(entries, delivery)
            if earlier and on_duplicate != "send":
                self._refuse(earlier[0], on_duplicate, settle, log)
            if earlier and not warned:
                warned = True
                log.warning(
                    "The same campaign was already sent: %s. Sending it again (on_duplicate='send').",
                    earlier[0].describe(),
                )
            self._save([entry for entry in entries if entry.identity != self.identity] + [mine])
            if settle:
                time.sleep(settle)
            after = self.load()
            if any(entry.nonce == mine.nonce for entry in after):
                self.mine = mine
                return
            # Overwritten by a send that read the register before our claim: if it is the same
            # campaign, it won; otherwise (another slot of the same content) claim again.
            rival = self._same_campaign(after, delivery)
            if rival and on_duplicate != "send":
                self._refuse(rival[0], on_duplicate, settle, log)
        raise AirflowFailException(
            f"The campaign register (Airflow Variable {self.key!r}) was overwritten by other sends "
            f"{_CLAIM_TRIES} times in a row while this send claimed it. Not sending; clear the task to "
            "try again."
        )

    def sent(self, tickets: list[str]) -> None:
        """Record the tickets of this send (its entry becomes ``sent``)."""
        if self.mine is None:
            return
        self.mine.state = "sent"
        self.mine.tickets = [str(ticket) for ticket in tickets]
        self._save([entry for entry in self.load() if entry.nonce != self.mine.nonce] + [self.mine])

    def release(self) -> None:
        """Forget this send: it certainly sent nothing (refused, skipped, or failed before any POST)."""
        if self.mine is None:
            return
        nonce = self.mine.nonce
        self.mine = None
        self._save([entry for entry in self.load() if entry.nonce != nonce])

    def _same_campaign(
        self, entries: list[RegisterEntry], delivery: pendulum.DateTime
    ) -> list[RegisterEntry]:
        window = duplicate_window()
        return [
            entry
            for entry in entries
            if entry.identity != self.identity and abs(entry.when() - delivery) < window
        ]

    def _refuse(self, earlier: RegisterEntry, on_duplicate: OnDuplicate, settle: float, log: Logger) -> None:
        minutes = duplicate_window().total_seconds() / 60
        text = (
            f"The same campaign (same connection {self.conn_id!r}, message and recipients, delivered "
            f"within {minutes:g} minutes) was already sent: {earlier.describe()}. Not sending it again "
            f"(on_duplicate={on_duplicate!r}); nothing was requested from the service. If this DAG repeats "
            "the campaign on purpose, set on_duplicate='send'. The register is the Airflow Variable "
            f"{self.key!r}. {RACE_WINDOW.format(settle=settle)}."
        )
        if on_duplicate == "skip":
            log.warning("%s Skipping (on_duplicate='skip').", text)
            raise AirflowSkipException(text)
        raise AirflowFailException(text)

    def _save(self, entries: list[RegisterEntry]) -> None:
        horizon = pendulum.now("UTC") - duplicate_window()
        # An entry delivered before the horizon can match no new send (their delivery is now or later).
        kept = [entry for entry in entries if entry.when() >= horizon]
        Variable.set(
            self.key,
            json.dumps(
                {"conn_id": self.conn_id, "entries": [asdict(entry) for entry in kept]}, separators=(",", ":")
            ),
            description="SMS campaign register: recent sends of one campaign, to refuse sending it twice.",
        )
