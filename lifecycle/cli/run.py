"""`lifecycle run`: drive a Megatron startup to its plan's target, train N steps, shut down.

With `--nproc N` (N > 1) outside a launcher, it re-executes itself under torchrun with N local ranks;
`torchrun --nproc-per-node N -m lifecycle run ...` works the same.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from states import PLAN_TARGETS, STARTUP_ORDER, Plan, State

PROVIDERS = ("gpt", "copying", "gpt-builder", "hybrid-builder")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="drive startup to the plan's target state and run training steps",
                       description=__doc__)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", help="a shipped preset, e.g. tiny-gpt (default when --config is absent)")
    src.add_argument("--config", help="a RunConfig YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set parallel.tp=2 (repeatable)")
    p.add_argument("--plan", choices=[x.value for x in Plan], help="training, inference, convert or rl")
    p.add_argument("--nproc", type=int, default=1, help="local ranks to launch (torchrun)")
    p.add_argument("--steps", type=int, help="training steps after startup (default: training.steps)")
    p.add_argument("--log-dir", help="directory for the per-rank startup logs (rank-NNNNN.jsonl)")
    p.add_argument("--provider", default="gpt", help=f"model provider: one of {', '.join(PROVIDERS)}")
    p.add_argument("--tripwires", choices=("raise", "warn", "off"), default="raise")
    p.set_defaults(func=run)


# megatron-core's import-time notices about optional packages a CPU rehearsal does not use.
_QUIET = (r"(Transformer Engine and )?Apex is not installed", r"Transformer Engine and Apex are not installed",
          r"full scope is deprecated")


def run(args: argparse.Namespace) -> int:
    import warnings

    for pattern in _QUIET:
        warnings.filterwarnings("ignore", message=pattern, category=UserWarning)
    if args.nproc < 1:
        print("lifecycle run: --nproc must be at least 1", file=sys.stderr)
        return 2
    if args.nproc > 1 and "LOCAL_RANK" not in os.environ:
        return _launch(args)
    from lifecycle.errors import LifecycleError

    try:
        config = _load(args)
    except LifecycleError as exc:
        print(f"lifecycle run: {exc}", file=sys.stderr)
        return 2
    try:
        return _drive(args, config)
    except LifecycleError as exc:
        rank = os.environ.get("RANK", "0")
        print(f"lifecycle run: rank {rank} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _load(args: argparse.Namespace) -> Any:
    from lifecycle.config import RunConfig

    overrides = list(args.overrides)
    if args.plan:
        overrides.append(f"plan={args.plan}")
    if args.log_dir:
        overrides.append(f"logging.log_dir={args.log_dir}")
    if args.config:
        return RunConfig.from_yaml(args.config, overrides)
    return RunConfig.preset(args.preset or "tiny-gpt", overrides)


def _drive(args: argparse.Namespace, config: Any) -> int:
    from lifecycle.engine import Lifecycle
    from lifecycle.megatron.train import StepResult, train_steps

    show = _printer()
    steps = config.training.steps if args.steps is None else args.steps
    with Lifecycle(config, args.provider, tripwires=args.tripwires) as lc:
        show(f"run {lc.run_id}: plan {lc.plan.value} → {lc.target.name}, {lc.runtime.world_size} rank(s)")
        for dest in STARTUP_ORDER[1 : PLAN_TARGETS[lc.plan].startup_index + 1]:
            started = time.perf_counter()
            lc.advance_to(dest)
            show(f"  ✓ {dest.name:<16} {time.perf_counter() - started:7.3f} s")
            _show_imports(show, lc.runtime.extras.get("imports") if dest is State.VALIDATED else None)
        if lc.state is State.CALLBACKS_BOUND and steps > 0:
            def on_step(result: StepResult) -> None:
                loss = "n/a (not last stage)" if result.loss is None else f"{result.loss:.4f}"
                show(f"  step {result.step}/{steps}: loss {loss}, {result.duration_s:.3f} s")

            train_steps(lc, steps, on_step)
        log_path = lc.log_path
    show(f"done; startup log: {log_path.parent if log_path else '(no --log-dir given)'}")
    return 0


def _show_imports(show: Any, imports: Any) -> None:
    """The heavy imports VALIDATED ran on a thread beside validation (its time above includes them)."""
    if isinstance(imports, Mapping):
        modules = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in imports["modules"].items())
        show(f"    imports {imports['duration_s']:7.3f} s ({modules or 'already imported'}), beside validation")


def _printer() -> Any:
    if os.environ.get("RANK", "0") != "0":
        return lambda _msg: None
    from rich.console import Console

    console = Console(stderr=False, highlight=False)
    return console.print


def _launch(args: argparse.Namespace) -> int:
    from lifecycle.engine.launch import free_port
    from lifecycle.runtime import new_run_id

    # Drop --nproc: torchrun would read it as an ambiguous abbreviation of its own --nproc-per-node.
    argv, skip = [], False
    for arg in args.argv:
        if skip or arg.startswith("--nproc="):
            skip = False
            continue
        if arg == "--nproc":
            skip = True
            continue
        argv.append(arg)
    env = dict(os.environ, LIFECYCLE_RUN_ID=os.environ.get("LIFECYCLE_RUN_ID") or new_run_id())
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}", "-m", "lifecycle", *argv]
    return subprocess.call(cmd, env=env)
