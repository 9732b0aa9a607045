"""2-rank tiny-GPT startup + 3 training steps through the lifecycle, as a ratio to the same work
written as a plain megatron-core script.

    python benchmarks/rehearsal.py [--repeats 5]

The plain script does the same work with no lifecycle: the same CPU rehearsal, tokenizer
(`NullTokenizer`), writers (none in the tiny-gpt preset), process group, parallel state and seeds,
the same model, DDP and optimizer (built by the same megatron-core calls, through the helpers the
lifecycle's phases use, so every config field matches), the same callbacks, data and steps. What it
lacks is what the lifecycle adds: validation, the engine and its guards, tripwires, the hash-chained
log, binding verification.

Each run spawns 2 fresh gloo ranks; the two variants alternate (ABBA) so both see the same load.
Both rendezvous as under torchrun: the benchmark hosts a fresh TCPStore for each run, as torchrun's
agent does, and every rank is its client (TORCHELASTIC_USE_AGENT_STORE). Otherwise a rank that
starts before rank 0 has its store up sleeps between connection attempts — torch's backoff in the
plain script, a 0.2 s poll in the lifecycle — and those sleeps, not the work, decide the result.
"startup+steps" runs from the moment the last rank has imported megatron.core (both variants pay
that ~7 s import; the ranks finish it at different times, and the first collective makes the early
one wait) to the end of step 3 on the last rank. "slowest rank's" is the older measure, each rank
timed from its own import, the slower counting: it includes that import skew. "end to end" is the
wall time of the spawn. On a
loaded machine wall times swing by several x between runs, so the CPU seconds of the same spans
(both ranks' process time; for end to end, every rank's whole process, read from the rusage of
whichever process reaped it: this one, or the fork server that forks the ranks on a CPU machine) are printed too. Ranks
run with OMP_NUM_THREADS=1 unless it is set.
Printed: medians over the runs, min-max spread, the per-run paired ratios, the per-phase breakdown
of rank 0 for both, the load average during the runs, and what one rank writes during startup.
Target: lifecycle / plain <= 1.05 on both.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS = 3
ROWS = ("imports", "validate", "services", "distributed", "model", "bind", "engine", "steps")
_STATE_ROWS = {
    "VALIDATED": "validate",
    "SERVICES_READY": "services",
    "DISTRIBUTED": "distributed",
    "MODEL_BUILT": "model",
    "CALLBACKS_BOUND": "bind",
}


def _config() -> Any:
    from lifecycle import RunConfig

    return RunConfig.preset("tiny-gpt")


def _agent_store(port: int) -> None:
    """Rendezvous as under torchrun: every rank a client of the store its agent (here the benchmark)
    already hosts."""
    os.environ.update(MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")


def lifecycle_rank(log_dir: str, store_port: int) -> dict[str, Any]:
    _agent_store(store_port)
    began = time.time()
    import megatron.core  # noqa: F401  (import cost excluded from the timing, as in the plain script)

    imported = time.time()

    from lifecycle import Lifecycle
    from lifecycle.core_entry.train import train_steps
    from states import State

    start, cpu, started = time.perf_counter(), time.process_time(), time.time()
    with Lifecycle(_config(), "gpt", log_dir) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        startup = time.perf_counter() - start
        train_steps(lc, STEPS)
        total, cpu, finished = time.perf_counter() - start, time.process_time() - cpu, time.time()
        keys = _store_keys()
        path = lc.log_path
    assert path is not None
    phases = _phases_from_log(path.read_bytes().splitlines(), startup)
    phases["steps"] = total - startup
    return {
        "total": total,
        "cpu": cpu,
        "phases": phases,
        "writes": _startup_writes(path),
        "store_keys": keys,
        "started": started,
        "finished": finished,
        "began": began,
        "imported": imported,
        "ended": time.time(),
    }


def _store_keys() -> int:
    """Keys in the rendezvous store (the benchmark's, both ranks'), through the default process
    group's store, as the plain script counts them (a PrefixStore counts its whole store's keys)."""
    import torch.distributed as dist

    return int(dist.distributed_c10d._get_default_store().num_keys())


def _phases_from_log(lines: list[bytes], startup: float) -> dict[str, float]:
    """Per-phase seconds from the log: each state's own work, the imports' wait, the engine's rest."""
    phases = dict.fromkeys(ROWS, 0.0)
    waited = 0.0
    for line in lines:
        rec = json.loads(line)
        if rec["event"] == "imports":
            waited += rec["waited_s"]
        elif rec["event"] == "transition_completed" and rec["dest"] in _STATE_ROWS:
            phases[_STATE_ROWS[rec["dest"]]] += rec["duration_s"]
    phases["imports"] = waited
    phases["validate"] -= waited
    phases["engine"] = startup - sum(phases.values())
    return phases


def _startup_writes(path: Path) -> dict[str, int]:
    """Records and bytes this rank's log holds once CALLBACKS_BOUND is reached."""
    records = size = 0
    for line in path.read_bytes().splitlines():
        records, size = records + 1, size + len(line) + 1
        rec = json.loads(line)
        if rec["event"] == "transition_completed" and rec["dest"] == "CALLBACKS_BOUND":
            break
    return {"records": records, "bytes": size}


