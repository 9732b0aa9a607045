"""`lifecycle check-binding`: build your model on 2 CPU ranks, bind it the way your framework does,
and print `bindings.check`'s report for each rank.

Binders: `lifecycle` (this project's CALLBACKS_BOUND), `megatron-lm` (the binding block of
Megatron-LM's `train()`, from the installed `megatron.training`), `bridge` (Megatron-Bridge's
`_update_model_config_funcs`, compiled from the installed `megatron.bridge`'s text without importing
it, since its import needs Transformer Engine; given the provider's config as Bridge's `setup()`
does), or your own `package.module:function` called as
`binder(model, optimizer, ddp_config, provider_config)`.

MODEL_BUILT checks that every setting asked for (`--preset`, `--set`) reached the model
(`bindings.check_settings`); a rank whose model does not carry one reports each such field and the
run exits 1. `--settings` prints that comparison on every rank, also when everything landed.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

from lifecycle.cli._inputs import EXIT_INPUT
from lifecycle.cli._lines import tell
from lifecycle.cli._specs import callable_problem, provider_problem
from lifecycle.core_entry.user_providers import NAMES
from lifecycle.log import JSONValue

if TYPE_CHECKING:  # megatron's objects a binder receives
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import MegatronOptimizer
    from megatron.core.transformer import TransformerConfig
    from torch.nn import Module

    from lifecycle.config import RunConfig
    from lifecycle.core_entry.user_providers import Provider
    from lifecycle.engine import Lifecycle

    Binder = Callable[[list[Module], MegatronOptimizer | None, DistributedDataParallelConfig, TransformerConfig], None]
    """A binding function: `binder(model, optimizer, ddp_config, provider_config)`, what `--binder` names."""

BINDERS = ("lifecycle", "megatron-lm", "bridge")
EXIT_HELP = """exit status: 0 every rank's binding is ok and every setting landed; 1 a slot is missing, wrong
or stale, or a setting did not reach the model, on some rank (or a rank failed); 2 bad command-line or
config input, or a binder that is not installed."""
# The binding block of Megatron-LM's train(): from this comment to the finalizer's assignment.
TRAIN_BLOCK = ("# Setup some training config params.", "config.finalize_model_grads_func = finalize_model_grads")
NPROC = 2
RANKS_S = 300.0
"""Beyond the bounded stages, how long the ranks may take in all (imports, a loaded machine)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check-binding",
        help="build your model on 2 CPU ranks, bind it as your framework does, and report each scheduler slot",
        description=__doc__,
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--provider",
        required=True,
        help=f"model provider: one of {', '.join(NAMES)}, or package.module:NAME or path/to/file.py:NAME, a "
        "function or an object (a ModelBuilder, a ModelConfig, one with .provide())",
    )
    p.add_argument("--preset", default="tiny-gpt", help="the RunConfig preset to start from")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set ddp.overlap_grad_reduce=true (repeatable)",
    )
    p.add_argument(
        "--binder",
        default="lifecycle",
        help=f"who binds the callbacks: {', '.join(BINDERS)}, or package.module:function",
    )
    p.add_argument(
        "--settings",
        action="store_true",
        help="print, for every rank, the comparison of the settings asked for with what the model carries",
    )
    p.set_defaults(func=run)


def _refuse(message: str) -> int:
    tell("check-binding", message)
    return EXIT_INPUT


def binder_problem(spec: str) -> str | None:
    """Why `--binder` cannot be used here, in one line, or None (its module is found and read, not run)."""
    if spec in BINDERS:
        module = {"megatron-lm": "megatron.training", "bridge": "megatron.bridge"}.get(spec)
        import importlib.util

        if module is not None and importlib.util.find_spec(module) is None:
            how = "megatron-core >= 0.17 ships it" if spec == "megatron-lm" else "pip install megatron-bridge"
            return (
                f"--binder {spec} needs {module}, which is not installed ({how}); "
                "or pass your own binder as --binder package.module:function"
            )
        return None
    if ":" not in spec or not all(spec.partition(":")[::2]):
        return (
            f"--binder {spec!r} is neither {', '.join(BINDERS)} nor package.module:function; "
            "write e.g. --binder mypkg.setup:bind"
        )
    return callable_problem("--binder", spec)


