"""The plugin's first dotted path, which the manual lists: the class is
:class:`airflow_provider_sms.api_server.plugin.SmsApiServerPlugin`.
"""

from __future__ import annotations

from airflow_provider_sms.api_server.plugin import SmsApiServerPlugin as SmsDeliveryReportsPlugin

__all__ = ["SmsDeliveryReportsPlugin"]
