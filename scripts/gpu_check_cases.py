"""The cases of `scripts/gpu-check`, each run as `gpu-check --case NAME` in a process of its own (see
its docstring for what each shows). A case returns its figures with `passed`, which `run` prints as
one JSON line; `passed` is True only on the evidence the figures hold."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CUDA = ["backend=nccl", "rehearsal=false"]
"""What every GPU case's lifecycle runs with: NCCL, the GPU itself (no CPU rehearsal)."""
RESUMED = ["model.dtype=fp16", "optimizer.loss_scale=1024", "model.hidden_dropout=0.1"]
"""verify-resume's run: fp16 with megatron's grad scaler, dropout (draws from the CUDA streams). The
scale is constant: a dynamic one starts at 2**32, so the first steps overflow and are skipped, Adam
keeps no state, and the save at step 2 cannot be loaded (KeyError on `optimizer.state.exp_avg`)."""
MAMBA = [
    *("--num-layers", "3", "--hybrid-layer-pattern", "M*-", "--hidden-size", "64", "--num-attention-heads", "4"),
    *("--mamba-head-dim", "16", "--mamba-num-groups", "2", "--mamba-state-dim", "16"),
    *("--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "4"),
    *("--train-iters", "3", "--lr", "0.001", "--seed", "1234", "--mock-data", "--split", "1,0,0", "--bf16"),
    *("--tokenizer-type", "NullTokenizer", "--vocab-size", "1000", "--eval-iters", "0", "--eval-interval", "1000"),
    *("--num-workers", "0", "--log-interval", "1", "--distributed-backend", "nccl"),
]
"""A tiny hybrid model (Mamba, attention, MLP) for `pretrain_mamba.py`, on mock data."""
Figures = dict[str, Any]


def run(name: str, needs: Sequence[str]) -> int:
    """Run case `name` here: its figures as one JSON line; exit status 0 when it passed."""
    missing = [n for n in needs if not any(importlib.util.find_spec(m) for m in n.split("|"))]
    if missing:
        figures: Figures = {"passed": False, "missing": [n.replace("|", " or ") for n in missing]}
    elif name != "store_4096_ranks" and not _cuda():
        figures = {"passed": False, "missing": ["a CUDA device"]}
    else:
        figures = CASES[name](Path(tempfile.mkdtemp(prefix=f"gpu-check-{name}-")))
    print(json.dumps(figures, default=str), flush=True)
    return 0 if figures["passed"] is True else 1


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def records(log_dir: Path) -> list[dict[str, Any]]:
    """Rank 0's startup log."""
    return [json.loads(line) for line in (log_dir / "rank-00000.jsonl").read_text().splitlines()]


def first(recs: list[dict[str, Any]], event: str, **fields: Any) -> dict[str, Any]:
    """The first record of `event` with `fields`, else {}."""
    return next((r for r in recs if r["event"] == event and all(r.get(k) == v for k, v in fields.items())), {})


def audited(log_dir: Path) -> tuple[int, list[str]]:
    """`lifecycle audit DIR`'s exit status, and the rules its findings name."""
    from lifecycle.audit import audit

    done = subprocess.run([sys.executable, "-m", "lifecycle", "audit", str(log_dir)], capture_output=True, check=False)
    findings = audit([str(log_dir / "rank-00000.jsonl")], jobs=1).findings
    return done.returncode, sorted({f.rule for f in findings})


def finite(values: Sequence[float | None]) -> bool:
    return bool(values) and all(v is not None and math.isfinite(v) for v in values)


def preset(*overrides: str, log: Path) -> Any:
    from lifecycle import RunConfig

    return RunConfig.preset(
        "tiny-gpt", [*CUDA, *overrides, f"logging.log_dir={log}"], values={"parallel.world_size": 1}
    )


@contextmanager
def one_rank() -> Iterator[None]:
    """The environment of rank 0 of a job of one, as torchrun gives it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    os.environ.update(env)
    yield


def te_layer_spec_every_state(work: Path) -> Figures:
    import torch

    from lifecycle import Lifecycle
    from lifecycle.core_entry.train import train_steps
    from states import STARTUP_ORDER, State

    log = work / "log"
    config = preset("model.transformer_impl=transformer_engine", "model.dtype=bf16", log=log)
    with Lifecycle(config, "gpt") as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        steps = train_steps(lc, 2)
        te = te_modules(lc.runtime.model)  # names only: a reference kept past the shutdown is a leak (LA023)
        on_scheduler = lc.runtime.binding.target_id == lc.runtime.binding.scheduler_config_id
    reached = [r["dest"] for r in records(log) if r["event"] == "transition_completed"]
    expected = [s.name for s in STARTUP_ORDER[1:]] + ["SHUT_DOWN"]
    exit_code, rules = audited(log)
    figures: Figures = {"states": reached, "te_modules": te, "losses": [s.loss for s in steps]}
    figures |= {"first_step_finalizer_calls": steps[0].finalizer_calls, "bound_to_scheduler_config": on_scheduler}
    figures |= {"audit_exit": exit_code, "rules": rules, "device": torch.cuda.get_device_name()}
    ok = reached == expected and bool(te) and steps[0].finalizer_calls == 1 and on_scheduler and exit_code == 0
    return {"passed": ok and finite(figures["losses"]), **figures}


def te_modules(chunks: Sequence[Any]) -> list[str]:
    """The Transformer Engine module classes in the model."""
    found = {
        type(m).__name__ for c in chunks for m in c.modules() if type(m).__module__.startswith("transformer_engine")
    }
    return sorted(found)


def _watch_init(seen: dict[str, Any]) -> None:
    """Record what `torch.distributed.init_process_group` is given and whether its group is bound to a device."""
    import torch.distributed as dist

    original = dist.init_process_group

    def init(*args: Any, **kwargs: Any) -> Any:
        seen.update(device_id=str(kwargs.get("device_id")), start=time.time())
        out = original(*args, **kwargs)
        group = dist.distributed_c10d._get_default_group()
        seen.update(end=time.time(), bound_device_id=str(getattr(group, "bound_device_id", None)))
        return out

    dist.init_process_group = init


def nccl_eager_init_in_distributed(work: Path) -> Figures:
    from functools import partial

    from lifecycle.lm_dropin import pretrain

    log, seen = work / "log", dict[str, Any]()
    _watch_init(seen)
    sys.argv = ["pretrain_gpt_tiny.py"]
    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script

    extra = ["--distributed-backend", "nccl", "--train-iters", "2"]
    with one_rank():
        result = script.main(pretrain=partial(pretrain, log_dir=str(log)), extra_argv=extra)
        groups, configured = read_back()  # what pretrain leaves up, as Megatron-LM's does
    recs = records(log)
    began = first(recs, "transition_started", source="SERVICES_READY").get("ts", math.inf)
    ended = first(recs, "transition_completed", dest="DISTRIBUTED").get("ts", -math.inf)
    inside = began <= seen.get("start", -math.inf) and seen.get("end", math.inf) <= ended
    nccl = {name: g["timeout_s"] for name, g in groups.items() if "nccl" in str(g["backend"])}
    figures: Figures = {"device_id": seen.get("device_id"), "bound_device_id": seen.get("bound_device_id")}
    figures |= {"init_inside_distributed": inside, "init_s": round(seen.get("end", 0) - seen.get("start", 0), 3)}
    figures |= {"configured_s": configured, "nccl_timeouts_s": nccl, "losses": result["losses"]}
    figures["other_timeouts_s"] = {name: g["timeout_s"] for name, g in groups.items() if name not in nccl}
    eager = seen.get("bound_device_id") not in (None, "None") and seen.get("device_id") not in (None, "None")
    same = "world" in nccl and all(t == configured for t in nccl.values())
    return {"passed": eager and inside and same and finite(result["losses"]), **figures}


def read_back() -> tuple[dict[str, dict[str, Any]], float]:
    """Each group's timeout read back from its backend (the lifecycle's `timeouts.seconds`): the world's
    and megatron's parallel_state groups; and the timeout Megatron-LM was asked for."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.training import get_args

    from lifecycle.core_entry.timeouts import seconds

    named = {"world": dist.distributed_c10d._get_default_group()}
    named |= {k.strip("_"): v for k, v in vars(parallel_state).items() if isinstance(v, dist.ProcessGroup)}
    groups = {k: {"timeout_s": seconds(g), "backend": dist.get_backend(g)} for k, g in named.items()}
    return groups, float(get_args().distributed_timeout_minutes * 60)


