"""Environment checks: what this machine must offer for a config (CUDA, packages, paths, launcher).

Each reads an `Environment` record (built once by `probe_environment`) and never the machine itself.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from lifecycle.config._bounds import ENDPOINT
from lifecycle.config._checkpoints import checkpoint_problem
from lifecycle.config._intrinsic import world_problems
from lifecycle.config._problems import TE_EXTRA, Environment, Problem
from lifecycle.config._problems import environment as _e
from lifecycle.config._records import RunConfig
from lifecycle.launchers import identity_variables
from lifecycle.log import LogDir
from lifecycle.redaction import redact_text

OPTIONAL_MODULES = ("transformer_engine", "apex", "torch_memory_saver", "transformers", "tensorboard")
OTEL_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
"""What `logging.otel` needs: the SDK for a file, and the OTLP/HTTP exporter for an endpoint."""


def probe_environment(config: RunConfig, log_dir: str | Path | None = None) -> Environment:
    """Read the facts environment checks need (imports torch to ask about CUDA; creates nothing).
    `log_dir`: the run's log directory where a lifecycle was given one (`Lifecycle(log_dir=)`);
    by default the config's `logging.log_dir`."""
    import torch

    paths = [p for p in (config.tokenizer.path, config.checkpoint.load) if p]
    log_dir = log_dir if log_dir is not None else config.logging.log_dir
    return Environment(
        cuda=bool(torch.cuda.is_available()),
        modules=frozenset(m for m in OPTIONAL_MODULES + OTEL_MODULES if _importable(m)),
        existing_dirs=frozenset(p for p in paths if Path(p).is_dir()),
        env=identity_variables(),
        log_dir_problem=LogDir(log_dir or None).problem(),
        checkpoint_problem=checkpoint_problem(config.checkpoint.load) if config.checkpoint.load else None,
    )


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a dotted name whose parent package is absent
        return False


def check_launcher(c: RunConfig, env: Environment) -> list[Problem]:
    """The launcher's WORLD_SIZE/RANK agree with the config; world size divisibility when only the
    launcher sets it; MASTER_ADDR/MASTER_PORT exist for more than one rank."""
    if c.backend == "fake":
        return []
    out: list[Problem] = []
    raw = {k: env.env.get(k) for k in ("WORLD_SIZE", "RANK")}
    launched = {k: int(v) for k, v in raw.items() if v is not None and v.isdigit()}
    world = c.parallel.world_size
    if world is None:
        world = launched.get("WORLD_SIZE", 1)
        out += world_problems(c, world, "WORLD_SIZE", "launcher", environment=True)
    for key, name in (("WORLD_SIZE", "world_size"), ("RANK", "rank")):
        mine = getattr(c.parallel, name)
        if mine is not None and key in launched and launched[key] != mine:
            out.append(
                _e(
                    "launcher",
                    f"parallel.{name}",
                    mine,
                    f"the launcher set {key}={launched[key]}",
                    f"remove parallel.{name} or launch with {key}={mine}",
                )
            )
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in env.env]
    if world > 1 and missing:
        out.append(
            _e(
                "launcher",
                "parallel.world_size",
                world,
                f"{world} ranks need a rendezvous but {', '.join(missing)} is not set",
                "launch with torchrun (or `lifecycle run --nproc N`)",
            )
        )
    return out


def check_cuda_backend(c: RunConfig, env: Environment) -> list[Problem]:
    """backend nccl needs CUDA; rehearsal=false (real CUDA paths) needs CUDA."""
    out = []
    if c.backend == "nccl" and not env.cuda:
        out.append(
            _e(
                "cuda_backend",
                "backend",
                "nccl",
                "NCCL needs CUDA and none is available",
                "use backend=gloo (the CPU rehearsal runs on it) or run on a GPU machine",
            )
        )
    if c.rehearsal is False and not env.cuda and c.backend != "fake":
        out.append(
            _e(
                "cuda_backend",
                "rehearsal",
                False,
                "megatron's CUDA paths need CUDA and none is available",
                "set rehearsal=null (auto) or true to rehearse on CPU",
            )
        )
    return out


def check_transformer_engine(c: RunConfig, env: Environment) -> list[Problem]:
    """transformer-engine layers and TP comm overlap need CUDA and transformer_engine importable."""
    wanted = {
        "model.transformer_impl": c.model.transformer_impl == "transformer_engine",
        "parallel.tp_comm_overlap": c.parallel.tp_comm_overlap,
    }
    out = []
    for name, on in wanted.items():
        if not on:
            continue
        value = c.model.transformer_impl if name.startswith("model") else True
        if "transformer_engine" not in env.modules:
            out.append(
                _e(
                    "transformer_engine",
                    name,
                    value,
                    "transformer_engine is not importable",
                    f"`{TE_EXTRA}`, or use model.transformer_impl=local",
                )
            )
        if not env.cuda:
            out.append(
                _e(
                    "transformer_engine",
                    name,
                    value,
                    "transformer-engine needs CUDA",
                    "use model.transformer_impl=local on a machine without a GPU",
                )
            )
    return out


