"""What the SMS operators do when their task runs: prepare, simulate, gate and send. Not public API.

The operators (:mod:`airflow_provider_sms.operators.sms`) hold the task's arguments and call this
module from ``execute()``: DAG files import the operators, and keeping the models, the batches, the
send guard and the hook here means parsing a DAG file loads none of them.

Nothing here builds payloads or reads answers (the hook does). What it adds is the task's side:
validation of everything before the first request, the local estimate of SMS parts, batching, the
gates, the send guard (:mod:`._send_guard`) and turning errors into Airflow outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

from airflow_provider_sms._task_arguments import (
    OnDuplicate,
    check_invalid_numbers,
    check_on_cost_exceeded,
    check_on_duplicate,
)
from airflow_provider_sms.delay import parse_instant, to_api_delay
from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsMaybeSentError,
    SmsNothingSentError,
    SmsTransportError,
    SmsValidationError,
)
from airflow_provider_sms.models import CampaignResult, ListRef, Message, Recipient
from airflow_provider_sms.operators._campaign_register import CampaignRegister, content_digest
from airflow_provider_sms.operators._recipient_batches import BatchPlan, RecipientSource, combine
from airflow_provider_sms.operators._send_guard import ApprovalRecord, SendGuard, fingerprint
from airflow_provider_sms.recipients import parse_lists
from airflow_provider_sms.send_window import Logger, apply_marketing_rules, postponement
from airflow_provider_sms.sms_parts import SmsParts, count_parts, has_stop_mention

if TYPE_CHECKING:
    from airflow_provider_sms.hooks.sms import SmsHook

# Answers that another attempt would get again (bad token, bad body, bad delay, unknown list, bad
# data): retrying them only delays the failure. Other statuses (-3 credits, -99) may be retried.
_PERMANENT_STATUSES = frozenset({-1, -2, -4, -5, -6, -7})
CHECK_HOW = (
    "look in the service's campaign history (for the sandbox, its inspection API) for a campaign "
    "created at that time with this text"
)


def task_failure(exc: Exception) -> Exception:
    """What a task raises for the provider's error ``exc``: fail at once where retrying cannot help.

    Bad input, permanent API errors and a send that reached nobody fail without retry; a send of
    unknown outcome (:class:`SmsMaybeSentError`) fails without retry, since a retry could send the
    campaign twice; :class:`SmsTransportError` (nothing was sent) stays, for Airflow's normal retries.
    The provider's frames are dropped: the message says what to fix, and Airflow logs the traceback of
    every failure (its own frames stay).

    :param exc: an error of the provider, or an ``AirflowFailException`` it raised.
    """
    failure = exc
    if isinstance(exc, SmsValidationError):
        failure = AirflowFailException(f"Invalid input (not retried): {exc}")
    elif isinstance(exc, SmsMaybeSentError):
        failure = AirflowFailException(
            f"{exc}. The campaign may have been sent, so Airflow will not retry this task: {CHECK_HOW}."
        )
    elif isinstance(exc, SmsNothingSentError):
        failure = AirflowFailException(
            f"{exc} Not retried: the campaign exists, and another attempt would meet the same filters."
        )
    elif isinstance(exc, SmsApiError) and exc.status in _PERMANENT_STATUSES:
        failure = AirflowFailException(f"{exc} (not retried: another attempt would get the same answer)")
    return failure.with_traceback(None)


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
        return fingerprint(
            self.message, (item.model_dump_json() if isinstance(item, Recipient) else item for item in items)
        )

    def digest(self) -> str:
        """What makes two campaigns the same but their delivery time (the campaign register's key)."""
        return content_digest(self.hook.sms_conn_id, self.message, self.plan.audience)

    def register(self, identity: Mapping[str, Any]) -> CampaignRegister:
        """The campaign register of this campaign, for the task instance ``identity`` that sends it."""
        return CampaignRegister(
            self.digest(),
            self.hook.sms_conn_id,
            (identity["dag_id"], identity["task_id"], identity["run_id"], identity["map_index"]),
        )

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
    """Simulate each batch (using the real result of batches already ``sent``) and add them up."""
    results = []
    for index, items in campaign.batches():
        if sent and index in sent:
            results.append(sent[index])
            continue
        results.append(campaign.simulate(items))
        if campaign.plan.batches > 1:
            log.info("Simulated batch %s/%s: %s", index + 1, campaign.plan.batches, results[-1].summary())
    return combine(results, duplicates=campaign.plan.duplicates)


def summary(figures: Mapping[str, Any]) -> str:
    """The one-line summary of added-up figures (as :meth:`CampaignResult.summary` writes it)."""
    return CampaignResult.model_validate({"status": 1, "message": "OK", **figures}).summary()


def _number(value: object, field: str, *, given: bool) -> float | int | None:
    """A templated gate value (it may render to a string) as a finite number >= 0, or None when unset.

    A gate fails closed: one the DAG gave (``given``) that rendered to nothing (``""``, ``None``,
    ``"None"``) is an error, not "no gate", and so are NaN and infinity (``"1e400"``): a budget that
    failed to arrive must not mean an unlimited budget.
    """
    if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
        if not given:
            return None
        raise SmsValidationError.for_value(
            field,
            value,
            "the gate was given but rendered to nothing; a gate that cannot be read refuses to send "
            "(give a number, or leave the argument out for no gate)",
        )
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = -1.0
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise SmsValidationError.for_value(field, value, "must be a number >= 0, neither NaN nor infinite")
    return int(number) if number.is_integer() else number


def read_gates(
    *,
    max_cost: object,
    max_filtered_ratio: object,
    min_credits_after: object,
    on_cost_exceeded: object,
    given: Collection[str] = (),
) -> dict[str, float | int | None]:
    """The gates from the operator's (rendered) arguments, each checked and named when wrong.

    :param given: the gates the DAG set (not None when the operator was built): those may not render
        to nothing.
    """
    check_on_cost_exceeded(on_cost_exceeded)
    ratio = _number(max_filtered_ratio, "max_filtered_ratio", given="max_filtered_ratio" in given)
    if ratio is not None and ratio > 1:
        raise SmsValidationError.for_value(
            "max_filtered_ratio", max_filtered_ratio, "must be between 0 and 1 (0.2 = 20 %)"
        )
    return {
        "max_cost": _number(max_cost, "max_cost", given="max_cost" in given),
        "max_filtered_ratio": ratio,
        "min_credits_after": _number(
            min_credits_after, "min_credits_after", given="min_credits_after" in given
        ),
    }


def apply_gates(
    gates: Mapping[str, Any],
    simulation: Mapping[str, Any],
    on_cost_exceeded: object,
    log: Logger,
    rejected_locally: int = 0,
    approval: ApprovalRecord | None = None,
    digest: str = "",
) -> dict[str, Any]:
    """Compare the simulated figures with the gates; raise (fail or skip) when one refuses.

    :param rejected_locally: recipients left out before any request (``invalid_numbers="skip"``):
        ``max_filtered_ratio`` counts them with the service's filtered ones.
    :param approval: with ``on_cost_exceeded="ask"``, the send guard's approval record, verified
        (:meth:`SendGuard.trusted_approval`), if any.
    :param digest: the campaign's content digest, compared with the approved one's.
    :return: the gate's decision and figures, returned in the operator's XCom.
    :raises ApprovalNeeded: ``ask``, and no approval yet: the operator asks.
    :raises AirflowFailException: ``ask``, approved, but the approval does not cover what the gates
        refuse now (:func:`~._approval.approved_gate`).
    """
    given = simulation["total"] + rejected_locally
    ratio = (simulation["filtered"] + rejected_locally) / given if given else 0.0
    # (gate, passed, what was compared) for each gate set: one sentence, whichever way it went.
    checks: list[tuple[str, bool, str]] = []
    if gates["max_cost"] is not None:
        passed = simulation["cost"] <= gates["max_cost"]
        checks.append(
            (
                "max_cost",
                passed,
                f"cost {simulation['cost']} credits is {'within' if passed else 'over'} "
                f"max_cost {gates['max_cost']}",
            )
        )
    if gates["max_filtered_ratio"] is not None:
        passed = ratio <= gates["max_filtered_ratio"]
        checks.append(
            (
                "max_filtered_ratio",
                passed,
                f"{ratio:.1%} of the numbers would be filtered, {'within' if passed else 'over'} "
                f"max_filtered_ratio {gates['max_filtered_ratio']:.1%}",
            )
        )
    if gates["min_credits_after"] is not None:
        passed = simulation["credits"] >= gates["min_credits_after"]
        checks.append(
            (
                "min_credits_after",
                passed,
                f"{simulation['credits']} credits would be left, {'at least' if passed else 'under'} "
                f"min_credits_after {gates['min_credits_after']}",
            )
        )
    refused = [name for name, passed, _ in checks if not passed]
    refusals = [text for _, passed, text in checks if not passed]
    gate = {**gates, "passed": not refusals, "filtered_ratio": round(ratio, 4), "refusals": refusals}
    if not refusals:
        log.info(
            "Gate passed: %s. Simulated: %s", "; ".join(text for _, _, text in checks), summary(simulation)
        )
        return gate
    text = f"Gate refused the send: {'; '.join(refusals)}. Simulated: {summary(simulation)}"
    if on_cost_exceeded == "ask":
        from airflow_provider_sms.operators._approval import ApprovalNeeded, approved_gate

        return approved_gate(ApprovalNeeded(gate, simulation, text, refused, approval), digest, log)
    if on_cost_exceeded == "skip":
        log.warning("%s; skipping (on_cost_exceeded='skip')", text)
        raise AirflowSkipException(text)
    raise AirflowFailException(text + " (not retried)")


def already_sent(
    guard: SendGuard, campaign: Campaign, *, allow_resend: bool, log: Logger
) -> dict[int, CampaignResult]:
    """Results of batches an earlier attempt sent; fail on batches of unknown outcome."""
    unknown = {i: r for i, r in guard.batches.items() if r.state == "sending"}
    beyond = [i for i in guard.batches if i >= campaign.plan.batches]
    if beyond:
        raise AirflowFailException(
            f"The send guard (Airflow Variable {guard.key!r}) records batch(es) "
            f"{[i + 1 for i in beyond]} but the campaign now has {campaign.plan.batches}: the input "
            "changed since an earlier attempt sent part of it. Not sending. Delete the Variable to "
            "send the new campaign as a whole."
        )
    if unknown and not allow_resend:
        first = min(unknown)
        record = unknown[first]
        raise AirflowFailException(
            f"Batch {first + 1}/{campaign.plan.batches} may have been sent by an earlier attempt of this "
            f"task (POST started at {record.started}, no answer recorded"
            + (f": {record.note}" if record.note else "")
            + f"), so it is not sent again. To check: {CHECK_HOW}. If it was not sent, set "
            f"allow_resend=True, or remove batch {first} from the Airflow Variable {guard.key!r}, and "
            "clear the task; batches recorded as sent are never sent again."
        )
    for index in unknown:
        log.warning(
            "Batch %s may have been sent by an earlier attempt; sending it again (allow_resend=True)",
            index + 1,
        )
    return {i: r.campaign_result() for i, r in guard.batches.items() if r.state == "sent"}


def send_batches(
    campaign: Campaign, guard: SendGuard, sent: Mapping[int, CampaignResult], log: Logger
) -> list[CampaignResult]:
    """Send every batch not yet sent, each recorded in the guard before and after its POST."""
    total = campaign.plan.batches
    results: list[CampaignResult] = []
    for index, items in campaign.batches():
        digest = campaign.fingerprint(items)
        if index in sent:
            if guard.batches[index].fingerprint != digest:
                raise AirflowFailException(
                    f"Batch {index + 1}/{total} was sent by an earlier attempt (ticket "
                    f"{sent[index].ticket}) with other recipients or another message: the input changed "
                    f"between attempts. Not sending. Delete the Airflow Variable {guard.key!r} to send "
                    "the new campaign."
                )
            results.append(sent[index])
            log.info(
                "Batch %s/%s was already sent by an earlier attempt (ticket %s): not sending it again",
                index + 1,
                total,
                sent[index].ticket,
            )
            continue
        guard.begin(index, digest)
        try:
            result = campaign.send(items)
        except SmsMaybeSentError as exc:
            guard.unknown(index, str(exc))
            raise AirflowFailException(
                f"{exc}. Batch {index + 1}/{total} may have been sent, so Airflow will not retry this "
                f"task ({len(results)} earlier batch(es) were sent: tickets "
                f"{[r.ticket for r in results]}). To check: {CHECK_HOW}. The send guard is the Airflow "
                f"Variable {guard.key!r}."
            ) from None
        except (SmsTransportError, SmsApiError, SmsValidationError):
            # Refused before sending, never received, or answered with an error: nothing was created.
            guard.release(index)
            raise
        log.info("Batch %s/%s sent: ticket %s; recording it", index + 1, total, result.ticket)
        guard.confirm(index, result)
        results.append(result)
        log.info(
            "Progress: batch %s/%s, %s numbers sent so far, %s credits spent so far, %s credits left",
            index + 1,
            total,
            sum(r.sent for r in results),
            sum(r.cost for r in results),
            result.credits,
        )
    return results


def send_campaign(
    campaign: Campaign,
    guard: SendGuard,
    gates: Mapping[str, Any],
    *,
    on_cost_exceeded: object,
    on_duplicate: object = "fail",
    allow_resend: bool,
    log: Logger,
) -> dict[str, Any]:
    """Look for the same campaign sent by another run, gate, then send batch by batch under the guard.

    :param on_duplicate: ``fail``, ``skip`` or ``send`` when the campaign register
        (:mod:`._campaign_register`) holds the same campaign sent by another task instance.
    :return: the send operators' XCom dict.
    :raises ApprovalNeeded: a gate refused, ``on_cost_exceeded="ask"`` and the guard holds no
        approval of this campaign (nothing was sent; the register's claim is released).
    :raises AirflowFailException: with ``ask``, the guard's approval does not verify, or does not cover
        what the gates refuse now (nothing was sent).
    """
    duplicate_policy: OnDuplicate = check_on_duplicate(on_duplicate)
    sent = already_sent(guard, campaign, allow_resend=allow_resend, log=log)
    register = campaign.register(guard.identity)
    delay = campaign.message.delay
    delivery = parse_instant(delay) if delay else pendulum.now("UTC")
    # A retry of a task instance that began sending resumes its own campaign: not a duplicate.
    register.claim(
        delivery, delayed=bool(delay), on_duplicate=duplicate_policy, log=log, resuming=bool(guard.batches)
    )
    simulation = gate = None
    # Every batch already sent (a cleared task): nothing to gate, the guard returns what was sent.
    resending = len(sent) < campaign.plan.batches
    try:
        if resending and any(value is not None for value in gates.values()):
            # An approval grants a send: verified before any request, or the send fails closed.
            approval = (
                guard.trusted_approval(campaign.hook.settings.token) if on_cost_exceeded == "ask" else None
            )
            simulation = simulate_all(campaign, log, sent)
            gate = apply_gates(
                gates,
                simulation,
                on_cost_exceeded,
                log,
                campaign.plan.rejected_count,
                approval=approval,
                digest=campaign.digest(),
            )
        results = send_batches(campaign, guard, sent, log)
    except BaseException:
        if not guard.batches:
            # Refused, skipped or failed before any POST that may have reached the service.
            try:
                register.release()
            except Exception as exc:  # the task's own error is what the log must show
                log.warning(
                    "Could not forget this send in the campaign register %s (%s): another run of this "
                    "campaign will be refused until its entry is removed",
                    register.key,
                    exc,
                )
        raise
    sent_at = min(parse_instant(record.started, field="started") for record in guard.batches.values())
    tickets = [result.ticket for result in results]
    register.sent([ticket for ticket in tickets if ticket is not None])
    figures = combine(results, duplicates=campaign.plan.duplicates)
    # A campaign that reached nobody is not called sent (the operator's on_nothing_sent follows).
    log.info(
        "%s: %s, tickets %s, delay %s",
        "Sent" if figures["sent"] else "Posted, sent to nobody",
        summary(figures),
        ", ".join(map(str, tickets)),
        f"{delay} Europe/Paris" if delay else "none (sent now)",
    )
    return {
        "ticket": tickets[0],
        "tickets": tickets,
        **figures,
        "delay": delay,
        # When the first batch was posted, and when the SMS go out: both with their offset (the delay
        # above is the service's Paris wall time, as it was sent).
        "sent_at": sent_at.in_tz("UTC").isoformat(),
        "delivery_at": (parse_instant(delay) if delay else sent_at).in_tz("Europe/Paris").isoformat(),
        "batches": campaign.plan.batches,
        "resumed_batches": len(sent),
        "estimate": campaign.estimate(),
        "simulation": simulation,
        "gate": gate,
        **campaign.notes(),
    }


def simulate_campaign(campaign: Campaign, log: Logger) -> dict[str, Any]:
    """Simulate every batch; return the simulate operator's XCom dict."""
    figures = simulate_all(campaign, log)
    log.info("Simulation: %s", summary(figures))
    return {
        **figures,
        "delay": campaign.message.delay,
        "batches": campaign.plan.batches,
        "estimate": campaign.estimate(),
        **campaign.notes(),
    }
