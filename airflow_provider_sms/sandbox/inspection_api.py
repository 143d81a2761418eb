"""The sandbox's inspection API (``/_sandbox/``, no token): what was sent, credits, faults, resets.

For tests and demos; it answers JSON, and a refusal in the service's error envelope.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at run time.
from typing import Any

from fastapi import APIRouter, Body

from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.sandbox.app_state import SandboxDep
from airflow_provider_sms.sandbox.responses import INSPECTION_PREFIX
from airflow_provider_sms.sandbox.state import LEDGER_COLUMNS, Faults

router = APIRouter(prefix=INSPECTION_PREFIX)


@router.get("/campaigns")
def campaigns(state: SandboxDep) -> list[dict[str, Any]]:
    return list(state.campaigns)


@router.get("/delivery-reports")
def delivery_reports(state: SandboxDep) -> dict[str, Any]:
    ledger = state.dlr_ledger
    return {"attempted": ledger.attempts(), "acknowledged": ledger.acknowledged()}


@router.get("/delivery-reports/counts")
def delivery_report_counts(state: SandboxDep) -> dict[str, Any]:
    return state.dlr_ledger.counts()


# One row per report, not one object: a big campaign's ledger stays a small answer.
@router.get("/delivery-reports/ledger")
def delivery_report_ledger(state: SandboxDep) -> dict[str, Any]:
    return {"columns": list(LEDGER_COLUMNS), "rows": state.dlr_ledger.rows()}


@router.post("/delivery-reports")
def set_delivery_reports(payload: dict[str, Any], state: SandboxDep) -> dict[str, Any]:
    try:
        state.set_delivery_reports(
            bool(payload.get("enabled")),
            payload.get("statuses"),
            payload.get("tries"),
            payload.get("concurrency"),
        )
    except ValueError as exc:
        raise SmsApiError(-7, str(exc)) from None
    return {"enabled": state.dlr_enabled, "statuses": list(state.dlr_statuses), "tries": state.dlr_tries}


@router.post("/tickets")
def set_next_ticket(payload: dict[str, int], state: SandboxDep) -> dict[str, int]:
    try:
        state.set_next_ticket(payload["next"])
    except (KeyError, ValueError) as exc:
        raise SmsApiError(-7, f"next: {exc}") from None
    return {"next": payload["next"]}


@router.post("/reset")
def reset(state: SandboxDep) -> dict[str, str]:
    state.reset()
    return {"status": "reset"}


@router.get("/credits")
def get_credits(state: SandboxDep) -> dict[str, int]:
    return {"credits": state.credits}


@router.post("/credits")
def set_credits(payload: dict[str, int], state: SandboxDep) -> dict[str, int]:
    try:
        return {"credits": state.set_credits(payload["credits"])}
    except (KeyError, ValueError) as exc:
        raise SmsApiError(-7, f"credits: {exc}") from None


@router.get("/price")
def get_price(state: SandboxDep) -> dict[str, int]:
    return {"price": state.price}


@router.post("/price")
def set_price(payload: dict[str, int], state: SandboxDep) -> dict[str, int]:
    try:
        return {"price": state.set_price(payload["price"])}
    except (KeyError, ValueError) as exc:
        raise SmsApiError(-7, f"price: {exc}") from None


@router.get("/faults")
def get_faults(state: SandboxDep) -> dict[str, Any]:
    return state.faults.model_dump()


@router.post("/faults")
def set_faults(faults: Faults, state: SandboxDep) -> dict[str, Any]:
    state.faults = faults
    return faults.model_dump()


@router.delete("/faults")
def clear_faults(state: SandboxDep) -> dict[str, Any]:
    state.faults = Faults()
    return state.faults.model_dump()


@router.get("/requests")
def requests_received(state: SandboxDep) -> dict[str, int]:
    return dict(state.requests)


@router.get("/npai")
def npai(state: SandboxDep) -> list[dict[str, Any]]:
    return [entry.model_dump() for entry in state.npai]


@router.post("/npai")
def add_npai(
    state: SandboxDep,
    destination: str = Body(),
    campaign_id: int | None = Body(None),
    date: str | None = Body(None),
) -> dict[str, Any]:
    return state.add_npai(destination, campaign_id, date).model_dump()


@router.post("/webhooks/{webhook_id}")
def set_webhook(webhook_id: str, payload: dict[str, Any], state: SandboxDep) -> dict[str, Any]:
    return state.set_webhook(webhook_id, payload).model_dump()