def lazy_nccl_group_after_callbacks_bound(work: Path) -> Figures:
    import torch
    import torch.distributed as dist

    from lifecycle import Lifecycle
    from lifecycle.core_entry.train import train_steps
    from states import State

    log = work / "log"
    with Lifecycle(preset(log=log), "gpt") as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        train_steps(lc, 1)
        group = dist.new_group([0], backend="nccl")  # made while training: its communicator at the first use
        bound = str(getattr(group, "bound_device_id", None))
        value = torch.ones(1, device="cuda")
        dist.all_reduce(value, group=group)
        torch.cuda.synchronize()
        summed = float(value.item())
    recs = records(log)
    made = [r for r in recs if r["event"] == "group_created" and "nccl" in str(r.get("backend"))]
    configured = first(recs, "timeouts_read").get("configured_s")
    exit_code, rules = audited(log)
    figures: Figures = {"group_created": made[:1], "configured_s": configured, "bound_device_id_at_creation": bound}
    figures |= {"all_reduce": summed, "audit_exit": exit_code, "rules": rules}
    read_back = bool(made) and isinstance(made[0].get("timeout_s"), (int, float)) and made[0]["timeout_s"] > 0
    return {"passed": read_back and "LA029" in rules and summed == 1.0, **figures}


def verify_resume(sets: Sequence[str], steps: int, keep: Path) -> tuple[int, str]:
    """`lifecycle verify-resume` on one rank, its checkpoints and logs kept in `keep`."""
    command = [sys.executable, "-m", "lifecycle", "verify-resume", "--nproc", "1", "--steps", str(steps)]
    command += ["--keep", str(keep), *(a for s in sets for a in ("--set", s))]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr[-2000:]


