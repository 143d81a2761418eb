"""The access token is kept out of every public object's str/repr and out of every error's text.

The token canary (tests/token_canary.py) watches logs and outputs of the whole suite; what it cannot see
is text nobody printed: the repr of a hook, an operator or a trigger, a trigger's serialized kwargs, the
message and traceback of an error that a test caught. These tests build each of them with the canary
configured as the connection's token, and look.
"""

from __future__ import annotations

import json
import traceback
from typing import TYPE_CHECKING, Any

import pytest
import requests
from airflow.providers.common.compat.sdk import redact

from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsAuthError,
    SmsError,
    SmsMaybeSentError,
    SmsNotFoundError,
    SmsTransportError,
    SmsValidationError,
)
from airflow_provider_sms.hooks.sms import SmsConnectionSettings, SmsHook
from airflow_provider_sms.notifications.sms import SmsNotifier
from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSendOperator, SmsSimulateOperator
from airflow_provider_sms.sensors.sms import SmsNpaiSensor, SmsWebhookSensor
from airflow_provider_sms.triggers.sms import SmsNpaiTrigger, SmsWebhookTrigger
from tests.compat import secrets_masker

from .conftest import BASE_URL, TOKEN
from .test_hook_errors import refused
from .test_triggers import Service, answer, first_event, serve

if TYPE_CHECKING:
    from collections.abc import Callable

MESSAGE = {"text": "Hello", "pushtype": "alert"}
NUMBERS = ["33612345678"]
# What an echoing proxy or a debugging server puts in an error page: the request it was sent.
ECHO = f"GET /npai HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n"


@pytest.fixture(autouse=True)
def fresh_masker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow's secrets masker knowing no secret: each test shows what its own hook registered."""
    masker = secrets_masker()
    monkeypatch.setattr(masker, "patterns", set())
    monkeypatch.setattr(masker, "replacer", None)


def texts(thing: object) -> dict[str, str]:
    """The texts a thing shows: str, repr and, for an error, its whole traceback (causes included)."""
    shown = {"str": str(thing), "repr": repr(thing)}
    if isinstance(thing, BaseException):
        shown["traceback"] = "".join(traceback.format_exception(thing))
    return shown


def assert_no_token(thing: object, what: str) -> None:
    for kind, text in texts(thing).items():
        assert TOKEN not in text, f"the token is in the {kind} of {what}"


def test_the_hook_is_configured_with_the_canary_yet_shows_it_nowhere(make_hook, requests_mock):
    requests_mock.get(f"{BASE_URL}/npai", json={"status": 1, "message": "OK", "list": [], "totalRecords": 0})
    hook = make_hook()
    hook.get_npai()

    # The token is configured and sent: the checks below are about a hook that really holds it.
    assert hook.settings.token == TOKEN
    assert requests_mock.last_request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert_no_token(hook, "the hook")
    assert_no_token(hook.settings, "the hook's settings")
    # Every attribute but the HTTP session, whose headers carry the token by design.
    for name, value in vars(hook).items():
        if name != "session":
            assert_no_token(value, f"hook.{name}")
    assert_no_token(SmsConnectionSettings(base_url=BASE_URL, token=TOKEN), "SmsConnectionSettings")


def test_the_token_is_registered_with_airflows_secrets_masker(make_hook):
    assert redact(TOKEN) == TOKEN
    assert make_hook().settings.token == TOKEN

    assert redact(f"Authorization: Bearer {TOKEN}") == "Authorization: Bearer ***"


@pytest.mark.parametrize(
    "extra",
    [{"format": "csv"}, {"timeout": "-1"}, {"timeout": "soon"}],
    ids=["bad-format", "negative-timeout", "bad-timeout"],
)
def test_connection_errors_do_not_show_the_token(make_hook, extra):
    with pytest.raises(SmsValidationError) as info:
        make_hook(**extra).prepare_message(MESSAGE)

    assert_no_token(info.value, "the connection error")
    assert_no_token(info.value.errors, "the connection error's fields")


