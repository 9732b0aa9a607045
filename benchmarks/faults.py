"""Time from a fault on one rank to the last rank's exit, as a ratio to `startup.timeout_s`.

    python benchmarks/faults.py [--runs 3] [--timeout 20] [--world 2] [--cases never_starts,raise_in_model_built,...]

Real gloo jobs of 2 ranks (`--world N`: N, the faulty rank still 1, or 0) without a launcher agent:
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by hand, as srun and mpirun do; each rank runs
`Lifecycle(...).advance_to(CALLBACKS_BOUND)` on the tiny GPT (CPU rehearsal). Rank 0's provider
all-reduces a checksum of its weights over the data-parallel group (a real collective inside
MODEL_BUILT), so rank 0 is blocked in it when rank 1
fails there. The cases:

- `never_starts`: rank 1 is never launched; the fault time is when rank 0 began DISTRIBUTED.
- `rank_0_never_starts`: only rank 1 is launched: it never reaches the store that rank 0 would host.
- `raise_in_model_built`: rank 1's provider raises; deadline 600 s (the default).
- `raise_and_linger`: as above, but rank 1 then keeps its process group (and the lifecycle) for
  60 s before shutting down, so only rank 0's watcher can end its wait; deadline 600 s.
- `sigterm_in_model_built`: rank 1 gets a real SIGTERM while its provider runs; its handler turns it
  into SystemExit (as training scripts do), so it publishes a failure of kind `signal`; 600 s.
- `kill_in_distributed`: rank 1 SIGKILLs itself after `init_process_group`, before megatron's
  parallel state: nothing is published; rank 0's watcher declares it lost as soon as its process is
  gone (same host; elsewhere when its heartbeat stands still for `stale_s`), before the deadline.
- `kill_in_model_built`: rank 1 SIGKILLs itself in its provider while rank 0 is in its all-reduce:
  the all-reduce raises at once ("Connection closed by peer"), and rank 0 waits for the verdict
  naming the dead rank (its pid is gone) rather than blaming itself.
- `kill_rank_0_in_rendezvous`: rank 0, which hosts the store (no agent), SIGKILLs itself in DISTRIBUTED's
  check-in once rank 1 has checked in and waits there for every rank: the store host lost mid-rendezvous.

After startup, both ranks train 3 steps (`train_steps`); after step 1 the faulty rank waits 1 s (the
other is then blocked in step 2's collectives) and:

- `raise_at_step_2`: rank 1 raises;
- `kill_at_step_2`: rank 1 SIGKILLs itself;
- `stop_at_step_2`: rank 1 SIGSTOPs itself (alive but silent: its heartbeat stands still); once the
  other rank has exited, the harness sends it SIGCONT and it ends on its own (not measured);
- `kill_rank_0_at_step_2`: rank 0, which hosts the store (no agent), SIGKILLs itself.

`lazy_group_skipped` (the verdict corpus): after step 1 both ranks make a group lazily (TORCH_GLOO_LAZY_INIT:
gloo connects it at its first collective, as NCCL makes its communicator); rank 0 all-reduces on it, rank 1
skips that and times out in step 2's collectives (Megatron-LM #6955). Its fault time is that deadline's.

Prints, per case, the median ratio (fault → last exit) / timeout_s over `--runs` runs, the spread
(min–max), the median seconds to the last exit and to the last log record (the lifecycle's part;
the rest is the interpreter tearing torch and megatron down). In `raise_and_linger` rank 1 holds
on for `LINGER_S` on purpose, so only rank 0's exit is measured.

Each rank is a fresh interpreter here (`LIFECYCLE_RANKS_START=spawn` unless set), as srun starts
one, so that its teardown is measured. `tests/integration/test_deadlines.py` runs the same cases
once and asserts on them, their ranks forked from the preloaded server (`run_ranks`' default
without an accelerator), which leaves out the import and the teardown, not the lifecycle's part.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from lifecycle.launchers.local import start_process

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

CASES = (
    "never_starts",
    "rank_0_never_starts",
    "raise_in_model_built",
    "raise_and_linger",
    "sigterm_in_model_built",
    "kill_in_distributed",
    "kill_in_model_built",
    "raise_at_step_2",
    "kill_at_step_2",
    "stop_at_step_2",
    "kill_rank_0_at_step_2",
)
STEP_FAULTS = {  # case: (the faulty rank, what it does after step 1)
    "raise_at_step_2": (1, "raise"),
    "kill_at_step_2": (1, "kill"),
    "stop_at_step_2": (1, "stop"),
    "kill_rank_0_at_step_2": (0, "kill"),
    "raise_rank_0_at_step_2": (0, "raise"),
    "sigterm_at_step_2": (1, "term"),
}
LAUNCH_FAULTS = ("world_split_job", "world_size_mismatch", "worlds_of_one", "bad_config", "config_on_one_rank")


def launch_fault(case: str, rank: int, world: int) -> dict[str, str]:
    """What the launch of `rank` gets wrong in `case` (the verdict corpus, benchmarks/verdicts.py): rank 1
    in a job of its own, or told a world of one more; every rank a world of its own (torchrun `--standalone`
    under a 2-node srun step)."""
    if case == "world_split_job":
        return {"LIFECYCLE_RUN_ID": "job-b" if rank == 1 else "job-a"}
    if case == "world_size_mismatch" and rank == 1:
        return {"WORLD_SIZE": str(world + 1)}
    if case == "worlds_of_one":
        return {"SLURM_STEP_NUM_NODES": "2", "GROUP_WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "x"}
    return {}


SERVICES_FAULTS = {"raise_in_services": "raise", "kill_in_services": "kill", "sigterm_in_services": "term"}
BAD_CONFIG = ["model.num_attention_heads=5"]  # hidden 64 is not a multiple: refused at VALIDATED
UNMEASURED = {
    "raise_and_linger": 1,
    "stop_at_step_2": 1,
    "stop_in_model_built": 1,
}  # the rank that holds on (or is stopped) on purpose
LONG_DEADLINE = {"raise_in_model_built", "raise_and_linger", "sigterm_in_model_built", *STEP_FAULTS}  # default 600 s
LINGER_S = 20.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseResult:
    """One run of a fault case: per-rank exit codes, exit times, logs and stderr."""

    case: str
    timeout_s: float
    fault_at: float
    launched_at: float
    exit_at: dict[int, float]
    returncode: dict[int, int]
    records: dict[int, list[dict[str, Any]]]
    stderr: dict[int, str]

    @property
    def waiting_ranks(self) -> list[int]:
        """The ranks whose exit is measured: all, except one that lingers or is stopped on purpose."""
        return [r for r in self.exit_at if UNMEASURED.get(self.case) != r]

    @property
    def fault_to_last_exit_s(self) -> float:
        return max(self.exit_at[r] for r in self.waiting_ranks) - self.fault_at

    @property
    def fault_to_last_record_s(self) -> float:
        """Until the last log record of a measured rank: the lifecycle's part, without teardown."""
        return max(float(self.records[r][-1]["ts"]) for r in self.waiting_ranks if self.records[r]) - self.fault_at

    def events(self, rank: int, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records.get(rank, []) if r["event"] == name]


