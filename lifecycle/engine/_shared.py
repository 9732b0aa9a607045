"""What the parts of one `Lifecycle` share: its config and plan, the phases, the log, the state
machine's model, the runtime record and the trigger running now.

`Lifecycle` owns one `Shared` and its parts (side-effect rules, failure handling, entry work, the
ledger and cycles, the step book); each part holds the `Shared` and keeps its own state besides.
Only the driver moves the machine and assigns `runtime`; the parts read them and return new runtimes.

What must see a lifecycle's log before it opens (the live export of `logging.otel`) registers here
from outside the engine (`before_log_opens`), so that the engine imports none of it.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lifecycle.config import RunConfig
from lifecycle.engine._machine import MachineModel
from lifecycle.errors import ConfigError
from lifecycle.launchers import lifecycle_launched, restart_count
from lifecycle.log import AuditLog, LogDir, records
from lifecycle.log.records import UNSET
from lifecycle.runtime import (
    GivenProvider,
    Options,
    OptionValues,
    PhaseSet,
    Runtime,
    rank_of,
    run_id_from_env,
    world_size_of,
)
from states import Plan, State, Trigger

TripwirePolicy = Literal["raise", "warn", "off"]
LogListener = Callable[[RunConfig, AuditLog], None]
"""Called with a lifecycle's config and log before the log opens (VALIDATE)."""
_LOG_LISTENERS: list[LogListener] = []


def before_log_opens(listener: LogListener) -> None:
    """Call `listener(config, log)` before the log of each lifecycle made from now on opens. `import
    lifecycle` registers the live export (`logging.otel`) this way; the engine never imports it."""
    if listener not in _LOG_LISTENERS:
        _LOG_LISTENERS.append(listener)


@dataclass(eq=False, kw_only=True)
class Shared:
    config: RunConfig
    plan: Plan
    provider: GivenProvider
    """The model provider as the user gave it: the entry work resolves it (core_entry/user_providers.py)."""
    options: Options
    policy: TripwirePolicy
    phases: PhaseSet
    log_dir: LogDir
    """The log directory's one owner: which, whether it can hold the log, claiming and opening it."""
    log: AuditLog
    runtime: Runtime
    model: MachineModel = field(default_factory=MachineModel)
    lock: threading.RLock = field(default_factory=threading.RLock)
    active: Trigger | None = None
    """The trigger whose guards or entry work run now, or None between transitions."""
    depth: int = 0
    """Transitions in progress on the thread holding `lock` (a release inside a failure nests)."""

    @property
    def state(self) -> State:
        return self.model.state


def make_shared(
    config: RunConfig,
    provider: GivenProvider,
    log_dir: str | Path | None,
    *,
    plan: Plan | str | None,
    phases: PhaseSet | None,
    tripwires: TripwirePolicy,
    options: Options | OptionValues | None,
    run_id: str | None,
) -> Shared:
    """The record a new lifecycle's parts share, from `Lifecycle`'s arguments."""
    if tripwires not in ("raise", "warn", "off"):
        raise ConfigError(
            f"tripwires={tripwires!r} is not a policy; use 'raise' (default), 'warn' or 'off'",
            field="tripwires",
            problems=[repr(tripwires)],
        )
    runtime = Runtime(config=config, rank=rank_of(config), world_size=world_size_of(config))
    opts = Options.of(options)
    owner = LogDir.resolve(log_dir, config.logging.log_dir, existing=config.logging.existing)
    for listener in _LOG_LISTENERS:
        owner.before_open(functools.partial(listener, config))
    return Shared(
        config=config,
        plan=Plan(plan if plan is not None else config.plan),
        provider=provider,
        options=opts,
        policy=tripwires,
        phases=phases if phases is not None else default_phases(),
        log_dir=owner,
        log=AuditLog(
            run_id=run_id or run_id_from_env(),
            rank=runtime.rank,
            world_size=runtime.world_size,
            keep_records=opts.keep_records,
        ),
        runtime=runtime,
    )


def started_record(shared: Shared, target: State, tripwires: str, rehearsal: bool | None) -> records.LifecycleStarted:
    """The first record of the attempt: the plan, who and where this process is, who launched it."""
    count = restart_count()
    return records.LifecycleStarted(
        plan=shared.plan.value,
        target=target.name,
        policy=tripwires,
        pid=os.getpid(),
        host=socket.gethostname(),
        rehearsal=rehearsal,
        restart_count=UNSET if count is None else count,
        launcher="lifecycle run" if lifecycle_launched() else UNSET,
    )


def default_phases() -> PhaseSet:
    """The real phases on megatron-core (imported only when a lifecycle is made without phases)."""
    from lifecycle.core_entry import MegatronPhases

    return MegatronPhases()