def _inner_optimizer(optimizer: Any) -> Any:
    """The torch optimizer under megatron's wrappers (chained, mixed precision, distributed)."""
    while True:
        chained = getattr(optimizer, "chained_optimizers", None)
        inner = chained[0] if chained else getattr(optimizer, "optimizer", None)
        if inner is None or inner is optimizer:
            return optimizer
        optimizer = inner


def planted_resume(sets: Sequence[str], checkpoint: Path, log: Path) -> dict[str, Any]:
    """A resume from `checkpoint` that draws from the CUDA generator before its first step."""
    import torch

    from lifecycle import Lifecycle
    from lifecycle.core_entry.train import train_steps
    from states import State

    with Lifecycle(preset(*sets, f"checkpoint.load={checkpoint}", log=log), "gpt") as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        optimizer = type(_inner_optimizer(lc.runtime.optimizer))
        scale = float(lc.runtime.optimizer.get_loss_scale())
        torch.rand(1, device="cuda")  # the planted draw
        train_steps(lc, 1)
    return {"optimizer": f"{optimizer.__module__}.{optimizer.__qualname__}", "loss_scale": scale}


def verify_resume_cuda(work: Path) -> Figures:
    sets = RESUMED
    exit_code, output = verify_resume([*CUDA, *sets], 2, work / "kept")
    recs = records(work / "kept" / "second") if (work / "kept" / "second").is_dir() else []
    restored, checked = first(recs, "streams_restored"), first(recs, "streams_checked")
    cuda_streams = sorted(s for s in restored.get("streams", {}) if s.startswith("cuda"))
    planted = planted_resume(sets, work / "kept" / "checkpoint", work / "planted")
    moved = first(records(work / "planted"), "streams_checked").get("moved", [])
    named = [m for m in moved if m["stream"].startswith("cuda") and "gpu_check_cases.py" in m.get("caller", "")]
    figures: Figures = {"verify_resume_exit": exit_code, "equal": _line(output, "bitwise equal"), **planted}
    figures |= {"cuda_streams": cuda_streams, "window_moved": checked.get("moved")}
    figures["planted_moved"] = [{"stream": m["stream"], "caller": m.get("caller")} for m in moved]
    figures |= {"optimizer_counts": checked.get("optimizer"), "saved_counts": checked.get("saved_optimizer")}
    equal = exit_code == 0 and bool(figures["equal"]) and bool(cuda_streams) and checked.get("moved") == []
    fused = "Fused" in planted["optimizer"] and planted["loss_scale"] > 0
    return {"passed": equal and fused and bool(named), **figures}


def _line(output: str, start: str) -> str | None:
    return next((line for line in output.splitlines() if line.startswith(start)), None)


def distributed_optimizer_resume(work: Path) -> Figures:
    sets = [
        *CUDA,
        "ddp.use_distributed_optimizer=true",
        "model.transformer_impl=transformer_engine",
        "model.dtype=bf16",
    ]
    exit_code, output = verify_resume(sets, 3, work / "kept")
    equal = _line(output, "bitwise equal")
    figures = {"verify_resume_exit": exit_code, "equal": equal, "not_equal": _line(output, "NOT EQUAL")}
    return {"passed": exit_code == 0 and equal is not None and "steps 1-6" in equal, **figures}


