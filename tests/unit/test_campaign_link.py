"""The send operators' "SMS campaign" extra link: computed when the task ends (Airflow 3 keeps it in XCom),
to the campaigns page inside Airflow's UI, only when the task sent something, never on Airflow 3.0."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

import airflow_provider_sms
from airflow_provider_sms import _compat
from airflow_provider_sms.campaigns import link
from airflow_provider_sms.campaigns.link import SmsCampaignLink
from airflow_provider_sms.exceptions import SmsTransportError
from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSendOperator, SmsSimulateOperator
from tests.compat import AIRFLOW_VERSION

from .conftest import BASE_URL, connection_json
from .test_operators import NUMBERS, Service, context

RECIPIENTS = [f"336000000{i:02d}" for i in range(15)]
# The version check as the module defines it (the fixture below replaces it for every test).
AIRFLOW_3_1_OR_LATER = _compat.airflow_3_1_or_later
PLUGIN_PAGES = tuple(int(part) for part in AIRFLOW_VERSION.split(".")[:2]) >= (3, 1)


@pytest.fixture(autouse=True)
def _connection(monkeypatch: pytest.MonkeyPatch, memory_variables: dict[str, str]) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example/team/")
    # Every test below runs on an Airflow with plugin pages unless it says otherwise.
    monkeypatch.setattr(_compat, "airflow_3_1_or_later", lambda: True)


def sent(**kwargs: Any) -> tuple[SmsSendOperator, dict[str, Any]]:
    ctx = context(run_id="scheduled__2030-01-01T09:00:00+00:00", map_index=3)
    operator = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, **kwargs)
    operator.execute(ctx)
    return operator, ctx


def test_a_task_that_sent_links_to_its_campaign_inside_airflows_ui(requests_mock: Any) -> None:
    Service().mount(requests_mock)
    operator, ctx = sent()

    url = SmsCampaignLink().get_link(operator, ti_key=ctx["ti"])

    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == (
        "https",
        "airflow.example",
        "/team/plugin/sms-campaigns",
    )
    route, _, query = parts.fragment.partition("?")
    assert route == "/task"
    assert parse_qs(query) == {
        "dag_id": ["campaigns"],
        "run_id": ["scheduled__2030-01-01T09:00:00+00:00"],
        "task_id": ["send"],
        "map_index": ["3"],
    }


def test_the_route_is_the_plugins_nav_view() -> None:
    from airflow_provider_sms.api_server.plugin import SmsApiServerPlugin

    (nav,) = [view for view in SmsApiServerPlugin().external_views if view["destination"] == "nav"]
    assert nav["url_route"] == link.CAMPAIGNS_ROUTE


@pytest.mark.parametrize("on_cost_exceeded", ["fail", "skip"])
def test_a_task_that_sent_nothing_has_no_link(requests_mock: Any, on_cost_exceeded: str) -> None:
    Service().mount(requests_mock)
    ctx = context()
    operator = SmsSendOperator(
        task_id="send", message="Hi", recipients=NUMBERS, max_cost=1, on_cost_exceeded=on_cost_exceeded
    )
    with pytest.raises((AirflowFailException, AirflowSkipException)):
        operator.execute(ctx)

    assert SmsCampaignLink().get_link(operator, ti_key=ctx["ti"]) == ""


def test_a_task_that_failed_after_sending_links_to_what_it_sent(requests_mock: Any) -> None:
    # The first batch is sent, the second cannot reach the service: the task fails, partly sent.
    requests_mock.post(f"{BASE_URL}/send", [{"json": Service()}, {"exc": requests.ConnectTimeout("x")}])
    ctx = context()
    operator = SmsSendOperator(task_id="send", message="Hi", recipients=RECIPIENTS, batch_size=10)
    with pytest.raises(SmsTransportError):
        operator.execute(ctx)

    assert SmsCampaignLink().get_link(operator, ti_key=ctx["ti"]).startswith("https://airflow.example/")


def test_on_airflow_3_0_there_is_no_link(requests_mock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    Service().mount(requests_mock)
    operator, ctx = sent()
    monkeypatch.setattr(_compat, "airflow_3_1_or_later", lambda: False)

    assert SmsCampaignLink().get_link(operator, ti_key=ctx["ti"]) == ""


def test_airflow_3_1_or_later_from_3_1() -> None:
    # The check itself, not the stand-in the fixture above puts in its place.
    assert AIRFLOW_3_1_OR_LATER() is PLUGIN_PAGES


def test_the_send_operators_declare_the_link_and_the_simulation_does_not() -> None:
    for operator in (SmsSendOperator, SmsSendListsOperator):
        assert [type(each) for each in operator.operator_extra_links] == [SmsCampaignLink]
    assert not SmsSimulateOperator.operator_extra_links


def test_the_link_is_registered_in_provider_info_and_with_airflow() -> None:
    from airflow.providers_manager import ProvidersManager

    path = "airflow_provider_sms.campaigns.link.SmsCampaignLink"
    assert airflow_provider_sms.get_provider_info()["extra-links"] == [path]
    assert path in ProvidersManager().extra_links_class_names


def test_the_link_is_serialized_with_the_operator() -> None:
    try:  # Airflow 3.2 and later
        from airflow.serialization.serialized_objects import OperatorSerialization as Serialization
    except ImportError:  # pragma: no cover - Airflow 3.0 and 3.1
        from airflow.serialization.serialized_objects import SerializedBaseOperator as Serialization

    for operator in (
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS),
        SmsSendListsOperator(task_id="send_lists", message="Hi", lists=[1]),
    ):
        serialized = Serialization.serialize_operator(operator)
        # What the API server reads: the link's name and the XCom key the worker pushes it under.
        assert serialized["_operator_extra_links"] == {"SMS campaign": "_link_SmsCampaignLink"}
