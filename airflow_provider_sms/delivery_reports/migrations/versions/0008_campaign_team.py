"""The team each campaign was sent under (``sms_campaign.team``): a campaign is shown to a team's users
only while its DAG stands under that team. The campaigns already copied get "" (no team): in a
multi-team deployment they are then shown only to the users who may read every DAG.

Revision ID: 4d8f2b6a1c93
Revises: 7f3b1d9e5a26
Create Date: 2026-11-27 16:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from airflow.models.base import ID_LEN
from alembic import op

revision = "4d8f2b6a1c93"
down_revision = "7f3b1d9e5a26"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sms_campaign", sa.Column("team", sa.String(ID_LEN), nullable=True))
    campaign = sa.table("sms_campaign", sa.column("team"))
    op.get_bind().execute(sa.update(campaign).values(team=""))


def downgrade() -> None:
    with op.batch_alter_table("sms_campaign") as batch:
        batch.drop_column("team")
