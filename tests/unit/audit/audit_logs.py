"""Startup logs for the audit's tests.

`engine_rank` makes them with the real engine (`Lifecycle` + in-process phases), which is how every
log the engine can produce is made. `write_events` writes a list of (event, fields) with the real
`AuditLog`, for what the engine refuses to produce (side effect before VALIDATED, binding before
MODEL_BUILT, ...); `clean_events` is the minimal startup those tests start from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from lifecycle import InProcessPhases, Lifecycle, PhaseContext, RunConfig, Runtime
from lifecycle.audit import audit
from lifecycle.log import GENESIS, AuditLog, records
from lifecycle.testing import AuditResult, Entry
from states import PLAN_TARGETS, SIDE_EFFECT_OWNERS, STARTUP_ORDER, Plan, State, forward_trigger

FP = "f" * 64
Events = list[tuple[str, dict[str, Any]]]


def engine_rank(
    log_dir: Path,
    rank: int = 0,
    world: int = 1,
    *,
    run_id: str = "run-a",
    seed: int = 1234,
    phases: Any = None,
    tripwires: str = "off",
    plan: str | None = None,
    existing: str = "refuse",
) -> Lifecycle:
    """One rank of a run, as torchrun starts it: RANK/WORLD_SIZE in the environment (a rank in the
    config would be part of the fingerprint, so ranks would disagree)."""
    config = RunConfig.from_dict({"training": {"seed": seed}, "logging": {"existing": existing}})
    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    try:
        return Lifecycle(
            config, log_dir=log_dir, plan=plan, phases=phases or InProcessPhases(), tripwires=tripwires, run_id=run_id
        )  # type: ignore[arg-type]
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def train_and_shut_down(lc: Lifecycle, *, steps: int = 2, finalizer_calls: int = 1) -> None:
    """What `lifecycle run` does once bound: steps, the first-step finalizer record, shutdown."""
    lc.advance_to(lc.target)
    for step in range(1, steps + 1):
        lc.record(records.StepCompleted(step=step, loss=1.0 / step, duration_s=0.01))
        if step == 1:
            kind = records.FirstStepFinalized if finalizer_calls == 1 else records.FirstStepNotFinalized
            lc.record(kind(finalizer_calls=finalizer_calls))
    lc.shutdown()


def clean_run(log_dir: Path, world: int = 2, *, run_id: str = "run-a") -> Path:
    for rank in range(world):
        train_and_shut_down(engine_rank(log_dir, rank, world, run_id=run_id))
    return log_dir


def rules(result: AuditResult) -> set[str]:
    return {f.rule for f in result.findings}


def audit_rules(*paths: Path) -> set[str]:
    result = audit([str(p) for p in paths], jobs=1)
    assert not result.errors, result.errors
    return rules(result)


class OldModelPhases(InProcessPhases):
    """A rebuild bug: after a rebuild the callbacks go to the first model's config again."""

    def __init__(self) -> None:
        super().__init__()
        self.first: Any = None
        self.around(State.MODEL_BUILT, enter=self.build_model).around(State.CALLBACKS_BOUND, enter=self.bind_callbacks)

    def build_model(self, ctx: PhaseContext, enter: Entry) -> Runtime:
        runtime = enter(ctx)
        if self.first is None:
            self.first = runtime.model
        return runtime

    def bind_callbacks(self, ctx: PhaseContext, enter: Entry) -> Runtime:
        old = dataclasses.replace(ctx.runtime, model=self.first)
        return _bind_on(ctx, old, scheduler=ctx.runtime.model)


