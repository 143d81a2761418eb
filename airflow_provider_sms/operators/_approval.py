"""A person approves a campaign a gate refused: ``on_cost_exceeded="ask"``. Not public API.

The question is Airflow's own human-in-the-loop record of the send task's task instance (Airflow 3.1
and later), written and awaited as Airflow's ``HITLOperator`` does (:mod:`._airflow_question`): a
subject, a Markdown body with the figures, the options "Send" and "Do not send", the default "Do not
send" taken at the timeout, the approvers. The task waits in ``awaiting_input`` (3.3 and later: no
worker, triggerer or pool slot held) or deferred (3.1, 3.2), and the answer resumes the send
operator's ``execute_complete``, a new process that renders the templates and prepares the campaign
again.

What "Send" approves is written at the end of the body the person reads (:class:`ApprovalTerms`): that
campaign (its digest), at that cost at most, past the gates that refused then, at figures no worse.
Airflow keeps a task instance's first question: asked again (a retry, a clear), it shows the first
body, so the send reads the terms back from the body Airflow keeps and asks only if "Send" there could
still cover today's campaign.

An approval is only ever Airflow's record of the answer, read by the try it resumes: the option "Send",
chosen by a user Airflow names (one of ``approvers``, when given). Nothing a task can write grants it:
no Variable, XCom or signature. A new try (a retry, a clear) asks again. Just before sending, the
campaign is simulated again and every gate checked: a campaign that changed, costs more, is refused by
a gate the question did not show refusing, or whose refused figure got worse is not sent, and the task
fails naming the gate and both figures.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import pendulum
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from airflow_provider_sms.delay import parse_instant
from airflow_provider_sms.models import FILTER_FIELDS
from airflow_provider_sms.operators._airflow_question import (
    Answer,
    post_question,
    required_actions_link,
    wait_for_answer,
)
from airflow_provider_sms.operators._campaign import parts_of
from airflow_provider_sms.send_window import describe
from airflow_provider_sms.short_urls import SHORT_MARKER
from airflow_provider_sms.sms_parts import has_stop_mention

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable, Mapping, Sequence

    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_sms.models import Message
    from airflow_provider_sms.operators._campaign import Campaign
    from airflow_provider_sms.operators._gates import GateCheck
    from airflow_provider_sms.send_window import Logger

SEND = "Send"
DO_NOT_SEND = "Do not send"
OPTIONS = [SEND, DO_NOT_SEND]
# The context key approval notifiers read (e.g. "{{ sms_approval.link }}" in an SmsNotifier's text).
CONTEXT_KEY = "sms_approval"
# The last paragraph of the question's body starts with it: the terms of "Send", as JSON.
TERMS_LABEL = f'What "{SEND}" approves, checked again just before sending: '
_ENCODINGS = {"GSM-7": "GSM 7-bit", "UCS-2": "UCS-2 (Unicode)"}
# Characters of the text shown before each short-URL marker in the question, beside the marker's link.
_WORDS_BEFORE_MARKER = 40
GateName = Literal["max_cost", "max_filtered_ratio", "min_credits_after"]

# Each gate an approval may cover: the figure it reads (an ApprovalTerms field) and whether a higher
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


class ApprovalTerms(BaseModel):
    """What "Send" approves, as the question's body shows it to the person who answers.

    :param campaign: the campaign's content digest (message and recipients; not the delay).
    :param cost: the simulated cost the question showed: what "Send" approves, at most.
    :param credits_after: the credits left after the campaign, as the question showed them.
    :param filtered_ratio: the share of numbers filtered, as the question showed it (0 to 1).
    :param refused: the gates that refused in the question: the only ones "Send" covers.
    :param asked_at: when the question was first asked (ISO 8601).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    campaign: str = Field(min_length=1)
    cost: int | float = Field(ge=0)
    credits_after: int | float
    filtered_ratio: float = Field(ge=0, le=1)
    refused: tuple[GateName, ...]
    asked_at: str

    @field_validator("cost", "credits_after", "filtered_ratio")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("a finite number")
        return value

    def line(self) -> str:
        """The terms as the body's last paragraph says them."""
        return f"{TERMS_LABEL}`{self.model_dump_json()}`"

    @classmethod
    def in_body(cls, body: str | None) -> ApprovalTerms | None:
        """The terms written at the end of a question's ``body``; None when it has none that read."""
        last = (body or "").rstrip().rsplit("\n", 1)[-1]
        if not last.startswith(TERMS_LABEL):
            return None
        try:
            return cls.model_validate_json(last.removeprefix(TERMS_LABEL).strip("`"))
        except ValidationError:
            return None


