"""The summary of a campaign's delivery reports: the provider's own shape, not the service's.

The service never sends it: the receiver on the Airflow API server computes it from the reports it
stored (:mod:`.store`) and serves it, and the delivery-reports sensor and trigger read it
(:mod:`.client`). So it lives with the delivery reports rather than in :mod:`airflow_provider_sms.models`,
which holds the service's resources only. The codec imports it when a summary is decoded, not when
the codec is imported, so that the hooks' import path does not load this package.
"""

from __future__ import annotations

from airflow_provider_sms.models import SmsModel


class DeliverySummary(SmsModel):
    """Where a campaign's messages stand, from the delivery reports received so far.

    Each message (a destination of the campaign) counts once, at its latest status: a final status
    wins over ``sent``, then the latest date.

    :param campaign_ids: the campaigns (tickets) summed up; a batched send has one per batch.
    :param reported: messages with at least one report.
    :param by_status: messages by status name, e.g. ``{"delivered": 950, "sent": 30, "expired": 20}``.
    :param final: messages whose status is final (anything but ``sent``).
    :param failed_count: messages whose final status is not ``delivered``.
    :param failed: those messages' numbers, when asked for (else None).
    """

    campaign_ids: list[int]
    reported: int
    by_status: dict[str, int]
    final: int
    failed_count: int
    failed: list[str] | None = None

    def final_share(self, expected: int) -> float:
        """The share of ``expected`` messages that have a final status (1.0 when none are expected)."""
        return 1.0 if expected <= 0 else min(1.0, self.final / expected)