def plain_rank(_log_dir: str, store_port: int) -> dict[str, Any]:
    """What a user writes by hand with megatron-core: no lifecycle, no log, no checks."""
    _agent_store(store_port)
    began = time.time()
    import megatron.core  # noqa: F401

    imported = time.time()

    # the lifecycle's megatron helpers, imported before the clock starts as `Lifecycle` is
    from lifecycle.core_entry import model_built, providers, train
    from lifecycle.core_entry.rehearsal import cpu_rehearsal
    from lifecycle.core_entry.services_ready import NullTokenizer

    helpers = {"model_built": model_built, "providers": providers, "train": train}
    clock, cpu, started = _Clock(), time.process_time(), time.time()
    with cpu_rehearsal():
        parts = _plain_imports() | helpers
        clock.lap("imports")
        cfg = _config()
        tokenizer = NullTokenizer(cfg.tokenizer.vocab_size)
        clock.lap("services")
        groups = _plain_distributed(parts, cfg)
        clock.lap("distributed")
        model, optimizer, tc = _plain_model(parts, cfg, tokenizer, groups)
        clock.lap("model")
        tc.finalize_model_grads_func = parts["finalize_model_grads"]
        tc.grad_scale_func = optimizer.scale_loss
        tc.no_sync_func = model[0].no_sync
        clock.lap("bind")
        _plain_steps(parts, cfg, model, optimizer)
        clock.lap("steps")
        cpu, finished = time.process_time() - cpu, time.time()
        keys = _store_keys()
        parts["dist"].barrier()
        parts["ps"].destroy_model_parallel()
        parts["dist"].destroy_process_group()
    return {
        "total": clock.total,
        "cpu": cpu,
        "phases": clock.phases,
        "writes": {"records": 0, "bytes": 0},
        "store_keys": keys,
        "started": started,
        "finished": finished,
        "began": began,
        "imported": imported,
        "ended": time.time(),
    }


class _Clock:
    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.phases = dict.fromkeys(ROWS, 0.0)
        self.total = 0.0

    def lap(self, row: str) -> None:
        now = time.perf_counter()
        self.phases[row] += now - self.last
        self.last, self.total = now, now - self.start


def _plain_imports() -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    return {
        "torch": torch,
        "dist": dist,
        "ps": ps,
        "finalize_model_grads": finalize_model_grads,
        "schedule": get_forward_backward_func,
        "groups": ProcessGroupCollection,
        "seed": model_parallel_cuda_manual_seed,
    }


def _plain_distributed(parts: dict[str, Any], cfg: Any) -> Any:
    import random

    parts["dist"].init_process_group("gloo", init_method="env://")
    parts["ps"].initialize_model_parallel(create_gloo_process_groups=True)
    random.seed(cfg.training.seed)
    parts["torch"].manual_seed(cfg.training.seed)
    parts["seed"](cfg.training.seed, force_reset_rng=True)
    return parts["groups"].use_mpu_process_groups()


def _plain_model(parts: dict[str, Any], cfg: Any, tokenizer: Any, groups: Any) -> tuple[list[Any], Any, Any]:
    mb, prov = parts["model_built"], parts["providers"]
    tc = prov.transformer_config(cfg)
    inputs = prov.model_inputs(cfg, tokenizer.vocab_size)
    chunks = mb.build_chunks(prov.gpt_provider, tc, inputs)
    model = mb.wrap_ddp(chunks, mb.megatron_ddp_config(cfg), groups)
    return model, mb.build_optimizer(cfg, model, groups), tc


def _plain_steps(parts: dict[str, Any], cfg: Any, model: list[Any], optimizer: Any) -> None:
    m, t = cfg.model, cfg.training
    vocab = parts["providers"].model_inputs(cfg, cfg.tokenizer.vocab_size + 1).vocab_size
    data = parts["train"].synthetic_batches(cfg, vocab, t.seed + parts["dist"].get_rank())
    schedule = parts["schedule"]()
    for _ in range(STEPS):
        model[0].zero_grad_buffer()
        optimizer.zero_grad()
        schedule(
            forward_step_func=parts["train"].forward_step,
            data_iterator=data,
            model=model,
            num_microbatches=t.num_microbatches,
            seq_length=m.seq_length,
            micro_batch_size=t.micro_batch_size,
            forward_only=False,
        )
        optimizer.step()


def _children_cpu() -> float:
    """CPU seconds of every rank ended so far: this process's reaped children, and those of the fork
    server (where ranks are forked on a machine without an accelerator, the server, not this process,
    reaps them: this process's own children's rusage then stays at 0)."""
    own = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime
    server = _fork_server()
    if server is not None:
        times = server.cpu_times()
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _fork_server() -> Any:
    """The running fork server of this process, as a psutil.Process, or None."""
    from multiprocessing import forkserver

    import psutil

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # the stdlib keeps it private
    try:
        return psutil.Process(pid) if pid else None
    except psutil.NoSuchProcess:
        return None


