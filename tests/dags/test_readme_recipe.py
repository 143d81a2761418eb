"""README's "Your own DAG": its shell lines run as written, from a fresh Airflow home, on real Airflow.

The block under the README's ``<!-- recipe ... -->`` mark is run by bash from the repository's root with
this venv's ``bin`` as ``.venv/bin`` (the README's ``. .venv/bin/activate``), on a free port instead of
8081; the run succeeds and the sandbox gets one campaign. The last line run again is refused as the
README says, naming ``on_duplicate``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DAG_TEST_TIMEOUT
from tests.ui.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.dags]

REPO = Path(__file__).resolve().parents[2]
RECIPE_MARK = "<!-- recipe (tests/dags/test_readme_recipe.py runs it) -->"
# How many campaigns the sandbox on the port given created (its inspection API).
COUNT = (
    "import sys; from airflow_provider_sms.sandbox.server import InspectionClient; "
    "print(len(InspectionClient(f'http://127.0.0.1:{sys.argv[1]}').campaigns()))"
)


def recipe() -> list[str]:
    """The README's recipe, line by line."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    start = lines.index(RECIPE_MARK)
    assert lines[start + 1] == "```bash", "the recipe's mark is not right above a bash block"
    end = lines.index("```", start + 2)
    return lines[start + 2 : end]


def test_the_readmes_own_dag_recipe_runs_as_written_and_a_second_run_is_refused(
    tmp_path: Path,
) -> None:
    lines = recipe()
    assert lines[0] == ". .venv/bin/activate"
    assert lines[-1].startswith("airflow dags test my_first_sms")
    port = str(free_port())
    body = "\n".join(line.replace("8081", port) for line in lines[1:])
    # The README's venv is this one; the recipe's own lines follow, then its last line once more.
    script = f"""
set -eu
export PATH="{Path(sys.executable).parent}:$PATH"
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
{body}
echo "=== the sandbox's campaigns: $(python -c "{COUNT}" {port})"
echo "=== second run"
{lines[-1]} || true
"""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AIRFLOW", "SMS_"))}
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=REPO,
        env={**env, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=3 * DAG_TEST_TIMEOUT,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    first, _, second = output.partition("=== second run")
    assert "=== the sandbox's campaigns: 1" in first, first[-4000:]
    assert "on_duplicate" in second, second[-4000:]
    assert "Sent:" not in second, second[-4000:]
