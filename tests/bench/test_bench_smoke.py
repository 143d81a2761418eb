"""Smoke check of ``make bench``: the quick mode runs and writes well-formed records (no time is judged)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {
    "name",
    "size",
    "unit",
    "ours",
    "baseline",
    "baseline_name",
    "ratio",
    "peak_memory",
    "target",
    "met",
    "note",
}
# Cases that need nothing but the codec: they must always run, never be skipped.
ALWAYS_RUN = {
    "encode /send body, JSON",
    "validate + encode /send body, JSON",
    "peak memory of the JSON encode",
    "encode /send body, XML",
    "decode NPAI list, JSON",
    "decode NPAI list, XML",
}


def test_quick_benchmarks_write_well_formed_records(tmp_path: Path) -> None:
    output = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| case | size | ours | baseline | ratio |" in done.stdout

    result = json.loads(output.read_text())
    assert result["mode"] == "quick"
    assert result["machine"]["cpus"] >= 1
    records = result["results"]
    names = [row["name"] for row in records]
    assert len(names) == len(set(names)), "case names must be unique"
    assert set(names) >= ALWAYS_RUN
    assert any(name.startswith("import cost") for name in names)
    assert any(name.startswith("DAG file parse") for name in names)

    for row in records:
        assert set(row) == FIELDS, row["name"]
        assert row["unit"] in {"s", "ms", "bytes", "count"}
        assert isinstance(row["baseline_name"], str), row["name"]
        assert row["baseline_name"], row["name"]
        assert isinstance(row["size"], int)
        if row["ours"] is None:
            # Skipped: says why, and claims nothing.
            assert row["note"].startswith("skipped: "), row
            assert row["met"] is None
            assert row["ratio"] is None
            continue
        assert row["name"] not in ALWAYS_RUN or row["baseline"] is not None
        assert row["ours"] > 0
        if row["baseline"] is not None:
            assert row["baseline"] > 0
            assert math.isclose(row["ratio"], row["ours"] / row["baseline"])
        if row["target"] == "report":
            assert row["met"] is None
        else:
            assert isinstance(row["met"], bool), row
