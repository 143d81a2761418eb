"""Campaigns as the Airflow UI shows them: what each send task sent, what it cost, how it was delivered.

- :mod:`.record`: the campaign record a send task leaves in XCom (key ``sms_campaign``), no phone number;
- :mod:`.indexer`: on the API server, copies those records into the provider's own table, so that a list
  of campaigns is read from an index and survives the XCom being cleared;
- :mod:`.tables`: that table and its tickets, beside the delivery-report tables;
- :mod:`.link`: the send tasks' "SMS campaign" extra link to their campaign's page.
"""
