"""The campaign record: what a send task instance leaves for the campaigns page, in XCom.

The send operators push it under the XCom key :data:`RECORD_KEY` whenever anything may have gone out:
after a send, and when the task fails with batches sent or of unknown outcome. Workers cannot write the
metadata database; the API server's indexer (:mod:`.indexer`) copies each record into the provider's
table. No phone number is in it: the record says how many, never which.

Any task can push an XCom under any key, so a record grants nothing by itself: it is signed with a key
derived from its connection's access token, over the record and the task instance that pushed it. The
indexer, which reads the connection, copies only the records whose signature it can verify: another
DAG cannot make the page show a campaign on a connection it does not hold, nor move one to its own DAG.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from airflow_provider_sms.models import (
    CAMPAIGN_ID_MAX,
    FILTER_FIELDS,
    REPORT_DATE_MAX,
    REPORT_DATE_MIN,
    PushType,
)
from airflow_provider_sms.token_keys import CAMPAIGN_RECORD, sign_for_task, signed_by_task

if TYPE_CHECKING:
    from collections.abc import Mapping

# The XCom key of the record (the return value stays the DAG's own).
RECORD_KEY = "sms_campaign"
# The field of the pushed record that holds its signature.
SIGNATURE = "signature"
# A connection id as Airflow stores it (connection.conn_id).
CONN_ID_MAX_LENGTH = 250
# The most batches one record lists (a campaign of 10,000 batches is 100 million numbers).
MAX_BATCHES = 10_000

Outcome = Literal["sent", "partly_sent", "maybe_sent"]
Instant = AwareDatetime
Count = int


class SendWindowMove(BaseModel):
    """The send window moved a marketing campaign: the time asked for, the time it goes out, why."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    requested: str = Field(max_length=64)
    moved_to: str = Field(max_length=64)
    reason: str = Field(max_length=500)


class CampaignRecord(BaseModel):
    """One send task instance's campaign, as the campaigns page lists it.

    :param conn_id: the connection it was sent with.
    :param operator: the operator's class name.
    :param outcome: ``sent`` (every batch), ``partly_sent`` (the task failed after some batches were
        sent; the others certainly were not) or ``maybe_sent`` (a batch's outcome is unknown).
    :param pushtype: ``alert`` or ``marketing``; None when the message did not say (the service's
        default applies).
    :param lists: the stored lists it went to; None when it went to numbers.
    :param tickets: the service's campaign id of each batch sent (delivery reports carry them).
    :param batches: how many batches the campaign has; ``unknown_batches`` lists those (1-based)
        whose outcome is unknown.
    :param sent_at: when the first batch was posted.
    :param delivery_at: when the SMS go out (the delay, after the send window; else ``sent_at``).
    :param send_window: what the send window changed of the delay, if it did.
    :param total: numbers given; ``sent`` numbers the service accepted; ``filtered`` by reason.
    :param cost: credits spent; ``credits`` left after it.
    :param max_cost: the cost gate, when one was set.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    version: Literal[1] = 1
    conn_id: str = Field(min_length=1, max_length=CONN_ID_MAX_LENGTH)
    operator: str = Field(min_length=1, max_length=100)
    outcome: Outcome
    pushtype: PushType | None = None
    lists: list[int] | None = Field(default=None, max_length=MAX_BATCHES)
    tickets: list[int] = Field(max_length=MAX_BATCHES)
    batches: int = Field(ge=1, le=MAX_BATCHES)
    unknown_batches: list[int] = Field(default_factory=list, max_length=MAX_BATCHES)
    sent_at: Instant = Field(ge=REPORT_DATE_MIN, le=REPORT_DATE_MAX)
    delivery_at: Instant = Field(ge=REPORT_DATE_MIN, le=REPORT_DATE_MAX)
    send_window: SendWindowMove | None = None
    total: Count = Field(ge=0, le=CAMPAIGN_ID_MAX)
    sent: Count = Field(ge=0, le=CAMPAIGN_ID_MAX)
    filtered: dict[Literal[FILTER_FIELDS], Count] = Field(default_factory=dict)  # type: ignore[valid-type]
    cost: Count = Field(ge=0, le=CAMPAIGN_ID_MAX)
    credits: int = Field(ge=-CAMPAIGN_ID_MAX, le=CAMPAIGN_ID_MAX)
    max_cost: float | None = Field(default=None, ge=0)

    def xcom_value(self) -> dict[str, Any]:
        """The record as kept: JSON types only, so that the API server reads it without Airflow's serde."""
        return self.model_dump(mode="json", exclude_defaults=False)

    def signed_value(self, task: TaskInstance, token: str) -> dict[str, Any]:
        """The record as pushed by ``task``: :meth:`xcom_value` with its signature made with ``token``
        (the access token of the record's connection)."""
        value = self.xcom_value()
        return {**value, SIGNATURE: sign_for_task(token, CAMPAIGN_RECORD, value, list(task))}


class TaskInstance(NamedTuple):
    """The task instance that pushed a record, as its XCom row names it."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int


def signed_by_holder(value: Mapping[str, Any], task: TaskInstance, token: str) -> bool:
    """Whether ``value`` (a pushed record) carries the signature that ``token``'s holder made for
    ``task``: a record changed, unsigned, signed with another token or pushed by another task is not."""
    document = {name: field for name, field in value.items() if name != SIGNATURE}
    return signed_by_task(token, CAMPAIGN_RECORD, document, list(task), value.get(SIGNATURE))
