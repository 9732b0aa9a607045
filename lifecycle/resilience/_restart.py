"""One `Lifecycle` driven through the cycles of an in-process restart wrapper (docs/restart.md).

Once per process: the version check, `Lifecycle` creation, validation (with the heavy imports) and
the CPU rehearsal's patches. Each cycle: log `cycle_ended` for the cycle before (who caused it,
when), `restart()` back to VALIDATED (the ledger proves what the cycle made is gone), then
`begin_cycle`, and SERVICES_READY → CALLBACKS_BOUND rendezvousing on the wrapper's store under
a per-cycle prefix. MODEL_BUILT loads the latest checkpoint under `checkpoint.save` (generation > 0).
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import orjson

from lifecycle.config import RunConfig
from lifecycle.core_entry.distributed import decide_rehearsal
from lifecycle.core_entry.resources import hook_counts
from lifecycle.core_entry.train import checkpoint_step
from lifecycle.engine import Lifecycle, TripwirePolicy
from lifecycle.errors import ConfigError
from lifecycle.log import JSONValue, records
from lifecycle.redaction import redact_text
from lifecycle.resilience import _nvrx
from lifecycle.resilience._call import client_timeout_s, cycle_and_store, own_client
from lifecycle.resilience._compat import installed_problem
from lifecycle.resilience._sockets import CycleSockets
from lifecycle.runtime import GivenProvider, Options, OptionValues, world_size_of
from lifecycle.runtime.frames import drop_frame_locals
from states import LifecycleError, Plan, State

if TYPE_CHECKING:
    from torch.distributed import Store

    from lifecycle.runtime import PhaseSet

T = TypeVar("T")
_CAUSE = "megatron-lifecycle/cause/{cycle}"


def refuse_incompatible(problem: str | None) -> None:
    """ConfigError (one line naming both versions) for a `pair_problem`; nothing for None."""
    if problem is not None:
        raise ConfigError(problem, field="resilience", problems=[problem])


class RestartsExhausted(LifecycleError, RuntimeError):
    """The restart wrapper gave up: every cycle allowed failed, or fewer ranks than `min_world_size`
    were left. `cycles`, `cause_rank` and `cause` say how many and the last fault; the log has the
    same in `restarts_exhausted`."""


class InProcessRestart:
    """`InProcessRestart(config, provider, log_dir).run(train)`: `train(lc)` runs at CALLBACKS_BOUND
    in each cycle; a fault on any rank restarts every rank in place, resuming from the checkpoint."""

    def __init__(
        self,
        config: RunConfig,
        provider: GivenProvider = None,
        log_dir: str | Path | None = None,
        *,
        max_cycles: int = 10,
        port: int | None = None,
        plan: Plan | str | None = None,
        phases: PhaseSet | None = None,
        tripwires: TripwirePolicy = "raise",
        options: Options | OptionValues | None = None,
        run_id: str | None = None,
        min_world_size: int | None = None,
    ) -> None:
        """`Lifecycle`'s arguments, and the wrapper's: at most `max_cycles` calls, its store on
        `port`, and at least `min_world_size` ranks in every cycle (default: every rank launched;
        a smaller number lets the job go on with fewer ranks after one is lost)."""
        refuse_incompatible(installed_problem())  # before anything imports megatron.core
        self.lc = Lifecycle(
            config, provider, log_dir, plan=plan, phases=phases, tripwires=tripwires, options=options, run_id=run_id
        )
        self.max_cycles = max_cycles
        self.min_world_size = min_world_size
        self.last_cause: dict[str, JSONValue] = {}
        """Who failed in the last cycle that failed, and why (`rank`, `error`), as this rank knows it."""
        self.port = port
        self.cycles = 0
        self.launched = 0
        """The world size launched (`parallel.world_size`, else the launcher's), known at VALIDATED."""
        self._cause_store: Store | None = None
        """The store the cycles' causes are published on (`_publish`), this rank's own connection."""
        self.wrapper_timeouts: dict[str, float | None] = {}
        """The restart wrapper's own timeouts, read back from it (logged in each `cycle_started`)."""
        self._cutting: threading.Timer | None = None
        self._failed: BaseException | None = None
        """The failed cycle's exception, whose frames still hold what it made: let go of at the next
        cycle's start (or the end), after the wrapper has told every rank to restart."""

    def run(self, train: Callable[[Lifecycle], T]) -> T:
        """Validate once, then call `train` under the wrapper; shut the lifecycle down at the end."""
        lc = self.lc
        try:
            with self._rehearsal(), _frozen_heap():
                lc.advance_to(State.VALIDATED)
                gc.freeze()
                self.launched = world_size_of(lc.runtime.config)
                floor = self._floor(self.launched)
                call, self.wrapper_timeouts = _nvrx.wrap(
                    lambda cw: self._cycle(train, cw),
                    max_cycles=self.max_cycles,
                    min_world_size=floor,
                    port=self.port,
                    timeout_s=lc.runtime.config.startup.timeout_s,
                )
                try:
                    result: T = call()
                except BaseException as exc:
                    if not _nvrx.is_restart_abort(exc):
                        raise
                    raise self._exhausted(exc, floor) from None
                lc.shutdown()
                return result
        finally:
            self._let_go()  # the last cycle's, when the wrapper gave up
            if lc.state is not State.SHUT_DOWN:
                lc.shutdown()
            lc.provide(rendezvous_store=None)  # the wrapper's store (and its port) can go

    def _floor(self, world: int) -> int:
        """The fewest ranks a cycle may have: `min_world_size`, checked, or every rank launched."""
        wanted = world if self.min_world_size is None else self.min_world_size
        if not 1 <= wanted <= world:
            raise ConfigError(
                f"min_world_size={wanted} must be in 1..{world}, the launched world size; leave it out to "
                "keep the job whole",
                field="min_world_size",
                problems=[],
            )
        return wanted

    def _exhausted(self, exc: BaseException, floor: int) -> RestartsExhausted:
        """Log `restarts_exhausted` (the cycles, the last cause) and say in one line why the wrapper
        gave up and which fault it was."""
        cause = self._final_cause()
        spent = self.cycles >= self.max_cycles
        self.lc.record(
            records.RestartsExhausted(
                cycles=self.cycles,
                max_cycles=self.max_cycles,
                min_world_size=floor,
                cause_rank=_int(cause.get("rank")),
                cause=_text(cause.get("error")),
                reason="max_cycles" if spent else "min_world_size",
            )
        )
        fault = f"rank {cause['rank']}: {cause.get('error')}" if "rank" in cause else "not published (a lost rank?)"
        why = (
            f"all {self.cycles} cycles (max_cycles={self.max_cycles}) failed"
            if spent
            else f"fewer than min_world_size={floor} ranks are left ({str(exc).strip()})"
        )
        return RestartsExhausted(
            redact_text(f"in-process restart gave up: {why}; the last fault was on {fault}"),
            cycles=self.cycles,
            cause_rank=cause.get("rank"),
            cause=cause.get("error"),
        )

    def _final_cause(self) -> dict[str, JSONValue]:
        """The last cycle's first failure, read again once the wrapper gave up. Read at the fault it
        can be missed: the wrapper's restart request (a BaseException, delivered into this thread at
        any line) may land before `_abort` kept it, leaving the cycle before's cause or none (the
        restart storm's message named cycle 0's fault, or none, about one run in three under load)."""
        store = self._cause_store
        again = _read_cause(store, self.cycles - 1) if store is not None and self.cycles > 0 else {}
        return again or self.last_cause

    @contextlib.contextmanager
    def _rehearsal(self) -> Iterator[None]:
        """The CPU rehearsal's patches, once per process for every cycle (DISTRIBUTED then uses them)."""
        import torch

        from lifecycle.core_entry.rehearsal import cpu_rehearsal, is_active

        on, _ = decide_rehearsal(self.lc.runtime.config.rehearsal, bool(torch.cuda.is_available()))
        if not on or is_active():
            yield
            return
        with cpu_rehearsal():
            yield

    def _cycle(self, train: Callable[[Lifecycle], T], call_wrapper: _nvrx.CallWrapper) -> T:
        lc, cycle = self.lc, _nvrx.iteration(call_wrapper)
        # The cause is published and read on our own connection: on the wrapper's, each operation
        # queued behind its monitor thread's waits (reading it took 0.43 s of a restart: measured).
        store = self._cause_store = own_client(base := _nvrx.base_store(call_wrapper))
        _, prefixed = cycle_and_store(call_wrapper, None)
        if self._cutting is not None:  # every rank got past the wrapper's barrier: nobody is blocked
            self._cutting.cancel()
            self._cutting.join()
        self._let_go()
        sockets = CycleSockets([getattr(store, "port", None), self.port])
        try:
            # Inside: a release of the cycle before that fails (restart() raises) is this cycle's
            # fault, published like any other, so the next cycle names this rank and why.
            fault = self._end(store, cycle - 1) if cycle > 0 else {}
            self.cycles = cycle + 1
            lc.begin_cycle(cycle)
            lc.provide(rendezvous_store=prefixed)
            lc.advance_to(lc.target)  # the plan's target, where it trains
            fault_ts = fault.get("ts")
            lc.cycle_trained(
                pid=os.getpid(),
                resumed_step=checkpoint_step(lc.runtime),
                hooks=hook_counts(lc.runtime),
                restart_s=time.time() - fault_ts if isinstance(fault_ts, (int, float)) else None,
                world_size=lc.runtime.world_size,
                launched_world_size=self.launched,
                restart_timeouts=self.wrapper_timeouts | {"store_client_s": client_timeout_s(base)},
            )
            return train(lc)
        except BaseException as exc:
            if lc.cycle != cycle:  # the release of the cycle before failed: its records say which cycle
                lc.begin_cycle(cycle)
            self._abort(store, cycle, exc, sockets)
            raise

    def _abort(self, store: Store, cycle: int, exc: BaseException, sockets: CycleSockets) -> None:
        """The rank that failed first publishes why (before the wrapper learns of the fault), and
        every rank keeps the exception, whose frames hold the model and what training started, to
        let go of them at the next cycle's start (`_let_go`). `REACTION_S` later, once the
        wrapper has told every rank to restart, the cycle's gloo connections are shut down: a peer
        blocked in a collective with this rank then raises at once instead of at the collective's
        timeout (`_sockets.py`), with the wrapper's RankShouldRestart already pending. (Cut at
        once, the peer's gloo error raced it, and where it landed in a `__del__`, a model chunk or
        a dataloader worker was left alive: measured.) The wrapper aborts the process groups, and
        the next cycle's `restart()` proves everything is gone."""
        self._failed = exc  # first: the wrapper's request can land while the cause is published
        own: dict[str, JSONValue] = (
            {} if _nvrx.is_restart_request(exc) else {"rank": self.lc.runtime.rank, "error": _error(exc)}
        )
        if own:
            _publish(store, cycle, self.lc.runtime.rank, exc)
        # the first failure published, which a peer's own error (peer_failed) or the wrapper's
        # request came after: what the storm's end names
        self.last_cause = _read_cause(store, cycle) or own
        self._cutting = sockets.cut_later(_nvrx.REACTION_S)

    def _let_go(self) -> None:
        """Clear the failed cycle's frames (they hold the model, the process groups, a dataloader's
        iterator) and drop their tracebacks: the wrapper keeps the exception. Done when the next
        cycle starts rather than at the fault: it takes 0.30–0.43 s (measured), and done at the
        fault it delayed the wrapper's hearing of it on the failed rank, and the survivor's return
        to the wrapper after the cut, one after the other; here every rank does it at once."""
        failed, self._failed = self._failed, None
        drop_frame_locals(failed, tracebacks=True)

    def _end(self, store: Store, cycle: int) -> dict[str, JSONValue]:
        """Log the end of `cycle` (who caused it) and release what it made, back to VALIDATED; the
        cause the first failed rank published."""
        lc = self.lc
        cause = _read_cause(store, cycle)
        fault_ts = cause.get("ts")
        lc.end_cycle(
            cause_rank=_int(cause.get("rank")),
            cause=_text(cause.get("error")),
            fault_ts=fault_ts if isinstance(fault_ts, (int, float)) else None,
        )
        if lc.state is not State.VALIDATED:
            lc.restart()
        return cause


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """What exists once VALIDATED has imported torch and megatron (most of the process's objects)
    is frozen out of the collector's walks: the wrapper collects until nothing is left after each
    fault (`while gc.collect()`) and the ledger's check collects once, each a walk of the whole heap
    otherwise. Objects made later (each cycle's model) are collected as before; unfrozen at the end."""
    try:
        yield
    finally:
        gc.unfreeze()


def _publish(store: Store, cycle: int, rank: int, exc: BaseException) -> None:
    """The first rank to fail in `cycle` says so on the wrapper's store (first writer wins)."""
    value = orjson.dumps({"rank": rank, "error": _error(exc), "ts": time.time()})
    with contextlib.suppress(Exception):
        store.compare_set(_CAUSE.format(cycle=cycle), "", value)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _int(value: JSONValue) -> int | None:
    return value if isinstance(value, int) else None


def _text(value: JSONValue) -> str | None:
    return value if isinstance(value, str) else None


def _read_cause(store: Store, cycle: int) -> dict[str, JSONValue]:
    """What the rank that failed first in `cycle` published; {} when none did (a lost rank, a timeout)."""
    key = _CAUSE.format(cycle=cycle)
    with contextlib.suppress(Exception):
        if store.check([key]):
            data = orjson.loads(store.get(key))
            return data if isinstance(data, dict) else {}
    return {}