# -- a rank (`worker`, started by `run_case` as `run_ranks` starts ranks: `start_process`) --------
def _checked_provider(config: Any, **kwargs: Any) -> Any:
    """The tiny GPT, then an all-reduce of a weight checksum over the data-parallel group."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from lifecycle.core_entry.providers import PROVIDERS

    model = PROVIDERS["gpt"](config, **kwargs)
    total = torch.stack([p.detach().float().sum() for p in model.parameters()]).sum().reshape(1)
    dist.all_reduce(total, group=ps.get_data_parallel_group())
    return model


def _failing_provider(fault_file: Path, *, kill: bool = False, stop: bool = False) -> Any:
    def provider(config: Any, **kwargs: Any) -> Any:
        time.sleep(1.0)  # rank 0 is in its all-reduce by now
        fault_file.write_text(repr(time.time()))
        if kill or stop:
            os.kill(os.getpid(), signal.SIGSTOP if stop else signal.SIGKILL)
        if stop:  # continued once the other rank exited: still hung, until its own deadline ends it
            time.sleep(3600.0)
        raise RuntimeError("injected fault: the provider failed on rank 1")

    return provider


def _waiting_provider(ready_file: Path) -> Any:
    def provider(config: Any, **kwargs: Any) -> Any:
        ready_file.write_text("ready")  # the parent sends SIGTERM now
        time.sleep(120.0)
        raise AssertionError("SIGTERM never came")

    return provider


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    """What a training script's handler does: turn SIGTERM into SystemExit in the main thread."""
    raise SystemExit(128 + signum)


