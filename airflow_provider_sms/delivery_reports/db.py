"""The DB manager's earlier dotted path, which Airflow's configuration may name (``[database]
external_db_managers`` on Airflow 3.0 and 3.1): the manager of every table of the provider is
:class:`~airflow_provider_sms.db_manager.SmsProviderDBManager`.
"""

from __future__ import annotations

from airflow_provider_sms.db_manager import SmsProviderDBManager

SmsDeliveryReportsDBManager = SmsProviderDBManager

__all__ = ["SmsDeliveryReportsDBManager"]
