"""Logs for the export tests (unit and browser): a clean 2-rank run made by the real engine, and a failed 4-rank run
written by the real AuditLog with a chosen clock (the audit tests' helpers)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))

from audit_logs import Events, clean_events, clean_run, clock, engine_rank, index, train_and_shut_down, write_events


def _until(trigger: str) -> Events:
    ev = clean_events()
    return ev[: index(ev, "transition_started", trigger=trigger) + 1]


def _rank_log(log_dir: Path, rank: int, ev: Events, *, at: dict[int, float]) -> Path:
    times = [at.get(i, 100.0 + i * 0.25) for i in range(len(ev))]
    with clock(times):
        return write_events(log_dir, ev, rank=rank, world=4, run_id="run-k")


def failed_run(log_dir: Path) -> Path:
    """Rank 2's init_distributed fails (CUDA out of memory) at +5 s; ranks 0 and 1 log peer_failed
    naming it, rank 3 times out; rank 0 also hit a tripwire before."""
    head = _until("init_distributed")
    n = len(head)
    error: dict[str, Any] = {
        "trigger": "init_distributed",
        "source": "SERVICES_READY",
        "error_type": "OutOfMemoryError",
        "error": "CUDA out of memory",
        "duration_s": 1.0,
    }
    _rank_log(log_dir, 2, [*head, ("transition_failed", error)], at={n: 105.0})
    timeout = {"state": "SERVICES_READY", "trigger": "init_distributed", "timeout_s": 600, "missing": [2]}
    _rank_log(log_dir, 3, [*head, ("state_timeout", timeout)], at={n: 110.0})
    peer = {"peer_rank": 2, "peer_state": "DISTRIBUTED", "error": "OutOfMemoryError: CUDA out of memory"}
    trip = {
        "target": "torch.manual_seed",
        "kind": "rng",
        "owner": "init_distributed",
        "state": "SERVICES_READY",
        "trigger": "init_distributed",
        "policy": "warn",
    }
    _rank_log(log_dir, 0, [*head, ("tripwire_violation", trip), ("peer_failed", peer)], at={n: 104.0, n + 1: 105.5})
    _rank_log(log_dir, 1, [*head, ("peer_failed", peer)], at={n: 106.0})
    return log_dir


__all__ = ["clean_2_ranks", "clean_events", "clock", "engine_rank", "failed_run", "train_and_shut_down", "write_events"]


def clean_2_ranks(log_dir: Path) -> Path:
    """A 2-rank training startup by the real engine (in-process phases): steps, then shutdown."""
    return clean_run(log_dir, world=2)