def _measure(fn: Any, log_dir: str) -> dict[str, Any]:
    from datetime import timedelta

    import torch.distributed as dist

    from lifecycle.launchers.local import free_port, run_ranks

    load, children = os.getloadavg()[0], _children_cpu()
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=600))
    start = time.time()
    try:
        per_rank = run_ranks(fn, 2, log_dir, port, timeout_s=600)
    finally:
        end = time.time()
        del store
    while multiprocessing.active_children():  # reap every rank, or its CPU time is not counted yet
        time.sleep(0.05)
    cpu = _children_cpu() - children
    spans = {
        "spawn": max(r["began"] for r in per_rank) - start,
        "import megatron.core": max(r["imported"] - r["began"] for r in per_rank),
        "after the work": max(r["ended"] - r["imported"] - r["total"] for r in per_rank),
        "exit": end - max(r["ended"] for r in per_rank),
    }
    return {
        "inner": max(r["finished"] for r in per_rank) - max(r["started"] for r in per_rank),
        "slowest_rank": max(r["total"] for r in per_rank),
        "outer": end - start,
        "rank0": per_rank[0],
        "inner_cpu": sum(r["cpu"] for r in per_rank),
        "outer_cpu": cpu,
        "load": (load + os.getloadavg()[0]) / 2,
        "spans": spans,
    }


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):6.2f}  (min {min(values):.2f}, max {max(values):.2f})"


def report(runs: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Print the runs' figures; return the ratios lifecycle ÷ plain (of the medians; _min, _max: paired)."""
    figures: dict[str, float] = {}
    n = len(runs["plain"])
    print(
        f"runs per variant: {n} (2 gloo ranks each, {STEPS} steps), ABBA order, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    loads = [r["load"] for v in runs.values() for r in v]
    print(f"load average (1 min) during the runs: {_spread(loads)}  on {os.cpu_count()} cores")
    for key, label in (
        ("inner", "startup+steps"),
        ("slowest_rank", "slowest rank's"),
        ("outer", "end to end"),
        ("inner_cpu", "startup+steps CPU"),
        ("outer_cpu", "end to end CPU"),
    ):
        for name in ("plain", "lifecycle"):
            print(f"  {name:<10} {label:<18} s: {_spread([r[key] for r in runs[name]])}")
        base = statistics.median(r[key] for r in runs["plain"])
        if base <= 0 or any(b[key] <= 0 for b in runs["plain"]):
            print(f"  ratio lifecycle/plain {label}: not measured (a plain run's figure is 0)")
            continue
        med = statistics.median(r[key] for r in runs["lifecycle"]) / base
        paired = [a[key] / b[key] for a, b in zip(runs["lifecycle"], runs["plain"], strict=True)]
        figures |= {key: med, f"{key}_min": min(paired), f"{key}_max": max(paired)}
        print(
            f"  ratio lifecycle/plain {label}: {med:.3f}x of medians; paired per run {_spread(paired)}"
            "  (target <= 1.05x)"
        )
    print("per phase, rank 0, median seconds:      plain   lifecycle")
    for row in ROWS:
        values = [statistics.median(r["rank0"]["phases"][row] for r in runs[name]) for name in ("plain", "lifecycle")]
        print(f"  {row:<36} {values[0]:8.3f}  {values[1]:8.3f}")
    print("end to end, slowest rank, median seconds: plain   lifecycle")
    for span in runs["plain"][0]["spans"]:
        values = [statistics.median(r["spans"][span] for r in runs[name]) for name in ("plain", "lifecycle")]
        print(f"  {span:<36} {values[0]:8.3f}  {values[1]:8.3f}")
    life = runs["lifecycle"][-1]["rank0"]
    plain_keys = runs["plain"][-1]["rank0"]["store_keys"]
    print(
        f"one rank's startup writes (lifecycle): {life['writes']['records']} log records, "
        f"{life['writes']['bytes']} bytes; rendezvous store keys (both ranks): lifecycle "
        f"{life['store_keys']}, plain {plain_keys}"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--save", help="also write every run's numbers to this JSON file")
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/results.toml")
    args = parser.parse_args()
    # 2 ranks on a small machine: one intra-op thread each (inherited by the spawned ranks), so
    # idle OpenMP threads spinning under load do not swamp the CPU times
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    runs: dict[str, list[dict[str, Any]]] = {"lifecycle": [], "plain": []}
    with tempfile.TemporaryDirectory() as tmp:
        _measure(plain_rank, f"{tmp}/warm-up")  # untimed: starts the fork server, whose CPU no run should carry
        for i in range(args.repeats):
            order = (("plain", plain_rank), ("lifecycle", lifecycle_rank))
            for name, fn in order if i % 2 == 0 else order[::-1]:
                runs[name].append(_measure(fn, f"{tmp}/{name}{i}"))
                if args.save:
                    Path(args.save).write_text(json.dumps(runs))
    figures = report(runs)
    if args.record:
        from _results import record

        record("rehearsal", figures)


if __name__ == "__main__":
    main()
