"""The sandbox never hands out a campaign id twice: not after a reset, not after a restart (the
service's campaign id is unique for ever, and the provider's tables key campaigns by it)."""

from __future__ import annotations

from airflow_provider_sms.sandbox.state import SandboxState
from airflow_provider_sms.sandbox.wire import CampaignRequest

ALERT = {"text": "Server down", "pushtype": "alert"}


def send(state: SandboxState, number: str) -> int:
    result, _ = state.campaign("/send", CampaignRequest(message=ALERT, recipients=[{"value": number}]))
    assert result.ticket is not None
    return int(result.ticket)


def test_no_campaign_id_comes_back_after_a_reset_or_a_restart():
    state = SandboxState()
    first = [send(state, f"3361200000{index}") for index in range(3)]
    state.reset()
    after_reset = send(state, "33612000009")
    restarted = send(SandboxState(), "33612000008")
    ids = [*first, after_reset, restarted]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_a_chosen_next_id_holds_until_a_reset_then_the_numbering_goes_past_it():
    state = SandboxState()
    state.set_next_ticket(7_000_001)
    assert [send(state, "33612000001"), send(state, "33612000002")] == [7_000_001, 7_000_002]
    state.reset()
    assert send(state, "33612000003") > 7_000_002
