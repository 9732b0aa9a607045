"""The ledger knows what the drop-in's entry work made beyond the real phases, and the releases end
it: SERVICES_READY's Megatron-LM global variables (only when set here: a script's own are left as
found), their tensorboard writer's files, the micro-batch calculator; DISTRIBUTED's rerun state
machine and `megatron.training`'s CPU patches; MODEL_BUILT's optimizer parameter scheduler. Each
entry reads gone once its resource is, and holds no reference to it. Once `pretrain` has trained,
SERVICES_READY's release leaves the global variables set and says which. In one process, on
megatron's real module variables (set to small objects: `set_global_variables` builds a tokenizer
and reads every argument; test_megatron_lm_providers.py runs it on a rank)."""

from __future__ import annotations

import dataclasses
import gc
import types
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from megatron.core import num_microbatches_calculator as calculator
from megatron.core import rerun_state_machine
from megatron.training import global_vars
from torch.utils.tensorboard import SummaryWriter

from lifecycle import RunConfig
from lifecycle.log import records
from lifecycle.runtime import Runtime
from lifecycle.testing import (
    HandOver,
    Patched,
    dropping_scheduler,
    lm_dropin_resources,
    release_globals,
    release_services,
    releasing_services,
)
from states import State


@dataclasses.dataclass
class Context:
    runtime: Runtime
    emitted: list[records.Record] = dataclasses.field(default_factory=list)

    def emit(self, record: records.Record) -> None:
        self.emitted.append(record)


class Ends:
    """A global's object whose `close`/`finish`/`release` is recorded in `ended` (or raises)."""

    def __init__(self, ended: list[str], *, fails: bool = False) -> None:
        self.ended, self.fails = ended, fails

    def _end(self, how: str) -> None:
        self.ended.append(how)
        if self.fails:
            raise RuntimeError(f"{how} failed")

    def finish(self) -> None:
        self._end("wandb finished")

    def release(self) -> None:
        self._end("signal given back")


@pytest.fixture
def set_here(tmp_path: Path) -> Iterator[SummaryWriter]:
    """Megatron-LM's globals as `set_global_variables` leaves them for a run with a tensorboard dir."""
    writer = SummaryWriter(str(tmp_path))
    global_vars._GLOBAL_ARGS = Namespace(rank=0)
    global_vars._GLOBAL_TIMERS = object()
    global_vars._GLOBAL_TENSORBOARD_WRITER = writer
    calculator.init_num_microbatches_calculator(0, None, 4, 1, 1, False)
    yield writer
    writer.close()
    global_vars.unset_global_variables()


def ours() -> Runtime:
    return Runtime(config=RunConfig(), services_ready=True, megatron_lm_globals=True, vocab_size=64)


NAMES = [
    "Megatron-LM args",
    "Megatron-LM tensorboard writer",
    "Megatron-LM timers",
    "Megatron-LM tensorboard writer's event files",
    "Megatron-LM micro-batch calculator",
]


def test_the_globals_set_here_are_registered_and_gone_after_the_release(set_here: SummaryWriter) -> None:
    made = lm_dropin_resources(State.SERVICES_READY, ours())
    assert [name for name, _ in made] == NAMES
    assert [gone() for _, gone in made] == [False] * len(NAMES)
    after = release_services(Context(ours()))  # type: ignore[arg-type]
    assert [gone() for _, gone in made] == [True] * len(NAMES)
    assert set_here.all_writers is None  # closed: its event files are flushed
    assert (after.megatron_lm_globals, after.services_ready, after.vocab_size) == (False, False, None)


def test_a_scripts_own_globals_are_neither_registered_nor_released(set_here: SummaryWriter) -> None:
    script = dataclasses.replace(ours(), megatron_lm_globals=False)
    assert lm_dropin_resources(State.SERVICES_READY, script) == []
    after = release_services(Context(script))  # type: ignore[arg-type]
    assert global_vars._GLOBAL_ARGS is not None and set_here.all_writers is not None
    assert (after.services_ready, after.megatron_lm_globals) == (False, False)


def test_a_global_set_again_to_another_object_counts_as_gone_and_none_is_held(set_here: SummaryWriter) -> None:
    made = dict(lm_dropin_resources(State.SERVICES_READY, ours()))
    global_vars._GLOBAL_ARGS = Namespace(rank=0)  # equal, but another run's
    assert made["Megatron-LM args"]() and not made["Megatron-LM timers"]()
    writer = global_vars._GLOBAL_TENSORBOARD_WRITER
    files = lm_dropin_resources(State.SERVICES_READY, ours())[-2][1]
    global_vars._GLOBAL_TENSORBOARD_WRITER = None
    del writer
    set_here.close()
    assert files()


def test_a_writer_freed_without_a_close_counts_as_gone(set_here: SummaryWriter, tmp_path: Path) -> None:
    writer = SummaryWriter(str(tmp_path / "other"))
    global_vars._GLOBAL_TENSORBOARD_WRITER = writer
    files = dict(lm_dropin_resources(State.SERVICES_READY, ours()))["Megatron-LM tensorboard writer's event files"]
    assert not files()
    global_vars._GLOBAL_TENSORBOARD_WRITER = None
    del writer
    gc.collect()
    assert files()


