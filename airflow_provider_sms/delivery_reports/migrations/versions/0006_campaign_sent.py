"""Two columns of ``sms_campaign`` for the list's delivery filter: ``sent``, the numbers each campaign
sent, which SQL compares with the kept counts (filled from the records already copied), and
``reports_pruned_at``, when the retention deleted the campaign's delivery reports (its delivery is then
unknown; none are marked here: campaigns pruned before it show as before).

Revision ID: 2c7e5a9f3d14
Revises: 9e4a1c7b2d68
Create Date: 2026-11-27 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from airflow.utils.sqlalchemy import UtcDateTime
from alembic import op

revision = "2c7e5a9f3d14"
down_revision = "9e4a1c7b2d68"
branch_labels = None
depends_on = None

# Campaigns updated per statement while filling the column.
CHUNK = 5000


def upgrade() -> None:
    op.add_column("sms_campaign", sa.Column("sent", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("sms_campaign", sa.Column("reports_pruned_at", UtcDateTime(), nullable=True))
    campaign = sa.table("sms_campaign", sa.column("id"), sa.column("record", sa.JSON()), sa.column("sent"))
    bind = op.get_bind()
    values = [
        {"row_id": row_id, "sent": int((record or {}).get("sent") or 0)}
        for row_id, record in bind.execute(sa.select(campaign.c.id, campaign.c.record))
    ]
    update = (
        sa.update(campaign).where(campaign.c.id == sa.bindparam("row_id")).values(sent=sa.bindparam("sent"))
    )
    for start in range(0, len(values), CHUNK):
        bind.execute(update, values[start : start + CHUNK])


def downgrade() -> None:
    with op.batch_alter_table("sms_campaign") as batch:
        batch.drop_column("reports_pruned_at")
        batch.drop_column("sent")