def _bind_on(ctx: PhaseContext, runtime: Runtime, *, scheduler: Any) -> Runtime:
    """Bind to `runtime.model[0].config` while the scheduler reads `scheduler[0].config`: the slots
    the in-process phases bind, each a no-op as theirs."""
    from states import SideEffect

    ctx.side_effect(SideEffect.CALLBACKS)
    target = runtime.model[0].config
    for slot in InProcessPhases.SLOTS:
        setattr(target, slot, _no_op)
    ctx.emit(
        records.CallbacksBound(
            target_type=type(target).__name__,
            target_id=hex(id(target)),
            scheduler_config_id=hex(id(scheduler[0].config)),
            provider_config_id=hex(id(ctx.runtime.provider_config)),
            copied=True,
            slots=list(InProcessPhases.SLOTS),
            chunks=1,
            overlap_grad_reduce=False,
            overlap_param_gather=False,
            policy="refuse",
        )
    )
    return dataclasses.replace(ctx.runtime, binding={"target_id": id(target), "slots": InProcessPhases.SLOTS})


def _no_op(*_args: Any, **_kwargs: Any) -> None:
    return None


class ProviderTargetPhases(InProcessPhases):
    """A binding bug: callbacks installed on the provider's config, not the copy the model holds."""

    def __init__(self) -> None:
        super().__init__()
        self.around(State.CALLBACKS_BOUND, enter=self.bind_callbacks)

    def bind_callbacks(self, ctx: PhaseContext, enter: Entry) -> Runtime:
        holder = [type("Chunk", (), {"config": ctx.runtime.provider_config})()]
        return _bind_on(ctx, dataclasses.replace(ctx.runtime, model=tuple(holder)), scheduler=ctx.runtime.model)


def _clean_bodies(model_id: str, provider_id: str, fp: str) -> dict[str, Events]:
    """What each forward trigger of the minimal training startup logs between its transition's
    start and its completion (a trigger not here logs a side effect per kind it owns)."""
    return {
        "validate": [("config_validated", dict(fingerprint=fp, config={}, environment=True))],
        "start_services": [
            ("side_effect", dict(kind="tokenizer", trigger="start_services")),
            ("services_ready", dict(tokenizer="T", vocab_size=8, vocab_source="explicit")),
        ],
        "init_distributed": [
            ("side_effect", dict(kind=k, trigger="init_distributed"))
            for k in ("process_group", "parallel_state", "rng")
        ]
        + [("distributed_initialized", dict(backend="gloo", tp=1, pp=1, cp=1, ep=1, dp=1, vpp=None))],
        "build_model": [
            ("side_effect", dict(kind="model", trigger="build_model")),
            ("model_built", dict(chunks=1, model_config_id=model_id, provider_config_id=provider_id, optimizer=True)),
        ],
        "bind_callbacks": [
            ("side_effect", dict(kind="callbacks", trigger="bind_callbacks")),
            (
                "callbacks_bound",
                dict(
                    target_type="TransformerConfig",
                    target_id=model_id,
                    scheduler_config_id=model_id,
                    provider_config_id=provider_id,
                    copied=True,
                    slots=["finalize_model_grads_func"],
                    chunks=1,
                    overlap_grad_reduce=False,
                    overlap_param_gather=False,
                    policy="refuse",
                ),
            ),
        ],
    }


def clean_events(*, model_id: str = "0x10", provider_id: str = "0x20", fp: str = FP) -> Events:
    """The minimal training startup of docs/log-format.md, then one step and a shutdown. Its
    transitions are the table's forward chain to the training plan's target (`STARTUP_ORDER`,
    `forward_trigger`); a state added to the chain is entered here with the side effects its trigger
    owns, and nothing else."""
    target = PLAN_TARGETS[Plan.TRAINING]
    ev: Events = [
        (
            "lifecycle_started",
            dict(plan="training", target=target.name, policy="raise", pid=1, host="h", rehearsal=None),
        )
    ]
    bodies = _clean_bodies(model_id, provider_id, fp)
    chain = STARTUP_ORDER[: target.startup_index + 1]
    steps = []
    for source, dest in itertools.pairwise(chain):
        trigger = forward_trigger(dest)
        owned: Events = [
            ("side_effect", dict(kind=kind.value, trigger=trigger.value))
            for kind, owner in SIDE_EFFECT_OWNERS.items()
            if owner is trigger
        ]
        steps.append((trigger.value, source.name, dest.name, bodies.get(trigger.value, owned)))
    for trigger, source, dest, body in steps:
        ev.append(("transition_started", dict(trigger=trigger, source=source)))
        ev += body
        ev.append(
            (
                "transition_completed",
                dict(
                    trigger=trigger,
                    source=source,
                    dest=dest,
                    duration_s=0.01,
                    config_fingerprint=None if trigger == "validate" else fp,
                ),
            )
        )
    ev += [
        ("step_completed", dict(step=1, loss=1.0, duration_s=0.1)),
        ("first_step_finalized", dict(finalizer_calls=1)),
        ("lifecycle_shutdown", dict(source=target.name)),
        (
            "transition_completed",
            dict(trigger="shutdown", source=target.name, dest="SHUT_DOWN", duration_s=0.01, config_fingerprint=fp),
        ),
    ]
    return ev


