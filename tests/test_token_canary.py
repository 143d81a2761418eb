"""The token canary's own tests: a guard that never fires proves nothing.

Each runs a small pytest session in a subprocess (pytester) with the guard and another canary, whose
tests leak it on purpose through each channel the guard watches, and checks that every leak was caught,
named, and failed the test or the session.
"""

from __future__ import annotations

import re
import textwrap

import pytest
from cryptography.fernet import Fernet

# Not the suite's canary: the inner sessions' output is printed by this test, and must not trip it.
INNER = "inner-canary-token-0b7e5d3c9a81"
RUN = ("-p", "tests.token_canary", f"--token-canary={INNER}", "-p", "no:cacheprovider", "-rf")

LEAKY_TESTS = textwrap.dedent(
    f'''
    import logging

    from airflow_provider_sms.hooks.sms import SmsHook

    CANARY = "{INNER}"


    def test_clean(capsys):
        logging.getLogger("quiet").warning("nothing secret here")
        print("hello")
        assert capsys.readouterr().out.endswith("hello\\n")


    def test_stdlib_log_record():
        logging.getLogger("leaky").warning("token is %s", CANARY)


    def test_airflow_task_log():
        # Airflow's self.log is structlog: it writes to stdout, never through the root logger.
        SmsHook().log.info("connected with %s", CANARY)


    def test_printed_output():
        print("Authorization: Bearer " + CANARY)


    def test_output_read_by_the_test(capfd):
        print(CANARY)
        assert capfd.readouterr().out  # consumed: it never reaches the report


    def test_exception_text():
        raise RuntimeError("failed with " + CANARY)


    def test_subprocess_output(token_canary):
        token_canary.check_output("started\\nBearer " + CANARY, "stdout of a fake subprocess")
    '''
)
FAILING = (
    "test_stdlib_log_record",
    "test_airflow_task_log",
    "test_printed_output",
    "test_output_read_by_the_test",
    "test_exception_text",
    "test_subprocess_output",
)


def test_every_channel_of_a_test_is_caught_and_fails_that_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaky=LEAKY_TESTS)

    result = pytester.runpytest_subprocess(*RUN)

    result.assert_outcomes(passed=1, failed=len(FAILING))
    out = result.stdout.str()
    for name in FAILING:
        assert f"FAILED test_leaky.py::{name}" in out
    assert "log record of 'leaky' (WARNING): ...token is <canary>..." in out
    assert "captured log call: ...WARNING  leaky:test_leaky.py:15 token is <canary>" in out
    assert "captured stdout call: ...Authorization: Bearer <canary>" in out
    # Airflow 3.1+'s self.log is structlog (captured stdout only); 3.0's goes through the root logger.
    assert "connected with <canary>" in out
    assert "output read with readouterr() (out): ...<canary>" in out
    assert 'failure text (call): ...("failed with " + CANARY)' in out
    assert "token canary: stdout of a fake subprocess: ...started\\nBearer <canary>..." in out
    # The stdlib record is also in its test's captured log section (and, with Airflow 3.0's logging
    # config, in captured stdout): at least 8 leaks in all.
    summary = re.search(r"token canary: (\d+) leaks in ", out)
    assert summary is not None
    assert int(summary.group(1)) >= 8
    assert "1 subprocess outputs" in out


def test_files_and_the_airflow_database_are_scanned_at_the_end(pytester: pytest.Pytester) -> None:
    key = Fernet.generate_key()
    pytester.makepyfile(
        test_home=textwrap.dedent(
            f'''
            import json
            import sqlite3

            import pytest
            from cryptography.fernet import Fernet

            CANARY = "{INNER}"


            def test_a_file_in_tmp_path(tmp_path):
                (tmp_path / "task.log").write_text("GET /npai with Bearer " + CANARY)


            def test_an_airflow_home(tmp_path_factory, token_canary):
                home = tmp_path_factory.mktemp("airflow_home")
                token_canary.watch_airflow_home(home)
                (home / "airflow.cfg").write_text("[core]\\nfernet_key = {key.decode()}\\n")
                db = sqlite3.connect(home / "airflow.db")
                db.execute("CREATE TABLE xcom (value JSON)")
                db.execute("CREATE TABLE trigger (kwargs TEXT)")
                db.execute("INSERT INTO xcom VALUES (?)", [json.dumps({{"ticket": "42"}})])
                # Encrypted, as Airflow stores trigger kwargs: only the decrypting check can see it.
                kwargs = json.dumps({{"webhook_id": "1", "token": CANARY}}).encode()
                db.execute("INSERT INTO trigger VALUES (?)", [Fernet({key!r}).encrypt(kwargs).decode()])
                db.commit()
                db.close()
            '''
        )
    )

    result = pytester.runpytest_subprocess(*RUN)

    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the session fails, though every test passed
    out = result.stdout.str()
    assert "token canary: leaks not reported by a test" in out
    assert "task.log: ...GET /npai with Bearer <canary>..." in out
    assert "trigger kwargs in " in out
    assert "token canary: 2 leaks in " in out
    assert "in 1 AIRFLOW_HOME(s), 1 XCom rows, 0 rendered-field rows, 1 trigger rows, 0 Variables" in out


def test_a_clean_session_passes_and_says_what_it_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_clean=textwrap.dedent(
            """
            import logging


            def test_logs_and_prints(tmp_path):
                logging.getLogger("quiet").warning("sent 3 SMS")
                print("done")
                (tmp_path / "result.json").write_text("{}")
            """
        )
    )

    result = pytester.runpytest_subprocess(*RUN)

    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.re_match_lines(
        [r"token canary: 0 leaks in [1-9]\d* log records, [1-9]\d* captured outputs.*"]
    )