def test_a_connection_without_host_names_the_host_not_the_token(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", json.dumps({"conn_type": "sms", "password": TOKEN}))

    with pytest.raises(SmsValidationError, match="host") as info:
        SmsHook().prepare_message(MESSAGE)

    assert_no_token(info.value, "the connection error")


def operators() -> list[Any]:
    return [
        SmsSimulateOperator(task_id="simulate", message=MESSAGE, recipients=NUMBERS),
        SmsSendOperator(task_id="send", message=MESSAGE, recipients=NUMBERS, max_cost=5),
        SmsSendListsOperator(task_id="send_lists", message=MESSAGE, lists=[1], max_cost=5),
        SmsWebhookSensor(task_id="webhook", webhook_id="1"),
        SmsNpaiSensor(task_id="npai", campaign_id=42),
        SmsNotifier(text="down", recipients=NUMBERS),
    ]


@pytest.mark.parametrize("task", operators(), ids=lambda task: type(task).__name__)
def test_operators_sensors_and_the_notifier_do_not_show_the_token(make_hook, task):
    make_hook()  # the canary connection
    assert task.hook.settings.token == TOKEN

    assert_no_token(task, type(task).__name__)
    assert_no_token(task.hook, f"{type(task).__name__}.hook")


@pytest.mark.parametrize(
    "trigger",
    [SmsWebhookTrigger(webhook_id="1"), SmsNpaiTrigger(campaign_id=42, destinations=NUMBERS)],
    ids=lambda trigger: type(trigger).__name__,
)
async def test_triggers_and_their_events_do_not_show_the_token(make_hook, monkeypatch, trigger):
    make_hook()  # the canary connection
    service = Service(answer("json", {"status": -1, "message": "Authentication error"}, 401))
    serve(monkeypatch, service)

    payload = await first_event(trigger)

    assert service.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert payload["error"] == "auth"
    assert_no_token(trigger, type(trigger).__name__)
    assert_no_token(json.dumps(trigger.serialize()), f"{type(trigger).__name__}.serialize()")
    assert_no_token(json.dumps(payload), "the trigger's event")


def npai(hook: SmsHook) -> object:
    return hook.get_npai()


def send(hook: SmsHook) -> object:
    return hook.send(MESSAGE, NUMBERS)


def simulate(hook: SmsHook) -> object:
    return hook.simulate(MESSAGE, NUMBERS)


def webhook(hook: SmsHook) -> object:
    return hook.get_webhook("9")


def bad_number(hook: SmsHook) -> object:
    return hook.send(MESSAGE, ["+33 6 12"])


def case(name: str, action: Callable[[SmsHook], object], expected: type[SmsError], **answer: Any) -> Any:
    """One failing call: ``answer`` is what requests-mock answers (method and path from ``action``)."""
    return pytest.param(action, answer, expected, id=name)


ENDPOINTS = {npai: ("GET", "/npai"), send: ("POST", "/send"), simulate: ("POST", "/send/simulate")}
ENDPOINTS[webhook] = ("GET", "/webhook/9")
ENDPOINTS[bad_number] = ("POST", "/send")
NOT_FOUND = {"status": -5, "message": "Webhook not found"}


@pytest.mark.parametrize(
    ("action", "answer", "expected"),
    [
        case("auth", npai, SmsAuthError, status_code=401, json={"status": -1, "message": "Bad token"}),
        case("not-found", webhook, SmsNotFoundError, status_code=404, json=NOT_FOUND),
        case("html-4xx", npai, SmsApiError, status_code=400, text="<html>Bad request</html>"),
        case("read-5xx", npai, SmsTransportError, status_code=503),
        case("read-refused", simulate, SmsTransportError, exc=refused()),
        case("read-timeout", npai, SmsTransportError, exc=requests.ReadTimeout("read timed out")),
        case("not-an-answer", npai, SmsApiError, text="nonsense"),
        case("send-5xx", send, SmsMaybeSentError, status_code=502, text="<html>Bad gateway</html>"),
        case("send-status-8", send, SmsMaybeSentError, json={"status": -8, "message": "held"}),
        case("send-read-timeout", send, SmsMaybeSentError, exc=requests.ReadTimeout("read timed out")),
        case("send-unreadable", send, SmsMaybeSentError, text="{"),
        case("send-refused", send, SmsTransportError, exc=refused()),
        case("send-429", send, SmsTransportError, status_code=429, headers={"Retry-After": "5"}),
        case("send-credits", send, SmsApiError, json={"status": -3, "message": "Not enough credits"}),
        case("bad-number", bad_number, SmsValidationError, json={}),
        # A proxy or a debugging server that echoes the request it got into its answer.
        case("echoed-html", npai, SmsApiError, status_code=400, text=ECHO),
        case("echoed-message", npai, SmsApiError, status_code=400, json={"status": -7, "message": ECHO}),
        case(
            "echoed-details",
            npai,
            SmsApiError,
            status_code=400,
            json={"status": -7, "message": "Bad request", "details": {"request": ECHO}},
        ),
        case("echoed-send-5xx", send, SmsMaybeSentError, status_code=502, text=ECHO),
    ],
)
def test_every_error_of_the_hook_leaves_the_token_out(make_hook, requests_mock, action, answer, expected):
    method, path = ENDPOINTS[action]
    requests_mock.register_uri(method, f"{BASE_URL}{path}", **answer)
    hook = make_hook()

    with pytest.raises(expected) as info:
        action(hook)

    assert_no_token(info.value, f"the {expected.__name__}")
    assert_no_token(vars(info.value), f"the attributes of the {expected.__name__}")


@pytest.mark.parametrize(
    "answer",
    [
        {"status_code": 401, "json": {"status": -1, "message": "Bad token"}},
        {"status_code": 400, "json": {"status": -7, "message": ECHO}},
        {"exc": refused()},
        {"json": {"status": 1, "message": "OK", "list": [], "totalRecords": 0}},
    ],
    ids=["rejected", "echoed", "unreachable", "accepted"],
)
def test_the_connection_test_message_leaves_the_token_out(make_hook, requests_mock, answer):
    requests_mock.get(f"{BASE_URL}/npai", **answer)

    ok, message = make_hook().test_connection()

    assert ok is ("json" in answer and answer["json"]["status"] == 1)
    assert TOKEN not in message