def _kill_before_parallel_state(fault_file: Path) -> None:
    from lifecycle.core_entry import distributed

    def kill(*_args: Any) -> Any:
        fault_file.write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)

    distributed.init_parallel_state = kill  # type: ignore[assignment]  # fault injection point


def _step_fault(case: str, rank: int, fault_file: Path) -> Any:
    """The `on_step` of `train_steps`: after step 1, the case's faulty rank fails as it says."""
    target, action = STEP_FAULTS.get(case, (-1, ""))

    def on_step(result: Any) -> None:
        if rank != target or result.step != 1:
            return
        time.sleep(1.0)  # the other rank is blocked in step 2's collectives by now
        fault_file.write_text(repr(time.time()))
        if action == "raise":
            raise RuntimeError(f"injected fault: rank {rank} failed at step 2")
        os.kill(os.getpid(), {"kill": signal.SIGKILL, "term": signal.SIGTERM}.get(action, signal.SIGSTOP))

    return on_step


def _lazy_group_step(rank: int, fault_file: Path, timeout_s: float) -> Any:
    """The `on_step` of `lazy_group_skipped`: after step 1 (after CALLBACKS_BOUND: LA029) both ranks make a
    group, lazily (gloo's TORCH_GLOO_LAZY_INIT: its pairs connect at its first collective, as NCCL makes its
    communicator); rank 0 all-reduces on it, rank 1, idle, skips that and goes on to step 2 (Megatron-LM #6955)."""

    def on_step(result: Any) -> None:
        import torch
        import torch.distributed as dist

        if result.step != 1:
            return
        os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
        group = dist.new_group([0, 1])
        if rank == 0:
            # rank 1 skips the collective that connects the group and waits in step 2's, which rank 0 never joins:
            # the fault is the deadline it violates there (its groups' startup.timeout_s), as for a short group
            fault_file.write_text(repr(time.time() + timeout_s))
            dist.all_reduce(torch.ones(1), group=group)

    return on_step


def _provider(case: str, rank: int, log_dir: Path) -> Any:
    """The provider of `case` on `rank`, with its fault (and any fault injected outside it) in place."""
    fault_file = log_dir / "fault_at"
    if rank == 1 and case == "kill_in_distributed":
        _kill_before_parallel_state(fault_file)
    if rank == 1 and case in SERVICES_FAULTS:
        _fail_in_services(fault_file, SERVICES_FAULTS[case])
    if rank == 1 and case == "sigterm_in_model_built":
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        return _waiting_provider(log_dir / "ready")
    if (rank, case) in ((1, "raise_in_model_built"), (1, "raise_and_linger")):
        return _failing_provider(fault_file)
    if (rank, case) in ((1, "kill_in_model_built"), (0, "kill_rank_0_in_model_built")):
        return _failing_provider(fault_file, kill=True)
    if (rank, case) == (1, "stop_in_model_built"):
        return _failing_provider(fault_file, stop=True)
    if (rank, case) == (0, "kill_rank_0_in_rendezvous"):
        _kill_store_host_in_checkin(fault_file)
    if (rank, case) == (1, "disk_full_in_model_built"):
        return _filling_provider(fault_file)
    if case == "group_timeout_shorter_than_work":
        return _short_group_provider(fault_file, rank)
    return _checked_provider


def _kill_store_host_in_checkin(fault_file: Path) -> None:
    """Rank 0, the store's host (no agent), SIGKILLs itself in DISTRIBUTED's check-in, before it checks in:
    once rank 1 has checked in and waits in the store for every rank (the store host lost mid-rendezvous)."""
    from lifecycle.rankwatch import RankWatch

    def check_in(self: RankWatch, _ctx: Any) -> None:
        while not self.store.check(["checkin/1"]):
            time.sleep(0.02)
        time.sleep(0.5)  # rank 1 is in its wait for every rank by now
        fault_file.write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)

    RankWatch.check_in = check_in  # type: ignore[method-assign]  # fault injection point


