"""Sample records of the service shared by the unit tests (one definition each)."""

from __future__ import annotations

from typing import Any

WEBHOOK: dict[str, Any] = {
    "webhook_id": "1839",
    "type": "DLR",
    "url": "https://crm.example.com/dlr",
    "status": "live",
    "signature": "f0e1d2",
    "last_http_code": 200,
}


def npai_entry(
    id: str,
    destination: str = "33612345678",
    date: str = "2026-06-01 10:00:00",
    campaign: int = 7,
    **fields: Any,
) -> dict[str, Any]:
    """An NPAI entry as the service writes it; ``fields`` override the info/extra fields."""
    return {
        "id": id,
        "destination": destination,
        "date": date,
        "info1": "",
        "info2": "",
        "info3": "",
        "info4": "",
        "user_information": [],
        "campaign_id": campaign,
        "batch_id": None,
        **fields,
    }
