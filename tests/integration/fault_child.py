"""A child process for the fault matrix: drives Lifecycles with the real MegatronPhases through a
list of scenarios (one megatron import for all of them) and prints one JSON line per scenario.

    python -m tests.integration.fault_child SCENARIOS_JSON

A scenario injects one fault at the start of one state's entry work: `exception` (the entry work
raises), `oserror` (the log's disk is filled: a real ENOSPC on a tmpfs when `disk` is given, else
the log writer's writes fail), `signal` (the child prints `READY` and sleeps; the test process
sends it SIGTERM or SIGINT). `between` sleeps between two transitions instead. The last scenario
may be `uncaught`: the StartupAborted is left to end the process (exit status 128 + signal).
"""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from lifecycle import GuardRejected, Lifecycle, LifecycleError, PhaseContext, RunConfig, Runtime
from lifecycle.core_entry import MegatronPhases
from lifecycle.errors import StartupAborted
from lifecycle.log import records
from lifecycle.testing import Entry
from states import STARTUP_ORDER, State, forward_trigger
from tests.integration import tiny_gpt

TINY = ["model.num_layers=2", *tiny_gpt.TINY]


REAL_WRITE = os.write


def fill(disk: str | None) -> None:
    """Fill the log's disk: a filler file on the tmpfs, else every later log write fails."""
    if disk is None:

        def write(fd: int, data: Any) -> int:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
                raise OSError(errno.ENOSPC, "No space left on device")
            return REAL_WRITE(fd, data)

        os.write = write  # every os.write, the log writer's included
        return
    fd = os.open(Path(disk) / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while REAL_WRITE(fd, b"\0" * 4096):
            pass
    except OSError as exc:  # ENOSPC: the disk is full
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


class FaultyPhases(MegatronPhases):
    """The real phases with one fault at the start of `state`'s entry work (once)."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        super().__init__()
        self.scenario = scenario
        self.armed = True
        for state in STARTUP_ORDER[1:]:
            self.around(state, enter=self.faulty)

    def faulty(self, ctx: PhaseContext, enter: Entry) -> Runtime:
        self._fault(ctx.trigger.value, ctx)
        return enter(ctx)

    def _fault(self, trigger: str, ctx: PhaseContext | None = None) -> None:
        if not self.armed or forward_trigger(State[self.scenario["state"]]).value != trigger:
            return
        self.armed = False
        kind = self.scenario["kind"]
        if kind == "exception":
            raise RuntimeError(f"injected in {trigger}")
        if kind == "oserror":
            fill(self.scenario.get("disk"))
            if self.scenario.get("disk") and ctx is not None:
                # tmpfs keeps the free bytes of the log's last page: records of this state's entry
                # work use them up (8 x ~0.7 KiB > one 4 KiB page), so its next write meets ENOSPC
                for _ in range(8):
                    ctx.emit(
                        records.WarningRecorded(
                            category="UserWarning", module="fault_child", message="x" * 512, lineno=0
                        )
                    )
        if kind == "signal":
            print("READY", flush=True)
            time.sleep(120)


def released() -> dict[str, Any]:
    """What a user relies on after a failure: nothing of ours is left, and their own seeding works."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    from lifecycle.core_entry.rehearsal import is_active

    try:
        torch.manual_seed(0)
        seed = "ok"
    except Exception as exc:
        seed = f"{type(exc).__name__}: {exc}"
    # torch._dynamo's import wraps torch.manual_seed (`_disable_dynamo`) over a tripwire armed before
    # it, so that patch cannot be taken back; the user-visible check is that seeding works.
    return {
        "dist": dist.is_initialized(),
        "parallel": parallel_state.model_parallel_is_initialized(),
        "rehearsal": is_active(),
        "manual_seed": seed,
    }


def drive(lc: Lifecycle, scenario: dict[str, Any]) -> None:
    if scenario["kind"] != "between":
        lc.advance_to(State.CALLBACKS_BOUND)
        return
    stop = State[scenario["state"]]
    for dest in STARTUP_ORDER[1:]:
        lc.advance_to(dest)
        if dest is stop:
            print("READY", flush=True)
            time.sleep(120)


def run(scenario: dict[str, Any]) -> dict[str, Any]:
    config = RunConfig.preset("tiny-gpt", [*TINY, f"logging.log_dir={scenario['log_dir']}"])
    lc = Lifecycle(config, phases=FaultyPhases(scenario), options={"keep_records": True})
    out: dict[str, Any] = {"scenario": scenario}
    try:
        drive(lc, scenario)
        out["error"] = None
    except StartupAborted as exc:
        if scenario.get("uncaught"):
            raise
        out["error"], out["exit_code"] = f"StartupAborted: {exc}", exc.code
    except LifecycleError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["state"] = lc.state.name
    out["events"] = [(r["event"], r.get("trigger"), r.get("signal"), r.get("dest")) for r in lc.records]
    out["log_fault"] = str(lc.log_fault) if lc.log_fault else None
    path = Path(scenario["log_dir"]) / "rank-00000.jsonl"
    out["file_ends_whole"] = not path.exists() or path.read_bytes().endswith(b"\n") or not path.read_bytes()
    out["in_failed"] = released() if lc.state is State.FAILED else None
    out["restart"] = restart(lc, scenario)
    lc.shutdown()
    out["after_shutdown"] = released()
    return out


def restart(lc: Lifecycle, scenario: dict[str, Any]) -> str | None:
    """From FAILED, restart() reaches CALLBACKS_BOUND where the failure allows it."""
    if lc.state is not State.FAILED or scenario["kind"] != "exception":
        return None
    try:
        lc.restart()
        lc.advance_to(State.CALLBACKS_BOUND)
    except GuardRejected as exc:
        return f"GuardRejected: {exc}"
    return lc.state.name


def main() -> None:
    for scenario in orjson.loads(sys.argv[1]):
        result = run(scenario)
        os.write = REAL_WRITE
        if scenario.get("disk"):
            (Path(scenario["disk"]) / "filler").unlink(missing_ok=True)
        print("RESULT " + orjson.dumps(result, default=str).decode(), flush=True)


if __name__ == "__main__":
    main()


def other_thread_shutdown(log_dir: str) -> dict[str, Any]:
    """shutdown() from a thread other than the one that started the CPU rehearsal is refused before
    anything changes; from the starting thread it then releases everything."""
    import threading

    from lifecycle.core_entry.rehearsal import is_active

    lc = Lifecycle(RunConfig.preset("tiny-gpt", [*TINY, f"logging.log_dir={log_dir}"]))
    lc.advance_to(State.CALLBACKS_BOUND)
    refused: list[str] = []

    def stop() -> None:
        try:
            lc.shutdown()
        except LifecycleError as exc:
            refused.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=stop)
    thread.start()
    thread.join()
    out = {"refused": refused, "state_after_refusal": lc.state.name, "rehearsal_after_refusal": is_active()}
    lc.shutdown()
    return {**out, "state": lc.state.name, "released": released()}


def two_rank_disk_full(disk: str) -> dict[str, Any]:
    """Both ranks reach DISTRIBUTED with their logs on `disk`; rank 0 fills it; both then try to go on."""
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    thread_case = other_thread_shutdown(str(Path(disk) / "threads"))
    config = RunConfig.preset("tiny-gpt", [*TINY, f"logging.log_dir={Path(disk) / 'run'}"])
    lc = Lifecycle(config)
    lc.advance_to(State.DISTRIBUTED)
    dist.barrier()
    if rank == 0:
        fill(disk)
    dist.barrier()
    try:
        lc.advance_to(State.CALLBACKS_BOUND)
        error = None
    except LifecycleError as exc:
        error = f"{type(exc).__name__}: {exc}"
    state = lc.state.name
    lc.shutdown()
    return {
        "rank": rank,
        "error": error,
        "state": state,
        "log_fault": str(lc.log_fault),
        "released": released(),
        "threads": thread_case,
    }
