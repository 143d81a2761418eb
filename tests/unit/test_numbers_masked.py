"""Phone numbers are personal data: logs, warnings and errors show them masked (``336•••••678``).

mask_number and the helpers built on it; then each place a number could reach a task log or the API
server's log: the refusals of the number rule, the rejected recipients, a CSV file's first row, the
hook and the operators, a delivery report the receiver refuses (its log line and its refusal counts),
an NPAI answer of the wrong shape, and the database errors of the delivery-report tables.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException
from sqlalchemy.exc import IntegrityError, OperationalError

from airflow_provider_sms import codec
from airflow_provider_sms._validation import build
from airflow_provider_sms.api_server import refusal as refusal_module
from airflow_provider_sms.delivery_reports import receiver as receiver_module
from airflow_provider_sms.delivery_reports.ingest import GroupCommit, StoreFailed
from airflow_provider_sms.delivery_reports.refusals import RefusalCounter
from airflow_provider_sms.delivery_reports.store import without_parameters
from airflow_provider_sms.exceptions import SmsApiError, SmsValidationError
from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.models import DeliveryReport, NpaiList, Recipient
from airflow_provider_sms.operators.sms import SmsSendOperator, SmsSimulateOperator
from airflow_provider_sms.phone_numbers import mask_number, mask_numbers_in, normalize_number, quoted_masked
from airflow_provider_sms.recipients import parse_recipients

from .conftest import connection_json
from .test_operators import NUMBERS, Service, context

NUMBER = "33612345678"
MASKED = "336•••••678"
# A delivery report but for its destination.
REPORT = {"date": "2026-11-24T10:00:00+01:00", "status": 3, "campaign_id": 777}


@pytest.fixture(autouse=True)
def _connection(monkeypatch: pytest.MonkeyPatch, memory_variables: dict[str, str]) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())


# ------------------------------------------------------------------------------------------ the masks


@pytest.mark.parametrize(
    ("number", "masked"),
    [
        (NUMBER, MASKED),  # 11 digits: 3 shown at each end
        ("447911123456", "447••••••456"),
        ("123456789012345", "123•••••••••345"),  # the longest valid number
        ("0612345678", "061••••678"),  # 10 characters: still 3 and 3
        ("+33 6 12 ab", "+33••••• ab"),  # not a number: masked by its characters all the same
        ("12345678", "12••••78"),  # under 10: a quarter at each end
        ("1234", "1••4"),
        ("123", "•••"),  # under 4: nothing shown
        ("", ""),
    ],
)
def test_mask_number_shows_at_most_the_first_and_last_three_characters(number: str, masked: str) -> None:
    assert mask_number(number) == masked
    assert len(mask_number(number)) == len(number)
    shown = [character for character in mask_number(number) if character != "•"]
    assert len(shown) <= (6 if len(number) >= 10 else len(number) // 2)


def test_mask_numbers_in_masks_runs_of_eight_digits_or_more_and_nothing_else() -> None:
    text = "to 33612345678, 0612345678 and 12345678 on 2026-11-24 10:00 from 10.0.0.7, ticket 1234567"
    assert mask_numbers_in(text) == (
        "to 336•••••678, 061••••678 and 12••••78 on 2026-11-24 10:00 from 10.0.0.7, ticket 1234567"
    )
    assert mask_numbers_in(mask_numbers_in(text)) == mask_numbers_in(text)
    assert quoted_masked({"destination": NUMBER}) == f"{{'destination': '{MASKED}'}}"
    assert quoted_masked(None) == "None"


@pytest.mark.parametrize(
    ("value", "shown", "rule"),
    [
        ("0612345678", "'061••••678' is a national number", "national number"),
        ("+33 6 12 ab 56 78", "'+33••••••••••• 78' is not an international", "not an international number"),
        (3.3612345678e10, f"got {MASKED}.0", "not text"),
        ([NUMBER], f"got ['{MASKED}']", "not text"),
    ],
)
def test_the_number_rule_quotes_a_refused_number_masked(value: object, shown: str, rule: str) -> None:
    with pytest.raises(ValueError, match=r"telephone number|national number") as info:
        normalize_number(value)
    assert shown in str(info.value)
    assert getattr(info.value, "rule", None) == rule
    given = value if isinstance(value, str) else NUMBER
    # The national rule's own example (33612345678 for 06 12 34 56 78) is no one's number.
    assert given not in str(info.value).replace("e.g. 33612345678 for", "")


# ----------------------------------------------------------------------------------------- recipients


def test_rejected_recipients_name_the_position_and_rule_and_quote_the_number_masked() -> None:
    recipients = [NUMBER, "0612345679", {"number": "33612345680"}, "+33 6 12 ab 56 81"]

    with pytest.raises(SmsValidationError) as info:
        parse_recipients(recipients)

    text = str(info.value)
    assert text.startswith("recipients: 3 of 4 recipients are not valid (by rule: ")
    assert "recipients[1]: '061••••679' is a national number" in text
    assert "recipients[2]: value: Field required (got {'number': '336•••••680'})" in text
    assert "recipients[3]: '+33••••••••••• 81' is not an international telephone number" in text
    for number in ("0612345679", "33612345680", "12 ab 56 81"):
        assert number not in text


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (Recipient, {"value": "0612345679"}),
        (Recipient, {"value": ["0612345679"]}),
        (Recipient, {"number": "0612345679"}),
        (DeliveryReport, {**REPORT, "destination": "0612345679"}),
        (DeliveryReport, {"destination": "0612345679"}),
        (NpaiList, {"status": 1, "message": "OK", "list": [{"id": "1", "destination": 612345679}]}),
    ],
)
def test_the_models_errors_never_show_a_number_in_full(model: Any, data: dict[str, Any]) -> None:
    """pydantic's own text of an error (a model validated directly) shows no input."""
    with pytest.raises(ValueError, match="validation error") as info:
        model.model_validate(data)
    assert "612345679" not in str(info.value).replace("e.g. 33612345678 for", "")