def pretrain_mamba_dropin(work: Path) -> Figures:
    checkout = Path(os.environ.get("MEGATRON_LM", ROOT / ".megatron-lm"))
    if not (checkout / "pretrain_mamba.py").is_file():
        return {"passed": False, "missing": [f"a Megatron-LM checkout at core_v0.19.0 in {checkout} (MEGATRON_LM)"]}
    runs: dict[str, dict[str, Any]] = {}
    for which in ("megatron", "lifecycle"):
        out = work / f"{which}.json"
        command = [sys.executable, __file__, "mamba", which, str(checkout), str(out), str(work / "log")]
        done = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=False)
        runs[which] = json.loads(out.read_text()) if out.is_file() else {"error": done.stderr[-1500:]}
    ours, theirs = runs["lifecycle"].get("losses"), runs["megatron"].get("losses")
    exit_code = audited(work / "log")[0] if (work / "log" / "rank-00000.jsonl").is_file() else None
    figures: Figures = {"megatron_lm_losses": theirs, "dropin_losses": ours, "audit_exit": exit_code}
    figures |= {k: v["error"] for k, v in runs.items() if "error" in v}
    same = theirs is not None and ours == theirs and len(theirs) == int(MAMBA[MAMBA.index("--train-iters") + 1])
    return {"passed": same and finite(theirs or []) and exit_code == 0, **figures}


def mamba_child(which: str, checkout: str, out: str, log: str) -> None:
    """One run of `pretrain_mamba.py` as `__main__`: Megatron-LM's `pretrain`, or the drop-in in its place."""
    import runpy
    from functools import partial

    import megatron.training
    from megatron.training import training

    losses: list[float | None] = []
    original = training.train_step

    def train_step(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        losses.append(float(result[0]["lm loss"]) if result[0] else None)
        return result

    training.train_step = train_step
    if which == "lifecycle":
        from lifecycle.lm_dropin import pretrain

        megatron.training.pretrain = partial(pretrain, log_dir=log)
    sys.path.insert(0, checkout)
    sys.argv = ["pretrain_mamba.py", *MAMBA]
    with one_rank():
        runpy.run_path(str(Path(checkout) / "pretrain_mamba.py"), run_name="__main__")
    Path(out).write_text(json.dumps({"losses": losses}))


STORE_ROW = re.compile(r"^\s+(?P<name>[^\d(]+?)\s+(?P<value>[\d,]+\.\d)")


def store_figures(output: str) -> Figures:
    """What `benchmarks/store.py` prints for its one size: the pooled p99 ratio (its last line), the
    per-pair one, the time until every survivor knew a lost node, the check-in's."""
    rows = {m["name"]: float(m["value"].replace(",", "")) for m in map(STORE_ROW.match, output.splitlines()) if m}
    ratio = re.search(r"^foreground p99 with watch / without: ([\d.]+|nan)$", output, re.MULTILINE)
    pairs = re.search(r"^\s+foreground p99 with / without, per pair: (.+)$", output, re.MULTILINE)
    figures: Figures = {
        "p99_ratio": float(ratio[1]) if ratio else None,
        "p99_ratio_per_pair": pairs[1] if pairs else None,
    }
    return figures | {
        "node_lost_known_by_all_s": rows.get("node lost, known by all s"),
        "check_in_s": rows.get("check-in s"),
    }


def store_4096_ranks(work: Path) -> Figures:
    ranks = int(os.environ.get("GPU_CHECK_STORE_RANKS", "4096"))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "store.py"),
        "--ranks",
        str(ranks),
        "--procs",
        str(max(1, cpus - 1)),
    ]
    command += ["--repeats", "2", "--window", "3", "--fresh-up-to", "0"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    figures: Figures = {"ranks": ranks, "cpus": cpus, **store_figures(done.stdout), "exit": done.returncode}
    if done.returncode != 0:
        figures["error"] = done.stderr[-1500:]
    ratio, lost = figures["p99_ratio"], figures["node_lost_known_by_all_s"]
    return {"passed": done.returncode == 0 and ratio is not None and ratio <= 1.10 and lost is not None, **figures}


CASES: dict[str, Callable[[Path], Figures]] = {
    "te_layer_spec_every_state": te_layer_spec_every_state,
    "nccl_eager_init_in_distributed": nccl_eager_init_in_distributed,
    "lazy_nccl_group_after_callbacks_bound": lazy_nccl_group_after_callbacks_bound,
    "verify_resume_cuda": verify_resume_cuda,
    "distributed_optimizer_resume": distributed_optimizer_resume,
    "pretrain_mamba_dropin": pretrain_mamba_dropin,
    "store_4096_ranks": store_4096_ranks,
}

if __name__ == "__main__" and sys.argv[1:2] == ["mamba"]:
    mamba_child(*sys.argv[2:6])