@dataclass(frozen=True)
class ApprovalRecord:
    """A person's "Send", as Airflow recorded it, with the terms the question showed.

    :param terms: what the question's body said "Send" approves.
    :param refusals: what the gates refused, as the question said it.
    :param by: who answered (the Airflow user's name).
    :param at: when (ISO 8601).
    """

    terms: ApprovalTerms
    refusals: list[str]
    by: str
    at: str


def approved_gate(
    check: GateCheck, approval: ApprovalRecord | None, digest: str, log: Logger
) -> dict[str, Any] | None:
    """The refused gate with the approval that lets the campaign go; None when there is no approval
    (ask).

    :param check: what the gates refuse now.
    :param approval: the answer that resumed this try (:func:`take_answer`), if any.
    :param digest: the campaign's content digest now (:meth:`Campaign.digest`).
    :raises AirflowFailException: approved, but the campaign changed, costs more than approved, or a
        gate refuses what the question did not show.
    """
    if approval is None:
        return None
    terms = approval.terms
    who = f"approved by {approval.by} at {approval.at} for {terms.cost} credits"
    problems = differences(terms, check, digest)
    if problems:
        raise AirflowFailException(
            f"Not sent: this campaign was {who}, but simulated again just before sending, "
            f'{"; ".join(problems)}. "{SEND}" covers only what the question showed. It is not asked '
            "again (Airflow keeps one question per task instance, whose figures would be the old ones): "
            "trigger a new DAG run to ask with today's figures (not retried)."
        )
    log.info(
        "%s. Sending it all the same: it was %s, covering %s as the question showed %s; now %s",
        check.text,
        who,
        ", ".join(terms.refused),
        _figures(terms.model_dump()),
        _figures(check.figures()),
    )
    decision = {"choice": SEND, "by": approval.by, "at": approval.at, "cost": terms.cost}
    return {**check.gate, "approval": decision}


def differences(terms: ApprovalTerms, check: GateCheck, digest: str) -> list[str]:
    """What "Send" on ``terms`` would not cover in the campaign ``check`` gated now, one phrase each;
    empty when it covers it all.

    The campaign must be the same and cost no more. A gate that did not refuse in the question is not
    covered; one that did is covered while its figure is no worse than the question showed.
    """
    if terms.campaign != digest:
        return ["its message or recipients changed since the question (the templates were rendered again)"]
    now = check.figures()
    if now["cost"] > terms.cost:
        return [f"it now costs {now['cost']} credits, more than the {terms.cost} approved"]
    problems = []
    for name in check.refused:
        field, higher_is_worse = _FIGURES[name]
        shown, current = getattr(terms, field), now[field]
        if name not in terms.refused:
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


