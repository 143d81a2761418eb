"""invalid_numbers="skip" and CSV files with a header (recipients_column), with requests-mock."""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.operators.sms import SmsSendOperator, SmsSimulateOperator

from .conftest import connection_json
from .test_operators import NUMBERS, Service, calls, context, numbers_of


@pytest.fixture(autouse=True)
def _connection(monkeypatch: pytest.MonkeyPatch, memory_variables: dict[str, str]) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())


BAD = ["0612345678", "call me", "+33 6 12 34"]  # national, letters, too short


def test_skip_leaves_the_invalid_numbers_out_and_reports_them_in_one_line(requests_mock, capsys):
    service = Service().mount(requests_mock)
    operator = SmsSendOperator(
        task_id="send", message="Hi", recipients=[BAD[0], *NUMBERS, BAD[1], BAD[2]], invalid_numbers="skip"
    )

    result = operator.execute(context())

    assert [numbers_of(body) for body in service.sent_bodies] == [NUMBERS]
    rejected = result["rejected_locally"]
    assert rejected["count"] == 3
    assert rejected["by_rule"] == {"national number": 1, "not an international number": 2}
    assert [example.split(":")[0] for example in rejected["examples"]] == [
        "recipients[0]",
        "recipients[4]",
        "recipients[5]",
    ]
    assert (result["total"], result["sent"], result["invalid"]) == (3, 3, 0)  # the service's own counts
    out = capsys.readouterr().out
    assert out.count("left out before any request (invalid_numbers='skip')") == 1
    assert "3 of 6 recipients are not valid" in out


def test_skip_logs_one_line_for_ten_thousand_bad_numbers(requests_mock, capsys):
    Service().mount(requests_mock)
    recipients = [f"06{n:08d}" for n in range(10_000)] + NUMBERS

    result = SmsSimulateOperator(
        task_id="sim", message="Hi", recipients=recipients, invalid_numbers="skip", batch_size=1000
    ).execute(context())

    assert result["rejected_locally"]["count"] == 10_000
    assert len(result["rejected_locally"]["examples"]) == 5
    assert result["sent"] == 3
    assert calls(requests_mock, "/send/simulate") == 1
    out = capsys.readouterr().out
    assert out.count("recipients[") <= 10  # the examples, not one line per number
    assert "10000 of 10003 recipients are not valid (by rule: 10000 national number)" in out


def test_fail_is_the_default_and_sends_nothing(requests_mock):
    Service().mount(requests_mock)

    with pytest.raises(AirflowFailException, match=r"recipients: 1 of 4 recipients are not valid"):
        SmsSendOperator(task_id="send", message="Hi", recipients=[*NUMBERS, BAD[0]]).execute(context())

    assert requests_mock.call_count == 0


def test_skip_with_nothing_valid_left_fails_before_any_request(requests_mock):
    Service().mount(requests_mock)

    with pytest.raises(
        AirflowFailException, match="no valid recipient is left once the invalid ones are skipped"
    ):
        SmsSendOperator(task_id="send", message="Hi", recipients=BAD, invalid_numbers="skip").execute(
            context()
        )

    assert requests_mock.call_count == 0


@pytest.mark.parametrize(("max_filtered_ratio", "sends"), [(0.5, True), (0.3, False)])
def test_max_filtered_ratio_counts_the_numbers_left_out_locally(requests_mock, max_filtered_ratio, sends):
    service = Service().mount(requests_mock)  # the service filters nothing: 0 of 3
    operator = SmsSendOperator(
        task_id="send",
        message="Hi",
        recipients=[*NUMBERS, BAD[0], BAD[1]],  # 2 of 5 left out locally: 40 %
        invalid_numbers="skip",
        max_filtered_ratio=max_filtered_ratio,
        on_cost_exceeded="skip",
    )

    if sends:
        result = operator.execute(context())
        assert result["gate"]["filtered_ratio"] == 0.4
        assert len(service.sent_bodies) == 1
    else:
        with pytest.raises(AirflowSkipException, match=r"40.0% of the numbers would be filtered"):
            operator.execute(context())
        assert service.sent_bodies == []


def test_invalid_numbers_is_checked_when_the_dag_is_parsed_unless_templated():
    with pytest.raises(SmsValidationError, match=r"invalid_numbers='drop': use 'fail' or 'skip'"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, invalid_numbers="drop")
    templated = SmsSendOperator(
        task_id="send", message="Hi", recipients=NUMBERS, invalid_numbers="{{ params.invalid_numbers }}"
    )
    assert "invalid_numbers" in templated.template_fields


# ------------------------------------------------------------------------------------- CSV with a header

CSV = "customer_id,name,phone,gsmsmsid\nc1,Ann,+33 6 12 34 56 78,ann-1\nc2,Bob,33612345679,\n"


def test_a_csv_with_a_header_says_what_format_is_expected_and_how_to_name_the_column(requests_mock, tmp_path):
    path = tmp_path / "customers.csv"
    path.write_text(CSV)

    with pytest.raises(AirflowFailException) as info:
        SmsSendOperator(task_id="send", message="Hi", recipients=path).execute(context())

    text = str(info.value)
    assert "the file starts with a header ('customer_id', 'name', 'phone', 'gsmsmsid')" in text
    assert "one telephone number per line" in text
    assert "recipients_column='phone'" in text
    assert requests_mock.call_count == 0


def test_recipients_column_reads_the_numbers_and_gsmsmsid_of_a_csv_with_a_header(requests_mock, tmp_path):
    service = Service().mount(requests_mock)
    path = tmp_path / "customers.csv"
    path.write_text(CSV)

    SmsSendOperator(task_id="send", message="Hi", recipients=path, recipients_column="Phone").execute(
        context()
    )

    (body,) = service.sent_bodies
    assert body["recipients"]["gsm"] == [
        {"gsmsmsid": "ann-1", "value": "33612345678"},
        {"value": "33612345679"},
    ]


def test_recipients_column_not_in_the_header_is_named(requests_mock, tmp_path):
    path = tmp_path / "customers.csv"
    path.write_text(CSV)

    with pytest.raises(
        AirflowFailException, match=r"recipients_column='mobile': the file's header has no such column"
    ):
        SmsSendOperator(task_id="send", message="Hi", recipients=path, recipients_column="mobile").execute(
            context()
        )

    assert requests_mock.call_count == 0
