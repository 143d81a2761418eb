"""The campaign an operator runs: its final message and its checked recipients or lists. Not public API.

Everything that decides what is sent is settled here before the first request: the message (the
delay merged, the send window applied), the recipients (checked, duplicates removed, in batches) or
the lists, and the local estimate of SMS parts. Simulating and sending one batch goes through the
hook, which builds the payloads and reads the answers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_sms._task_arguments import check_invalid_numbers
from airflow_provider_sms.delay import to_api_delay
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.models import CampaignResult, ListRef, Message, Recipient
from airflow_provider_sms.operators._recipient_batches import BatchPlan, RecipientSource, combine
from airflow_provider_sms.recipients import parse_lists
from airflow_provider_sms.send_window import Logger, apply_marketing_rules, postponement
from airflow_provider_sms.sms_parts import SmsParts, count_parts, has_stop_mention

if TYPE_CHECKING:
    from array import array

    from airflow_provider_sms.hooks.sms import SmsHook


def message_to_send(
    hook: SmsHook, message: object, delay: object, send_window: object, log: Logger
) -> tuple[Message, dict[str, str] | None]:
    """The validated message, with the operator's ``delay`` merged in and the send window applied.

    Everything that decides the final message, its delay included, happens here, before any
    request: a marketing message outside the send window is postponed (or refused) here.
    Returns the message and, when the send window moved its delay, what moved and why
    (:func:`~airflow_provider_sms.send_window.postponement`).

    :param hook: fills ``sender`` from the connection's ``default_sender``.
    :param message: the text, a dict or a :class:`Message` (rendered).
    :param delay: the operator's ``delay`` (rendered), or None.
    :param send_window: ``postpone``, ``fail`` or ``ignore`` (rendered).
    :param log: the task's logger.
    """
    data: dict[str, Any]
    if isinstance(message, str):
        data = {"text": message}
    elif isinstance(message, Message):
        data = message.model_dump(exclude_none=True)
    elif isinstance(message, Mapping):
        data = dict(message)
    else:
        text = f"message: expected the text, a dict or a Message, got {type(message).__name__}"
        raise SmsValidationError.for_field("message", text)
    if delay not in (None, ""):
        if data.get("delay") not in (None, ""):
            text = "delay: given both as the operator's delay and in message; give it once"
            raise SmsValidationError.for_field("delay", text)
        # Checked here, so that an error names the operator's argument, not message.delay.
        data["delay"] = to_api_delay(delay, field="delay")
    requested = hook.prepare_message(data)
    sent = apply_marketing_rules(requested, send_window, logger=log)
    return sent, postponement(requested, sent)


def fingerprint(message: Message, items: Iterable[object]) -> str:
    """Digest of what a batch sends, to notice a retry whose input changed.

    The delay is left out: a delay computed from "now" in a template differs on every attempt,
    and a retry must not be refused for that alone.
    """
    digest = hashlib.sha256(message.model_dump_json(exclude={"delay"}).encode())
    # Each item on a line of its own, hashed in one update: the digest of one update per line.
    lines = list(map(str, items))
    if lines:
        digest.update(("\n" + "\n".join(lines)).encode())
    return digest.hexdigest()[:32]


def content_digest(conn_id: str, message: Message, audience: str) -> str:
    """Digest of what makes two campaigns the same, but their delivery time.

    :param audience: the digest of the recipients as a set, or of the sorted list ids
        (:attr:`~._recipient_batches.BatchPlan.audience`).
    """
    content = {
        "conn_id": conn_id,
        "text": message.text,
        "sender": message.sender,
        "pushtype": message.pushtype,
        "links": message.links or [],
        "audience": audience,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:32]


def parts_of(message: Message) -> SmsParts:
    """The SMS parts each recipient is billed for: the text, short URLs and any STOP mention."""
    return count_parts(message.text, stop_mention=has_stop_mention(message.pushtype, message.sender))


@dataclass
class Campaign:
    """The campaign an operator runs: one message, to numbers in batches or to stored lists."""

    hook: SmsHook
    message: Message
    source: RecipientSource | None
    lists: list[ListRef] | None
    batch_size: int
    plan: BatchPlan
    # What the send window changed of the delay (requested, moved_to, reason), when it did.
    moved: dict[str, str] | None = None
    # Per batch, the positions of the numbers another send of the message holds for the slot: left out
    # before any request (:meth:`sendable`).
    left_out: dict[int, array[int]] = field(default_factory=dict)

    @classmethod
    def prepare(
        cls,
        hook: SmsHook,
        message: Message,
        *,
        recipients: object,
        lists: object,
        batch_size: int,
        log: Logger,
        invalid_numbers: object = "fail",
        recipients_column: str | None = None,
        moved: dict[str, str] | None = None,
    ) -> Campaign:
        """Check the recipients or lists (no request made) and log the estimate of SMS parts.

        :param invalid_numbers: ``fail`` or ``skip`` the recipients that fail local validation.
        :param recipients_column: the numbers' column of a CSV file with a header.
        :param moved: what the send window changed of the message's delay, if anything.
        """
        if (recipients is None) == (lists is None):
            text = "give either recipients (telephone numbers) or lists (list ids), not both or neither"
            raise SmsValidationError.for_field("recipients", text)
        parts = parts_of(message)
        if lists is not None:
            refs = parse_lists(lists)
            log.info("Estimate: %s, to lists %s", parts.describe(), [ref.value for ref in refs])
            audience = "lists:" + ",".join(str(ref.value) for ref in sorted(refs, key=lambda ref: ref.value))
            plan = BatchPlan(1, len(refs), 0, audience=audience)
            return cls(hook, message, None, refs, batch_size, plan, moved)
        source = RecipientSource(
            recipients,
            invalid_numbers=check_invalid_numbers(invalid_numbers),
            column=recipients_column or None,
        )
        plan = source.plan(batch_size)
        if plan.rejected is not None and plan.rejected.count:
            log.warning(
                "recipients: %s left out before any request (invalid_numbers='skip'); they are reported "
                "in the result as rejected_locally",
                plan.rejected.describe(plan.rejected.count + plan.recipients + plan.duplicates),
            )
        log.info(
            "Estimate: %s; %s recipients (%s duplicates removed) in %s batch(es) of up to %s: "
            "about %s SMS parts before the service's filters",
            parts.describe(),
            plan.recipients,
            plan.duplicates,
            plan.batches,
            batch_size,
            plan.recipients * parts.parts,
        )
        return cls(hook, message, source, None, batch_size, plan, moved)

    def batches(self) -> Iterator[tuple[int, list[str | Recipient] | list[ListRef]]]:
        """``(index, items)`` of each batch; a list campaign is one batch."""
        if self.source is not None:
            yield from self.source.batches()
        elif self.lists is not None:
            yield 0, self.lists

    def sendable(self, index: int, items: list[Any]) -> list[Any]:
        """The items of batch ``index`` that are sent: those no other send of the message holds."""
        left_out = self.left_out.get(index)
        if not left_out:
            return items
        gone = set(left_out)
        return [item for position, item in enumerate(items) if position not in gone]

    def recipients_left(self) -> int:
        """The recipients that are sent to (:meth:`sendable`), in every batch."""
        return self.plan.recipients - sum(map(len, self.left_out.values()))

    def simulate(self, items: list[Any]) -> CampaignResult:
        """Simulate one batch (nothing is created)."""
        if self.lists is not None:
            return self.hook.simulate_lists(self.message, items)
        return self.hook.simulate(self.message, items)

    def send(self, items: list[Any]) -> CampaignResult:
        """Send one batch, exactly once (the hook never repeats a send)."""
        if self.lists is not None:
            return self.hook.send_lists(self.message, items)
        return self.hook.send(self.message, items)

    def fingerprint(self, items: list[Any]) -> str:
        """Digest of the batch, to tell a retry of the same campaign from a changed one."""
        if self.lists is not None:
            return fingerprint(self.message, (f"list:{ref.value}" for ref in items))
        # A number is a str: the usual item, told apart without the model's slower isinstance().
        return fingerprint(
            self.message,
            [
                item if type(item) is str or not isinstance(item, Recipient) else item.model_dump_json()
                for item in items
            ],
        )

    def digest(self) -> str:
        """What makes two campaigns the same but their delivery time (a send to lists claims it)."""
        return content_digest(self.hook.sms_conn_id, self.message, self.plan.audience)

    def notes(self) -> dict[str, Any]:
        """What the result reports beyond the figures, when it happened: ``send_window`` (the delay was
        moved) and ``rejected_locally`` (numbers left out with ``invalid_numbers="skip"``)."""
        notes: dict[str, Any] = {}
        if self.moved is not None:
            notes["send_window"] = self.moved
        if self.plan.rejected is not None:
            notes["rejected_locally"] = self.plan.rejected.as_dict()
        return notes

    def estimate(self) -> dict[str, Any]:
        """The local estimate of SMS parts (returned in XCom next to the service's figures)."""
        parts = parts_of(self.message)
        estimate = parts.as_dict()
        if self.lists is None:
            estimate["parts_total"] = self.plan.recipients * parts.parts
        return estimate


def simulate_all(
    campaign: Campaign, log: Logger, sent: Mapping[int, CampaignResult] | None = None
) -> dict[str, Any]:
    """Simulate each batch (using the real result of batches already ``sent``) and add them up; a batch
    whose every number another send holds is not simulated (it is not sent)."""
    results = []
    for index, items in campaign.batches():
        if sent and index in sent:
            results.append(sent[index])
            continue
        items = campaign.sendable(index, items)
        if not items:
            continue
        results.append(campaign.simulate(items))
        if campaign.plan.batches > 1:
            log.info("Simulated batch %s/%s: %s", index + 1, campaign.plan.batches, results[-1].summary())
    return combine(results, duplicates=campaign.plan.duplicates)
