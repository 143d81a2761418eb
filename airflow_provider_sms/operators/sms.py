"""Operators: simulate a campaign, and send one to numbers or lists behind a cost gate, exactly once.

Operators never build payloads or read answers: :class:`~airflow_provider_sms.hooks.sms.SmsHook`
does. They hold the task's arguments (templated, checked when the DAG file is parsed where they are
not templates) and hand the run on: :mod:`._campaign` validates everything before the first request
(the message, the recipients in batches, the estimate of SMS parts) and :mod:`._campaign_run` sends,
stage by stage (the duplicate check, the gates or the approval, the batches under the send guard, the
campaign record).

DAG files import this module, so it imports only :mod:`airflow_provider_sms._task_arguments` and the
extra link (:mod:`airflow_provider_sms.campaigns.link`); the exceptions, the hook, the models and the
send guard are imported when a task runs.
"""

from __future__ import annotations

import functools
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, ParamSpec, TypeVar

from airflow.providers.common.compat.sdk import AirflowFailException, BaseOperator

from airflow_provider_sms import DEFAULT_CONN_ID
from airflow_provider_sms._task_arguments import (
    DEFAULT_APPROVAL_TIMEOUT,
    DEFAULT_BATCH_SIZE,
    check_approval_timeout,
    check_approvers,
    check_audience,
    check_batch_size,
    check_invalid_numbers,
    check_literal_message,
    check_on_cost_exceeded,
    check_on_duplicate,
    check_on_nothing_sent,
    check_send_window,
    is_template,
)
from airflow_provider_sms.campaigns.link import SmsCampaignLink

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable, Mapping, Sequence

    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_sms._task_arguments import (
        InvalidNumbers,
        OnCostExceeded,
        OnDuplicate,
        OnNothingSent,
        SendWindowMode,
    )
    from airflow_provider_sms.hooks.sms import SmsHook
    from airflow_provider_sms.models import Message
    from airflow_provider_sms.operators._approval import ApprovalRecord, ApprovalSpec
    from airflow_provider_sms.operators._campaign import Campaign
    from airflow_provider_sms.operators._send_guard import SendGuard

P = ParamSpec("P")
R = TypeVar("R")
# Airflow's XCom key of a task's return value (XCOM_RETURN_KEY, which Airflow 3.0 keeps in its core).
RETURN_KEY = "return_value"


