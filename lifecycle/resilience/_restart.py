"""One `Lifecycle` driven through the cycles of an in-process restart wrapper (docs/restart.md).

Once per process: the version check, `Lifecycle` creation, validation (with the heavy imports) and
the CPU rehearsal's patches. Each cycle: log `cycle_ended` for the cycle before (who caused it,
when), `restart()` back to VALIDATED (the ledger proves what the cycle made is gone), then
`begin_cycle`, and SERVICES_READY → CALLBACKS_BOUND rendezvousing on the wrapper's store under
a per-cycle prefix. MODEL_BUILT loads the latest checkpoint under `checkpoint.save` (generation > 0).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson

from lifecycle.engine import Lifecycle
from lifecycle.errors import ConfigError
from lifecycle.megatron.distributed import STORE, decide_rehearsal
from lifecycle.resilience import _nvrx
from lifecycle.resilience._compat import installed_problem
from states import State

T = TypeVar("T")
_CAUSE = "megatron-lifecycle/cause/{cycle}"


def refuse_incompatible(problem: str | None = None) -> None:
    """ConfigError (one line, both versions) when the installed pair cannot run; before any import."""
    problem = installed_problem() if problem is None else problem
    if problem is not None:
        raise ConfigError(problem, field="resilience", problems=[problem])


class InProcessRestart:
    """`InProcessRestart(config, provider, log_dir).run(train)`: `train(lc)` runs at CALLBACKS_BOUND
    in each cycle; a fault on any rank restarts every rank in place, resuming from the checkpoint."""

    def __init__(self, config: Any, provider: Any = None, log_dir: str | Path | None = None, *,
                 max_cycles: int = 10, port: int | None = None, **lifecycle: Any) -> None:
        refuse_incompatible()
        self.lc = Lifecycle(config, provider, log_dir, **lifecycle)
        self.max_cycles = max_cycles
        self.port = port
        self.cycles = 0

    def run(self, train: Callable[[Lifecycle], T]) -> T:
        """Validate once, then call `train` under the wrapper; shut the lifecycle down at the end."""
        lc = self.lc
        try:
            with self._rehearsal():
                lc.advance_to(State.VALIDATED)
                call = _nvrx.wrap(lambda cw: self._cycle(train, cw), max_cycles=self.max_cycles,
                                  port=self.port, timeout_s=lc.runtime.config.startup.timeout_s)
                result: T = call()
                lc.shutdown()
                return result
        finally:
            if lc.state is not State.SHUT_DOWN:
                lc.shutdown()
            lc.provide(**{STORE: None})  # the wrapper's store (and its port) can go

    @contextlib.contextmanager
    def _rehearsal(self) -> Iterator[None]:
        """The CPU rehearsal's patches, once per process for every cycle (DISTRIBUTED then uses them)."""
        import torch

        from lifecycle.megatron.rehearsal import cpu_rehearsal, is_active

        on, _ = decide_rehearsal(self.lc.runtime.config.rehearsal, bool(torch.cuda.is_available()))
        if not on or is_active():
            yield
            return
        with cpu_rehearsal():
            yield

    def _cycle(self, train: Callable[[Lifecycle], T], call_wrapper: Any) -> T:
        lc, cycle = self.lc, _nvrx.iteration(call_wrapper)
        store = _nvrx.base_store(call_wrapper)
        if cycle > 0:
            self._end(store, cycle - 1)
        self.cycles = cycle + 1
        lc.begin_cycle(cycle, pid=os.getpid())
        import torch.distributed as dist

        lc.provide(**{STORE: dist.PrefixStore(f"megatron-lifecycle/cycle-{cycle}", store)})
        try:
            lc.advance_to(State.CALLBACKS_BOUND)
            return train(lc)
        except BaseException as exc:
            if not _nvrx.is_restart_request(exc):
                _publish(store, cycle, lc.runtime.rank, exc)
            raise

    def _end(self, store: Any, cycle: int) -> None:
        """Log the end of `cycle` (who caused it) and release what it made, back to VALIDATED."""
        lc = self.lc
        cause = _read_cause(store, cycle)
        lc.end_cycle(cycle=cycle, cause_rank=cause.get("rank"), cause=cause.get("error"),
                     fault_ts=cause.get("ts"), restarted_at=time.time())
        if lc.state is not State.VALIDATED:
            lc.restart()


def _publish(store: Any, cycle: int, rank: int, exc: BaseException) -> None:
    """The first rank to fail in `cycle` says so on the wrapper's store (first writer wins)."""
    value = orjson.dumps({"rank": rank, "error": f"{type(exc).__name__}: {exc}"[:500], "ts": time.time()})
    with contextlib.suppress(Exception):
        store.compare_set(_CAUSE.format(cycle=cycle), "", value)


def _read_cause(store: Any, cycle: int) -> dict[str, Any]:
    """What the rank that failed first in `cycle` published; {} when none did (a lost rank, a timeout)."""
    key = _CAUSE.format(cycle=cycle)
    with contextlib.suppress(Exception):
        if store.check([key]):
            data = orjson.loads(store.get(key))
            return data if isinstance(data, dict) else {}
    return {}