def _fail_in_services(fault_file: Path, action: str) -> None:
    """SERVICES_READY's tokenizer build fails on this rank: an I/O error, a SIGKILL or a SIGTERM."""
    from lifecycle.core_entry import services_ready

    def build(*_args: Any) -> Any:
        fault_file.write_text(repr(time.time()))
        if action == "raise":
            raise OSError(5, "Input/output error: the tokenizer's files could not be read")
        os.kill(os.getpid(), signal.SIGKILL if action == "kill" else signal.SIGTERM)
        time.sleep(60.0)  # a SIGTERM: the lifecycle's handler ends the startup

    services_ready.build_tokenizer = build  # type: ignore[assignment]  # fault injection point


def _filling_provider(fault_file: Path) -> Any:
    """The log's disk fills while the model is built: every later write to a .jsonl fails with ENOSPC."""

    def provider(config: Any, **kwargs: Any) -> Any:
        model = _checked_provider(config, **kwargs)
        real = os.write

        def write(fd: int, data: Any) -> int:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
                raise OSError(28, "No space left on device")
            return real(fd, data)

        fault_file.write_text(repr(time.time()))
        os.write = write
        return model

    return provider


def _short_group_provider(fault_file: Path, rank: int) -> Any:
    """Both ranks make a group with a 3 s timeout (shorter than the work); rank 0 works alone for 8 s
    before its collective there, so rank 1 times out in it (Megatron-Bridge #4011's shape)."""

    def provider(config: Any, **kwargs: Any) -> Any:
        import datetime

        import torch
        import torch.distributed as dist

        group = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=3))
        if rank == 0:
            time.sleep(8.0)
        elif rank == 1:
            fault_file.write_text(repr(time.time() + 3.0))  # the group's deadline: the fault is its timeout
        dist.all_reduce(torch.ones(1), group=group)
        return _checked_provider(config, **kwargs)

    return provider