def test_a_model_built_by_the_provider_names_the_field_the_rule_and_the_number_masked() -> None:
    with pytest.raises(SmsValidationError, match=r"^recipient\.value: '061••••679' is a national number"):
        build(Recipient, {"value": "0612345679"}, "recipient")


def test_the_hook_refuses_bad_numbers_before_any_request_with_the_numbers_masked(requests_mock) -> None:
    with pytest.raises(SmsValidationError) as info:
        SmsHook().send({"text": "Hi", "pushtype": "alert"}, [NUMBER, "0612345679"])
    assert "recipients[1]: '061••••679' is a national number" in str(info.value)
    assert "0612345679" not in str(info.value)
    assert requests_mock.call_count == 0


def test_the_skip_warning_and_the_result_quote_the_left_out_numbers_masked(requests_mock, capsys) -> None:
    Service().mount(requests_mock)
    bad = ["0612345601", "+33 6 12 ab 56 02"]

    result = SmsSendOperator(
        task_id="send", message="Hi", recipients=[*NUMBERS, *bad], invalid_numbers="skip"
    ).execute(context())

    out = capsys.readouterr().out
    assert "left out before any request (invalid_numbers='skip')" in out
    assert "recipients[3]: '061••••601' is a national number" in out
    assert "recipients[4]: '+33••••••••••• 02' is not an international telephone number" in out
    # The result reports them by position (which finds them in the input), masked.
    examples = result["rejected_locally"]["examples"]
    assert [example.split(":")[0] for example in examples] == ["recipients[3]", "recipients[4]"]
    for number in bad:
        assert number not in out
        assert number not in str(examples)


def test_the_failure_on_bad_numbers_quotes_them_masked(requests_mock) -> None:
    with pytest.raises(AirflowFailException) as info:
        SmsSimulateOperator(task_id="sim", message="Hi", recipients=[*NUMBERS, "0612345601"]).execute(
            context()
        )
    assert "recipients[3]: '061••••601' is a national number" in str(info.value)
    assert "0612345601" not in str(info.value)


def test_a_csv_files_first_row_of_data_is_quoted_masked(requests_mock, tmp_path) -> None:
    path = tmp_path / "customers.csv"
    path.write_text("Ann,+33 6 12 34 56 78,tel 33612345679\nBob,33612345680,\n")

    with pytest.raises(AirflowFailException) as header:
        SmsSendOperator(task_id="send", message="Hi", recipients=path).execute(context())
    with pytest.raises(AirflowFailException) as column:
        SmsSendOperator(task_id="send", message="Hi", recipients=path, recipients_column="mobile").execute(
            context()
        )

    quoted = "'Ann', '+33••••••••••• 78', 'tel 336•••••679'"
    assert f"the file starts with a header ({quoted})" in str(header.value)
    assert f"(it has {quoted})" in str(column.value)
    for text in (str(header.value), str(column.value)):
        assert "34 56 78" not in text
        assert "33612345679" not in text
    assert requests_mock.call_count == 0


# ---------------------------------------------------------------------------------- delivery reports


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ({**REPORT, "destination": "0612345678"}, "report.destination: '061••••678' is a national number"),
        (
            {"destination": NUMBER, "status": 3},
            f"report.date: Field required (got {{'destination': '{MASKED}'",
        ),
        ([NUMBER], f"report: Input should be an object (got ['{MASKED}'])"),
    ],
)
def test_a_refused_delivery_report_quotes_its_destination_masked(body: Any, shown: str) -> None:
    import json

    with pytest.raises(SmsValidationError) as info:
        codec.decode_delivery_report(json.dumps(body).encode())
    assert shown in str(info.value)
    assert NUMBER not in str(info.value).replace("e.g. 33612345678 for", "")
    assert "0612345678" not in str(info.value)


