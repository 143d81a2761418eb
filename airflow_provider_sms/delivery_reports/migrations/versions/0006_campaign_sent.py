"""The numbers each campaign sent, in a column of ``sms_campaign``: the list's delivery filter compares
them with the kept counts in SQL. Filled from the records already copied.

Revision ID: 2c7e5a9f3d14
Revises: 9e4a1c7b2d68
Create Date: 2026-11-27 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "2c7e5a9f3d14"
down_revision = "9e4a1c7b2d68"
branch_labels = None
depends_on = None

# Campaigns updated per statement while filling the column.
CHUNK = 5000


def upgrade() -> None:
    op.add_column("sms_campaign", sa.Column("sent", sa.BigInteger(), nullable=False, server_default="0"))
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
        batch.drop_column("sent")
