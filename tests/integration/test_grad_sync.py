"""`lifecycle experiment grad-sync` reproduces the numbers from real runs on 2 gloo ranks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lifecycle.cli import main
from lifecycle.cli.experiment import table

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows() -> dict[tuple[str, str], dict[str, Any]]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["experiment", "grad-sync", "--format", "json"]) == 0
    data = json.loads(out.getvalue())
    assert data["experiment"] == "grad-sync"
    return {(r["case"], r["binding"]): r for r in data["rows"]}


def test_dp2_old_binding_never_finalizes_and_each_owner_steps_on_its_local_gradient(
    rows: dict[tuple[str, str], dict[str, Any]],
) -> None:
    row = rows[("dp2", "provider_config")]
    assert row["finalizer_calls"] == [0, 0]
    assert row["local_grad"] == [1.0, -3.0]
    assert row["owned_grad"] == [[1.0], [-3.0]]
    assert row["decreased"] == [256, 256] and row["increased"] == [256, 256]
    assert row["replicas_identical"]  # the parameter all-gather hides it


def test_dp2_scheduler_binding_finalizes_once_and_every_parameter_follows_the_mean(
    rows: dict[tuple[str, str], dict[str, Any]],
) -> None:
    row = rows[("dp2", "scheduler_config")]
    assert row["finalizer_calls"] == [1, 1]
    assert row["owned_grad"] == [[-1.0], [-1.0]]
    assert row["increased"] == [512, 512] and row["decreased"] == [0, 0]
    assert row["replicas_identical"]


def test_tp2_old_binding_moves_the_replicas_of_a_replicated_parameter_apart(
    rows: dict[tuple[str, str], dict[str, Any]],
) -> None:
    row = rows[("tp2", "provider_config")]
    assert row["finalizer_calls"] == [0, 0]
    assert row["decreased"] == [512, 0] and row["increased"] == [0, 512]
    assert not row["replicas_identical"]


def test_tp2_scheduler_binding_cancels_the_contributions_and_the_replicas_stay_zero(
    rows: dict[tuple[str, str], dict[str, Any]],
) -> None:
    row = rows[("tp2", "scheduler_config")]
    assert row["finalizer_calls"] == [1, 1]
    assert row["owned_grad"] == [[0.0], [0.0]]
    assert row["stayed"] == [512, 512]
    assert row["replicas_identical"]


def test_the_table_shows_one_line_per_case_and_binding(
    rows: dict[tuple[str, str], dict[str, Any]],
) -> None:
    text = table(list(rows.values()))
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["case", "binding"]
    assert any(line.startswith("dp2   provider_config   0 / 0") for line in lines)
    assert len(lines) == 2 + 4 + 1
