"""`logging.otel` on the main job: `lifecycle run` with 2 ranks writes, as it goes, the spans that
`lifecycle export --format otlp-json` makes afterwards from the same run's logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.child_python import run_lifecycle
from tests.otlp_spans import flat_spans

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]  # the floor skips it (scripts/test)
pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")


lifecycle = run_lifecycle


def test_the_live_spans_of_a_two_rank_run_are_the_spans_exported_from_its_logs(tmp_path: Path) -> None:
    logs, live, after = tmp_path / "logs", tmp_path / "live.jsonl", tmp_path / "after.json"
    run = lifecycle(
        "run",
        "--preset",
        "tiny-gpt",
        "--nproc",
        "2",
        "--steps",
        "2",
        "--log-dir",
        str(logs),
        "--set",
        f"logging.otel={live}",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert lifecycle("export", str(logs), "--format", "otlp-json", "-o", str(after)).returncode == 0
    written = flat_spans(live.read_bytes().splitlines())
    assert written == flat_spans([after.read_bytes()])
    names = sorted(str(s["name"]) for s in written.values())
    assert names.count("megatron.startup") == 2 and names.count("DISTRIBUTED") == 2 and names.count("imports") == 2
    assert {s["resource"]["dl.rank"]["intValue"] for s in written.values() if s["name"] == "megatron.startup"} == {
        "0",
        "1",
    }
