"""A person approves a campaign a gate refused: ``on_cost_exceeded="ask"``. Not public API.

The question is Airflow's own human-in-the-loop request (Airflow 3.1 and later). The send operator
builds the standard provider's ``HITLOperator`` for its own task instance and runs its ``execute()``,
which writes the request (subject, Markdown body, the options "Send" and "Do not send", the default
"Do not send" taken at the timeout, the approvers), calls the notifiers and parks the task until the
answer: in Airflow's ``awaiting_input`` state from 3.3 (no worker, triggerer or pool slot held),
deferred to ``HITLTrigger`` on 3.1 and 3.2. The answer resumes the send operator's
``execute_complete``, a new process that renders the templates and prepares the campaign again.

What the question showed travels with the wait (the task instance's ``next_kwargs``, which no user
edits) and is kept in the send guard (:mod:`._send_guard`), signed for this task instance, so that a
retry knows it too. "Send" approves exactly what the question showed: that campaign, at that cost at
most, past the gates that refused then, at figures no worse. Just before sending, the campaign is
simulated again and every gate checked: a campaign that changed, costs more, is refused by a gate the
question did not show refusing, or whose refused figure got worse (fewer credits left, more numbers
filtered) is not sent, and the task fails naming the gate and both figures. It does not ask again:
Airflow keeps one question per task instance, and a second question would show the first one's figures.

Who answered comes only from Airflow's own record of the answer (the event that resumes the task);
an approval read from the guard counts only once its signature verifies
(:meth:`~._send_guard.SendGuard.trusted_approval`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import pendulum
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

from airflow_provider_sms.delay import parse_instant
from airflow_provider_sms.models import FILTER_FIELDS
from airflow_provider_sms.operators._campaign import parts_of
from airflow_provider_sms.operators._send_guard import ApprovalRecord, approval_from
from airflow_provider_sms.send_window import describe
from airflow_provider_sms.short_urls import SHORT_MARKER
from airflow_provider_sms.sms_parts import has_stop_mention

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable, Mapping, Sequence

    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.standard.operators.hitl import HITLOperator

    from airflow_provider_sms.models import Message
    from airflow_provider_sms.operators._campaign import Campaign
    from airflow_provider_sms.operators._gates import GateCheck
    from airflow_provider_sms.operators._send_guard import SendGuard
    from airflow_provider_sms.send_window import Logger

SEND = "Send"
DO_NOT_SEND = "Do not send"
# The context key approval notifiers read (e.g. "{{ sms_approval.link }}" in an SmsNotifier's text).
CONTEXT_KEY = "sms_approval"
_ENCODINGS = {"GSM-7": "GSM 7-bit", "UCS-2": "UCS-2 (Unicode)"}
# Characters of the text shown before each short-URL marker in the question, beside the marker's link.
_WORDS_BEFORE_MARKER = 40


# Each gate an approval may cover: the figure it reads (an ApprovalRecord field) and whether a higher
# figure is worse for it.
_FIGURES: dict[str, tuple[str, bool]] = {
    "max_cost": ("cost", True),
    "max_filtered_ratio": ("filtered_ratio", True),
    "min_credits_after": ("credits_after", False),
}


@dataclass(frozen=True)
class ApprovalSpec:
    """Who is asked, for how long, and who is told: what the send task's arguments say of a question.

    :param task_id: the send task's id (the question is its task instance's).
    :param approvers: the Airflow users who may answer, checked (``check_approvers``); None: anyone
        who may answer the DAG's required actions.
    :param timeout: how long the question waits; None: no limit. No answer in time is "Do not send".
    :param notifiers: called once the question is asked.
    """

    task_id: str
    approvers: list[dict[str, str]] | None
    timeout: dt.timedelta | None
    notifiers: Sequence[Callable[[Context], Any]] = ()


def approved_gate(
    check: GateCheck, approval: ApprovalRecord | None, digest: str, log: Logger
) -> dict[str, Any] | None:
    """The refused gate with the approval that lets the campaign go; None when there is no approval
    yet (ask).

    :param check: what the gates refuse now.
    :param approval: the send guard's approval record, verified (:meth:`SendGuard.trusted_approval`).
    :param digest: the campaign's content digest now (:meth:`Campaign.digest`).
    :raises AirflowFailException: approved, but the campaign changed, costs more than approved, or a
        gate refuses what the question did not show.
    """
    if approval is None or approval.state != "approved":
        return None
    simulation, text = check.simulation, check.text
    who = f"approved by {approval.by} at {approval.at} for {approval.cost} credits"
    if approval.fingerprint != digest:
        raise AirflowFailException(
            f"Not sent: this campaign was {who}, but its message or recipients changed since (the "
            "templates were rendered again). Airflow keeps one question per task instance, so it is not "
            "asked again: trigger a new DAG run to ask about the new campaign (not retried)."
        )
    if simulation["cost"] > approval.cost:
        raise AirflowFailException(
            f"Not sent: this campaign was {who}; simulated again just before sending, it now costs "
            f"{simulation['cost']} credits, more than the {approval.cost} approved. It is not sent at the "
            "higher price, and not asked again (Airflow keeps one question per task instance, whose "
            "figures would be the old ones): trigger a new DAG run to ask at the new price (not retried)."
        )
    problems = uncovered(approval, check)
    if problems:
        raise AirflowFailException(
            f"Not sent: this campaign was {who}, but simulated again just before sending, "
            f'{"; ".join(problems)}. "{SEND}" covers only what the question showed. It is not asked '
            "again (Airflow keeps one question per task instance, whose figures would be the old ones): "
            "trigger a new DAG run to ask with today's figures (not retried)."
        )
    log.info(
        "%s. Sending it all the same: it was %s, covering %s as the question showed %s; now %s",
        text,
        who,
        ", ".join(approval.refused),
        _figures(vars(approval)),
        _figures(check.figures()),
    )
    decision = {"choice": SEND, "by": approval.by, "at": approval.at, "cost": approval.cost}
    return {**check.gate, "approval": decision}


def uncovered(approval: ApprovalRecord, check: GateCheck) -> list[str]:
    """What the gates refuse now that ``approval`` does not cover, one sentence each; empty when covered.

    A gate that did not refuse in the question is not covered; one that did is covered while its
    figure is no worse than the question showed.
    """
    now = check.figures()
    problems = []
    for name in check.refused:
        field, higher_is_worse = _FIGURES[name]
        shown, current = getattr(approval, field), now[field]
        if name not in approval.refused:
            problems.append(
                f"{name} now refuses it and did not in the question: the question showed "
                f"{_figure(field, shown)}, now {_figure(field, current)}"
            )
        elif current > shown if higher_is_worse else current < shown:
            problems.append(
                f"{name} refused in the question at {_figure(field, shown)}, and it is worse now: "
                f"{_figure(field, current)}"
            )
    return problems


def _figure(field: str, value: float) -> str:
    """One figure a gate reads, as the task log says it."""
    if field == "cost":
        return f"cost {value} credits"
    if field == "credits_after":
        return f"{value} credits left after it"
    return f"{value:.1%} of the numbers filtered"


def _figures(figures: Mapping[str, Any]) -> str:
    """The figures the gates read (``cost``, ``credits_after``, ``filtered_ratio``), in one phrase."""
    return ", ".join(_figure(field, figures[field]) for field in ("cost", "credits_after", "filtered_ratio"))


def ask(
    spec: ApprovalSpec,
    context: Context,
    campaign: Campaign,
    check: GateCheck,
    shown: ApprovalRecord | None,
    guard: SendGuard,
    log: Logger,
) -> NoReturn:
    """Ask in Airflow's Required actions whether to send ``campaign``; park the task until the answer.

    The question's figures and refused gates are kept in ``guard``, signed with the connection's token.

    :param check: what the gates refused.
    :param shown: the guard's verified approval record, if any: the question of an earlier try.

    :raises TaskAwaitingInput: (Airflow 3.3+) or TaskDeferred (3.1, 3.2): the wait, carrying what was
        asked for :func:`take_answer`.
    :raises AirflowFailException: this task instance already asked about another campaign or a lower
        cost, which Airflow would show instead of this question.
    """
    ti = context["ti"]
    figures = check.figures()
    record = ApprovalRecord(
        state="asked",
        cost=figures["cost"],
        fingerprint=campaign.digest(),
        refusals=list(check.gate["refusals"]),
        asked_at=pendulum.now("UTC").isoformat(),
        refused=list(check.refused),
        credits_after=figures["credits_after"],
        filtered_ratio=figures["filtered_ratio"],
    )
    if shown is not None:
        # A question of an earlier try: Airflow still shows its subject and body to the approver.
        if shown.fingerprint != record.fingerprint or shown.cost < record.cost:
            raise AirflowFailException(
                f"{check.text}. This task instance already asked, at {shown.asked_at}, about "
                f"{'another campaign' if shown.fingerprint != record.fingerprint else 'this campaign'} "
                f"at {shown.cost} credits; it now costs {record.cost}. Airflow keeps a task instance's "
                "first question, so asking again would show the old figures: not asked, not sent. "
                "Trigger a new DAG run to ask about this campaign (not retried)."
            )
        record = dataclasses.replace(shown, state="asked", by=None, at=None)
    subject, body = question(campaign, check, ti, spec.timeout)
    hitl = hitl_operator(spec, subject=subject, body=body)
    try:
        link: str | None = hitl.generate_link_to_ui(task_instance=ti)
    except ValueError as exc:
        link = None
        log.warning(
            "No link to the Required actions page for the notifiers (%s): set [api] base_url on the workers",
            exc,
        )
    facts = {
        "subject": subject,
        "cost": record.cost,
        "gate": "; ".join(record.refusals),
        "refusals": record.refusals,
        "credits_after": check.simulation["credits"],
        "link": link,
        "approvers": [user["name"] for user in spec.approvers or []],
    }
    # Plain callables: HITLOperator calls each notifier with the context, and these log their failures.
    hitl.notifiers = [_quiet(notifier, log) for notifier in spec.notifiers]  # type: ignore[misc]
    guard.keep_approval(record, campaign.hook.settings.token)
    log.warning(
        "%s. Asking in Airflow's Required actions (on_cost_exceeded='ask'; %s; answer %s): %s. Nothing is "
        "sent until someone answers %r; %r%s skips the task.",
        check.text,
        "approvers: " + ", ".join(facts["approvers"]) if facts["approvers"] else "any user who may answer",
        f"within {_duration(spec.timeout)}" if spec.timeout else "without time limit",
        link or "the DAG run's Required actions tab",
        SEND,
        DO_NOT_SEND,
        " or no answer in time" if spec.timeout else "",
    )
    try:
        # Airflow logs that an operator runs another one's execute(): this one does it on purpose.
        approval_context: dict[str, Any] = {**context, "task": hitl, CONTEXT_KEY: facts}
        hitl.execute(approval_context)  # type: ignore[arg-type]
    except BaseException as wait:
        if getattr(wait, "method_name", None) == "execute_complete":
            # What was asked rides with the wait (next_kwargs) to take_answer().
            asked = {"approval": vars(record), "gate": check.gate, "simulation": check.simulation}
            wait.kwargs = {**(getattr(wait, "kwargs", None) or {}), "asked": asked}  # type: ignore[attr-defined]
        raise
    raise RuntimeError("HITLOperator.execute() returned instead of waiting for the answer")


def take_answer(
    spec: ApprovalSpec,
    context: Context,
    event: dict[str, Any],
    asked: Mapping[str, Any],
    *,
    push_xcom: bool,
    log: Logger,
) -> ApprovalRecord:
    """Read the answer: the approval on "Send" (to keep in the send guard; the send follows); skip on
    "Do not send" or timeout.

    The answer and what was asked come from Airflow (the event and ``next_kwargs``), so they are
    trusted. Who answered, when and the figures go to the task log; on a skip, to the XCom too
    (``gate`` -> ``approval``).

    :param push_xcom: whether the task pushes its result (``do_xcom_push``): a skip pushes the answer.
    :raises AirflowFailException: what was asked cannot be read (a question of an earlier version of
        the provider).
    """
    hitl = hitl_operator(spec, subject="", body=None)
    answer = hitl.execute_complete(context, event)  # Airflow's checks of the event and the option
    user = answer["responded_by_user"] or {}
    by = user.get("name") or user.get("id")
    at = _iso(answer["responded_at"])
    timed_out = bool(event.get("timedout"))
    try:
        record = approval_from(asked["approval"])
    except ValueError as exc:
        raise AirflowFailException(
            f"Not sent: the question's record that Airflow carried to the answer cannot be read ({exc}); "
            "it was asked by another version of the provider. Trigger a new DAG run to ask again "
            "(not retried)."
        ) from None
    if answer["chosen_options"] == [SEND] and not timed_out:
        approved = dataclasses.replace(record, state="approved", by=by, at=at)
        log.info(
            "Approved: %s answered %r at %s for the campaign asked about at %s (%s credits; %s). Simulating "
            "it again, then sending it if no gate refuses more than the question showed.",
            by,
            SEND,
            at,
            record.asked_at,
            record.cost,
            "; ".join(record.refusals),
        )
        return approved
    limit = _duration(spec.timeout) if spec.timeout else "the time allowed"
    why = (
        f"no answer within {limit} of the question asked at {record.asked_at}: the default "
        f"{DO_NOT_SEND!r} was taken at {at}"
        if timed_out
        else f"{by} answered {answer['chosen_options'][0]!r} at {at}"
    )
    decision = {"choice": DO_NOT_SEND, "by": None if timed_out else by, "at": at, "timed_out": timed_out}
    text = f"Not sent: {why} (campaign of {record.cost} credits; {'; '.join(record.refusals)})"
    log.warning("%s; skipping the task (on_cost_exceeded='ask')", text)
    if push_xcom:
        gate = {**asked["gate"], "approval": decision}
        result = {"ticket": None, "tickets": [], "sent": 0, "cost": 0, "simulation": asked["simulation"]}
        context["ti"].xcom_push(key="return_value", value={**result, "gate": gate})
    raise AirflowSkipException(text)


def hitl_operator(spec: ApprovalSpec, *, subject: str, body: str | None) -> HITLOperator:
    """Airflow's human-in-the-loop operator for the send task's question (not part of any DAG)."""
    from airflow.providers.standard.operators.hitl import HITLOperator

    return HITLOperator(
        task_id=spec.task_id,
        subject=subject,
        body=body,
        options=[SEND, DO_NOT_SEND],
        defaults=[DO_NOT_SEND],
        assigned_users=spec.approvers,  # type: ignore[arg-type]
        response_timeout=spec.timeout,
    )


def question(campaign: Campaign, check: GateCheck, ti: Any, timeout: Any) -> tuple[str, str]:
    """The question's subject and Markdown body: the figures a person needs to say yes or no."""
    simulation, gate, message = check.simulation, check.gate, campaign.message
    cost, credits = simulation["cost"], simulation["credits"]
    subject = f"Send the SMS campaign of {ti.dag_id}.{ti.task_id}? It costs {cost:,} credits, over its gate"
    parts = parts_of(message)
    stop = (
        "; the service adds the STOP mention (marketing with a custom sender), counted above"
        if has_stop_mention(message.pushtype, message.sender)
        else ""
    )
    filtered = ", ".join(f"{name} {simulation[name]:,}" for name in FILTER_FIELDS if simulation.get(name))
    audience = (
        f"lists {', '.join(str(ref.value) for ref in campaign.lists)}: {simulation['total']:,} numbers"
        if campaign.lists is not None
        else f"{simulation['total']:,} given"
    )
    when = describe(parse_instant(message.delay)) if message.delay else "at once, when approved"
    if campaign.moved:
        when += f" (moved by the send window from {campaign.moved['requested']}: {campaign.moved['reason']})"
    limits = {
        "max_cost": f" (max_cost {gate['max_cost']:,})" if gate.get("max_cost") is not None else "",
        "credits": f" (min_credits_after {gate['min_credits_after']:,})"
        if gate.get("min_credits_after") is not None
        else "",
        "ratio": f", max_filtered_ratio {gate['max_filtered_ratio']:.1%}"
        if gate.get("max_filtered_ratio") is not None
        else "",
    }
    deadline = describe(pendulum.now("UTC") + timeout) if timeout else "no time limit"
    rows = [
        ("Simulated cost", f"**{cost:,} credits**{limits['max_cost']}"),
        ("Credits left after it", f"{credits:,}{limits['credits']}"),
        ("Numbers", f"{audience}, {simulation['sent']:,} would be sent"),
        (
            "Filtered",
            f"{simulation['filtered']:,} ({gate['filtered_ratio']:.1%}{limits['ratio']})"
            + (f": {filtered}" if filtered else ""),
        ),
        (
            "Message",
            f"{message.pushtype or 'alert'}, {parts.parts} SMS part{'s' if parts.parts > 1 else ''} "
            "per number, "
            f"{_ENCODINGS.get(parts.encoding, parts.encoding)}, {parts.length} characters{stop}",
        ),
        ("Goes out", when),
        ("DAG run", f"`{ti.dag_id}` / `{ti.run_id}`, task `{ti.task_id}`"),
        ("Answer by", f"{deadline}; no answer means {DO_NOT_SEND!r}" if timeout else deadline),
    ]
    table = "\n".join(f"| {name} | {_cell(value)} |" for name, value in rows)
    refusals = "\n".join(f"- {text}" for text in gate["refusals"])
    body = (
        f"A gate refused this campaign:\n\n{refusals}\n\n| | |\n|---|---|\n{table}\n\n"
        f"**Text**\n\n{_fenced(message.text)}\n\n{_links(message)}"
        f"**{SEND}** sends this campaign at no more than {cost:,} credits: it is simulated again just before "
        "it goes out, and not sent if it costs more, if a gate refuses that did not refuse here, or if a "
        f"refused figure got worse. **{DO_NOT_SEND}** skips the task: nothing is sent."
    )
    return subject, body


