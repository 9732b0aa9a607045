"""A node's leader rank SIGKILLed while the other ranks of its node run is named as that rank by every
rank of the job: each logs `peer_failed` naming it, kind `lost`, its process gone, and ends (exit 75);
"its node ... sent no heartbeat" is said only when every rank of the node was killed. Real processes
(4 ranks on two nodes named a and b, on one machine), a real TCPStore hosted by the test, real SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lifecycle.rankwatch import EXIT_CODE

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]  # the floor skips it (scripts/test)
ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("leader_lost_child.py")
LAYOUT = {0: "a", 1: "a", 2: "a", 3: "b"}
"""Rank -> node: rank 0 checks in first on node a and leads it; rank 3 alone on node b watches node a's beat."""


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _job(tmp_path: Path) -> tuple[dict[int, subprocess.Popen[bytes]], dict[int, Path], Any]:
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, len(LAYOUT) + 1, is_master=True, wait_for_workers=False)
    outs = {rank: tmp_path / f"rank-{rank}.jsonl" for rank in LAYOUT}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def start(rank: int) -> subprocess.Popen[bytes]:
        args = [str(store.port), str(len(LAYOUT)), str(rank), LAYOUT[rank], str(tmp_path), str(outs[rank])]
        return subprocess.Popen([sys.executable, str(CHILD), *args], env=env)

    ranks = {rank: start(rank) for rank in LAYOUT}  # they import at once; rank 0 checks in first (the child)
    deadline = time.monotonic() + 300
    while not all(any(r["event"] == "ready" for r in _records(out)) for out in outs.values()):
        assert all(p.poll() is None for p in ranks.values()), {r: p.returncode for r, p in ranks.items()}
        assert time.monotonic() < deadline, "the ranks never got into their state"
        time.sleep(0.1)
    assert store.get("host/a/1").startswith(b"0:"), "rank 0 leads node a"
    return ranks, outs, store


def _ended(ranks: dict[int, subprocess.Popen[bytes]], killed: list[int]) -> dict[int, int | None]:
    """SIGKILL `killed`; the exit status of every other rank (None: still running 60 s later, then killed)."""
    for rank in killed:
        ranks[rank].send_signal(signal.SIGKILL)
    codes: dict[int, int | None] = {}
    for rank, proc in ranks.items():
        try:
            codes[rank] = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            codes[rank] = None
    return {rank: code for rank, code in codes.items() if rank not in killed}


def _peer_failed(out: Path) -> list[dict[str, Any]]:
    return [r for r in _records(out) if r["event"] == "peer_failed"]


def test_a_killed_leader_is_named_as_that_rank_on_its_node_and_on_the_other_node(tmp_path: Path) -> None:
    ranks, outs, _store = _job(tmp_path)
    leader = ranks[0].pid
    codes = _ended(ranks, [0])
    assert codes == {1: EXIT_CODE, 2: EXIT_CODE, 3: EXIT_CODE}
    for rank in (1, 2, 3):
        [named] = _peer_failed(outs[rank])
        assert (named["peer_rank"], named["peer_kind"]) == (0, "lost"), rank
        assert named["error"] == f"its process (pid {leader}) is gone without a failure record: killed or crashed"


def test_a_node_whose_every_rank_was_killed_is_named_as_its_node(tmp_path: Path) -> None:
    ranks, outs, _store = _job(tmp_path)
    codes = _ended(ranks, [0, 1, 2])
    assert codes == {3: EXIT_CODE}
    [named] = _peer_failed(outs[3])
    assert (named["peer_rank"], named["peer_kind"]) == (0, "lost")
    assert named["error"].startswith("its node a sent no heartbeat for ")