def test_the_receivers_refusal_log_line_quotes_the_number_masked(caplog: pytest.LogCaptureFixture) -> None:
    """decode_report's refusal, as the app's handler logs it (refusal.refused)."""
    import json

    from starlette.requests import Request

    with pytest.raises(refusal_module.Refusal) as info:
        receiver_module.decode_report(json.dumps({"destination": NUMBER, "status": 3}).encode())
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/delivery-reports/sms_default",
        "path_params": {"conn_id": "sms_default"},
        "headers": [],
        "client": ("10.0.0.7", 4242),
    }
    with caplog.at_level(logging.WARNING, logger=refusal_module.__name__):
        answer = asyncio.run(refusal_module.refused(Request(scope), info.value))

    assert answer.status_code == 422
    (line,) = [record.getMessage() for record in caplog.records if "refused a call" in record.getMessage()]
    assert line.startswith("Delivery reports for 'sms_default': refused a call from 10.0.0.7: report.date:")
    assert MASKED in line
    assert NUMBER not in line
    assert NUMBER not in answer.body.decode()


def test_the_refusal_counts_keep_the_last_detail_with_its_numbers_masked() -> None:
    counter = RefusalCounter()
    counter.count("sms_default", "invalid_report", "report.destination: '0612345678' is a national number")
    counter.count("sms_default", "caller_not_allowed", f"calls from 10.0.0.7 are not allowed ({NUMBER})")

    tallies = counter.take()

    details = {reason: tally.last_detail for (_, reason, _), tally in tallies.items()}
    assert details == {
        "invalid_report": "report.destination: '061••••678' is a national number",
        "caller_not_allowed": f"calls from 10.0.0.7 are not allowed ({MASKED})",
    }


def test_an_npai_answer_of_the_wrong_shape_quotes_its_numbers_masked() -> None:
    body = b'{"status": 1, "message": "OK", "list": [{"id": "1", "destination": 33612345678, "date": "x"}]}'
    with pytest.raises(SmsApiError) as info:
        codec.decode_npai(body, "json", endpoint="GET /npai")
    assert f"list.0.destination: Input should be a valid string (got {MASKED})" in str(info.value)
    assert NUMBER not in str(info.value)


# ----------------------------------------------------------------------------- the tables' database errors


def insert_error() -> IntegrityError:
    return IntegrityError(
        "INSERT INTO sms_delivery_report (destination) VALUES (?)", (NUMBER,), Exception("UNIQUE failed")
    )


def test_database_errors_leave_the_statements_numbers_out() -> None:
    error = insert_error()
    assert NUMBER in str(error)  # what SQLAlchemy says by itself
    wrapped = StoreFailed("the report could not be stored")
    wrapped.__cause__ = error

    assert without_parameters(wrapped) is wrapped
    assert NUMBER not in str(error)
    assert "INSERT INTO sms_delivery_report" in str(error)
    assert "UNIQUE failed" in str(error)


@pytest.mark.parametrize("max_rows", [1, 500])
def test_a_failed_commit_is_logged_without_the_reports_numbers(
    max_rows: int, caplog: pytest.LogCaptureFixture
) -> None:
    report = DeliveryReport.model_validate({**REPORT, "destination": NUMBER})

    def write(_reports: Any) -> list[bool]:
        raise insert_error()

    async def store_two() -> list[Any]:
        writer = GroupCommit(write, max_rows)
        calls = [writer.store("sms_default", report), writer.store("sms_default", report)]
        return await asyncio.gather(*calls, return_exceptions=True)

    with caplog.at_level(logging.WARNING, logger="airflow_provider_sms.delivery_reports.ingest"):
        outcomes = asyncio.run(store_two())

    assert all(isinstance(outcome, StoreFailed) for outcome in outcomes)
    assert "not stored" in caplog.text
    assert "INSERT INTO sms_delivery_report" in caplog.text  # the traceback names the statement
    assert NUMBER not in caplog.text


def test_a_summary_that_cannot_be_read_is_logged_without_the_page_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = OperationalError("SELECT destination ... WHERE destination > ?", (NUMBER,), Exception("locked"))
    with caplog.at_level(logging.ERROR, logger=receiver_module.__name__):
        refusal = receiver_module.database_refusal(error, "sms_default", "summary")
    assert refusal.status == 503
    assert "summary cannot be read" in caplog.text
    assert NUMBER not in caplog.text
