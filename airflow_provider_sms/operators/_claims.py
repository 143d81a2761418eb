"""Never twice across runs, per person: a send's claim in the claim store, as the sending task sees it.
Internal.

The send guard (:mod:`._send_guard`) keeps a retry from sending again what its own earlier attempt
sent. The claim store (:mod:`airflow_provider_sms.api_server.claims`, the provider's tables in
Airflow's metadata database) keeps two task instances from sending the same message to the same people
for the same slot, whatever their timing: each decision is one transaction there.

- **A send to numbers** claims each number for its message (connection, text, sender, pushtype, links)
  and delivery time, batch by batch, before any request. A number another send of that message holds
  for a delivery time within :func:`duplicate_window` is left out and counted in the result
  (``already_sent``); a send left with nobody is refused as ``on_duplicate`` says (``send`` sends to
  everyone anyway). The store keeps a keyed digest of each number (the key derived from the
  connection's token), never the number.
- **A send to lists**, whose members only the service knows, claims the campaign as a whole (the
  message and the lists): the second send of it within the window is refused as ``on_duplicate`` says.

A task reaches the store through the provider's routes on the Airflow API server (the worker's task
process has no database access); a task that runs in-process with the metadata database (``airflow
dags test``) uses it directly. Whatever the store answers but a definite decision (unreachable, a
timeout, a 5xx, an answer lost), nothing is sent: every call is idempotent (a claimant asking again
finds its own claim), so it is asked again a few times, then the task fails naming the store.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from array import array
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pendulum
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowSkipException,
    conf,
)

from airflow_provider_sms.delay import parse_instant

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable, Collection, Iterator, Sequence

    import httpx
    from pydantic import BaseModel

    from airflow_provider_sms._task_arguments import OnDuplicate
    from airflow_provider_sms.api_server.claims import (
        ClaimAnswer,
        Claimant,
        ClaimRequest,
        ClaimView,
        FoldAnswer,
        FoldRequest,
        NumberChunk,
        NumbersAnswer,
        NumbersRequest,
        ReleaseRequest,
        SentRequest,
    )
    from airflow_provider_sms.hooks.sms import SmsHook
    from airflow_provider_sms.models import Message, Recipient
    from airflow_provider_sms.operators._campaign import Campaign
    from airflow_provider_sms.send_window import Logger

_Answer = TypeVar("_Answer")
CONFIG_SECTION = "sms"
DEFAULT_WINDOW_MINUTES = 60.0
# Each call to the store is asked this many times at most when its answer is not a decision.
STORE_TRIES = 3
STORE_TIMEOUT = 30.0
CHECK_STORE = (
    "check that the Airflow API server is up with this provider installed (the same version as the "
    "workers), that `airflow db migrate` made the provider's tables, and that the workers reach it at "
    "that URL (the connection's extra dlr_api_url, else [api] base_url)"
)


def duplicate_window() -> dt.timedelta:
    """How close two delivery times must be for two sends to be the same slot (``[sms]
    duplicate_window_minutes``, default 60)."""
    import datetime as dt

    minutes = conf.getfloat(CONFIG_SECTION, "duplicate_window_minutes", fallback=DEFAULT_WINDOW_MINUTES)
    return dt.timedelta(minutes=minutes)


# How many sends met the setting the pause had: the first says it is ignored.
_settle_warnings = itertools.count()


def warn_if_settle_set(log: Logger) -> None:
    """Say once per process that ``[sms] duplicate_check_settle_seconds`` is ignored, when it is set."""
    if conf.has_option(CONFIG_SECTION, "duplicate_check_settle_seconds") and not next(_settle_warnings):
        log.warning(
            "[sms] duplicate_check_settle_seconds is set but no longer used: a claim is decided by one "
            "transaction in the provider's claim store, with no pause. Remove the setting."
        )


class ClaimStoreError(AirflowException):
    """The claim store did not decide (unreachable, a timeout, a 5xx, missing tables): nothing is sent.
    Retried by Airflow like any failure: nothing was requested from the service.

    :param message: what happened and what it means for the send.
    :param problem: what happened alone (what the store did or answered), for a caller that does
        something else about it (an alert is sent unfolded); the message when not given.
    """

    def __init__(self, message: str, problem: str | None = None) -> None:
        super().__init__(message)
        self.problem = problem or message


def database_in_process() -> bool:
    """Whether this process may use Airflow's metadata database itself (``airflow dags test``, a script),
    rather than through the API server: a task run by an executor has it blocked by the Task SDK."""
    settings = sys.modules.get("airflow.settings")
    return settings is not None and getattr(settings, "engine", None) is not None


class ClaimStore(Protocol):
    """Where a task's claims are decided: :class:`LocalClaimStore` or :class:`HttpClaimStore`."""

    @property
    def where(self) -> str:
        """The store, as errors name it."""

    def claim(self, request: ClaimRequest) -> ClaimAnswer:
        """Decide whether the send may go (:func:`~airflow_provider_sms.api_server.claims.claim`)."""

    def claim_numbers(self, claim_id: int, request: NumbersRequest) -> NumbersAnswer:
        """Claim a batch of numbers."""

    def sent(self, claim_id: int, request: SentRequest) -> None:
        """Record the send's tickets."""

    def release(self, claim_id: int, request: ReleaseRequest) -> None:
        """Forget a send that sent nothing."""

    def fold(self, request: FoldRequest) -> FoldAnswer:
        """Decide whether an alert goes now or is held
        (:func:`~airflow_provider_sms.api_server.claims.fold`)."""


