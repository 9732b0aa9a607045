"""`lifecycle run`: drive a Megatron startup to its plan's target, train N steps, shut down.

With `--nproc N` (N > 1) or `--nnodes` outside a launcher, it checks the config for the world size
it is about to launch, then re-executes itself under torchrun; torchrun's multi-node options
(`--nnodes`, `--node-rank`, `--rdzv-endpoint`, `--rdzv-backend`, `--rdzv-id`, `--max-restarts`)
pass through. `torchrun --nproc-per-node N -m lifecycle run ...`, `srun lifecycle run ...`
(SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID) and `mpirun -n N lifecycle run ...`
(OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK) work the same (`lifecycle.launchers`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from lifecycle import launchers
from lifecycle.cli._inputs import EXIT_INPUT, check_before_start, flag_values, load, non_negative, say
from lifecycle.cli._launch import (
    add_launch_options,
    launch,
    launch_problem,
    launch_world_size,
    wants_launch,
)
from lifecycle.cli._specs import callable_problem, provider_problem
from lifecycle.config import flatten
from lifecycle.core_entry.user_providers import NAMES
from lifecycle.redaction import redact_text
from states import PLAN_TARGETS, STARTUP_ORDER, Plan, State, training_state

if TYPE_CHECKING:
    from lifecycle.config import RunConfig
    from lifecycle.core_entry.user_providers import Provider
    from lifecycle.engine import Lifecycle
    from lifecycle.runtime import Imports, PhaseSet

Show = Callable[[str], None]

EXIT_HELP = """exit status: 0 done; 1 a problem found by validation (the config does not fit together
or with the world size being launched) or a rank failed; 2 bad command-line or config input (an
unknown key, a malformed or out-of-range value, an unknown provider), one line per problem naming
the field and the fix."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="drive startup to the plan's target state and run training steps",
        description=__doc__,
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_sources(p)
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set parallel.tp=2 (repeatable)",
    )
    p.add_argument("--plan", choices=[x.value for x in Plan], help="training, inference, convert or rl")
    p.add_argument("--steps", type=non_negative, help="training steps after startup (default: training.steps)")
    p.add_argument("--log-dir", help="directory for the per-rank startup logs (rank-NNNNN.jsonl)")
    p.add_argument(
        "--provider",
        default="gpt",
        help=f"model provider: one of {', '.join(NAMES)}, or your own as package.module:function "
        "or path/to/file.py:function (docs/adopting.md)",
    )
    p.add_argument(
        "--phases",
        metavar="MODULE:FUNCTION",
        help="a function returning the PhaseSet to run in place of the real phases, e.g. "
        "MegatronPhases().around(State.X, release=...) to inject a fault into a real state (docs/extending.md)",
    )
    p.add_argument("--tripwires", choices=("raise", "warn", "off"), default="raise")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace another run's logs in --log-dir (logging.existing=overwrite; default: refuse)",
    )
    add_launch_options(p)
    p.set_defaults(func=run)