def _quiet(notifier: Callable[[Context], Any], log: Logger) -> Callable[[Context], None]:
    """``notifier``, called with a copy of the context; a failure is logged and the question stands."""

    def call(context: Context) -> None:
        try:
            notifier(dict(context))  # type: ignore[arg-type]
        except Exception as exc:
            log.warning(
                "The approval notifier %s failed (%s); the question is asked all the same",
                getattr(notifier, "__name__", None) or type(notifier).__name__,
                exc,
            )

    return call


def _duration(span: dt.timedelta) -> str:
    """``span`` as a person says it: ``24 h``, ``1 h 30 min``, ``20 s``."""
    hours, rest = divmod(int(span.total_seconds()), 3600)
    minutes, seconds = divmod(rest, 60)
    return " ".join(
        f"{value} {unit}" for value, unit in ((hours, "h"), (minutes, "min"), (seconds, "s")) if value
    )


def _iso(moment: object) -> str:
    return moment.isoformat() if hasattr(moment, "isoformat") else str(moment)


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table: a ``|`` would end the cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _links(message: Message) -> str:
    """Each ``<-short->`` marker of the text, after the words before it, beside the URL it will link to.

    Empty for a message without links; else a Markdown list and a blank line.
    """
    if not message.links:
        return ""
    before = message.text.split(SHORT_MARKER)
    items = []
    for index, link in enumerate(message.links):
        words = " ".join(before[index].split())
        if len(words) > _WORDS_BEFORE_MARKER:
            words = "…" + words[-_WORDS_BEFORE_MARKER:].split(" ", 1)[-1]  # from a word's start
        shown = f"{words} " if words else ""
        items.append(f"- {_fenced(shown + SHORT_MARKER, inline=True)} → {_fenced(link, inline=True)}")
    marker = _fenced(SHORT_MARKER, inline=True)
    return f"**Links** (each {marker} becomes a short URL to its link)\n\n" + "\n".join(items) + "\n\n"


def _fenced(text: str, *, inline: bool = False) -> str:
    """``text`` as Markdown code whose fence no run of backticks in the text can close.

    :param inline: a code span within a line (``text`` has no line break), instead of a block.
    """
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    if inline:
        fence = "`" * (longest + 1)
        return f"{fence} {text} {fence}" if longest else f"{fence}{text}{fence}"
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"
