"""The ledger of what each state made, and the restart cycles (a part of `Lifecycle`).

After a forward transition's entry work, the phases name what that state created
(`PhaseSet.resources(state, runtime)`, optional: the light in-process phases have none), each with
a probe that says whether it is gone. A release (rebuild, restart, shutdown) walks the entries of
the states it leaves backwards, newest first, and probes each: a survivor is logged
(`resource_leaked`) and raised as `ResourceLeak` naming the resource and its state. Phases whose
resources end in other threads and processes (`PhaseSet.settle_s`: a worker process exiting, a
gloo work unwinding after the wrapper's abort) have their survivors probed again for that long
before a rebuild or restart calls them leaks; one that ends meanwhile is logged `resource_lingered`.

A cycle is one in-process restart attempt (`lifecycle.resilience`): `begin_cycle` puts its number on
every later record (the `cycle` envelope field); `cycle_trained` logs `cycle_started` once training
can start (the ledger, the fingerprint, how long the restart took); `end_cycle` logs
`cycle_ended` (which rank caused it, and why) in the cycle that ends.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, Unpack

from lifecycle.errors import ResourceLeak
from lifecycle.log import records
from states import State, Trigger

if TYPE_CHECKING:
    from lifecycle.engine._shared import Shared

Probe = Callable[[], bool]
"""True when the resource is gone."""
UNFROZEN = gc.get_freeze_count()
"""What the interpreter itself keeps frozen (375 objects on Python 3.12, none on 3.11): more means
that someone froze the heap (`gc.freeze`), a lifecycle or the program."""


class CycleFields(TypedDict, total=False):
    """The caller's fields of `cycle_started` (`lifecycle.log.records.CycleStarted` says what each means)."""

    world_size: int
    launched_world_size: int
    pid: int
    resumed_step: int
    hooks: dict[str, int]
    restart_s: float | None
    restart_timeouts: dict[str, float | None]


class CauseFields(TypedDict, total=False):
    """The caller's fields of `cycle_ended` (`lifecycle.log.records.CycleEnded`)."""

    cause_rank: int | None
    cause: str | None
    fault_ts: float | None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One thing `state` made, by `name`, and the probe that says whether it is gone."""

    state: State
    name: str
    gone: Probe


class Ledger:
    """Entries in creation order; `survivors(keep, settle_s)` probes, newest first, those of states after `keep`.
    `clock` and `sleep` time the probing again of survivors (`settle_s`)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.entries: list[LedgerEntry] = []
        self.lingered: list[tuple[LedgerEntry, float]] = []
        """What the last `survivors` found alive at first and gone later, with the seconds it took."""
        self._clock, self._sleep = clock, sleep
        self.froze = False
        """Whether `freeze_heap` froze the collector's heap, which `thaw` gives back."""

    def freeze_heap(self) -> None:
        """Before any entry is made (once VALIDATED has imported torch and megatron, most of the
        process's objects), move what exists out of the collector's walks (`gc.freeze`): the checks'
        full collection then walks only what was made since (the model, the groups), not the whole
        heap, which takes seconds with torch and megatron loaded. Not when the heap is already frozen
        (another lifecycle's, or the program's own): a second freeze would hide what the first one's
        lifecycle made from its own checks."""
        if not self.froze and gc.get_freeze_count() <= UNFROZEN:
            gc.freeze()
            self.froze = True

    def thaw(self) -> None:
        """Give the frozen objects back to the collector (`gc.unfreeze`), when `freeze_heap` froze them."""
        if self.froze:
            gc.unfreeze()
            self.froze = False

    def register(self, state: State, name: str, gone: Probe) -> None:
        self.entries.append(LedgerEntry(state, name, gone))

    def names(self) -> list[tuple[str, str]]:
        return [(e.state.name, e.name) for e in self.entries]

    def survivors(self, keep: State, settle_s: float) -> list[LedgerEntry]:
        """Walk back over the entries of states after `keep`, drop them, return those still alive
        after `settle_s` seconds of probing them again (a pause of 10 ms, doubling to 0.25 s)."""
        leaving = [e for e in self.entries if e.state.startup_index > keep.startup_index]
        self.entries = [e for e in self.entries if e.state.startup_index <= keep.startup_index]
        self.lingered = []
        if not leaving:
            return []
        gc.collect()  # what only a reference cycle still holds is gone, not leaked
        alive = [e for e in reversed(leaving) if not _gone(e)]
        start, pause = self._clock(), 0.01
        while alive and (left := start + settle_s - self._clock()) > 0:
            self._sleep(min(pause, left))
            pause = min(2 * pause, 0.25)
            gc.collect()
            waited, still = self._clock() - start, []
            for entry in alive:
                if _gone(entry):
                    self.lingered.append((entry, waited))
                else:
                    still.append(entry)
            alive = still
        return alive


