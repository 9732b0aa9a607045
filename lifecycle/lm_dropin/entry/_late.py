"""The names Megatron-LM's startup looks up in its modules' globals when it runs, in one place, and
how the drop-in resolves each, so that a script's patch of one behaves as under Megatron-LM.

Megatron-LM's `pretrain` and `initialize_megatron` call what their module's globals hold at the moment
of the call: a script that sets `megatron.training.training.set_jit_fusion_options = mine` gets
`mine` called. The drop-in does their work itself (as the lifecycle's states), so for each name in
`LOOKUPS` it does one of two things:

- it calls the name too, looked up in the same module at the same point of the startup (`late`);
  `train()`'s default finalizer (`finalize_model_grads`) is read when `train()` starts, where
  `train()` would bind it, and the lifecycle's finalizer then calls that function;
- or it does not run that part of `pretrain` (startup timers and timestamps, one-logger, the
  fault-tolerance package's hooks, ...): a script's replacement of such a name is refused at
  VALIDATED, naming it (`refused`), instead of being ignored.

Megatron-LM's code that the drop-in runs as is (`train()`, `train_step`, `evaluate`,
`setup_model_and_optimizer`, `_initialize_distributed`, ...) looks its own names up itself. A new
Megatron-LM release whose source looks up a name `LOOKUPS` does not list fails
`tests/integration/test_lm_dropin_resolves_names_where_megatron_lm_does.py`. Each look-up is one
dictionary read (the module's `__dict__`), once per call of the name.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from argparse import Namespace
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

TRAINING: Final = "megatron.training.training"
INITIALIZE: Final = "megatron.training.initialize"


@dataclass(frozen=True, slots=True)
class Lookup:
    """How the drop-in resolves one of Megatron-LM's global look-ups."""

    called: bool
    """The drop-in calls it, looked up in the same module where Megatron-LM's code would."""
    why: str


def _called(why: str) -> Lookup:
    return Lookup(called=True, why=why)


def _not_run(why: str) -> Lookup:
    return Lookup(called=False, why=why)


_TIMING = _not_run("pretrain's startup timers, timestamps and their log lines: the startup log records the states")
_ONE_LOGGER = _not_run("one-logger's and wandb's startup metrics")
_RL = _not_run("the RL path (--perform-rl-step), which the drop-in does not run")
_MODULE = _not_run("a module: the drop-in uses the same module object")

_PRETRAIN: Final[Mapping[str, Lookup]] = {
    "initialize_megatron": _not_run(
        "its steps are SERVICES_READY's and DISTRIBUTED's work, each looked up in megatron.training.initialize"
    ),
    "get_args": _called("once, after DISTRIBUTED, as pretrain reads it after initialize_megatron"),
    "get_timers": _TIMING,
    "set_jit_fusion_options": _called("at the end of DISTRIBUTED, where pretrain calls it after initialize_megatron"),
    "ProcessGroupCollection": _called("use_mpu_process_groups(), after the JIT warm-up, before the model"),
    "MultiModuleProcessGroupCollection": _called("a multi-module pg_collection skips the random seeds"),
    "setup_model_and_optimizer": _called("MODEL_BUILT's work"),
    "get_model_config": _called("the config passed to train(), read after CALLBACKS_BOUND"),
    "build_train_valid_test_data_iterators": _called("after CALLBACKS_BOUND, before train()"),
    "train": _called("after the data iterators"),
    "save_checkpoint_and_time": _called("the final save after train()"),
    "evaluate_and_print_results": _called("validation and test after train()"),
    "maybe_finalize_async_save": _called("the last call"),
    "append_to_progress_log": _called('with --log-progress, "Starting job" before set_jit_fusion_options'),
    "print_datetime": _TIMING,
    "print_rank_0": _TIMING,
    "set_startup_timestamps": _TIMING,
    "_STARTUP_TIMESTAMPS": _TIMING,
    "_TRAIN_START_TIME": _TIMING,
    "_LEGACY_TRAIN_START_TIME": _TIMING,
    "datetime": _TIMING,
    "time": _TIMING,
    "one_logger_utils": _ONE_LOGGER,
    "get_one_logger": _ONE_LOGGER,
    "get_wandb_writer": _ONE_LOGGER,
    "ft_integration": _not_run("nvidia-resiliency-ext fault tolerance's hooks: the rank watch and deadlines instead"),
    "get_tensorboard_writer": _RL,
    "initialize_rl_profiler": _RL,
    "rl_utils": _RL,
    "get_model": _RL,
    "swap_model_weights": _RL,
    "unwrap_model": _RL,
    "create_unified_mempool": _RL,
    "torch_memory_saver": _RL,
    "HAVE_TORCH_MEMORY_SAVER": _RL,
    "copy": _MODULE,
    "nullcontext": _RL,
    "functools": _MODULE,
    "inspect": _MODULE,
    "os": _MODULE,
    "torch": _MODULE,
}

