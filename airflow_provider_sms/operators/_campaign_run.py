"""What the send operators do when their task runs: one send's stages, in order. Not public API.

:meth:`CampaignSend.run` lists them: validate, claim the campaign (its numbers, or its lists) in the
claim store, simulate, gate (or approve), send batch by batch under the send guard, record.
The claims, the guard and the approval are stores the stages consult; none of them calls back
into the run. The operators (:mod:`airflow_provider_sms.operators.sms`) hold the task's arguments
and import this module from ``execute()``: parsing a DAG file loads none of it.

Nothing here builds payloads or reads answers (the hook does); errors become Airflow outcomes here
(:func:`task_failure`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

from airflow_provider_sms import metrics
from airflow_provider_sms._task_arguments import check_on_duplicate
from airflow_provider_sms.delay import parse_instant
from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsMaybeSentError,
    SmsNothingSentError,
    SmsTransportError,
    SmsValidationError,
)
from airflow_provider_sms.operators._approval import ApprovalSpec, approved_gate, ask
from airflow_provider_sms.operators._campaign import Campaign, simulate_all
from airflow_provider_sms.operators._claims import AlreadySent, CampaignClaim
from airflow_provider_sms.operators._gates import GateCheck, check_gates
from airflow_provider_sms.operators._recipient_batches import combine, summary
from airflow_provider_sms.operators._send_record import push_record

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_sms._task_arguments import OnCostExceeded, OnDuplicate
    from airflow_provider_sms.models import CampaignResult
    from airflow_provider_sms.operators._approval import ApprovalRecord
    from airflow_provider_sms.operators._send_guard import SendGuard
    from airflow_provider_sms.send_window import Logger

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


class ApprovalToAsk(Exception):
    """A gate refuses and no approval covers it: the question is asked once the claim is released."""

    def __init__(self, check: GateCheck) -> None:
        super().__init__(check.text)
        self.check = check


@dataclass(frozen=True)
class SendOrder:
    """What a send task asks for beyond its campaign, rendered and checked.

    :param operator: the operator's class name (the campaign record names it).
    :param gates: the gates (``read_gates``): a number each, or None.
    :param on_cost_exceeded: ``fail``, ``skip`` or ``ask`` when a gate refuses.
    :param on_duplicate: ``fail``, ``skip`` or ``send`` when the claim store (:mod:`._claims`) says
        another task instance sent the same campaign (to lists), or every one of its numbers.
    :param allow_resend: send again a batch of unknown outcome.
    :param approval: who is asked, with ``ask``.
    """

    operator: str
    gates: Mapping[str, Any]
    on_cost_exceeded: OnCostExceeded | str
    on_duplicate: object
    allow_resend: bool
    approval: ApprovalSpec


class CampaignSend:
    """One task instance's send of a campaign: :meth:`run` goes through its stages in order.

    :param order: what the task asks for.
    :param guard: the task instance's send guard (what its earlier attempts sent).
    :param context: the task's context (the question and the record use its task instance).
    :param log: the task's logger.
    :param approval: the answer "Send" that resumed this try (``on_cost_exceeded="ask"``), if any.
    """

    def __init__(
        self,
        order: SendOrder,
        guard: SendGuard,
        context: Context,
        log: Logger,
        approval: ApprovalRecord | None = None,
    ) -> None:
        self.order = order
        self.approval = approval
        self.guard = guard
        self.context = context
        self.log = log
        # Whether this send pushed a campaign record (the operator's extra link reads it).
        self.recorded = False
        self.started = time.monotonic()
        # Where the run is (guard, claim, gate, ask, send): what a refusal there counts as.
        self.stage = "guard"
        self.tags: dict[str, object] = {}
        # Whether this try posted a batch (a cleared task that sent everything before posts none).
        self.posted = False

    def run(self, campaign: Campaign) -> dict[str, Any]:
        """Send ``campaign`` (validated, :meth:`Campaign.prepare`); return the send operators' XCom dict.

        The stages: what an earlier attempt sent (the guard), the claims (the campaign's, and its
        numbers'), the simulation, the gates or the approval, the batches under the guard, and, whatever
        happened, the campaign record.

        :raises AirflowSkipException: a duplicate (``on_duplicate="skip"``) or a gate refused
            (``on_cost_exceeded="skip"``); nothing was sent.
        :raises AirflowFailException: a duplicate, a refusal, a guard that cannot be read, or a batch
            of unknown outcome: nothing more is sent.
        """
        order, guard, log = self.order, self.guard, self.log
        self.tags = metrics.task_tags(
            self.context["ti"],
            conn_id=campaign.hook.sms_conn_id,
            operator=order.operator,
            pushtype=campaign.message.pushtype,
        )
        result = None
        try:
            on_duplicate: OnDuplicate = check_on_duplicate(order.on_duplicate)
            sent = already_sent(guard, campaign, allow_resend=order.allow_resend, log=log)
            digest = campaign.digest()
            try:
                result = self.claimed_send(campaign, digest, sent, on_duplicate)
            except ApprovalToAsk as need:
                self.count("asked")
                self.stage = "ask"
                # Asked once the claim is released: another run is not refused while people decide.
                ask(order.approval, self.context, campaign, need.check, log)
            if self.posted:
                self.count("sent" if result["sent"] else "nobody_reached")
            return result
        except Exception as exc:
            outcome = self.outcome_of(exc)
            if outcome is not None:
                self.count(outcome)
            raise
        finally:
            self.recorded = push_record(
                self.context["ti"],
                campaign,
                guard,
                operator=order.operator,
                result=result,
                max_cost=order.gates["max_cost"],
                log=log,
            )

    def claimed_send(
        self, campaign: Campaign, digest: str, sent: dict[int, CampaignResult], on_duplicate: OnDuplicate
    ) -> dict[str, Any]:
        """The stages under the campaign's claim: simulate, gate (or approval), batches.

        :raises ApprovalToAsk: a gate refuses and ``on_cost_exceeded="ask"`` has no approval for it (the
            claim is released on the way out).
        """
        order, guard, log = self.order, self.guard, self.log
        self.stage = "claim"
        with claimed(campaign, guard, sent, on_duplicate, log) as (claim, already):
            self.stage = "gate"
            simulation = gate = None
            # Every batch already sent (a cleared task): nothing to gate, the guard returns what was sent.
            if len(sent) < campaign.plan.batches and any(value is not None for value in order.gates.values()):
                simulation = simulate_all(campaign, log, sent)
                check = check_gates(order.gates, simulation, campaign.plan.rejected_count)
                gate = self.gate_or_ask(check, campaign, digest)
            self.stage = "send"
            results = send_batches(campaign, guard, sent, log, self.tags)
            self.posted = len(results) > len(sent)
            if self.posted:
                metrics.timing("send.duration", time.monotonic() - self.started, **self.tags)
            claim.sent([batch.ticket for batch in results if batch.ticket is not None])
            result = {
                **sent_result(campaign, guard, results, resumed=len(sent), log=log),
                "simulation": simulation,
                "gate": gate,
                **campaign.notes(),
            }
            if already.numbers:
                result["already_sent"] = already.as_dict()
        return result

    def gate_or_ask(self, check: GateCheck, campaign: Campaign, digest: str) -> dict[str, Any]:
        """The gate's decision when the gates pass, or an approval covers what they refuse; else ask,
        skip or fail, as ``on_cost_exceeded`` says.

        :raises ApprovalToAsk: ``ask``, and no approval yet.
        :raises AirflowFailException: ``fail``; or ``ask``, approved, but the approval does not cover
            what the gates refuse now (:func:`~._approval.approved_gate`).
        """
        if check.passed:
            self.log.info(
                "Gate passed: %s. Simulated: %s", "; ".join(check.checks), summary(check.simulation)
            )
            return check.gate
        if self.order.on_cost_exceeded == "ask":
            approved = approved_gate(check, self.approval, digest, self.log)
            if approved is not None:
                self.count("approved")
                return approved
        for refused in check.refused:
            metrics.count("gate.refused", gate=refused, **self.tags)
        if self.order.on_cost_exceeded == "ask":
            raise ApprovalToAsk(check)
        if self.order.on_cost_exceeded == "skip":
            self.log.warning("%s; skipping (on_cost_exceeded='skip')", check.text)
            raise AirflowSkipException(check.text)
        raise AirflowFailException(check.text + " (not retried)")

    def count(self, outcome: str) -> None:
        """Count this campaign's ``outcome`` (metric ``sms.campaigns``)."""
        metrics.count("campaigns", outcome=outcome, **self.tags)

    def outcome_of(self, exc: Exception) -> str | None:
        """What the error ``exc`` ending this try makes of the campaign; None for the wait on an answer."""
        refused = isinstance(exc, (AirflowSkipException, AirflowFailException))
        if self.stage == "claim" and refused:
            return "duplicate"
        if self.stage in ("gate", "ask") and refused:
            return "gated"
        if self.stage == "ask":
            return None
        if self.stage == "send" and any(batch.state == "sending" for batch in self.guard.batches.values()):
            return "maybe_sent"
        return "failed"


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


@contextmanager
def claimed(
    campaign: Campaign,
    guard: SendGuard,
    sent: Mapping[int, CampaignResult],
    on_duplicate: OnDuplicate,
    log: Logger,
) -> Iterator[tuple[CampaignClaim, AlreadySent]]:
    """The campaign claimed in the claim store before any request, or refused as a duplicate; the claim
    is released when the send then fails before any POST that may have reached the service.

    A send to numbers claims each of them (every batch an earlier attempt did not send) and leaves out
    those another send of the message holds for the slot; one left with nobody is refused as
    ``on_duplicate`` says. A retry of a task instance finds its own claim: not a duplicate.
    """
    claim = CampaignClaim.for_identity(campaign.hook, guard.identity, log)
    claim.take(campaign, on_duplicate=on_duplicate, resuming=bool(guard.batches), skip=sent)
    try:
        already = AlreadySent()
        if campaign.lists is None:
            already = claim.numbers(campaign)
            if not sent and not campaign.recipients_left():
                claim.refuse_nobody_left(already, on_duplicate)
        yield claim, already
    except BaseException:
        if not guard.batches:
            # Refused, skipped or failed before any POST that may have reached the service.
            try:
                claim.release()
            except Exception as exc:  # the task's own error is what the log must show
                log.warning(
                    "Could not forget this send in the claim store (%s): another run of this campaign "
                    "will be refused until its claim is past the duplicate window or pruned",
                    exc,
                )
        raise


def send_batches(
    campaign: Campaign,
    guard: SendGuard,
    sent: Mapping[int, CampaignResult],
    log: Logger,
    tags: Mapping[str, object],
) -> list[CampaignResult]:
    """Send every batch not yet sent, each recorded in the guard before and after its POST, and its
    answer's figures counted (:func:`~airflow_provider_sms.metrics.send_answer`, with ``tags``)."""
    total = campaign.plan.batches
    results: list[CampaignResult] = []
    for index, items in campaign.batches():
        digest = campaign.fingerprint(items)
        items = campaign.sendable(index, items)
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
        if not items:
            log.info(
                "Batch %s/%s: every number already got this message for this slot; not sent", index + 1, total
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
        metrics.send_answer(result, **tags)
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


def sent_result(
    campaign: Campaign, guard: SendGuard, results: list[CampaignResult], *, resumed: int, log: Logger
) -> dict[str, Any]:
    """Log the send and return its figures added up, with its tickets and times.

    :param resumed: how many batches an earlier attempt had sent.
    """
    delay = campaign.message.delay
    sent_at = min(parse_instant(record.started, field="started") for record in guard.batches.values())
    tickets = [result.ticket for result in results]
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
        "resumed_batches": resumed,
        "estimate": campaign.estimate(),
    }


def simulate_campaign(campaign: Campaign, log: Logger, tags: Mapping[str, object]) -> dict[str, Any]:
    """Simulate every batch; return the simulate operator's XCom dict, and count what the campaign would
    cost (with ``tags``)."""
    figures = simulate_all(campaign, log)
    log.info("Simulation: %s", summary(figures))
    metrics.count("simulate.credits", figures["cost"], **tags)
    metrics.count("simulate.numbers", figures["sent"], **tags)
    return {
        **figures,
        "delay": campaign.message.delay,
        "batches": campaign.plan.batches,
        "estimate": campaign.estimate(),
        **campaign.notes(),
    }