def task_errors(method: Callable[P, R]) -> Callable[P, R]:
    """``method`` (a task's ``execute``), with the provider's errors raised as Airflow outcomes.

    See :func:`~airflow_provider_sms.operators._campaign_run.task_failure`. The outcome is raised here,
    without the frames below: a refusal's traceback in the task log holds Airflow's frames and this one.
    """

    @functools.wraps(method)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        from airflow_provider_sms.exceptions import SmsError

        try:
            return method(*args, **kwargs)
        except (SmsError, AirflowFailException) as exc:
            from airflow_provider_sms.operators._campaign_run import task_failure

            raise task_failure(exc) from None

    return run


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
    :param invalid_numbers: what to do with recipients that fail local validation (a national number,
        letters, a ``gsmsmsid`` where it is not valid): ``fail`` (default: the task fails before any
        request, naming them) or ``skip`` (they are left out before any request, logged in one line
        and returned as ``rejected_locally``: count, count by rule, first examples). The service's own
        ``invalid`` count stays the service's. Ignored for ``lists``. Templated.
    :param recipients_column: for a CSV file with a header given as ``recipients``: the header of the
        column holding the numbers (a ``gsmsmsid`` column is read too). Templated.
    :param sms_conn_id: the Airflow connection of type ``sms``. Templated.
    """

    template_fields: Sequence[str] = (
        "sms_conn_id",
        "message",
        "recipients",
        "lists",
        "delay",
        "send_window",
        "invalid_numbers",
        "recipients_column",
    )
    ui_color = "#d6eaf8"
    # Whether the task sends (the message must then meet the send-only rules before any request).
    sends = False
    # The one argument a campaign must be addressed with ("recipients" or "lists"); None: either.
    audience: ClassVar[str | None] = None

    def __init__(
        self,
        *,
        message: str | Mapping[str, Any] | Message,
        recipients: Any = None,
        lists: Any = None,
        delay: Any = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        send_window: SendWindowMode | str = "postpone",
        invalid_numbers: InvalidNumbers | str = "fail",
        recipients_column: str | None = None,
        sms_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_audience(type(self).__name__, self.audience, recipients=recipients, lists=lists)
        check_batch_size(batch_size)
        # A template is checked once rendered, in execute(); anything else fails at DAG parse time.
        if not is_template(send_window):
            check_send_window(send_window)
        if not is_template(invalid_numbers):
            check_invalid_numbers(invalid_numbers)
        check_literal_message(message, delay)
        self.message = message
        self.recipients = recipients
        self.lists = lists
        self.delay = delay
        self.batch_size = batch_size
        self.send_window = send_window
        self.invalid_numbers = invalid_numbers
        self.recipients_column = recipients_column
        self.sms_conn_id = sms_conn_id

    @cached_property
    def hook(self) -> SmsHook:
        """The hook on ``sms_conn_id``."""
        from airflow_provider_sms.hooks.sms import SmsHook

        return SmsHook(sms_conn_id=self.sms_conn_id)

    def prepare_campaign(self) -> Campaign:
        """The final message (delay merged, send window applied) and its checked recipients or lists.

        Everything is validated here, before any request; an error names the field and the rule.
        """
        from airflow_provider_sms.operators._campaign import Campaign, message_to_send

        message, moved = message_to_send(self.hook, self.message, self.delay, self.send_window, self.log)
        if self.sends:
            message.check_sendable()
        return Campaign.prepare(
            self.hook,
            message,
            recipients=self.recipients,
            lists=self.lists,
            batch_size=self.batch_size,
            log=self.log,
            invalid_numbers=self.invalid_numbers,
            recipients_column=self.recipients_column,
            moved=moved,
        )


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

    @task_errors
    def execute(self, context: Context) -> dict[str, Any]:
        """Simulate every batch and return the figures added up."""
        from airflow_provider_sms.metrics import task_tags
        from airflow_provider_sms.operators._campaign_run import simulate_campaign

        campaign = self.prepare_campaign()
        tags = task_tags(
            context.get("ti"),
            conn_id=self.sms_conn_id,
            operator=type(self).__name__,
            pushtype=campaign.message.pushtype,
        )
        return simulate_campaign(campaign, self.log, tags)


class SmsSendBaseOperator(SmsBaseOperator):
    """A send behind optional gates, made once per task instance (see :mod:`._send_guard`).

    When a gate is set, the exact campaign is simulated first (every batch, added up) and sent only if
    every gate passes; otherwise the task fails (not retried) or is skipped, with the figures.

    :param max_cost: most credits the campaign may cost. Templated.
    :param on_cost_exceeded: ``fail`` (default), ``skip`` or ``ask`` when a gate refuses (any of the
        three). ``ask`` (Airflow 3.1 and later) asks a person in Airflow's Required actions, with the
        figures, whether to send: "Send" sends the campaign approved, at no more than the cost shown
        (it is simulated again just before sending); "Do not send", or no answer within
        ``approval_timeout``, skips the task. Templated (e.g. ``"{{ params.on_cost_exceeded }}"``).
    :param approvers: with ``ask``, the Airflow users who may answer: user names (simple auth manager)
        or ``{"id": ..., "name": ...}`` dicts (the id the auth manager gives the user). Default: anyone
        who may answer the DAG's required actions. Templated.
    :param approval_timeout: with ``ask``, how long to wait for the answer (default 24 hours; None: no
        limit). No answer in time is "Do not send".
    :param approval_notifiers: with ``ask``, notifiers called once the question is asked, e.g.
        ``SmsNotifier`` to text the approver; their templates see ``sms_approval`` (``cost``, ``gate``,
        ``credits_after``, ``link`` to the Required actions page, ``subject``, ``approvers``). A notifier
        that fails is logged; the question stands.
    :param max_filtered_ratio: refuse when more than this share (0-1) of the numbers would be filtered.
        Templated.
    :param min_credits_after: refuse when fewer credits than this would be left. Templated.
    :param on_duplicate: what to do when the same campaign (same connection, message and recipients or
        lists, delivered within an hour of this one) was already sent, or is being sent, by another task
        instance, e.g. a manual run beside the scheduled one: ``fail`` (default: the task fails before
        any request, naming the earlier DAG run, task and ticket), ``skip``, or ``send`` (a DAG that
        repeats a campaign on purpose). Templated.
    :param allow_resend: on a retry, send again a batch an earlier attempt may have sent (its outcome
        is unknown). Off by default: set it only after checking the service's campaign history.
    :param on_nothing_sent: what to do when the service's answer says the campaign reached no number
        (0 sent, every batch added up: its filters removed them all): ``fail`` (default: the task
        fails, not retried, naming each filter's count and what to do; the result is still pushed to
        XCom and the campaign recorded) or ``warn`` (the task succeeds, with a warning). Read from the
        answer after the send, never a reason to send again. Templated; checked before any request.

    A gate given here that renders to nothing (``""``, ``None``), to NaN or to infinity fails the task
    before any request: a budget that did not arrive is not an unlimited budget.
    """

    template_fields: Sequence[str] = (
        *SmsBaseOperator.template_fields,
        "max_cost",
        "on_cost_exceeded",
        "max_filtered_ratio",
        "min_credits_after",
        "on_duplicate",
        "approvers",
        "on_nothing_sent",
    )
    ui_color = "#fadbd8"
    sends = True
    # "SMS campaign": the campaign on the campaigns page (Airflow 3.1+), once a record is pushed.
    operator_extra_links = (SmsCampaignLink(),)
    # Whether this run of the task pushed a campaign record (read by the extra link when the task ends).
    campaign_recorded = False

    def __init__(
        self,
        *,
        max_cost: int | str | None = None,
        on_cost_exceeded: OnCostExceeded | str = "fail",
        max_filtered_ratio: float | str | None = None,
        min_credits_after: int | str | None = None,
        on_duplicate: OnDuplicate | str = "fail",
        allow_resend: bool = False,
        on_nothing_sent: OnNothingSent | str = "fail",
        approvers: Sequence[str | Mapping[str, str]] | str | None = None,
        approval_timeout: dt.timedelta | None = DEFAULT_APPROVAL_TIMEOUT,
        approval_notifiers: Sequence[Callable[[Context], Any]] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # A template (e.g. "{{ params.on_cost_exceeded }}") is checked once rendered, in execute().
        if not is_template(on_cost_exceeded):
            check_on_cost_exceeded(on_cost_exceeded)
        if not is_template(on_duplicate):
            check_on_duplicate(on_duplicate)
        if not is_template(on_nothing_sent):
            check_on_nothing_sent(on_nothing_sent)
        if not is_template(approvers):
            check_approvers(approvers)
        self.approvers = approvers
        self.approval_timeout = check_approval_timeout(approval_timeout)
        self.approval_notifiers = list(approval_notifiers)
        self.max_cost = max_cost
        self.on_cost_exceeded = on_cost_exceeded
        self.max_filtered_ratio = max_filtered_ratio
        self.min_credits_after = min_credits_after
        self.on_duplicate = on_duplicate
        self.allow_resend = allow_resend
        self.on_nothing_sent = on_nothing_sent
        # The gates the DAG set: once rendered, each must be a number (a gate fails closed).
        self.gates_given = tuple(
            name
            for name, value in (
                ("max_cost", max_cost),
                ("max_filtered_ratio", max_filtered_ratio),
                ("min_credits_after", min_credits_after),
            )
            if value is not None
        )

    def check_delivery_waits(self, guard: SendGuard) -> None:
        """Before any request: a delivery-report wait downstream on this connection must be able to work
        (the campaign cannot be sent again to fix its set-up). Not on a try that resumes a send: what
        is sent is sent, and the rest must go out."""
        if guard.batches:
            return
        # A wait says it needs the receiver (SmsDeliveryReportsSensor.needs_delivery_receiver).
        waits = sorted(
            task.task_id
            for task in self.get_flat_relatives(upstream=False)
            if getattr(task, "needs_delivery_receiver", False)
            and getattr(task, "sms_conn_id", None) == self.sms_conn_id
        )
        if not waits:
            return
        from airflow_provider_sms.delivery_reports.client import ReceiverAccess, check_receiver

        names = ", ".join(waits)
        url = check_receiver(ReceiverAccess.of(self.hook), names)
        self.log.info("The delivery-report wait %s can work: the receiver at %s answers", names, url)

    def approval_spec(self) -> ApprovalSpec:
        """Who is asked, for how long, and who is told, with ``on_cost_exceeded="ask"``."""
        from airflow_provider_sms.operators._approval import ApprovalSpec

        return ApprovalSpec(
            task_id=self.task_id,
            approvers=check_approvers(self.approvers),
            timeout=self.approval_timeout,
            notifiers=tuple(self.approval_notifiers),
        )

    @task_errors
    def execute(self, context: Context) -> dict[str, Any]:
        """Validate, gate, then send batch by batch under the guard; return the result dict."""
        from airflow_provider_sms.operators._send_guard import SendGuard

        result = self.send(context, SendGuard.for_task_instance(context["ti"]))
        return self.finish(context, result)

    @task_errors
    def execute_complete(
        self, context: Context, event: dict[str, Any], asked: dict[str, Any]
    ) -> dict[str, Any]:
        """Resume after a person answered the approval question (``on_cost_exceeded="ask"``).

        "Send": the campaign is prepared and simulated again, then sent if it is the one approved and no
        gate refuses more than the question showed. "Do not send" or no answer in time: the task is
        skipped, nothing sent.

        :param event: Airflow's human-in-the-loop answer.
        :param asked: what the question showed (carried by Airflow with the wait).
        """
        from airflow_provider_sms.operators._approval import take_answer
        from airflow_provider_sms.operators._send_guard import SendGuard

        approved = take_answer(
            self.approval_spec(), context, event, asked, push_xcom=self.do_xcom_push, log=self.log
        )
        # "Send" grants this try's send only: a retry or a clear asks again.
        result = self.send(context, SendGuard.for_task_instance(context["ti"]), approved)
        return self.finish(context, result)

    def send(
        self, context: Context, guard: SendGuard, approval: ApprovalRecord | None = None
    ) -> dict[str, Any]:
        """Check the rendered arguments, prepare the campaign, then send it under ``guard``
        (:meth:`~._campaign_run.CampaignSend.run`: duplicate check, gates or approval, batches,
        record)."""
        from airflow_provider_sms.operators._campaign_run import CampaignSend, SendOrder
        from airflow_provider_sms.operators._gates import read_gates

        self.on_nothing_sent = check_on_nothing_sent(self.on_nothing_sent)
        self.check_delivery_waits(guard)
        order = SendOrder(
            operator=type(self).__name__,
            gates=read_gates(
                max_cost=self.max_cost,
                max_filtered_ratio=self.max_filtered_ratio,
                min_credits_after=self.min_credits_after,
                on_cost_exceeded=self.on_cost_exceeded,
                given=self.gates_given,
            ),
            on_cost_exceeded=self.on_cost_exceeded,
            on_duplicate=self.on_duplicate,
            allow_resend=self.allow_resend,
            approval=self.approval_spec(),
        )
        campaign_send = CampaignSend(order, guard, context, self.log, approval)
        try:
            return campaign_send.run(self.prepare_campaign())
        finally:
            self.campaign_recorded = campaign_send.recorded

    def finish(self, context: Context, result: dict[str, Any]) -> dict[str, Any]:
        """The result, with its ticket pushed under its own XCom key too; then ``on_nothing_sent``."""
        if self.do_xcom_push:
            # Under its own key too: `send.output["ticket"]` pulls the XCom key "ticket", so that an
            # XComArg can feed SmsNpaiSensor(campaign_id=...) directly.
            context["ti"].xcom_push(key="ticket", value=result["ticket"])
        if result["sent"] == 0:
            self.nothing_sent(context, result)
        return result

    def nothing_sent(self, context: Context, result: dict[str, Any]) -> None:
        """A campaign that reached no number: warn, or fail once the result is in XCom.

        The send is over (recorded in the guard and the campaign record): this reads its answer, and
        the failure is not retried (:func:`~._campaign_run.task_failure`).
        """
        from airflow_provider_sms.exceptions import SmsNothingSentError

        if self.on_nothing_sent == "warn":
            error = SmsNothingSentError(result, "The campaign", "The task succeeds: on_nothing_sent='warn'.")
            self.log.warning("%s", error)
            return
        if self.do_xcom_push:
            # Airflow pushes no return value for a failed task: the result goes under its key here.
            context["ti"].xcom_push(key=RETURN_KEY, value=result)
        raise SmsNothingSentError(result, "The campaign", "on_nothing_sent='warn' lets such a send succeed.")


class SmsSendOperator(SmsSendBaseOperator):
    """Send a campaign to telephone numbers (POST /send), behind optional gates, exactly once.

    Large recipient sets are sent in batches of ``batch_size`` (default 10,000), each recorded in the
    send guard, so a retry resumes after the last confirmed batch. Returns (XCom) a dict: ``ticket``
    (of the first batch) and ``tickets``, the figures added up, ``delay`` (as sent, Paris time, after
    the send window), ``batches``, ``resumed_batches``, ``estimate``, and ``simulation``/``gate`` when
    a gate was set. The ticket is also pushed under the XCom key ``ticket``, so that
    ``send.output["ticket"]`` can be given to ``SmsNpaiSensor(campaign_id=...)``.

    :param message: see :class:`SmsBaseOperator`.
    :param recipients: see :class:`SmsBaseOperator`.
    :param max_cost: see :class:`SmsSendBaseOperator`.
    :param on_cost_exceeded: see :class:`SmsSendBaseOperator`.
    :param send_window: see :class:`SmsBaseOperator` (``postpone``, ``fail`` or ``ignore``).
    :param sms_conn_id: the Airflow connection of type ``sms``.
    """

    audience = "recipients"


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

    audience = "lists"