def _add_sources(p: argparse.ArgumentParser) -> None:
    """Where the config comes from: a preset, a RunConfig YAML, or a Megatron-LM YAML (one of them)."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", help="a shipped preset, e.g. tiny-gpt (default when --config is absent)")
    src.add_argument("--config", help="a RunConfig YAML file")
    src.add_argument(
        "--megatron-config",
        metavar="FILE",
        help="a Megatron-LM YAML config (PretrainConfigContainer.to_yaml); the RunConfig is derived from it",
    )
    p.add_argument(
        "--allow-targets",
        action="store_true",
        help="with --megatron-config: let Megatron-LM's allowlist decide the _target_s outside megatron's "
        "config classes (default: refuse them; loading one runs it)",
    )


# megatron-core's import-time notices about optional packages a CPU rehearsal does not use.
_QUIET = (
    r"(Transformer Engine and )?Apex is not installed",
    r"Transformer Engine and Apex are not installed",
    r"full scope is deprecated",
)


def run(args: argparse.Namespace) -> int:
    """parse → check input → launch, or drive this rank."""
    import warnings

    for pattern in _QUIET:
        warnings.filterwarnings("ignore", message=pattern, category=UserWarning)
    launching = wants_launch(args)
    problem = launch_problem(args) or provider_problem(args.provider) or _phases_problem(args.phases)
    if args.allow_targets and not args.megatron_config:
        problem = "--allow-targets applies to --megatron-config FILE only; drop it, or give the Megatron-LM YAML"
    if problem:
        return _refuse(problem)
    from lifecycle.errors import LifecycleError

    try:
        config = _megatron_config(args, launching) if args.megatron_config else load(args)
    except LifecycleError as exc:
        return _refuse(str(exc))
    status = check_before_start(config, launch_world_size(args) if launching else None)
    if status is not None:
        return status
    if launching:
        return launch(args, config.logging.log_dir)
    return _drive_rank(args, config)


def _megatron_config(args: argparse.Namespace, launching: bool) -> RunConfig:
    """The RunConfig derived from a Megatron-LM YAML config (needs megatron-core>=0.17)."""
    from lifecycle.lm_dropin import require_megatron_training

    require_megatron_training()
    from lifecycle.config import RunConfig
    from lifecycle.lm_dropin.entry import run_config_from_yaml

    world = launch_world_size(args) if launching else None
    world = world or launchers.world_size() or 1
    config = run_config_from_yaml(
        args.megatron_config, world_size=world, log_dir=args.log_dir, allow_targets=args.allow_targets
    )
    values = {k: v for k, v in flag_values(args).items() if k != "logging.log_dir"}  # placed above
    if not (args.overrides or values):
        return config
    changed = RunConfig.from_dict(config.to_dict(), args.overrides, values=values)
    if launching or not (launchers.rank() or launchers.lifecycle_launched()):  # said once: by our launcher, or rank 0
        for line in overridden(config, changed, args.overrides, args.megatron_config):
            say(line)
    return changed


def overridden(derived: RunConfig, changed: RunConfig, overrides: list[str], source: str) -> list[str]:
    """One line per `--set` that changed a value derived from the Megatron-LM YAML."""
    before, after = flatten(derived.to_dict()), flatten(changed.to_dict())
    lines = []
    for override in overrides:
        key = override.partition("=")[0].strip()
        if key in before and before[key] != after.get(key):
            lines.append(
                f"--set {key}={after.get(key)!r} overrides {key} = {before[key]!r} from --megatron-config {source}"
            )
    return lines


def _refuse(message: str) -> int:
    say(message)
    return EXIT_INPUT


def _drive_rank(args: argparse.Namespace, config: RunConfig) -> int:
    from lifecycle.core_entry.user_providers import Provider
    from lifecycle.errors import ConfigError, LifecycleError, ProviderError, StartupAborted
    from lifecycle.runtime import adopt_launcher_identity, world_size_of

    if launchers.inside_torchrun():  # launched: end with the launcher
        from lifecycle.launchers.local import die_with_parent

        die_with_parent()
    try:
        adopt_launcher_identity()
        world_size_of(config)
        provider = Provider.of(args.provider)  # resolved once: the entry work takes it as it is
    except (ConfigError, ProviderError) as exc:
        return _refuse(str(exc))
    try:
        return _drive(args, config, provider)
    except StartupAborted as exc:
        during = f" during {exc.trigger}" if exc.trigger else ""  # the transition, not the method's name
        say(
            f"rank {launchers.rank() or 0}: startup aborted by {exc.signal} in state {exc.state}{during}; "
            f"everything was released (exit {exc.code})"
        )
        return int(exc.code or 1)
    except LifecycleError as exc:
        say(f"rank {launchers.rank() or 0} failed: {type(exc).__name__}: {exc}")
        return 1


def _drive(args: argparse.Namespace, config: RunConfig, provider: Provider) -> int:
    from lifecycle.engine import Lifecycle

    show = _printer()
    steps = config.training.steps if args.steps is None else args.steps
    with Lifecycle(config, provider, phases=_phases(args.phases), tripwires=args.tripwires) as lc:
        show(f"run {lc.run_id}: plan {lc.plan.value} → {lc.target.name}, {lc.runtime.world_size} rank(s)")
        for dest in STARTUP_ORDER[1 : PLAN_TARGETS[lc.plan].startup_index + 1]:
            started = time.perf_counter()
            lc.advance_to(dest)
            show(f"  ✓ {dest.name:<16} {time.perf_counter() - started:7.3f} s")
            _show_imports(show, lc.runtime.imports if dest is State.VALIDATED else None)
        if lc.state is training_state(lc.target):
            _train_and_save(lc, steps, show)
        log_path, fault = lc.log_path, lc.log_fault
    if fault is not None:  # trained, unlogged: the lifecycle is FAILED, and the run says so in its status
        say(f"rank {launchers.rank() or 0}: trained with its startup log unwritten ({fault.strerror}); exit 1")
        return 1
    show(f"done; startup log: {log_path.parent if log_path else '(no --log-dir given)'}")
    return 0


def _phases_problem(spec: str | None) -> str | None:
    """Why `--phases spec` names no function, in one line, or None (found and read, not run)."""
    if spec is None:
        return None
    module, sep, name = spec.rpartition(":")
    if not sep or not module or module.endswith(".py") or not name.isidentifier():
        return f"--phases {spec!r} is not package.module:function; write e.g. --phases my_pkg.faults:phases"
    return callable_problem("--phases", spec)


def _phases(spec: str | None) -> PhaseSet | None:
    """What the `--phases` function returns; None (the real phases) without one."""
    if spec is None:
        return None
    import importlib

    module, _, name = spec.rpartition(":")
    made: PhaseSet = getattr(importlib.import_module(module), name)()
    return made


def _train_and_save(lc: Lifecycle, steps: int, show: Show) -> None:
    """`steps` training steps (continuing from a loaded checkpoint's step), then `checkpoint.save`."""
    from lifecycle.core_entry.train import StepResult, checkpoint_step, save_after_steps, train_steps

    start = checkpoint_step(lc.runtime)
    if start:
        show(f"  resumed from the checkpoint of step {start}")

    def on_step(result: StepResult) -> None:
        loss = "n/a (not last stage)" if result.loss is None else f"{result.loss:.4f}"
        show(f"  step {result.step}/{start + steps}: loss {loss}, {result.duration_s:.3f} s")

    if steps > 0:
        train_steps(lc, steps, on_step)
    saved = save_after_steps(lc, start + steps)
    if saved is not None:
        show(f"  saved checkpoint {saved}")


def _show_imports(show: Show, imports: Imports | None) -> None:
    """The heavy imports VALIDATED ran on a thread beside validation (its time above includes them)."""
    if isinstance(imports, Mapping):
        modules = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in imports["modules"].items())
        show(f"    imports {imports['duration_s']:7.3f} s ({modules or 'already imported'}), beside validation")


def _printer() -> Show:
    if launchers.rank():
        return lambda _msg: None
    from rich.console import Console

    console = Console(stderr=False, highlight=False, soft_wrap=True)  # paths stay whole, one per line
    return lambda msg: console.print(redact_text(msg))  # a path may hold a password= (docs/failures.md#credentials)