_INITIALIZE_MEGATRON: Final[Mapping[str, Lookup]] = {
    "initialize_rerun_state_machine": _called("first in DISTRIBUTED"),
    "RerunMode": _called("the rerun state machine's mode"),
    "RerunErrorInjector": _called("the rerun state machine's error injector"),
    "RerunDiagnostic": _called("the error injector's diagnostic"),
    "tensor_parallel": _called("by the rerun state machine's RNG-tracker save and restore, at each call"),
    "_initialize_distributed": _called("DISTRIBUTED's process group and parallel state"),
    "_set_random_seed": _called("after the process group"),
    "_init_autoresume": _called("after the seeds"),
    "_compile_dependencies": _called("after autoresume"),
    "_initialize_tp_communicators": _called("with --tp-comm-overlap"),
    "get_args": _not_run("the drop-in holds Megatron-LM's args already (the script's, or derived from the container)"),
    "setup_logging": _called("first in DISTRIBUTED: --logging-level or MEGATRON_LOGGING_LEVEL"),
    "init_persistent_async_worker": _not_run("--use-persistent-ckpt-worker's worker"),
    "enable_batch_invariant_mode": _called("with --batch-invariant-mode, after the rerun state machine"),
    "print_rank_0": _TIMING,
    "mpu": _not_run("--lazy-mpu-init's path"),
    "torch": _MODULE,
}

_TRAIN: Final[Mapping[str, Lookup]] = {
    "finalize_model_grads": _called(
        "train() binds it to config.finalize_model_grads_func when that is unset; the lifecycle bound its "
        "finalizer at CALLBACKS_BOUND, which calls what this name holds when train() starts"
    ),
}

LOOKUPS: Final[Mapping[str, Mapping[str, Lookup]]] = MappingProxyType(
    {
        f"{TRAINING}:pretrain": MappingProxyType(_PRETRAIN),
        f"{INITIALIZE}:initialize_megatron": MappingProxyType(_INITIALIZE_MEGATRON),
        f"{TRAINING}:train": MappingProxyType(_TRAIN),
    }
)
"""By Megatron-LM function (`module:function`), each name it looks up in its module's globals (for
`train`, the ones it binds to a callback slot), and how the drop-in resolves it."""


FLAGS_REFUSED: Final[Mapping[str, tuple[str, str]]] = MappingProxyType(
    {
        "enable_ft_package": (
            "--enable-ft-package",
            "nvidia-resiliency-ext's fault tolerance hooks, which the drop-in does not run (the rank watch and "
            "the deadlines bound a hung or lost rank instead)",
        ),
        "use_persistent_ckpt_worker": (
            "--use-persistent-ckpt-worker",
            "Megatron-LM's persistent checkpoint worker, a process the drop-in does not start",
        ),
    }
)
"""By Megatron-LM argument: (its flag, what it asks for that the drop-in does not do). A script that
sets one is refused at VALIDATED (`flags_refused`), never run without it."""


def flags_refused(args: Namespace) -> list[tuple[str, str]]:
    """(flag, what it asks for) for each argument of `FLAGS_REFUSED` that `args` sets."""
    return [(flag, what) for dest, (flag, what) in FLAGS_REFUSED.items() if getattr(args, dest, False)]


def late(module: str, name: str) -> Any:  # Any: whatever the module's global holds, as Megatron-LM calls it
    """What `module`'s global `name` holds now: what Megatron-LM's code there would call now."""
    found = sys.modules.get(module)
    return vars(found if found is not None else importlib.import_module(module))[name]


def refused() -> list[tuple[str, str]]:
    """(`module.name`, what replaced it) for each name the drop-in does not call whose value a script
    replaced with a function or module that is not Megatron-LM's."""
    out, homes = [], tuple(_homes())
    for where, names in LOOKUPS.items():
        module = sys.modules.get(where.partition(":")[0])
        if module is None:
            continue
        for name, how in names.items():
            value = vars(module).get(name)
            if not how.called and value is not None and not _megatrons(value, homes):
                out.append((f"{module.__name__}.{name}", describe(value)))
    return sorted(set(out))


def _megatrons(value: object, homes: tuple[str, ...]) -> bool:
    """Whether `value` is what Megatron-LM's module holds unpatched: a module that is itself, or a
    function whose code is Megatron-LM's or torch's. Classes and data are taken as they are."""
    if isinstance(value, types.ModuleType):
        return sys.modules.get(value.__name__) is value
    code = getattr(value, "__code__", None)
    if code is None:
        return not callable(value) or isinstance(value, type)
    return str(code.co_filename).startswith(homes)


def _homes() -> list[str]:
    """The directories of the `megatron` and `torch` packages, each ending in a separator."""
    homes = []
    for package in ("megatron", "torch"):
        found = sys.modules.get(package)
        for path in getattr(getattr(found, "__spec__", None), "submodule_search_locations", None) or ():
            homes.append(os.path.join(path, ""))
    return homes


def describe(value: object) -> str:
    """A replacement named by where it was defined: `module.qualname` (never its repr)."""
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    module = getattr(value, "__module__", None) or type(value).__module__
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}.{name}"


def why(dotted: str) -> str:
    """Why the drop-in does not call `module.name` (the first function of `LOOKUPS` that names it)."""
    module, _, name = dotted.rpartition(".")
    return next(
        how.why
        for where, names in LOOKUPS.items()
        if where.startswith(module + ":")
        for n, how in names.items()
        if n == name
    )