def index(ev: Events, event: str, **match: Any) -> int:
    """Position of the first `event` record whose fields include `match`."""
    for i, (name, fields) in enumerate(ev):
        if name == event and all(fields.get(k) == v for k, v in match.items()):
            return i
    raise LookupError(f"no {event} {match}")


_CLOCKS: list[Callable[[], float]] = []
"""The clock `write_events` gives its log while `clock(...)` is on (the innermost)."""


@contextlib.contextmanager
def clock(times: Iterable[float]) -> Iterator[None]:
    """The logs `write_events` writes in this block are stamped `times`, one per record (then the
    last again): ranks whose records happen at chosen moments."""
    values = iter(times)
    last = [0.0]

    def now() -> float:
        last[0] = next(values, last[0])
        return last[0]

    _CLOCKS.append(now)
    try:
        yield
    finally:
        _CLOCKS.pop()


def rechain(path: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    """Edit a log's records and write them back with their hash chain recomputed, byte for byte
    as AuditLog lays lines out: what a user does who wants the audit to trust the edit."""
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    edit(records)
    prev, out = GENESIS, []
    for rec in records:
        rec.pop("hash", None)
        rec["prev_hash"] = prev
        body = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
        prev = hashlib.sha256(body).hexdigest()
        out.append(body[:-1] + b',"hash":"' + prev.encode() + b'"}\n')
    path.write_bytes(b"".join(out))


def write_events(log_dir: Path, ev: Events, *, rank: int = 0, world: int = 1, run_id: str = "hand") -> Path:
    log = AuditLog(run_id=run_id, rank=rank, world_size=world, clock=_CLOCKS[-1] if _CLOCKS else time.time)
    path = log.open(log_dir)
    for event, fields in ev:
        if event == "__generation__":  # what the engine does at a restart
            log.rebind(generation=fields["generation"])
        else:
            log.emit(event, **fields)
    log.close()
    return path


class KilledPhases(InProcessPhases):
    """Entry work whose process is SIGKILLed in the middle of `build_model`, once the other ranks
    are done (so the launcher does not stop them first)."""

    def __init__(self, log_dir: Path, others: int) -> None:
        super().__init__()
        self.log_dir = log_dir
        self.others = others
        self.around(State.MODEL_BUILT, enter=self.build_model)

    def build_model(self, ctx: PhaseContext, enter: Entry) -> Runtime:
        from states import SideEffect

        ctx.side_effect(SideEffect.MODEL)
        deadline = time.monotonic() + 60
        while len(list(self.log_dir.glob("done-*"))) < self.others and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable: the process was killed")


def launched_rank(log_dir: str, die_rank: int) -> str:
    """One rank under `lifecycle.launch.run_ranks` (RANK, WORLD_SIZE, MASTER_* in the environment)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    phases = KilledPhases(Path(log_dir), world - 1) if rank == die_rank else InProcessPhases()
    lc = Lifecycle(RunConfig(), log_dir=log_dir, phases=phases, tripwires="off")
    train_and_shut_down(lc)
    (Path(log_dir) / f"done-{rank}").touch()
    return lc.state.name