def worker(case: str, rank: int, port: int, log_dir: Path, timeout_s: float, world: int = 2) -> int:
    from lifecycle.testing import torchrun_env

    os.environ.update(torchrun_env(rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port))
    os.environ.update(launch_fault(case, rank, world))
    from lifecycle import Lifecycle, RunConfig
    from states import State

    bad = BAD_CONFIG if case == "bad_config" or (case, rank) == ("config_on_one_rank", 1) else []
    logs = log_dir / "job-b" if case == "world_split_job" and rank == 1 else log_dir  # one log directory a run
    config = RunConfig.preset("tiny-gpt", [f"startup.timeout_s={timeout_s}", f"logging.log_dir={logs}", *bad])
    provider = _provider(case, rank, log_dir)
    lc = Lifecycle(config, provider=provider)
    try:
        lc.advance_to(State.CALLBACKS_BOUND)
        if case in STEP_FAULTS:
            from lifecycle.core_entry.train import train_steps

            train_steps(lc, 3, _step_fault(case, rank, log_dir / "fault_at"))
        elif case == "lazy_group_skipped":
            from lifecycle.core_entry.train import train_steps

            train_steps(lc, 3, _lazy_group_step(rank, log_dir / "fault_at", timeout_s))
    except BaseException as exc:
        print(f"rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        if case == "raise_and_linger" and rank == 1:
            time.sleep(LINGER_S)
        if lc.state not in (State.FAILED, State.SHUT_DOWN):  # what `with Lifecycle(...)` does
            lc.fail(f"{type(exc).__name__}: {exc}")
        lc.shutdown()
        return exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
    lc.shutdown()
    return 0


# -- the job ------------------------------------------------------------------------------------
def _free_port() -> int:
    from lifecycle.launchers.local import free_port

    return free_port()


def run_case(case: str, timeout_s: float, workdir: Path, world: int = 2) -> CaseResult:
    """Launch the case's ranks (a world of `world`, the faulty rank 0 or 1, the others as rank 0 but
    for the store), wait for every exit (killing what outlives timeout_s + 120 s)."""
    log_dir = workdir / case
    log_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    absent = {"never_starts": 1, "rank_0_never_starts": 0}.get(case)
    ranks = [r for r in range(world) if r != absent]
    launched_at = time.time()
    procs = {}
    for r in ranks:
        procs[r] = start_process(worker, case, r, port, log_dir, timeout_s, world, output=log_dir / f"stderr-{r}")
    exit_at: dict[int, float] = {}
    hard_stop = time.monotonic() + timeout_s + 120
    if case == "sigterm_in_model_built":
        _sigterm_when_ready(procs[1], log_dir, hard_stop)
    while len(exit_at) < len(procs):
        for r, proc in procs.items():
            if r not in exit_at and proc.exitcode is not None:
                exit_at[r] = time.time()
        stopped = procs.get(UNMEASURED.get(case, -1))
        others_ended = all(r in exit_at for r in procs if procs[r] is not stopped)
        if stopped is not None and stopped.pid is not None and stopped.exitcode is None and others_ended:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(stopped.pid, signal.SIGCONT)  # a stopped rank may now end (never pid 0: the group)
        if time.monotonic() > hard_stop:
            for r, proc in procs.items():
                if r not in exit_at:
                    proc.kill()
                    proc.join()
                    exit_at[r] = time.time()
        time.sleep(0.02)
    records = {r: _read(log_dir / f"rank-{r:05d}.jsonl") for r in ranks}
    fault_file = log_dir / "fault_at"
    if fault_file.exists():
        fault_at = float(fault_file.read_text())
    elif case in ("bad_config", "config_on_one_rank"):  # from when a rank with the bad setting started
        fault_at = min(float(records[r][0]["ts"]) for r in ranks if records[r] and (case == "bad_config" or r == 1))
    else:  # a rank never starts (or a launch is wrong): from when the last rank began DISTRIBUTED
        starts = [
            r["ts"]
            for rank in ranks
            for r in records[rank]
            if r["event"] == "transition_started" and r["trigger"] == "init_distributed"
        ]  # a config refused at VALIDATED: from the first record
        first = case == "worlds_of_one"  # each rank refuses alone: from the first; two worlds meet at the last
        fault_at = (
            (min(starts) if first else max(starts))
            if starts
            else min(float(rec[0]["ts"]) for rec in records.values() if rec)
        )
    return CaseResult(
        case=case,
        timeout_s=timeout_s,
        fault_at=fault_at,
        launched_at=launched_at,
        exit_at=exit_at,
        returncode={r: -1 if p.exitcode is None else p.exitcode for r, p in procs.items()},  # all ended by now
        records=records,
        stderr={r: (log_dir / f"stderr-{r}").read_text(errors="replace") for r in ranks},
    )


def _sigterm_when_ready(proc: BaseProcess, log_dir: Path, hard_stop: float) -> None:
    """SIGTERM rank 1 once its provider runs (rank 0 is then in its all-reduce); note the time."""
    while not (log_dir / "ready").exists() and proc.exitcode is None and time.monotonic() < hard_stop:
        time.sleep(0.05)
    time.sleep(1.0)
    (log_dir / "fault_at").write_text(repr(time.time()))
    proc.terminate()


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=20.0, help="deadline for the cases that wait it out")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--world", type=int, default=2, help="ranks a job")
    args = parser.parse_args(argv)
    os.environ.setdefault("LIFECYCLE_RANKS_START", "spawn")  # fresh interpreters: their teardown is measured
    print(
        f"{'case':<22} {'deadline':>9} {'median ratio':>13} {'spread':>17} {'median s':>9} {'record s':>9}  exit codes"
    )
    for case in args.cases.split(","):
        timeout_s = 600.0 if case in LONG_DEADLINE else args.timeout
        results = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                results.append(run_case(case, timeout_s, Path(tmp), args.world))
        ratios = [r.fault_to_last_exit_s / timeout_s for r in results]
        seconds = statistics.median(r.fault_to_last_exit_s for r in results)
        record = statistics.median(r.fault_to_last_record_s for r in results)
        codes = sorted({tuple(sorted(r.returncode.items())) for r in results})
        print(
            f"{case:<22} {timeout_s:>8g}s {statistics.median(ratios):>13.3f} "
            f"{min(ratios):>8.3f}–{max(ratios):<8.3f} {seconds:>9.2f} {record:>9.2f}  {codes}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