def ask(spec: ApprovalSpec, context: Context, campaign: Campaign, check: GateCheck, log: Logger) -> NoReturn:
    """Ask in Airflow's Required actions whether to send ``campaign``; park the task until the answer.

    :param check: what the gates refused.
    :raises TaskAwaitingInput: (Airflow 3.3+) or TaskDeferred (3.1, 3.2): the wait, carrying the terms
        the question shows to :func:`take_answer`.
    :raises AirflowFailException: this task instance asked before (Airflow shows that first question
        again) and "Send" there would not cover this campaign.
    """
    ti = context["ti"]
    figures = check.figures()
    digest = campaign.digest()
    terms = ApprovalTerms(
        campaign=digest,
        cost=figures["cost"],
        credits_after=figures["credits_after"],
        filtered_ratio=figures["filtered_ratio"],
        refused=check.refused,
        asked_at=pendulum.now("UTC").isoformat(),
    )
    subject, body = question(campaign, check, ti, spec.timeout, terms)
    kept = post_question(
        ti.id,
        subject=subject,
        body=body,
        options=OPTIONS,
        defaults=[DO_NOT_SEND],
        assigned_users=spec.approvers,
    )
    if kept != body:
        # Asked before: Airflow shows the first question again, and its terms are what "Send" approves.
        shown = ApprovalTerms.in_body(kept)
        problems = (
            differences(shown, check, digest)
            if shown is not None
            else ["the question Airflow keeps for this task instance states no terms this send can read"]
        )
        if problems:
            asked_at = f", at {shown.asked_at}" if shown is not None else ""
            raise AirflowFailException(
                f"{check.text}. This task instance already asked{asked_at}, and Airflow shows a task "
                f'instance\'s first question again; "{SEND}" there would not cover this campaign: '
                f"{'; '.join(problems)}. Not asked, not sent. Trigger a new DAG run to ask about this "
                "campaign (not retried)."
            )
        terms = shown  # type: ignore[assignment]
    link = required_actions_link(ti)
    if link is None:
        log.warning(
            "No link to the Required actions page for the notifiers: set [api] base_url on the workers"
        )
    approvers = [user["name"] for user in spec.approvers or []]
    facts = {
        "subject": subject,
        "cost": terms.cost,
        "gate": "; ".join(check.gate["refusals"]),
        "refusals": list(check.gate["refusals"]),
        "credits_after": check.simulation["credits"],
        "link": link,
        "approvers": approvers,
    }
    _notify(spec.notifiers, {**context, CONTEXT_KEY: facts}, log)
    log.warning(
        "%s. Asking in Airflow's Required actions (on_cost_exceeded='ask'; %s; answer %s): %s. Nothing is "
        "sent until someone answers %r; %r%s skips the task.",
        check.text,
        "approvers: " + ", ".join(approvers) if approvers else "any user who may answer",
        f"within {_duration(spec.timeout)}" if spec.timeout else "without time limit",
        link or "the DAG run's Required actions tab",
        SEND,
        DO_NOT_SEND,
        " or no answer in time" if spec.timeout else "",
    )
    asked = {"terms": terms.model_dump(mode="json"), "gate": check.gate, "simulation": check.simulation}
    wait_for_answer(
        ti.id, options=OPTIONS, defaults=[DO_NOT_SEND], timeout=spec.timeout, kwargs={"asked": asked}
    )


