"""Logs written by the real Megatron phases (megatron-core on CPU, gloo, 2 ranks) pass the audit,
and the audit's timing sees every state of both ranks."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from lifecycle.audit import audit, critical_chain

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parent))

CASES = [
    ("dp2", "training", (), {"steps": 1}),
    ("rebuild-copying", "rebuild", ("copying",), {}),
    ("restart", "restart", (), {}),
]


@pytest.fixture(scope="module")
def real_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("megatron.core") is None:
        pytest.skip("megatron-core is not installed")
    from real_cases import run_cases

    from lifecycle.launchers.local import run_ranks

    root = tmp_path_factory.mktemp("real-audit")
    os.environ["LIFECYCLE_TEST_ROOT"] = str(root)
    try:
        results: list[dict[str, Any]] = run_ranks(run_cases, 2, CASES, timeout_s=900)
    finally:
        del os.environ["LIFECYCLE_TEST_ROOT"]
    for rank, result in enumerate(results):
        for label, out in result.items():
            assert "error" not in out, f"rank {rank} {label}: {out.get('traceback')}"
    return root


@pytest.mark.parametrize("label", [c[0] for c in CASES])
def test_a_real_two_rank_run_passes_every_rule(real_logs: Path, label: str) -> None:
    result = audit([str(real_logs / label)], jobs=1)
    assert (result.errors, result.findings) == ((), ())
    assert sorted(r.rank for r in result.ranks) == [0, 1]


def test_the_critical_chain_of_a_real_run_covers_the_whole_startup(real_logs: Path) -> None:
    chain = critical_chain(audit([str(real_logs / "dp2")], jobs=1).ranks)
    assert [link.state for link in chain][:6] == [  # the heavy imports first: their own step
        "imports",
        "VALIDATED",
        "SERVICES_READY",
        "DISTRIBUTED",
        "MODEL_BUILT",
        "CALLBACKS_BOUND",
    ]
    assert all(link.duration >= 0 for link in chain)