def run(args: argparse.Namespace) -> int:
    """parse → check input → 2 ranks build, bind, check → print."""
    from lifecycle.errors import LifecycleError

    problem = provider_problem(args.provider) or binder_problem(args.binder)
    if problem:
        return _refuse(problem)
    from lifecycle.config import RunConfig, refuse_repeated

    try:
        refuse_repeated(args.overrides)
        config = RunConfig.preset(args.preset, args.overrides, values={"parallel.world_size": NPROC})
    except LifecycleError as exc:
        return _refuse(str(exc))
    from lifecycle.errors import RankFailed
    from lifecycle.launchers.local import run_ranks

    try:  # every stage of a rank is bounded by startup.timeout_s: the whole by all of them, and more
        ranks = run_ranks(
            check_rank,
            NPROC,
            config.to_dict(),
            args.provider,
            args.binder,
            args.settings,
            timeout_s=RANKS_S + 8 * timeout_s(config),
        )
    except RankFailed as exc:
        for rank, line in sorted(exc.context["errors"].items()):  # type: ignore[attr-defined]  # a dict by run_ranks
            tell("check-binding", f"rank {rank} failed: {line}")
        return 1
    except KeyboardInterrupt:  # Ctrl-C: the ranks got it too, and the owner stopped them
        return 128 + 2
    for rank, result in enumerate(ranks):
        print(f"rank {rank}: {result['text']}")
    return 0 if all(r["verdict"] == "ok" for r in ranks) else 1


def check_rank(
    config_data: dict[str, JSONValue], provider_spec: str, binder_spec: str, settings: bool = False
) -> dict[str, str]:
    """On one rank: startup to MODEL_BUILT (its settings check), the binder, then `bindings.check`.
    The provider is resolved here, once per rank (a spawned rank gets the spec: a user's function
    need not pickle). A model that does not carry a setting asked for is verdict `not-landed`."""
    import warnings

    from bindings import SettingsNotLanded
    from lifecycle.config import RunConfig

    warnings.simplefilter("ignore")
    config = RunConfig.from_dict(config_data)
    provider = bounded_provider(provider_spec, timeout_s(config))
    try:
        return _build_bind_check(config, provider, binder_spec, settings)
    except SettingsNotLanded as exc:
        return {
            "verdict": "not-landed",
            "text": "settings check: NOT LANDED\n" + str(exc).split(" The lifecycle is")[0],
        }


def _build_bind_check(config: RunConfig, provider: Provider, binder_spec: str, settings: bool) -> dict[str, str]:
    from bindings import check
    from lifecycle.engine import Lifecycle
    from lifecycle.launchers.local import bounded
    from states import State

    with Lifecycle(config, provider, tripwires="warn") as lc:
        if binder_spec == "lifecycle":
            lc.advance_to(State.CALLBACKS_BOUND)
        else:
            lc.advance_to(State.MODEL_BUILT)
        rt = lc.runtime
        model = list(rt.model or ())
        if binder_spec != "lifecycle":
            bind = bounded(
                binder, what=f"importing binder {binder_spec}", state="MODEL_BUILT", timeout_s=timeout_s(config)
            )
            bounded(bind(binder_spec), what=f"binder {binder_spec}", state="MODEL_BUILT", timeout_s=timeout_s(config))(
                model, rt.optimizer, rt.ddp_config, rt.provider_config
            )
        report = check(
            model,
            rt.ddp_config,
            rt.optimizer,
            provider_config=rt.provider_config,
            align_grad_reduce=config.ddp.align_grad_reduce,
        )
        result = {"verdict": report.verdict, "text": report.render()}
        if settings:
            result["text"] += "\n" + _settings_report(lc)
        if binder_spec != "lifecycle":  # the foreign binder's callbacks hold the optimizer and the model:
            _clear_slots([rt.provider_config, *model])  # let the lifecycle's release free them
        del rt, model, report
    return result


def _settings_report(lc: Lifecycle) -> str:
    """MODEL_BUILT's settings comparison, made again on the built model, as text."""
    from bindings import check_settings
    from lifecycle.core_entry.model_built import asked_for

    rt = lc.runtime
    asked = asked_for(rt.config, lc.provider, training=rt.optimizer is not None)
    return check_settings(
        list(rt.model or ()), asked, optimizer=rt.optimizer, provider_config=rt.provider_config
    ).render()


def timeout_s(config: RunConfig) -> float:
    return float(config.startup.timeout_s)


def bounded_provider(spec: str, limit_s: float) -> Provider:
    """The provider `spec` names, its import and each call bounded by `limit_s` (`bounded`)."""
    from lifecycle.core_entry.user_providers import Provider
    from lifecycle.launchers.local import bounded

    found = bounded(Provider.of, what=f"importing provider {spec}", state="CONFIGURED", timeout_s=limit_s)(spec)
    call = bounded(found.call, what=f"provider {found.name}", state="DISTRIBUTED → MODEL_BUILT", timeout_s=limit_s)
    for kept in ("asked", "own_config"):  # a provider object's own config: what MODEL_BUILT's settings check asks for
        if hasattr(found.call, kept):
            setattr(call, kept, getattr(found.call, kept))
    return Provider(call=call, name=found.name)


