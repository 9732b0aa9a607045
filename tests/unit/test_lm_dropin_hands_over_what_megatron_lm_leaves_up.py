"""`pretrain` returns as Megatron-LM's does: once it has trained, what Megatron-LM's `pretrain` leaves
up (the process group, parallel state, RNG tracker, rerun state machine, global variables) is the
caller's, counted as gone by the ledger and left up by the releases, which say so in one
`resources_handed_over` record each; the lifecycle's own (the rank watch, the group watch, the CPU
stand-ins) are released as always. Before the hand-over (a failed startup, a `train()` that
raised) every release is the real one. DISTRIBUTED's release is given a runtime whose watch and
stand-ins record what is done to them; SERVICES_READY's handed-over path reads megatron's global
variables (tests/integration/test_megatron_lm.py runs it)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from lifecycle import RunConfig
from lifecycle.log import records
from lifecycle.runtime import Runtime
from lifecycle.testing import HandOver, lm_dropin_quiet_library_loggers, releasing_distributed, releasing_services
from states import State

MEGATRON_LMS = [
    "megatron parallel state",
    "process group",
    "process group objects (their gloo sockets)",
    "rerun state machine",
    "RNG tracker states",
]


class Done:
    """The lifecycle's own resource of DISTRIBUTED: records its `stop`/`close`, in order, in `done`."""

    def __init__(self, name: str, done: list[str], *, fails: bool = False) -> None:
        self.name, self.done, self.fails = name, done, fails

    def stop(self) -> None:
        self.done.append(f"{self.name} stopped")
        if self.fails:
            raise RuntimeError(f"{self.name} failed to stop")

    def close(self) -> None:
        self.done.append(f"{self.name} closed")


@dataclasses.dataclass
class Context:
    """What a release reads of its PhaseContext: the runtime, and where its records go."""

    runtime: Runtime
    emitted: list[records.Record] = dataclasses.field(default_factory=list)

    def emit(self, record: records.Record) -> None:
        self.emitted.append(record)


def distributed(done: list[str], *, watch_fails: bool = False) -> Context:
    config = RunConfig.from_dict({"parallel": {"rank": 3, "world_size": 4}})
    runtime = Runtime(
        config=config,
        distributed=True,
        rank=1,
        world_size=2,
        backend="gloo",
        rank_watch=Done("rank watch", done, fails=watch_fails),  # type: ignore[arg-type]  # records its stop
        group_watch=Done("group watch", done),
        rehearsal=Done("CPU stand-ins", done),
    )
    return Context(runtime)


def real_release(done: list[str]) -> Any:
    def release(ctx: Context) -> Runtime:
        done.append("real release")
        return dataclasses.replace(ctx.runtime, distributed=False)

    return release


def test_before_the_hand_over_every_entry_is_probed_as_the_ledger_made_it() -> None:
    handover = HandOver()
    made = [(name, lambda: False) for name in [*MEGATRON_LMS, "optimizer parameter scheduler"]]
    for state in (State.DISTRIBUTED, State.SERVICES_READY, State.MODEL_BUILT):
        assert [probe() for _, probe in handover.probes(state, made)] == [False] * len(made)


def test_after_the_hand_over_megatron_lms_entries_count_as_gone_and_the_lifecycles_are_still_probed() -> None:
    handover = HandOver()
    handover()
    up = [(name, lambda: False) for name in [*MEGATRON_LMS, "lifecycle rank watch"]]
    probed = handover.probes(State.DISTRIBUTED, up)
    assert [name for name, _ in probed] == [name for name, _ in up]
    assert {name: probe() for name, probe in probed} == {
        **dict.fromkeys(MEGATRON_LMS, True),
        "lifecycle rank watch": False,
    }
    services = handover.probes(State.SERVICES_READY, [("Megatron-LM args", lambda: False)])
    assert [probe() for _, probe in services] == [True]  # all of SERVICES_READY's are Megatron-LM's globals
    model = handover.probes(State.MODEL_BUILT, [("optimizer parameter scheduler", lambda: False)])
    assert [probe() for _, probe in model] == [False]


def test_an_entry_gone_by_itself_stays_gone_either_way() -> None:
    handover = HandOver()
    [(_, probe)] = handover.probes(State.DISTRIBUTED, [("process group", lambda: True)])
    assert probe()
    handover()
    assert probe()