def check_memory_saver(c: RunConfig, env: Environment) -> list[Problem]:
    """KV-cache offload/recompute and static KV memory pointers need torch_memory_saver."""
    if "torch_memory_saver" in env.modules:
        return []
    inf, out = c.inference, []
    if inf.kv_cache_management_mode in ("offload", "recompute"):
        out.append(
            _e(
                "memory_saver",
                "inference.kv_cache_management_mode",
                inf.kv_cache_management_mode,
                "needs torch_memory_saver, not importable",
                "`pip install torch_memory_saver` or use kv_cache_management_mode=persist",
            )
        )
    if inf.static_kv_memory_pointers:
        out.append(
            _e(
                "memory_saver",
                "inference.static_kv_memory_pointers",
                True,
                "needs torch_memory_saver, not importable",
                "`pip install torch_memory_saver` or set static_kv_memory_pointers=false",
            )
        )
    return out


def check_paths(c: RunConfig, env: Environment) -> list[Problem]:
    """tokenizer.path is a directory (and transformers importable); checkpoint.load holds a checkpoint."""
    tok, out = c.tokenizer, []
    if tok.type == "huggingface" and tok.build and tok.path:
        if tok.path not in env.existing_dirs:
            out.append(
                _e(
                    "paths",
                    "tokenizer.path",
                    tok.path,
                    "not an existing directory",
                    "point tokenizer.path at a local tokenizer directory (no downloads)",
                )
            )
        if "transformers" not in env.modules:
            out.append(
                _e(
                    "paths",
                    "tokenizer.type",
                    "huggingface",
                    "loading a huggingface tokenizer needs `transformers`, not importable",
                    "`pip install 'megatron-lifecycle[hf]'`, or use tokenizer.type=null",
                )
            )
    load = c.checkpoint.load
    if load and env.checkpoint_problem:
        out.append(
            _e(
                "paths",
                "checkpoint.load",
                load,
                env.checkpoint_problem,
                "point checkpoint.load at a directory a run saved checkpoints to (checkpoint.save), or remove it",
            )
        )
    return out


def check_writers(c: RunConfig, env: Environment) -> list[Problem]:
    """logging.log_dir can hold the startup log; tensorboard_dir needs tensorboard."""
    out = []
    if env.log_dir_problem:
        out.append(
            _e(
                "writers",
                "logging.log_dir",
                c.logging.log_dir,
                env.log_dir_problem,
                "choose a writable directory",
            )
        )
    if c.logging.tensorboard_dir and "tensorboard" not in env.modules:
        out.append(
            _e(
                "writers",
                "logging.tensorboard_dir",
                c.logging.tensorboard_dir,
                "the tensorboard writer needs `tensorboard`, not importable",
                "`pip install tensorboard`, or remove logging.tensorboard_dir",
            )
        )
    return out


def check_otel_exporter(c: RunConfig, env: Environment) -> list[Problem]:
    """logging.otel needs opentelemetry-sdk; an endpoint also needs the OTLP/HTTP exporter."""
    otel = (c.logging.otel or "").strip()
    if not otel:
        return []
    if "opentelemetry.sdk" not in env.modules:
        why, fix = "live spans need opentelemetry-sdk, not importable", "pip install megatron-lifecycle[otel]"
    elif ENDPOINT.match(otel) and OTEL_MODULES[1] not in env.modules:
        why, fix = (
            "an OTLP endpoint needs opentelemetry-exporter-otlp-proto-http, not importable",
            "pip install opentelemetry-exporter-otlp, or set logging.otel to a local file",
        )
    else:
        return []
    return [_e("otel_exporter", "logging.otel", redact_text(c.logging.otel or ""), why, fix)]


def check_distributed_optimizer_checkpoints(c: RunConfig, env: Environment) -> list[Problem]:
    """The distributed optimizer's checkpoints need Apex's or Transformer Engine's Adam.

    Without either, megatron-core falls back to torch's Adam, whose per-parameter `step` its
    DistributedOptimizer checkpoint code does not handle (0.15.3: the save asserts on it; 0.19: the
    load fails in every sharding type), so such a run would fail after its steps, at the save, or
    at MODEL_BUILT's load. Refused here instead, before any side effect."""
    wanted = [
        name
        for name, value in (("checkpoint.save", c.checkpoint.save), ("checkpoint.load", c.checkpoint.load))
        if value
    ]
    if not (c.ddp.use_distributed_optimizer and wanted) or env.modules & {"apex", "transformer_engine"}:
        return []
    return [
        _e(
            "distributed_optimizer_checkpoints",
            "ddp.use_distributed_optimizer",
            True,
            f"with {' and '.join(wanted)}, the distributed optimizer's checkpoints need Apex or Transformer "
            "Engine (megatron-core's checkpoint code fails on torch's Adam, its fallback without them)",
            f"`{TE_EXTRA}` on a CUDA machine, or set ddp.use_distributed_optimizer=false, or remove "
            f"{' and '.join(wanted)}",
        )
    ]


ENVIRONMENT = (
    check_launcher,
    check_cuda_backend,
    check_transformer_engine,
    check_memory_saver,
    check_paths,
    check_distributed_optimizer_checkpoints,
    check_writers,
    check_otel_exporter,
)