@dataclass
class LocalClaimStore:
    """The claim store in this process's metadata database: one transaction per call."""

    conn_id: str

    @property
    def where(self) -> str:
        return "the claim store in this process's Airflow metadata database"

    def _decide(self, decide: Callable[..., _Answer], *args: Any) -> _Answer:
        from airflow.utils.session import create_session
        from sqlalchemy.exc import SQLAlchemyError

        from airflow_provider_sms.api_server.claims import ClaimNotFound
        from airflow_provider_sms.api_server.database_errors import migrate_hint, tables_missing

        try:
            with create_session(scoped=False) as session:
                return decide(session, self.conn_id, *args)
        except ClaimNotFound as exc:
            lost = f"{self.where} lost this send's claim: {exc}"
            raise ClaimStoreError(f"{lost}. Not sending.", lost) from None
        except SQLAlchemyError as exc:
            problem = migrate_hint() if tables_missing(exc) else f"{type(exc).__name__}: {str(exc)[:300]}"
            undecided = f"{self.where} did not decide ({problem})"
            raise ClaimStoreError(
                f"{undecided}, so it is unknown whether another run sent this campaign. Not sending.",
                undecided,
            ) from None

    def claim(self, request: ClaimRequest) -> ClaimAnswer:
        from airflow_provider_sms.api_server import claims

        return self._decide(claims.claim, request)

    def claim_numbers(self, claim_id: int, request: NumbersRequest) -> NumbersAnswer:
        from airflow_provider_sms.api_server import claims

        return self._decide(claims.claim_numbers, claim_id, request)

    def sent(self, claim_id: int, request: SentRequest) -> None:
        from airflow_provider_sms.api_server import claims

        self._decide(claims.mark_sent, claim_id, request)

    def release(self, claim_id: int, request: ReleaseRequest) -> None:
        from airflow_provider_sms.api_server import claims

        self._decide(claims.release, claim_id, request)

    def fold(self, request: FoldRequest) -> FoldAnswer:
        from airflow_provider_sms.api_server import claims

        return self._decide(claims.fold, request)


class _NotDecided(Exception):
    """An answer that is not a decision, worth asking again (every call is idempotent)."""