def _clear_slots(holders: list[TransformerConfig | Module | None]) -> None:
    """Empty every callback slot on the given configs and on the configs of the given chunks."""
    from megatron.core.utils import get_model_config

    from bindings import SLOTS

    for holder in holders:
        config = holder if holder is None or not hasattr(holder, "forward") else get_model_config(holder)
        for slot in SLOTS if config is not None else ():
            if hasattr(config, slot):
                setattr(config, slot, None)


def binder(spec: str) -> Binder:
    """The binding function `--binder` names."""
    if spec == "megatron-lm":
        return megatron_lm_binding
    if spec == "bridge":
        return bridge_binding
    import importlib

    module, _, name = spec.partition(":")
    found: Binder = getattr(importlib.import_module(module), name)
    return found


def bridge_binding(
    model: list[Module],
    optimizer: MegatronOptimizer | None,
    ddp_config: DistributedDataParallelConfig,
    provider_config: TransformerConfig,
) -> None:
    """What Megatron-Bridge's `setup()` does: its installer on `cfg.model`, the provider's config."""
    _bridge_installer()(model, provider_config, ddp_config, optimizer)


def _bridge_installer() -> Callable[..., None]:
    """`_update_model_config_funcs` of the installed Megatron-Bridge, compiled alone from its file's
    text: importing `megatron.bridge.training.setup` imports Transformer Engine (0.3 to 0.6.2), which a
    CPU machine lacks. Its names are megatron-core's; annotations stay unevaluated."""
    import __future__

    import ast
    import importlib.util
    from functools import partial
    from pathlib import Path
    from typing import Optional

    from megatron.core.distributed import DistributedDataParallel, finalize_model_grads
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

    spec = importlib.util.find_spec("megatron.bridge")  # finds the package, runs none of it
    path = Path(next(iter(spec.submodule_search_locations or []))) / "training" / "setup.py" if spec else None
    if path is None or not path.is_file():
        raise FileNotFoundError("megatron.bridge's training/setup.py is not installed: pip install megatron-bridge")
    tree = ast.parse(path.read_text(), str(path))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_update_model_config_funcs")
    namespace: dict[str, object] = {
        "partial": partial,
        "Optional": Optional,
        "DistributedDataParallel": DistributedDataParallel,
        "megatron_FSDP": FullyShardedDataParallel,
        "finalize_model_grads": finalize_model_grads,
    }
    code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec", __future__.annotations.compiler_flag)
    exec(code, namespace)  # Bridge's own function, as it is written in the installed file
    return cast("Callable[..., None]", namespace["_update_model_config_funcs"])


def megatron_lm_binding(
    model: list[Module],
    optimizer: MegatronOptimizer | None,
    ddp_config: DistributedDataParallelConfig,
    provider_config: TransformerConfig,
) -> None:
    """The binding block of the installed Megatron-LM `train()`, as it is written there."""
    import inspect

    import megatron.training.training as training

    lines = inspect.getsource(training.train).splitlines()
    run_train_block(lines, training.__file__, dict(vars(training)), model, optimizer, ddp_config)


def run_train_block(
    lines: list[str],
    origin: str,
    namespace: dict[str, object],
    model: list[Module],
    optimizer: MegatronOptimizer | None,
    ddp_config: DistributedDataParallelConfig,
    align_grad_reduce: bool = True,
) -> None:
    """Run Megatron-LM's binding block, cut from `lines` (train()'s source), on
    `config = get_model_config(model[0])`, with the `args` it reads taken from `ddp_config`."""
    from megatron.core.utils import get_model_config

    start = next(i for i, line in enumerate(lines) if TRAIN_BLOCK[0] in line)
    end = next(i for i, line in enumerate(lines) if i > start and TRAIN_BLOCK[1] in line)
    source = textwrap.dedent("\n".join(lines[start : end + 1]))
    args = SimpleNamespace(
        overlap_grad_reduce=ddp_config.overlap_grad_reduce,
        align_grad_reduce=align_grad_reduce,
        overlap_param_gather=ddp_config.overlap_param_gather,
        align_param_gather=ddp_config.align_param_gather,
    )
    scope = {
        **namespace,
        "config": get_model_config(model[0]),
        "model": model,
        "optimizer": optimizer,
        "args": args,
        "timers": None,
    }
    exec(compile(source, origin, "exec"), scope)