def test_before_the_hand_over_distributed_is_released_in_full() -> None:
    done: list[str] = []
    ctx = distributed(done)
    after = releasing_distributed(HandOver(), ctx, real_release(done))  # type: ignore[arg-type]
    assert done == ["real release"] and not after.distributed and ctx.emitted == []


def test_after_the_hand_over_distributed_releases_only_the_lifecycles_own_and_says_what_it_leaves_up() -> None:
    done: list[str] = []
    ctx = distributed(done)
    handover = HandOver()
    handover()
    after = releasing_distributed(handover, ctx, real_release(done))  # type: ignore[arg-type]
    assert done == ["rank watch stopped", "group watch closed", "CPU stand-ins closed"]
    assert ctx.emitted == [records.ResourcesHandedOver(state="DISTRIBUTED", resources=sorted(MEGATRON_LMS))]
    assert (after.distributed, after.backend, after.pg_collection) == (False, None, None)
    assert (after.rank_watch, after.group_watch, after.rehearsal) == (None, None, None)
    assert (after.rank, after.world_size) == (3, 4)  # the config's again, as before DISTRIBUTED


def test_a_rank_watch_that_fails_to_stop_still_lets_the_stand_ins_close() -> None:
    done: list[str] = []
    handover = HandOver()
    handover()
    with pytest.raises(RuntimeError, match="rank watch failed to stop"):
        releasing_distributed(handover, distributed(done, watch_fails=True), real_release(done))  # type: ignore[arg-type]
    assert done == ["rank watch stopped", "group watch closed", "CPU stand-ins closed"]


def test_a_runtime_without_watches_or_stand_ins_is_handed_over_too() -> None:
    handover = HandOver()
    handover()
    ctx = Context(Runtime(config=RunConfig(), distributed=True, backend="gloo"))
    after = releasing_distributed(handover, ctx, real_release([]))  # type: ignore[arg-type]
    assert not after.distributed and [r.state for r in ctx.emitted] == ["DISTRIBUTED"]  # type: ignore[attr-defined]


def test_a_distributed_that_never_came_up_is_released_as_always_after_the_hand_over() -> None:
    done: list[str] = []
    handover = HandOver()
    handover()
    ctx = Context(Runtime(config=RunConfig()))
    releasing_distributed(handover, ctx, real_release(done))  # type: ignore[arg-type]
    assert done == ["real release"] and ctx.emitted == []


def test_before_the_hand_over_services_ready_is_released_in_full() -> None:
    done: list[str] = []
    ctx = Context(Runtime(config=RunConfig(), services_ready=True, megatron_lm_globals=True))

    def release(ctx: Context) -> Runtime:
        done.append("real release")
        return ctx.runtime

    releasing_services(HandOver(), ctx, release)  # type: ignore[arg-type]
    assert done == ["real release"] and ctx.emitted == []


def test_library_loggers_print_warnings_only_and_a_quieter_level_is_kept() -> None:
    loggers = {name: logging.getLogger(name) for name in ("", "transitions", "megatron", "megatron.core", "mine")}
    levels = {name: logger.level for name, logger in loggers.items()}
    try:
        loggers[""].setLevel(logging.INFO)  # what megatron.training's import does to the root logger
        loggers["transitions"].setLevel(logging.DEBUG)
        loggers["megatron"].setLevel(logging.ERROR)
        loggers["megatron.core"].setLevel(logging.NOTSET)
        loggers["mine"].setLevel(logging.INFO)
        lm_dropin_quiet_library_loggers()
        assert loggers["transitions"].level == logging.WARNING
        assert loggers["megatron"].level == logging.ERROR  # quieter than WARNING: kept
        assert not loggers["megatron.core"].isEnabledFor(logging.INFO)
        assert loggers["mine"].level == logging.INFO  # not a library's
        loggers["megatron"].setLevel(logging.NOTSET)
        loggers["transitions"].setLevel(logging.WARNING)
        lm_dropin_quiet_library_loggers()
        assert loggers["megatron"].level == logging.WARNING  # it followed the root's INFO: set
        loggers["megatron"].setLevel(logging.NOTSET)
        loggers[""].setLevel(logging.WARNING)
        lm_dropin_quiet_library_loggers()
        assert loggers["megatron"].level == logging.NOTSET  # already quiet: still follows the root
    finally:
        for name, level in levels.items():
            loggers[name].setLevel(level)