def take_answer(
    spec: ApprovalSpec,
    context: Context,
    event: Mapping[str, Any],
    asked: Mapping[str, Any],
    *,
    push_xcom: bool,
    log: Logger,
) -> ApprovalRecord:
    """Read the answer Airflow resumed this try with: the approval on "Send" (the send follows); skip
    on "Do not send" or no answer in time.

    "Send" counts only as Airflow recorded it: chosen by a user Airflow names, one of ``approvers``
    when they are given. The terms are those the question showed (``asked``, which Airflow carried
    with the wait). Who answered, when and the figures go to the task log; on a skip, to the XCom too
    (``gate`` -> ``approval``).

    :param event: Airflow's record of the answer, as it resumed the task (``next_kwargs``).
    :param push_xcom: whether the task pushes its result (``do_xcom_push``): a skip pushes the answer.
    :raises AirflowFailException: the record holds "Send" from nobody Airflow names, or from a user who
        is not an approver; or the terms cannot be read. Nothing is sent.
    """
    try:
        terms = ApprovalTerms.model_validate(asked["terms"])
    except (KeyError, TypeError, ValidationError) as exc:
        raise AirflowFailException(
            f"Not sent: the terms of the question, carried by Airflow to the answer, cannot be read ({exc}). "
            "Trigger a new DAG run to ask again (not retried)."
        ) from None
    answer = Answer.of(event)
    refusals = list(asked["gate"]["refusals"])
    user = answer.by
    by = (user.get("name") or user.get("id")) if user else None
    if answer.options == (SEND,):
        allowed = {approver["id"] for approver in spec.approvers or []}
        if user is None or (allowed and user["id"] not in allowed):
            raise AirflowFailException(
                f"Not sent: Airflow's record of this task instance's question holds \"{SEND}\", but "
                + (
                    "no user gave it (it was written through the execution API, which any code of this "
                    "task instance may call, not answered in Airflow's UI or REST API)"
                    if user is None
                    else f"from {by}, who is not among the approvers ({', '.join(sorted(allowed))})"
                )
                + ". Trigger a new DAG run to ask again (not retried)."
            )
        log.info(
            "Approved: %s answered %r at %s for the campaign asked about at %s (%s credits; %s). Simulating "
            "it again, then sending it if no gate refuses more than the question showed.",
            by,
            SEND,
            answer.at,
            terms.asked_at,
            terms.cost,
            "; ".join(refusals),
        )
        return ApprovalRecord(terms=terms, refusals=refusals, by=str(by), at=str(answer.at))
    timed_out = user is None and answer.error is None
    limit = _duration(spec.timeout) if spec.timeout else "the time allowed"
    why = (
        f"no answer within {limit} of the question asked at {terms.asked_at}: the default "
        f"{DO_NOT_SEND!r} was taken" + (f" at {answer.at}" if answer.at else "")
        if timed_out
        else f"{by} answered {', '.join(answer.options)!r} at {answer.at}"
    )
    if answer.error:
        why = f"Airflow ended the wait for the answer with an error: {answer.error}"
    decision = {"choice": DO_NOT_SEND, "by": by, "at": answer.at, "timed_out": timed_out}
    text = f"Not sent: {why} (campaign of {terms.cost} credits; {'; '.join(refusals)})"
    log.warning("%s; skipping the task (on_cost_exceeded='ask')", text)
    if push_xcom:
        gate = {**asked["gate"], "approval": decision}
        result = {"ticket": None, "tickets": [], "sent": 0, "cost": 0, "simulation": asked["simulation"]}
        context["ti"].xcom_push(key="return_value", value={**result, "gate": gate})
    raise AirflowSkipException(text)


def question(
    campaign: Campaign, check: GateCheck, ti: Any, timeout: Any, terms: ApprovalTerms
) -> tuple[str, str]:
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
        f"refused figure got worse. **{DO_NOT_SEND}** skips the task: nothing is sent.\n\n{terms.line()}"
    )
    return subject, body


def _notify(notifiers: Sequence[Callable[[Context], Any]], context: dict[str, Any], log: Logger) -> None:
    """Call each notifier with a copy of ``context``; a failure is logged and the question stands."""
    for notifier in notifiers:
        try:
            notifier(dict(context))  # type: ignore[arg-type]
        except Exception as exc:
            log.warning(
                "The approval notifier %s failed (%s); the question is asked all the same",
                getattr(notifier, "__name__", None) or type(notifier).__name__,
                exc,
            )


def _duration(span: dt.timedelta) -> str:
    """``span`` as a person says it: ``24 h``, ``1 h 30 min``, ``20 s``."""
    hours, rest = divmod(int(span.total_seconds()), 3600)
    minutes, seconds = divmod(rest, 60)
    return " ".join(
        f"{value} {unit}" for value, unit in ((hours, "h"), (minutes, "min"), (seconds, "s")) if value
    )


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
