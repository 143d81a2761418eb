"""My first SMS: one alert to one number, sent only if it costs at most 5 credits (the README's own DAG,
which tests/dags/test_readme_recipe.py runs as the README says)."""

# --8<-- [start:code]
import pendulum
from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator

with DAG("my_first_sms", schedule=None, start_date=pendulum.datetime(2026, 1, 1), doc_md=__doc__):
    SmsSendOperator(
        task_id="send",
        message={"text": "Hello from Airflow", "pushtype": "alert"},
        recipients=["+33 6 12 34 56 78"],
        max_cost=5,
    )
# --8<-- [end:code]
