"""Operators: simulate a campaign, and send one to numbers or lists behind a cost gate, exactly once.

Operators never build payloads or read answers: :class:`~airflow_provider_sms.hooks.sms.SmsHook`
does. What they add is the task's side: templating, validation of everything before the first
request, the local estimate of SMS parts, batching of large campaigns, the gates, the send guard
(:mod:`airflow_provider_sms.guard`) and turning errors into the right Airflow outcome.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException, BaseOperator

from airflow_provider_sms import DEFAULT_CONN_ID
from airflow_provider_sms.batches import DEFAULT_BATCH_SIZE, BatchPlan, RecipientSource, combine
from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsMaybeSentError,
    SmsTransportError,
    SmsValidationError,
)
from airflow_provider_sms.guard import SendGuard, fingerprint
from airflow_provider_sms.models import CampaignResult, ListRef, Message, Recipient, parse_lists
from airflow_provider_sms.segments import count_parts
from airflow_provider_sms.send_window import SendWindowMode, apply_marketing_rules, check_mode

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_sms.hooks.sms import SmsHook

# Answers that another attempt would get again (bad token, bad body, bad delay, unknown list, bad
# data): retrying them only delays the failure. Other statuses (-3 credits, -99) may be retried.
_PERMANENT_STATUSES = frozenset({-1, -2, -4, -5, -6, -7})
_CHECK_HOW = (
    "look in the service's campaign history (for the sandbox, its inspection API) for a campaign "
    "created at that time with this text"
)

OnGateRefused = Literal["fail", "skip"]


@contextmanager
def task_errors() -> Iterator[None]:
    """Turn the provider's errors into Airflow outcomes: fail at once where retrying cannot help.

    Bad input and permanent API errors fail without retry; a send of unknown outcome
    (:class:`SmsMaybeSentError`) fails without retry, since a retry could send the campaign twice;
    :class:`SmsTransportError` (nothing was sent) propagates, for Airflow's normal retries.
    """
    try:
        yield
    except SmsValidationError as exc:
        raise AirflowFailException(f"Invalid input (not retried): {exc}") from None
    except SmsMaybeSentError as exc:
        raise AirflowFailException(
            f"{exc}. The campaign may have been sent, so Airflow will not retry this task: {_CHECK_HOW}."
        ) from None
    except SmsApiError as exc:
        if exc.status in _PERMANENT_STATUSES:
            raise AirflowFailException(
                f"{exc} (not retried: another attempt would get the same answer)"
            ) from None
        raise


def _check_on_refused(value: object) -> None:
    """Raise SmsValidationError unless ``value`` is a valid ``on_cost_exceeded`` (``fail`` or ``skip``)."""
    if value not in ("fail", "skip"):
        message = f"on_cost_exceeded={value!r}: use 'fail' or 'skip'"
        raise SmsValidationError(message, [("on_cost_exceeded", message)])


def _number(value: object, field: str) -> float | int | None:
    """A templated gate value (it may render to a string) as a number >= 0, or None when unset."""
    if value is None or value == "":
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = -1.0
    if number < 0 or number != number or isinstance(value, bool):
        message = f"{field}={value!r}: must be a number >= 0"
        raise SmsValidationError(message, [(field, message)])
    return int(number) if number.is_integer() else number


@dataclass
class _Campaign:
    """The campaign an operator runs: one message, to numbers in batches or to stored lists."""

    hook: SmsHook
    message: Message
    source: RecipientSource | None
    lists: list[ListRef] | None
    batch_size: int
    plan: BatchPlan

    def batches(self) -> Iterator[tuple[int, list[str | Recipient] | list[ListRef]]]:
        """``(index, items)`` of each batch; a list campaign is one batch."""
        if self.lists is not None:
            yield 0, self.lists
            return
        assert self.source is not None
        for batch in self.source.batches(self.batch_size):
            yield batch.index, batch.recipients

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


class SmsBaseOperator(BaseOperator):
    """What the simulate and send operators share: message, delay, recipients or lists, the hook.

    :param message: the text (a string), or a dict / :class:`~airflow_provider_sms.models.Message`
        with ``text`` and optionally ``pushtype``, ``sender``, ``links``, ``delay``. Templated.
    :param recipients: telephone numbers (international format, ``+33 6..`` is normalized), or
        ``{"value", "gsmsmsid"}`` dicts; a list (e.g. ``other_task.output``), a path
        (``ObjectStoragePath``, templated) or an open file with one number per line. Templated.
    :param lists: ids of stored recipient lists, instead of ``recipients``. Templated.
    :param delay: when to send: an aware datetime, an ISO-8601 string with offset (e.g.
        ``"{{ data_interval_end }}"``) or ``Y-m-d H:i:s`` in Europe/Paris. Templated.
    :param batch_size: numbers per request for large campaigns (default 10,000).
    :param send_window: what to do with a ``marketing`` message whose send time (``delay``, or now
        when there is none) is outside the marketing window (08:00-20:00 Europe/Paris, Monday to
        Saturday, no French public holidays; see :mod:`airflow_provider_sms.send_window`):
        ``postpone`` (default: the delay becomes the next allowed time, both logged), ``fail`` (the
        task fails before any request, naming the next allowed time) or ``ignore`` (for accounts with
        another agreement). Alerts are never moved. Templated.
    :param sms_conn_id: the Airflow connection of type ``sms``.
    """

    template_fields: Sequence[str] = ("message", "recipients", "lists", "delay", "send_window")
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        message: str | Mapping[str, Any] | Message,
        recipients: Any = None,
        lists: Any = None,
        delay: Any = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        send_window: SendWindowMode | str = "postpone",
        sms_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if batch_size < 1:
            raise SmsValidationError(f"batch_size={batch_size!r}: must be >= 1", [("batch_size", ">= 1")])
        if "{{" not in str(send_window):
            # A template is checked once rendered, in execute(); anything else fails at DAG parse time.
            check_mode(send_window)
        self.message = message
        self.recipients = recipients
        self.lists = lists
        self.delay = delay
        self.batch_size = batch_size
        self.send_window = send_window
        self.sms_conn_id = sms_conn_id

    @cached_property
    def hook(self) -> SmsHook:
        """The hook on ``sms_conn_id``."""
        # Imported here: DAG files import this module, and only running tasks need the client.
        from airflow_provider_sms.hooks.sms import SmsHook

        return SmsHook(sms_conn_id=self.sms_conn_id)

    def _message_to_send(self) -> Message:
        """The validated message, with the operator's ``delay`` merged in and the send window applied.

        Everything that decides the final message, its delay included, happens here, before any
        request: a marketing message outside the send window is postponed (or refused) here.
        """
        data: dict[str, Any]
        if isinstance(self.message, str):
            data = {"text": self.message}
        elif isinstance(self.message, Message):
            data = self.message.model_dump(exclude_none=True)
        elif isinstance(self.message, Mapping):
            data = dict(self.message)
        else:
            message = f"message: expected the text, a dict or a Message, got {type(self.message).__name__}"
            raise SmsValidationError(message, [("message", message)])
        if self.delay not in (None, ""):
            if data.get("delay") not in (None, ""):
                message = "delay: given both as the operator's delay and in message; give it once"
                raise SmsValidationError(message, [("delay", message)])
            data["delay"] = self.delay
        return apply_marketing_rules(self.hook.prepare_message(data), self.send_window, logger=self.log)

    def _campaign(self, message: Message) -> _Campaign:
        """Check the recipients or lists (no request made) and log the estimate of SMS parts."""
        if (self.recipients is None) == (self.lists is None):
            message_text = (
                "give either recipients (telephone numbers) or lists (list ids), not both or neither"
            )
            raise SmsValidationError(message_text, [("recipients", message_text)])
        parts = count_parts(message.text)
        if self.lists is not None:
            refs = parse_lists(self.lists)
            campaign = _Campaign(self.hook, message, None, refs, self.batch_size, BatchPlan(1, len(refs), 0))
            self.log.info("Estimate: %s, to lists %s", parts.describe(), [ref.value for ref in refs])
            return campaign
        source = RecipientSource(self.recipients)
        plan = source.plan(self.batch_size)
        self.log.info(
            "Estimate: %s; %s recipients (%s duplicates removed) in %s batch(es) of up to %s: "
            "about %s SMS parts before the service's filters",
            parts.describe(),
            plan.recipients,
            plan.duplicates,
            plan.batches,
            self.batch_size,
            plan.recipients * parts.parts,
        )
        return _Campaign(self.hook, message, source, None, self.batch_size, plan)

    def _estimate(self, campaign: _Campaign) -> dict[str, Any]:
        parts = count_parts(campaign.message.text)
        estimate = parts.as_dict()
        if campaign.lists is None:
            estimate["parts_total"] = campaign.plan.recipients * parts.parts
        return estimate


class SmsSimulateOperator(SmsBaseOperator):
    """Simulate a campaign to numbers (``/send/simulate``) or lists (``/send/lists/simulate``).

    Nothing is created or spent. Returns (XCom) the figures as a dict: ``cost``, ``credits`` (balance
    after such a campaign), ``total``, ``sent``, each filtered count and ``filtered``, plus ``delay``
    (Paris time, after the send window), ``batches`` and the local ``estimate`` of SMS parts. Large
    recipient sets are simulated in batches and added up.

    :param message: see :class:`SmsBaseOperator`.
    :param recipients: see :class:`SmsBaseOperator`; give this or ``lists``.
    :param lists: see :class:`SmsBaseOperator`.
    :param send_window: see :class:`SmsBaseOperator`; a simulation is of the campaign as it would be
        sent, so a marketing one is postponed (or refused) the same way.
    :param sms_conn_id: the Airflow connection of type ``sms``.
    """

    template_fields: Sequence[str] = ("message", "recipients", "lists", "delay", "send_window")

    def __init__(
        self,
        *,
        message: str | Mapping[str, Any] | Message,
        recipients: Any = None,
        lists: Any = None,
        sms_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            message=message, recipients=recipients, lists=lists, sms_conn_id=sms_conn_id, **kwargs
        )

    def execute(self, context: Context) -> dict[str, Any]:
        """Simulate every batch and return the figures added up."""
        with task_errors():
            campaign = self._campaign(self._message_to_send())
            figures = simulate_all(campaign, self.log)
        self.log.info("Simulation: %s", _summary(figures))
        return {
            **figures,
            "delay": campaign.message.delay,
            "batches": campaign.plan.batches,
            "estimate": self._estimate(campaign),
        }


def simulate_all(
    campaign: _Campaign, log: Any, sent: Mapping[int, CampaignResult] | None = None
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


def _summary(figures: Mapping[str, Any]) -> str:
    """The one-line summary of added-up figures (as :meth:`CampaignResult.summary` writes it)."""
    return CampaignResult.model_validate({"status": 1, "message": "OK", **figures}).summary()


class SmsSendBaseOperator(SmsBaseOperator):
    """A send behind optional gates, made once per task instance (see :mod:`airflow_provider_sms.guard`).

    When a gate is set, the exact campaign is simulated first (every batch, added up) and sent only if
    every gate passes; otherwise the task fails (not retried) or is skipped, with the figures.

    :param max_cost: most credits the campaign may cost. Templated.
    :param on_cost_exceeded: ``fail`` (default) or ``skip`` when a gate refuses (any of the three).
        Templated (e.g. ``"{{ params.on_cost_exceeded }}"``).
    :param max_filtered_ratio: refuse when more than this share (0-1) of the numbers would be filtered.
        Templated.
    :param min_credits_after: refuse when fewer credits than this would be left. Templated.
    :param allow_resend: on a retry, send again a batch an earlier attempt may have sent (its outcome
        is unknown). Off by default: set it only after checking the service's campaign history.
    """

    template_fields: Sequence[str] = (
        "message",
        "recipients",
        "lists",
        "delay",
        "send_window",
        "max_cost",
        "on_cost_exceeded",
        "max_filtered_ratio",
        "min_credits_after",
    )
    ui_color = "#fadbd8"

    def __init__(
        self,
        *,
        max_cost: int | str | None = None,
        on_cost_exceeded: OnGateRefused | str = "fail",
        max_filtered_ratio: float | str | None = None,
        min_credits_after: int | str | None = None,
        allow_resend: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if "{{" not in str(on_cost_exceeded):
            # A template (e.g. "{{ params.on_cost_exceeded }}") is checked once rendered, in execute().
            _check_on_refused(on_cost_exceeded)
        self.max_cost = max_cost
        self.on_cost_exceeded = on_cost_exceeded
        self.max_filtered_ratio = max_filtered_ratio
        self.min_credits_after = min_credits_after
        self.allow_resend = allow_resend

    def execute(self, context: Context) -> dict[str, Any]:
        """Validate, gate, then send batch by batch under the guard; return the result dict."""
        with task_errors():
            gates = self._gates()
            message = self._message_to_send()
            message.check_sendable()
            campaign = self._campaign(message)
            guard = SendGuard.for_task_instance(context["ti"])
            sent = self._already_sent(guard, campaign)
            simulation = gate = None
            if any(value is not None for value in gates.values()):
                simulation = simulate_all(campaign, self.log, sent)
                gate = self._apply_gates(gates, simulation)
            results = self._send_batches(campaign, guard, sent)
        figures = combine(results, duplicates=campaign.plan.duplicates)
        tickets = [result.ticket for result in results]
        self.log.info(
            "Sent: %s, tickets %s, delay %s",
            _summary(figures),
            ", ".join(map(str, tickets)),
            f"{message.delay} Europe/Paris" if message.delay else "none (sent now)",
        )
        return {
            "ticket": tickets[0],
            "tickets": tickets,
            **figures,
            "delay": message.delay,
            "batches": campaign.plan.batches,
            "resumed_batches": len(sent),
            "estimate": self._estimate(campaign),
            "simulation": simulation,
            "gate": gate,
        }

    def _gates(self) -> dict[str, float | int | None]:
        _check_on_refused(self.on_cost_exceeded)
        ratio = _number(self.max_filtered_ratio, "max_filtered_ratio")
        if ratio is not None and ratio > 1:
            message = f"max_filtered_ratio={self.max_filtered_ratio!r}: must be between 0 and 1 (0.2 = 20 %)"
            raise SmsValidationError(message, [("max_filtered_ratio", message)])
        return {
            "max_cost": _number(self.max_cost, "max_cost"),
            "max_filtered_ratio": ratio,
            "min_credits_after": _number(self.min_credits_after, "min_credits_after"),
        }

    def _apply_gates(self, gates: Mapping[str, Any], simulation: Mapping[str, Any]) -> dict[str, Any]:
        """Compare the simulated figures with the gates; raise (fail or skip) when one refuses."""
        ratio = simulation["filtered"] / simulation["total"] if simulation["total"] else 0.0
        refusals = []
        if gates["max_cost"] is not None and simulation["cost"] > gates["max_cost"]:
            refusals.append(f"cost {simulation['cost']} credits is over max_cost {gates['max_cost']}")
        if gates["max_filtered_ratio"] is not None and ratio > gates["max_filtered_ratio"]:
            refusals.append(
                f"{ratio:.1%} of the numbers would be filtered, over max_filtered_ratio "
                f"{gates['max_filtered_ratio']:.1%}"
            )
        if gates["min_credits_after"] is not None and simulation["credits"] < gates["min_credits_after"]:
            refusals.append(
                f"{simulation['credits']} credits would be left, under min_credits_after "
                f"{gates['min_credits_after']}"
            )
        gate = {**gates, "passed": not refusals, "filtered_ratio": round(ratio, 4), "refusals": refusals}
        if not refusals:
            self.log.info("Gate passed: %s (simulated: %s)", gates, _summary(simulation))
            return gate
        text = f"Gate refused the send: {'; '.join(refusals)}. Simulated: {_summary(simulation)}"
        if self.on_cost_exceeded == "skip":
            self.log.warning("%s; skipping (on_cost_exceeded='skip')", text)
            raise AirflowSkipException(text)
        raise AirflowFailException(text + " (not retried)")

    def _already_sent(self, guard: SendGuard, campaign: _Campaign) -> dict[int, CampaignResult]:
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
        if unknown and not self.allow_resend:
            first = min(unknown)
            record = unknown[first]
            raise AirflowFailException(
                f"Batch {first + 1}/{campaign.plan.batches} may have been sent by an earlier attempt of this "
                f"task (POST started at {record.started}, no answer recorded"
                + (f": {record.note}" if record.note else "")
                + f"), so it is not sent again. To check: {_CHECK_HOW}. If it was not sent, set "
                f"allow_resend=True, or remove batch {first} from the Airflow Variable {guard.key!r}, and "
                "clear the task; batches recorded as sent are never sent again."
            )
        for index in unknown:
            self.log.warning(
                "Batch %s may have been sent by an earlier attempt; sending it again (allow_resend=True)",
                index + 1,
            )
        return {i: r.campaign_result() for i, r in guard.batches.items() if r.state == "sent"}

    def _send_batches(
        self, campaign: _Campaign, guard: SendGuard, sent: Mapping[int, CampaignResult]
    ) -> list[CampaignResult]:
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
                self.log.info(
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
                    f"{[r.ticket for r in results]}). To check: {_CHECK_HOW}. The send guard is the Airflow "
                    f"Variable {guard.key!r}."
                ) from None
            except (SmsTransportError, SmsApiError, SmsValidationError):
                # Refused before sending, never received, or answered with an error: nothing was created.
                guard.release(index)
                raise
            self.log.info("Batch %s/%s sent: ticket %s; recording it", index + 1, total, result.ticket)
            guard.confirm(index, result)
            results.append(result)
            self.log.info(
                "Progress: batch %s/%s, %s numbers sent so far, %s credits spent so far, %s credits left",
                index + 1,
                total,
                sum(r.sent for r in results),
                sum(r.cost for r in results),
                result.credits,
            )
        return results


class SmsSendOperator(SmsSendBaseOperator):
    """Send a campaign to telephone numbers (POST /send), behind optional gates, exactly once.

    Large recipient sets are sent in batches of ``batch_size`` (default 10,000), each recorded in the
    send guard, so a retry resumes after the last confirmed batch. Returns (XCom) a dict: ``ticket``
    (of the first batch) and ``tickets``, the figures added up, ``delay`` (as sent, Paris time, after
    the send window), ``batches``, ``resumed_batches``, ``estimate``, and ``simulation``/``gate`` when
    a gate was set.

    :param message: see :class:`SmsBaseOperator`.
    :param recipients: see :class:`SmsBaseOperator`.
    :param max_cost: see :class:`SmsSendBaseOperator`.
    :param on_cost_exceeded: see :class:`SmsSendBaseOperator`.
    :param send_window: see :class:`SmsBaseOperator` (``postpone``, ``fail`` or ``ignore``).
    :param sms_conn_id: the Airflow connection of type ``sms``.
    """

    def __init__(
        self,
        *,
        message: str | Mapping[str, Any] | Message,
        recipients: Any,
        max_cost: int | str | None = None,
        on_cost_exceeded: OnGateRefused | str = "fail",
        sms_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            message=message,
            recipients=recipients,
            max_cost=max_cost,
            on_cost_exceeded=on_cost_exceeded,
            sms_conn_id=sms_conn_id,
            **kwargs,
        )


class SmsSendListsOperator(SmsSendBaseOperator):
    """Send a campaign to stored recipient lists (POST /send/lists), behind optional gates, exactly once.

    Returns the same dict as :class:`SmsSendOperator` (one batch).

    :param message: see :class:`SmsBaseOperator`.
    :param lists: list ids (ints, digit strings or ``{"value": id}``). Templated.
    :param max_cost: see :class:`SmsSendBaseOperator`.
    :param on_cost_exceeded: see :class:`SmsSendBaseOperator`.
    :param send_window: see :class:`SmsBaseOperator` (``postpone``, ``fail`` or ``ignore``).
    :param sms_conn_id: the Airflow connection of type ``sms``.
    """

    def __init__(
        self,
        *,
        message: str | Mapping[str, Any] | Message,
        lists: Any,
        max_cost: int | str | None = None,
        on_cost_exceeded: OnGateRefused | str = "fail",
        sms_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            message=message,
            lists=lists,
            max_cost=max_cost,
            on_cost_exceeded=on_cost_exceeded,
            sms_conn_id=sms_conn_id,
            **kwargs,
        )
