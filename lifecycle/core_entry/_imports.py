"""The heavy imports as one named, logged step: the `imports` record, seconds per top-level module.

VALIDATED starts them on a background thread and validates meanwhile, so per-state durations
measure each state's own work, not megatron's ~6 s import landing wherever it first happens. The
record says how long the main thread waited (`waited_s`); the audit takes that out of VALIDATED.

CPython cannot import a package on one thread while another thread imports its submodules: the
process aborts (`import torch.distributed` on the main thread while a thread runs torch's
`__init__`). So while the thread runs the main thread imports nothing heavy: it waits for torch
before validating (the environment checks import it) and joins before VALIDATED returns, so no code
outside this phase ever runs alongside the thread. An environment error is raised only after the
join: nothing this phase started outlives it.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from lifecycle.config import RunConfig, normalize, validate
from lifecycle.errors import ImportHung
from lifecycle.log import records
from lifecycle.runtime import Imports, PhaseContext, Runtime
from states import PLAN_TARGETS, Plan, State

TORCH = ("torch", "torch.distributed")
# What DISTRIBUTED, MODEL_BUILT, CALLBACKS_BOUND and the training steps import, in dependency order.
MEGATRON = (
    "megatron.core",
    "megatron.core.parallel_state",
    "megatron.core.tensor_parallel",
    "megatron.core.transformer",
    "megatron.core.models.gpt",
    "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.distributed",
    "megatron.core.optimizer",
    "megatron.core.pipeline_parallel",
)
# megatron-core imports in ~7 s; an import still running after this is stuck (a hung file system,
# a lock held elsewhere): VALIDATED fails naming it instead of waiting forever.
JOIN_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportReport:
    """What the import step did: seconds per top-level module (0.0 when already imported)."""

    modules: Mapping[str, float]
    started_ts: float
    duration_s: float
    waited_s: float
    failed: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def heavy_modules(config: RunConfig, plan: Plan, *, environment: bool) -> tuple[str, ...]:
    """The modules the states up to `plan`'s target import, for this config, in import order."""
    megatron = PLAN_TARGETS[plan].startup_index > State.SERVICES_READY.startup_index or config.logging.timers
    hf = config.tokenizer.build and config.tokenizer.type == "huggingface"
    tensorboard = bool(config.logging.tensorboard_dir)
    names: list[str] = list(TORCH) if environment or megatron or hf or tensorboard else []
    names += ["transformers", "megatron.core.tokenizers"] if hf else []
    names += list(MEGATRON) if megatron else []
    names += ["megatron.core.timers"] if config.logging.timers else []
    names += ["torch.utils.tensorboard"] if tensorboard else []
    return tuple(names)


class ImportJob:
    """Imports `names` in order on a daemon thread; `wait_for(name)` and `join()` block on it."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._done: set[str] = set()
        self._cond = threading.Condition()
        self._seconds: dict[str, float] = {}
        self._failed: dict[str, str] = {}
        self._waited = 0.0
        self._started_ts = time.time()
        self._elapsed = 0.0
        self._current: str | None = None
        self._thread = threading.Thread(target=self._run, name="lifecycle-imports", daemon=True)

    @classmethod
    def start(cls, names: Sequence[str]) -> ImportJob:
        job = cls(names)
        job._thread.start()
        return job

    def _run(self) -> None:
        began = time.perf_counter()
        for name in self.names:
            self._current = name
            t0 = time.perf_counter()
            try:
                importlib.import_module(name)
            except BaseException as exc:  # reported; the phase that needs it raises it again
                self._failed[name] = f"{type(exc).__name__}: {exc}"
            top = name.partition(".")[0]
            self._seconds[top] = self._seconds.get(top, 0.0) + time.perf_counter() - t0
            with self._cond:
                self._done.add(name)
                self._cond.notify_all()
        self._current = None
        self._elapsed = time.perf_counter() - began

    def wait_for(self, name: str) -> None:
        """Block until `name` is imported (or failed); at once if the job does not import it."""
        t0 = time.perf_counter()
        with self._cond:
            self._cond.wait_for(lambda: name in self._done or name not in self.names)
        self._waited += time.perf_counter() - t0

    def join(self, timeout_s: float = JOIN_TIMEOUT_S) -> ImportReport:
        """Wait for the thread; raise ImportHung naming the stuck module after `timeout_s`."""
        t0 = time.perf_counter()
        self._thread.join(timeout_s)
        self._waited += time.perf_counter() - t0
        if self._thread.is_alive():
            raise ImportHung(
                f"the import thread is still importing {self._current!r} after {timeout_s:.0f} s; "
                f"find what that import waits for (try `python -X importtime -c 'import {self._current}'`)",
                module=self._current,
                timeout_s=timeout_s,
            )
        return ImportReport(
            modules=MappingProxyType({k: round(v, 6) for k, v in self._seconds.items()}),
            started_ts=self._started_ts,
            duration_s=round(self._elapsed, 6),
            waited_s=round(self._waited, 6),
            failed=MappingProxyType(dict(self._failed)),
        )


def validate_while_importing(
    ctx: PhaseContext, enter: Callable[[PhaseContext], Runtime], *, environment: bool
) -> Runtime:
    """Run VALIDATED's `enter` while the heavy imports run; join them and log `imports` either way.

    A config that fails the intrinsic checks (pure, milliseconds) imports nothing extra: `enter`
    raises at once, listing every problem.
    """
    config, _rewrites = normalize(ctx.runtime.config)  # what VALIDATED checks (Megatron-LM's normalization)
    if validate(config, environment=False):
        return enter(ctx)
    job = ImportJob.start(heavy_modules(config, ctx.plan, environment=environment))
    try:
        if environment:
            job.wait_for("torch")
        runtime = enter(ctx)
    finally:
        report = job.join()
        fields = Imports(
            modules=dict(report.modules),
            started_ts=report.started_ts,
            duration_s=report.duration_s,
            waited_s=report.waited_s,
            failed=dict(report.failed),
        )
        ctx.emit(records.Imports(**fields))
    return dataclasses.replace(runtime, imports=fields)  # for `lifecycle run`'s summary
