"""The child of test_inprocess_restart_decisions.py: `InProcessRestart` on 2 spawned ranks under
nvidia-resiliency-ext's real `inprocess.Wrapper`, each lifecycle on the in-process phases (no torch
collectives, no model: `plan="convert"`), so that a case takes seconds. Rank 1 raises; rank 0 waits
in `train` until the wrapper's restart request reaches it. Returns, per case, what a user sees: the
result or the one-line error, the records of the rank's log, and what the process holds after."""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from tests.integration.ports import shared_port

WAIT_S = 60.0
"""How long rank 0 waits in `train` for the wrapper's restart request (a bound, not an expectation)."""


class Held:
    """What a cycle's `train` made (a model, an iterator): it must be let go of when the cycle failed."""


HELD: list[weakref.ref[Held]] = []


def _wait_for_restart() -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.02)
    return "never restarted"


def _train(port: int, faults: int, lose: bool = False) -> Any:
    """`train(lc)`: in its first `faults` cycles rank 1 raises and rank 0 waits; then both return
    what they see of the process in the cycle that trains."""

    def train(lc: Any) -> dict[str, Any]:
        held = Held()
        HELD.append(weakref.ref(held))
        if lc.cycle < faults:
            if lc.runtime.rank == 1 and lose:
                os._exit(3)  # lost: no exception, nothing published
            if lc.runtime.rank == 1:
                raise RuntimeError(f"injected fault in cycle {lc.cycle}")
            return {"waited": _wait_for_restart()}
        gc.collect()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the wrapper's store listens on the port asked for
        return {
            "cycle": lc.cycle,
            "state": lc.state.name,
            "alive_before": [ref() is not None for ref in HELD[:-1]],
            "frozen": gc.get_freeze_count() > 0,
        }

    return train


RELEASE_FAULT = "injected release fault " + "x" * 600
"""What rank 1's release of SERVICES_READY raises once in the `release` case (longer than a cause keeps)."""


def _failing_release(ctx: Any, inner: Any) -> Any:
    """Rank 1's first release of SERVICES_READY (the restart back to VALIDATED in cycle 1) raises."""
    if os.environ["RANK"] == "1" and not RELEASED:
        RELEASED.append(True)
        raise RuntimeError(RELEASE_FAULT)
    return inner(ctx)


RELEASED: list[bool] = []


def _case(
    root: str,
    name: str,
    port: int,
    faults: int,
    *,
    timeout_s: float = 20.0,
    lose: bool = False,
    release_fails: bool = False,
    **options: Any,
) -> dict[str, Any]:
    from lifecycle import InProcessPhases, RunConfig
    from lifecycle.errors import ConfigError
    from lifecycle.resilience import InProcessRestart, RestartsExhausted
    from states import State

    HELD.clear()
    phases = InProcessPhases()
    if release_fails:
        phases.around(State.SERVICES_READY, release=_failing_release)
    log_dir = Path(root) / name
    restart = InProcessRestart(
        RunConfig.preset("tiny-gpt", [f"startup.timeout_s={timeout_s}"]),
        log_dir=log_dir,
        plan="convert",
        phases=phases,
        port=port,
        **options,
    )
    out: dict[str, Any] = {}
    try:
        out["result"] = restart.run(_train(port, faults, lose))
    except RestartsExhausted as exc:
        out["exhausted"] = {"message": str(exc), "cycles": exc.cycles, "rank": exc.cause_rank, "cause": exc.cause}
    except ConfigError as exc:
        out["refused"] = {"message": str(exc), "field": exc.field}
    gc.collect()
    import orjson

    own = log_dir / f"rank-{int(os.environ['RANK']):05d}.jsonl"
    out["records"] = [orjson.loads(line) for line in own.read_bytes().splitlines()] if own.exists() else []
    out["cycles"] = restart.cycles
    out["last_cause"] = restart.last_cause
    out["timeouts"] = restart.wrapper_timeouts
    out["state"] = restart.lc.state.name
    out["frozen_after"] = gc.get_freeze_count()
    out["alive_after"] = [ref() is not None for ref in HELD]
    out["timers"] = sum(isinstance(t, threading.Timer) and t.is_alive() for t in threading.enumerate())
    return out


def cases(root: str) -> dict[str, Any]:
    """Every case on this rank, one after another, each with its own store port."""
    from lifecycle import InProcessPhases, RunConfig
    from lifecycle.resilience import InProcessRestart

    try:
        InProcessRestart(RunConfig(), None, None, 3)  # type: ignore[misc]
        positional = "accepted"
    except TypeError as exc:
        positional = str(exc)
    fresh = InProcessRestart(RunConfig(), phases=InProcessPhases())
    before_run = {"launched": fresh.launched, "cycles": fresh.cycles}
    fresh.lc.shutdown()
    return {
        "positional": positional,
        "before_run": before_run,
        "recovers": _case(root, "recovers", shared_port(root, "recovers"), faults=1, timeout_s=4.5, max_cycles=3),
        "storm": _case(root, "storm", shared_port(root, "storm"), faults=5, max_cycles=2, min_world_size=1),
        "release": _case(root, "release", shared_port(root, "release"), faults=1, max_cycles=3, release_fails=True),
        "above": _case(root, "above", shared_port(root, "above"), faults=0, min_world_size=3),
        "zero": _case(root, "zero", shared_port(root, "zero"), faults=0, min_world_size=0),
    }


def rank_lost(root: str) -> None:
    """Rank 1 exits in cycle 0 (lost: nothing published); rank 0's outcome goes to `root`/rank0.json."""
    import orjson

    out = _case(root, "lost", shared_port(root, "lost"), faults=1, lose=True)  # the defaults
    (Path(root) / "rank0.json").write_bytes(orjson.dumps(out))