@dataclass
class HttpClaimStore:
    """The claim store behind the provider's routes on the Airflow API server.

    :param base: the API server's URL of the connection's claims (``.../sms/claims/<conn_id>``).
    :param key: the key derived from the connection's token (never logged).
    :param tries: how many times a call is asked when its answer is not a decision.
    """

    base: str
    key: str = field(repr=False)
    tries: int = STORE_TRIES

    @property
    def where(self) -> str:
        return f"the claim store on the Airflow API server at {self.base}"

    @cached_property
    def client(self) -> httpx.Client:
        """One client for the send's calls, its connection kept alive. A TLS context (slow to build) is
        built only for an https URL: a plain-HTTP API server has no use for one."""
        import httpx

        return httpx.Client(
            verify=self.base.startswith("https://"),
            timeout=STORE_TIMEOUT,
            headers={
                "Authorization": f"Bearer {self.key}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )

    def claim(self, request: ClaimRequest) -> ClaimAnswer:
        from airflow_provider_sms.api_server.claims import ClaimAnswer

        return ClaimAnswer.model_validate_json(self._post("", request))

    def claim_numbers(self, claim_id: int, request: NumbersRequest) -> NumbersAnswer:
        from airflow_provider_sms.api_server.claims import NumbersAnswer

        return NumbersAnswer.model_validate_json(self._post(f"/{claim_id}/numbers", request))

    def sent(self, claim_id: int, request: SentRequest) -> None:
        self._post(f"/{claim_id}/sent", request)

    def release(self, claim_id: int, request: ReleaseRequest) -> None:
        self._post(f"/{claim_id}/release", request)

    def fold(self, request: FoldRequest) -> FoldAnswer:
        from airflow_provider_sms.api_server.claims import FoldAnswer

        return FoldAnswer.model_validate_json(self._post("/fold", request))

    def _post(self, path: str, body: BaseModel) -> bytes:
        import tenacity

        url = self.base + path
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.tries),
            wait=tenacity.wait_exponential(multiplier=0.5, max=4),
            retry=tenacity.retry_if_exception_type(_NotDecided),
            reraise=True,
        )
        try:
            return retrying(self._post_once, url, body.model_dump_json().encode())
        except _NotDecided as exc:
            tries = f"{self.tries} tries" if self.tries > 1 else "one try"
            undecided = f"{self.where} did not decide after {tries} ({exc})"
            raise ClaimStoreError(
                f"{undecided}, so it is unknown whether another run sent this campaign. Not sending. To fix: "
                f"{CHECK_STORE}.",
                undecided,
            ) from None

    def _post_once(self, url: str, content: bytes) -> bytes:
        import httpx

        try:
            answer = self.client.post(url, content=content)
        except httpx.HTTPError as exc:
            raise _NotDecided(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None
        if answer.status_code < 300:
            return answer.content
        detail = _detail(answer.content)
        # A 5xx may come after the commit: asked again, the claimant finds what was decided.
        if answer.status_code == 429 or answer.status_code >= 500:
            raise _NotDecided(f"HTTP {answer.status_code}: {detail}")
        problem = {
            401: "it refused the key: the API server and this worker must read the same sms connection "
            "(same access token)",
            404: "no such route, or this send's claim is gone: is the provider installed on the API server?",
        }.get(answer.status_code, detail)
        refused = f"{self.where} answered HTTP {answer.status_code} at {url}: {problem} ({detail})"
        raise ClaimStoreError(
            f"{refused}. Not sending: it is unknown whether another run sent this campaign. To fix: "
            f"{CHECK_STORE}.",
            refused,
        )


def _detail(body: bytes) -> str:
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else body[:200].decode("utf-8", errors="replace").strip() or "no detail"


def store_for(hook: SmsHook, *, tries: int = STORE_TRIES) -> ClaimStore:
    """Where this task's claims are decided: this process's database when it may use it, else the API
    server's routes (:class:`ClaimStoreError` when its URL is unknown).

    :param tries: how many times the API server is asked a call whose answer is not a decision.
    """
    if database_in_process():
        return LocalClaimStore(hook.sms_conn_id)
    from airflow.configuration import conf as airflow_conf

    from airflow_provider_sms.api_server.claims import CLAIMS_PATH
    from airflow_provider_sms.api_server.claims_api import claim_key
    from airflow_provider_sms.delivery_reports.settings import receiver_url
    from airflow_provider_sms.exceptions import SmsValidationError
    from airflow_provider_sms.hooks.sms import connection_extra

    extra = connection_extra(hook.get_connection(hook.sms_conn_id), conn_id=hook.sms_conn_id)
    try:
        base = receiver_url(
            extra,
            conn_id=hook.sms_conn_id,
            default_api_url=airflow_conf.get("api", "base_url", fallback=""),
            path=CLAIMS_PATH,
        )
    except SmsValidationError as exc:
        unreachable = (
            f"The claim store (the provider's tables, on the Airflow API server) cannot be reached: {exc}"
        )
        raise ClaimStoreError(
            f"{unreachable}. A send must be claimed there before it goes. Not sending.", unreachable
        ) from None
    return HttpClaimStore(base, claim_key(hook.settings.token), tries)


class NumberKeys:
    """The keyed digests of numbers a claim keeps (BLAKE2b keyed with a key derived from the token)."""

    def __init__(self, token: str) -> None:
        from airflow_provider_sms.api_server.claims import NUMBER_KEY_BYTES
        from airflow_provider_sms.token_keys import NUMBER_DIGEST, derived_key

        key = bytes.fromhex(derived_key(token, NUMBER_DIGEST))
        self._base = hashlib.blake2b(key=key, digest_size=NUMBER_KEY_BYTES)
        self.key_id = hashlib.blake2b(b"key id", key=key, digest_size=8).hexdigest()

    def digests(self, numbers: Sequence[str]) -> list[bytes]:
        """Each number's digest, in order."""
        base = self._base
        digests: list[bytes] = []
        add = digests.append
        for number in numbers:
            digest = base.copy()
            digest.update(number.encode())
            add(digest.digest())
        return digests


def message_scope(conn_id: str, message: Message) -> str:
    """What two sends to numbers share when one may leave people out of the other: the connection and the
    message but its delay (a campaign's content digest whose audience is every number)."""
    from airflow_provider_sms.operators._campaign import content_digest

    return content_digest(conn_id, message, audience="each number")


@dataclass
class AlreadySent:
    """The numbers a send left out because another send of the message holds them for the slot.

    :param numbers: how many.
    :param earlier: those sends (one each).
    """

    numbers: int = 0
    earlier: dict[int, ClaimView] = field(default_factory=dict)

    def add(self, answer: NumbersAnswer) -> None:
        self.numbers += len(answer.taken)
        self.earlier.update((view.id, view) for view in answer.earlier)

    def as_dict(self) -> dict[str, Any]:
        """As the result reports it: how many, the earlier sends' tickets and who they were."""
        return {
            "numbers": self.numbers,
            "tickets": [ticket for view in self.earlier.values() for ticket in view.tickets],
            "sends": [view.describe() for view in self.earlier.values()],
        }


@dataclass(frozen=True)
class _Chunk:
    """A chunk of a send's numbers to claim: its batch, where it starts in the batch, the request's part."""

    batch: int
    in_batch: int
    chunk: NumberChunk


class CampaignClaim:
    """This task instance's claim of a campaign in the claim store.

    :param store: where claims are decided.
    :param conn_id: the send's connection (refusals name it).
    :param claimant: the task instance (``dag_id``, ``task_id``, ``run_id``, ``map_index``).
    :param log: the task's logger.
    """

    def __init__(self, store: ClaimStore, conn_id: str, claimant: Claimant, log: Logger) -> None:
        self.store = store
        self.conn_id = conn_id
        self.claimant = claimant
        self.log = log
        self.claim_id: int | None = None
        self.forced = False
        self._keys: NumberKeys | None = None
        # The chunks of numbers :meth:`take` claimed or left to claim, each with its answer once asked.
        self._claimed: Iterator[tuple[_Chunk, NumbersAnswer]] = iter(())

    def number_keys(self, campaign: Campaign) -> NumberKeys:
        """The keyed digests of the campaign's numbers (the key derived from its connection's token)."""
        if self._keys is None:
            self._keys = NumberKeys(campaign.hook.settings.token)
        return self._keys

    @classmethod
    def for_identity(cls, hook: SmsHook, identity: dict[str, Any], log: Logger) -> CampaignClaim:
        """The claim of the task instance ``identity`` (the send guard's), on ``hook``'s connection."""
        from airflow_provider_sms.api_server.claims import Claimant

        warn_if_settle_set(log)
        return cls(store_for(hook), hook.sms_conn_id, Claimant(**identity), log)

    def take(
        self, campaign: Campaign, *, on_duplicate: OnDuplicate, resuming: bool, skip: Collection[int] = ()
    ) -> None:
        """Claim ``campaign`` before its first request, or refuse it as a duplicate. A send to numbers
        claims its first chunk of numbers in the same call (:meth:`numbers` claims the rest).

        :param resuming: this task instance already began sending (a retry): for a send to lists, not a
            duplicate of anything (its own campaign).
        :param skip: the batches an earlier attempt sent (their numbers are not claimed again).
        :raises AirflowFailException: ``fail``, naming the earlier send; or the store did not decide.
        :raises AirflowSkipException: ``skip``.
        """
        from airflow_provider_sms.api_server.claims import ClaimRequest

        per_number = campaign.lists is None
        delay = campaign.message.delay
        self.forced = on_duplicate == "send"
        chunks = self._chunks(campaign, skip) if per_number else iter(())
        first = next(chunks, None)
        request = ClaimRequest(
            claimant=self.claimant,
            scope=message_scope(campaign.hook.sms_conn_id, campaign.message)
            if per_number
            else campaign.digest(),
            per_number=per_number,
            key_id=self.number_keys(campaign).key_id if per_number else "",
            delivery=parse_instant(delay) if delay else pendulum.now("UTC"),
            delayed=bool(delay),
            window_seconds=duplicate_window().total_seconds(),
            force=self.forced or (resuming and not per_number),
            numbers=first.chunk if first else None,
        )
        answer = self.store.claim(request)
        if answer.outcome == "duplicate":
            self._refuse(answer.earlier[0], on_duplicate)
        if answer.outcome == "undecidable":
            raise AirflowFailException(
                "The same message was claimed for this slot by "
                f"{answer.earlier[0].describe()}, under another access token of connection "
                f"{campaign.hook.sms_conn_id!r} (the token changed since): its numbers cannot be compared "
                "with this send's, so it is unknown who already got the message. Not sending; nothing was "
                "requested from the service. Wait until that slot is past the duplicate window, or set "
                "on_duplicate='send' to send to everyone."
            )
        if answer.claim is None or (first is not None and answer.numbers is None):
            # won or resumed always carry the claim, and the first chunk's answer when it was asked
            raise ClaimStoreError(f"{self.store.where} answered {answer.outcome!r} without the claim")
        self.claim_id = answer.claim.id
        self._claimed = itertools.chain(
            [(first, answer.numbers)] if first is not None and answer.numbers is not None else [],
            ((chunk, self._claim_chunk(chunk)) for chunk in chunks),
        )
        if answer.outcome == "won" and answer.earlier and self.forced and not per_number:
            self.log.warning(
                "The same campaign was already sent: %s. Sending it again (on_duplicate='send').",
                answer.earlier[0].describe(),
            )

    def numbers(self, campaign: Campaign) -> AlreadySent:
        """Claim the numbers of every batch of ``campaign`` :meth:`take` did not skip (the first chunk's
        answer came with the claim); leave out of the campaign the numbers another send holds (unless
        forced)."""
        already = AlreadySent()
        for chunk, answer in self._claimed:
            already.add(answer)
            if answer.taken and not self.forced:
                left_out = campaign.left_out.setdefault(chunk.batch, array("L"))
                left_out.extend(chunk.in_batch + position for position in answer.taken)
        if already.numbers and self.forced:
            self.log.warning(
                "%s number(s) already got this message for this slot (%s). Sending it again "
                "(on_duplicate='send').",
                already.numbers,
                "; ".join(view.describe() for view in already.earlier.values()),
            )
        elif already.numbers:
            self.log.warning(
                "%s number(s) already got this message for this slot and are left out: %s",
                already.numbers,
                "; ".join(view.describe() for view in already.earlier.values()),
            )
        return already

    def _chunks(self, campaign: Campaign, skip: Collection[int]) -> Iterator[_Chunk]:
        """The chunks of the numbers of every batch of ``campaign`` but those in ``skip``, in order."""
        from airflow_provider_sms.api_server.claims import MAX_NUMBERS_PER_CALL, NumberChunk

        keys = self.number_keys(campaign)
        following = 0  # where each batch starts among the campaign's numbers: its chunks' place
        for index, items in campaign.batches():
            numbers = numbers_of(items)  # type: ignore[arg-type]  # a send to numbers: no ListRef
            batch_start, following = following, following + len(numbers)
            if index in skip:
                continue
            for start in range(0, len(numbers), MAX_NUMBERS_PER_CALL):
                digests = keys.digests(numbers[start : start + MAX_NUMBERS_PER_CALL])
                yield _Chunk(index, start, NumberChunk.of(batch_start + start, digests))

    def _claim_chunk(self, chunk: _Chunk) -> NumbersAnswer:
        from airflow_provider_sms.api_server.claims import NumbersRequest

        return self.store.claim_numbers(
            self.own_claim, NumbersRequest(claimant=self.claimant, chunk=chunk.chunk)
        )

    def refuse_nobody_left(self, already: AlreadySent, on_duplicate: OnDuplicate) -> None:
        """Every number of the campaign already got the message for this slot: refuse as
        ``on_duplicate`` says (the claim is released by the caller)."""
        earlier = next(iter(already.earlier.values()))
        every = f"Every one of its {already.numbers} numbers already got this message for this slot. "
        self._refuse(earlier, on_duplicate, every)

    def sent(self, tickets: Sequence[str]) -> None:
        """Record this send's tickets. A store that cannot record them is logged, not raised: the SMS
        went out, and the claim, still ``sending``, keeps refusing other sends as "may have sent it"."""
        from airflow_provider_sms.api_server.claims import SentRequest

        if self.claim_id is None:
            return
        try:
            self.store.sent(
                self.claim_id, SentRequest(claimant=self.claimant, tickets=list(map(str, tickets)))
            )
        except AirflowException as exc:
            self.log.warning("Could not record the tickets of this send in the claim store: %s", exc)

    def release(self) -> None:
        """Forget this send: it certainly sent nothing (refused, skipped, or failed before any POST)."""
        from airflow_provider_sms.api_server.claims import ReleaseRequest

        if self.claim_id is None:
            return
        claim_id, self.claim_id = self.claim_id, None
        self.store.release(claim_id, ReleaseRequest(claimant=self.claimant))

    @property
    def own_claim(self) -> int:
        """This send's claim id (:meth:`take` made it)."""
        if self.claim_id is None:
            raise RuntimeError("CampaignClaim.take() claims the campaign first")
        return self.claim_id

    def _refuse(self, earlier: ClaimView, on_duplicate: OnDuplicate, detail: str = "") -> None:
        minutes = duplicate_window().total_seconds() / 60
        text = (
            f"The same campaign (same connection {self.conn_id!r}, message and recipients, delivered within "
            f"{minutes:g} minutes) was already sent: {earlier.describe()}. {detail}Not sending it again "
            f"(on_duplicate={on_duplicate!r}); nothing was requested from the service. If this DAG repeats "
            "the campaign on purpose, set "
            "on_duplicate='send'. The claim store (the provider's tables in Airflow's metadata database) "
            "decides this in one transaction per send."
        )
        if on_duplicate == "skip":
            self.log.warning("%s Skipping (on_duplicate='skip').", text)
            raise AirflowSkipException(text)
        raise AirflowFailException(text)


def numbers_of(items: Sequence[str | Recipient]) -> list[str]:
    """The numbers of a batch's items."""
    return [item if type(item) is str else item.value for item in items]  # type: ignore[union-attr]