def test_the_release_ends_the_writers_and_the_signal_handler_then_unsets_every_global() -> None:
    ended: list[str] = []
    global_vars._GLOBAL_ARGS = Namespace()
    global_vars._GLOBAL_WANDB_WRITER = Ends(ended)
    global_vars._GLOBAL_SIGNAL_HANDLER = Ends(ended)
    global_vars._GLOBAL_ENERGY_MONITOR = object()
    release_globals()
    assert ended == ["wandb finished", "signal given back"]
    assert all(getattr(global_vars, var) is None for var in vars(global_vars) if var.startswith("_GLOBAL_"))


def test_a_release_that_fails_part_way_still_unsets_every_global() -> None:
    ended: list[str] = []
    global_vars._GLOBAL_ARGS = Namespace()
    global_vars._GLOBAL_WANDB_WRITER = Ends(ended, fails=True)
    with pytest.raises(RuntimeError, match="wandb finished failed"):
        release_globals()
    assert global_vars._GLOBAL_ARGS is None and global_vars._GLOBAL_WANDB_WRITER is None


def test_after_the_hand_over_services_ready_leaves_the_globals_set_and_names_them(set_here: SummaryWriter) -> None:
    handover = HandOver()
    handover()
    ctx = Context(ours())
    after = releasing_services(handover, ctx, release_services)  # type: ignore[arg-type]
    names = ["Megatron-LM args", "Megatron-LM micro-batch calculator", "Megatron-LM tensorboard writer"]
    assert ctx.emitted == [
        records.ResourcesHandedOver(state="SERVICES_READY", resources=[*names, "Megatron-LM timers"])
    ]
    assert global_vars._GLOBAL_ARGS is not None and set_here.all_writers is not None
    assert calculator._GLOBAL_NUM_MICROBATCHES_CALCULATOR is not None
    assert (after.megatron_lm_globals, after.services_ready) == (False, False)


def test_after_the_hand_over_without_a_calculator_only_the_globals_are_named() -> None:
    handover = HandOver()
    handover()
    global_vars._GLOBAL_ARGS = Namespace()
    try:
        ctx = Context(ours())
        releasing_services(handover, ctx, release_services)  # type: ignore[arg-type]
        assert [r.resources for r in ctx.emitted] == [["Megatron-LM args"]]  # type: ignore[attr-defined]
    finally:
        global_vars.unset_global_variables()


def test_distributed_registers_the_rerun_state_machine_and_the_cpu_patches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rerun_state_machine, "_GLOBAL_RERUN_STATE_MACHINE", object())
    owner = types.SimpleNamespace(is_available=lambda: False)
    patches = Patched().install([(owner, "is_available", lambda: True)])  # type: ignore[list-item]
    runtime = Runtime(config=RunConfig(), rehearsal=types.SimpleNamespace(extra=patches, close=lambda: None))  # type: ignore[arg-type]
    made = lm_dropin_resources(State.DISTRIBUTED, runtime)
    assert [name for name, _ in made] == ["rerun state machine", "megatron.training's CPU patches"]
    assert [gone() for _, gone in made] == [False, False]
    rerun_state_machine.destroy_rerun_state_machine()
    patches.restore()
    assert [gone() for _, gone in made] == [True, True]
    freed = Patched().install([(owner, "is_available", lambda: True)])  # type: ignore[list-item]
    runtime = dataclasses.replace(runtime, rehearsal=types.SimpleNamespace(extra=freed, close=lambda: None))  # type: ignore[arg-type]
    [(_, patched_gone)] = lm_dropin_resources(State.DISTRIBUTED, runtime)
    assert not patched_gone()
    del runtime, freed
    gc.collect()
    assert patched_gone()  # freed with its patches in place: nothing of it is held


def test_distributed_without_either_registers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rerun_state_machine, "_GLOBAL_RERUN_STATE_MACHINE", None)
    assert lm_dropin_resources(State.DISTRIBUTED, Runtime(config=RunConfig())) == []
    rehearsal_only = Runtime(config=RunConfig(), rehearsal=types.SimpleNamespace(close=lambda: None))  # type: ignore[arg-type]
    assert lm_dropin_resources(State.DISTRIBUTED, rehearsal_only) == []


class Scheduler:
    """Stands for the OptimizerParamScheduler, which holds the optimizer: only its lifetime is read."""


def test_model_built_registers_the_scheduler_until_it_is_freed() -> None:
    scheduler = Scheduler()
    [(name, gone)] = lm_dropin_resources(State.MODEL_BUILT, Runtime(config=RunConfig(), scheduler=scheduler))  # type: ignore[arg-type]
    assert name == "optimizer parameter scheduler" and not gone()
    del scheduler
    gc.collect()
    assert gone()
    assert lm_dropin_resources(State.MODEL_BUILT, Runtime(config=RunConfig())) == []


def test_model_builts_release_drops_the_scheduler_after_the_real_release() -> None:
    seen: list[Any] = []

    def release(ctx: Context) -> Runtime:
        seen.append(ctx.runtime.scheduler)
        return dataclasses.replace(ctx.runtime, model=None)

    runtime = Runtime(config=RunConfig(), scheduler=Scheduler())  # type: ignore[arg-type]
    after = dropping_scheduler(Context(runtime), release)  # type: ignore[arg-type]
    assert after.scheduler is None and seen == [runtime.scheduler]


@pytest.mark.parametrize("state", [State.CONFIGURED, State.VALIDATED, State.CALLBACKS_BOUND])
def test_other_states_make_nothing_of_megatron_lms(state: State) -> None:
    assert lm_dropin_resources(state, ours()) == []