def _gone(entry: LedgerEntry) -> bool:
    try:
        return bool(entry.gone())
    except Exception:  # a probe that cannot look (its module torn down) cannot prove a leak
        return True


class Cycles:
    """A part of `Lifecycle`: its ledger, and the records of its restart cycles."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.ledger = Ledger()

    def begin(self, cycle: int) -> None:
        """Start restart cycle `cycle`: every later record carries it in its `cycle` field."""
        self.shared.log.rebind(cycle=cycle)

    def trained(self, **fields: Unpack[CycleFields]) -> None:
        """Log `cycle_started`: the ledger now (`STATE:resource`), the config fingerprint, `fields`
        (`world_size`: the log's unless given)."""
        fields.setdefault("world_size", self.shared.log.world_size)
        self.shared.log.write(
            records.CycleStarted(
                ledger=[f"{s}:{n}" for s, n in self.ledger.names()],
                fingerprint=self.shared.runtime.fingerprint,
                **fields,
            )
        )

    def ended(self, **fields: Unpack[CauseFields]) -> None:
        """Log `cycle_ended` (`cause_rank`, `cause`, `fault_ts`) in the cycle that ends."""
        self.shared.log.write(records.CycleEnded(state=self.shared.state.name, **fields))

    def register(self, trigger: Trigger, dest: State) -> None:
        """What the phases say state `dest` made, each with the probe that says it is gone."""
        probes = getattr(self.shared.phases, "resources", None)
        if probes is None or trigger is Trigger.FAIL:
            return
        for name, gone in probes(dest, self.shared.runtime):
            self.ledger.register(dest, name, gone)

    def alive_at_shutdown(self, keep: State) -> list[dict[str, str]]:
        """What the states after `keep` made that one probe finds alive, for the shutdown's own record
        (no waiting and no raising: the process is leaving, and a signal's grace is short). The heap
        frozen since VALIDATED is given back after it."""
        try:
            return [{"resource": e.name, "state": e.state.name} for e in self.ledger.survivors(keep, 0.0)]
        finally:
            self.ledger.thaw()

    def check_released(self, keep: State) -> None:
        """Probe what the states after `keep` made (a rebuild, a restart): a survivor is probed again
        for the phases' `settle_s`, then logged and raised (ResourceLeak)."""
        settle_s = float(getattr(self.shared.phases, "settle_s", 0.0))
        survivors = self.ledger.survivors(keep, settle_s)
        for entry, waited in self.ledger.lingered:
            self.shared.log.write(
                records.ResourceLingered(resource=entry.name, state=entry.state.name, lingered_s=waited)
            )
        for entry in survivors:
            self.shared.log.write(records.ResourceLeaked(resource=entry.name, state=entry.state.name))
        if survivors:
            first = survivors[0]
            names = ", ".join(f"{e.name} ({e.state.name})" for e in survivors)
            raise ResourceLeak(
                f"{len(survivors)} resource(s) still alive after release to {keep.name}: {names}; "
                f"the release of {first.state.name} must destroy {first.name}",
                resource=first.name,
                state=first.state.name,
            )
