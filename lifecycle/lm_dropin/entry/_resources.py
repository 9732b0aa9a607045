"""What the drop-in's entry work makes beyond what the real phases make, for the engine's ledger
(`lifecycle.core_entry.resources` names the rest), and the release of Megatron-LM's global variables.

- SERVICES_READY: Megatron-LM's global variables (args, tokenizer, writers, timers, energy monitor,
  exit signal handler, micro-batch calculator), when `set_global_variables` ran here. Those the
  script's `parse_and_validate_args` set are the script's: neither registered nor released.
- DISTRIBUTED: the rerun state machine; the CPU patches `megatron.training` needs on top of the
  rehearsal (`_cuda.py`).
- MODEL_BUILT: the optimizer parameter scheduler (it holds the optimizer).

Each probe is true once its resource is gone; it keeps no strong reference to it.
"""

from __future__ import annotations

import dataclasses
import types
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from lifecycle.core_entry.services_ready import without_services
from lifecycle.runtime import Entry, PhaseContext, Runtime
from states import State

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

Probe = Callable[[], bool]
GLOBALS = {
    "_GLOBAL_ARGS": "Megatron-LM args",
    "_GLOBAL_TOKENIZER": "Megatron-LM tokenizer",
    "_GLOBAL_TENSORBOARD_WRITER": "Megatron-LM tensorboard writer",
    "_GLOBAL_WANDB_WRITER": "Megatron-LM wandb writer",
    "_GLOBAL_ONE_LOGGER": "Megatron-LM one logger",
    "_GLOBAL_ADLR_AUTORESUME": "Megatron-LM ADLR autoresume",
    "_GLOBAL_TIMERS": "Megatron-LM timers",
    "_GLOBAL_ENERGY_MONITOR": "Megatron-LM energy monitor",
    "_GLOBAL_SIGNAL_HANDLER": "Megatron-LM exit signal handler",
}
"""`megatron.training.global_vars`' variables that `set_global_variables` sets, by resource name."""


def resources(state: State, runtime: Runtime) -> list[tuple[str, Probe]]:
    """(name, gone) for what the drop-in's work for `state` made beyond the real phases' resources."""
    made = {State.SERVICES_READY: _services, State.DISTRIBUTED: _distributed, State.MODEL_BUILT: _model}.get(state)
    return made(runtime) if made is not None else []


def _services(runtime: Runtime) -> list[tuple[str, Probe]]:
    if not runtime.megatron_lm_globals:
        return []
    from megatron.core import num_microbatches_calculator as calculator
    from megatron.training import global_vars

    out: list[tuple[str, Probe]] = []
    for var, name in GLOBALS.items():
        value = getattr(global_vars, var, None)
        if value is not None:
            out.append((name, _unset(global_vars, var, value)))
    writer = getattr(global_vars, "_GLOBAL_TENSORBOARD_WRITER", None)
    if writer is not None:
        out.append(("Megatron-LM tensorboard writer's event files", _writer_closed(writer)))
    value = getattr(calculator, "_GLOBAL_NUM_MICROBATCHES_CALCULATOR", None)
    if value is not None:
        out.append(
            ("Megatron-LM micro-batch calculator", _unset(calculator, "_GLOBAL_NUM_MICROBATCHES_CALCULATOR", value))
        )
    return out


def _unset(module: types.ModuleType, var: str, value: object) -> Probe:
    """Gone once `module.var` no longer holds `value` (compared by id: the probe holds no reference)."""
    ident = id(value)
    return lambda: id(getattr(module, var, None)) != ident


def _writer_closed(writer: SummaryWriter) -> Probe:
    """A SummaryWriter is closed once it holds no file writers (or is freed)."""
    ref = weakref.ref(writer)

    def gone() -> bool:
        alive = ref()
        return alive is None or getattr(alive, "all_writers", None) is None

    return gone


def _distributed(runtime: Runtime) -> list[tuple[str, Probe]]:
    from megatron.core import rerun_state_machine

    out: list[tuple[str, Probe]] = []
    if getattr(rerun_state_machine, "_GLOBAL_RERUN_STATE_MACHINE", None) is not None:
        out.append(("rerun state machine", lambda: rerun_state_machine._GLOBAL_RERUN_STATE_MACHINE is None))
    extra = getattr(runtime.rehearsal, "extra", None)
    if extra is not None:
        patched = weakref.ref(extra)
        out.append(("megatron.training's CPU patches", lambda: not getattr(patched(), "installed", False)))
    return out


def _model(runtime: Runtime) -> list[tuple[str, Probe]]:
    scheduler = runtime.scheduler
    if scheduler is None:
        return []
    ref = weakref.ref(scheduler)
    return [("optimizer parameter scheduler", lambda: ref() is None)]


def release_services(ctx: PhaseContext) -> Runtime:
    """SERVICES_READY's release: Megatron-LM's global variables when they are ours; the script's
    are left as found. Tolerates a partly built runtime."""
    runtime = ctx.runtime
    if runtime.megatron_lm_globals:
        release_globals()
    return dataclasses.replace(without_services(runtime), megatron_lm_globals=False)


def release_globals() -> None:
    """Close the tensorboard writer, finish the wandb run, give the exit signal handler's signal
    back, then unset every global variable `set_global_variables` sets (whichever it got to)."""
    from megatron.training import global_vars

    try:
        writer = global_vars._GLOBAL_TENSORBOARD_WRITER
        if writer is not None:
            writer.close()
        finish = getattr(global_vars._GLOBAL_WANDB_WRITER, "finish", None)
        if finish is not None:
            finish()
        handler = global_vars._GLOBAL_SIGNAL_HANDLER
        if handler is not None:
            handler.release()
    finally:
        global_vars.unset_global_variables()


def dropping_scheduler(ctx: PhaseContext, release: Entry) -> Runtime:
    """MODEL_BUILT's release, and the scheduler built with the optimizer (it holds the optimizer)."""
    runtime = release(ctx)
    return dataclasses.replace(runtime, scheduler=None)
