"""Benchmark `lifecycle audit` at scale: N ranks x ~60 records, a few injected faults.

Prints the audit's throughput as a ratio to a bare `orjson.loads` loop over the same lines (target
>= 0.5), first for ONE process (jobs=1), then for the default number of processes: the median over
`--repeat` runs, each run timing the bare loop and the audit back to back, with the lowest and
highest. Then the audit's peak traced memory at `--memory-ranks` rank counts (it should grow
linearly with ranks; 16384 checks that at 4x the default).

    python benchmarks/audit.py [--ranks 4096] [--steps 30] [--repeat 5] [--memory-ranks 1024,4096,16384] [--dir DIR]

The logs are written by `write_run`, a direct writer that reproduces AuditLog's exact bytes
(sorted-keys orjson, SHA-256 chain, `hash` appended last) without structlog's per-record cost.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lifecycle.log import GENESIS
from lifecycle.testing import rank_file

STATES = ("VALIDATED", "SERVICES_READY", "DISTRIBUTED", "MODEL_BUILT", "CALLBACKS_BOUND")
TRIGGERS = ("validate", "start_services", "init_distributed", "build_model", "bind_callbacks")
SOURCES = ("CONFIGURED", *STATES[:-1])
BASE_S = {"validate": 0.2, "start_services": 1.5, "init_distributed": 3.0, "build_model": 4.0, "bind_callbacks": 0.05}
EFFECTS = {
    "start_services": ("files", "tokenizer", "writers"),
    "init_distributed": ("process_group", "parallel_state", "rng", "cuda_device"),
    "build_model": ("model",),
    "bind_callbacks": ("callbacks",),
}
FAULTS = {
    "died": "rank died during init_distributed",
    "tampered": "a loss value edited",
    "wrong_target": "callbacks bound to the provider's config",
    "straggler": "build_model 10x slower",
}


class ChainWriter:
    """Writes one rank's records exactly as lifecycle.log.AuditLog does."""

    def __init__(self, run_id: str, rank: int, world: int) -> None:
        self.base = {"run_id": run_id, "rank": rank, "world_size": world, "generation": 0, "cycle": 0}
        self.seq = 0
        self.prev = GENESIS
        self.lines: list[bytes] = []

    def emit(self, ts: float, event: str, **fields: Any) -> None:
        rec = {**self.base, **fields, "event": event, "ts": ts, "seq": self.seq, "prev_hash": self.prev}
        body = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha256(body).hexdigest()
        self.lines.append(body[:-1] + b',"hash":"' + digest.encode() + b'"}\n')
        self.seq += 1
        self.prev = digest


def rank_records(w: ChainWriter, t: float, *, steps: int, slow: float = 1.0, fault: str | None = None) -> None:
    """A training startup to CALLBACKS_BOUND, `steps` steps and a shutdown; `fault` changes it."""
    rank = w.base["rank"]
    w.emit(
        t,
        "lifecycle_started",
        plan="training",
        target="CALLBACKS_BOUND",
        policy="raise",
        pid=1000 + rank,
        host=f"node{rank // 8:04d}",
        rehearsal=None,
    )
    fingerprint = hashlib.sha256(b"config").hexdigest()
    model_id, provider_id = f"0x7f00{rank:06x}10", f"0x7f00{rank:06x}20"
    for trigger, source, dest in zip(TRIGGERS, SOURCES, STATES, strict=True):
        duration = BASE_S[trigger] * (1 + (rank % 97) / 500) * (slow if trigger == "build_model" else 1)
        w.emit(t, "transition_started", trigger=trigger, source=source)
        for kind in EFFECTS.get(trigger, ()):
            w.emit(t + duration / 2, "side_effect", kind=kind, trigger=trigger)
            if fault == "died" and kind == "rng":
                return
        _entry_record(w, t + duration * 0.9, trigger, fingerprint, model_id, provider_id, fault)
        t += duration
        w.emit(
            t,
            "transition_completed",
            trigger=trigger,
            source=source,
            dest=dest,
            duration_s=duration,
            config_fingerprint=fingerprint,
        )
    for step in range(1, steps + 1):
        t += 0.5
        w.emit(t, "step_completed", step=step, loss=10.0 / step, duration_s=0.5)
        if step == 1:
            w.emit(t, "first_step_finalized", finalizer_calls=1)
    w.emit(t, "lifecycle_shutdown", source="CALLBACKS_BOUND")
    w.emit(t, "transition_started", trigger="shutdown", source="CALLBACKS_BOUND")
    w.emit(
        t + 0.1,
        "transition_completed",
        trigger="shutdown",
        source="CALLBACKS_BOUND",
        dest="SHUT_DOWN",
        duration_s=0.1,
        config_fingerprint=fingerprint,
    )


def _entry_record(
    w: ChainWriter, ts: float, trigger: str, fingerprint: str, model_id: str, provider_id: str, fault: str | None
) -> None:
    if trigger == "validate":
        config = {
            "model": {"num_layers": 2, "hidden_size": 64},
            "parallel": {"tp": 1, "pp": 1},
            "train": {"seed": 1234, "micro_batch_size": 2},
        }
        w.emit(ts, "config_validated", fingerprint=fingerprint, config=config, environment=True)
    elif trigger == "start_services":
        w.emit(ts, "services_ready", tokenizer="NullTokenizer", vocab_size=128, vocab_source="explicit")
    elif trigger == "init_distributed":
        w.emit(ts, "distributed_initialized", backend="nccl", tp=1, pp=1, cp=1, ep=1, dp=w.base["world_size"], vpp=None)
    elif trigger == "build_model":
        w.emit(ts, "model_built", chunks=1, model_config_id=model_id, provider_config_id=provider_id, optimizer=True)
    else:
        target = provider_id if fault == "wrong_target" else model_id
        w.emit(
            ts,
            "callbacks_bound",
            target_type="TransformerConfig",
            target_id=target,
            scheduler_config_id=model_id,
            provider_config_id=provider_id,
            copied=True,
            slots=["finalize_model_grads_func", "grad_scale_func", "no_sync_func"],
            chunks=1,
            overlap_grad_reduce=False,
            overlap_param_gather=False,
            policy="replace",
        )


def fault_ranks(ranks: int) -> dict[int, str]:
    """A handful of deterministic faults spread over the ranks (none below 4 ranks)."""
    if ranks < 4:
        return {}
    names = list(FAULTS)
    return {(ranks * (i + 1)) // (len(names) + 1): name for i, name in enumerate(names)}


def write_run(
    log_dir: Path,
    ranks: int,
    *,
    steps: int = 30,
    run_id: str = "bench",
    faults: dict[int, str] | None = None,
    t0: float = 1.7e9,
) -> int:
    """Write `ranks` rank files under `log_dir`; returns the number of lines written."""
    log_dir.mkdir(parents=True, exist_ok=True)
    faults = fault_ranks(ranks) if faults is None else faults
    total = 0
    for rank in range(ranks):
        fault = faults.get(rank)
        w = ChainWriter(run_id, rank, ranks)
        rank_records(w, t0 + (rank % 13) * 0.01, steps=steps, slow=10.0 if fault == "straggler" else 1.0, fault=fault)
        if fault == "tampered":
            w.lines[-5] = w.lines[-5].replace(b'"loss":', b'"loss":1', 1)
        rank_file(log_dir, rank).write_bytes(b"".join(w.lines))
        total += len(w.lines)
    return total


def bare_loop(log_dir: Path) -> float:
    return _bare(log_dir)[0]


def _bare(log_dir: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the baseline: read every rank file, orjson.loads every line."""
    start, cpu = time.perf_counter(), time.process_time()
    loads = orjson.loads
    for path in sorted(log_dir.glob("rank-*.jsonl")):
        for line in path.read_bytes().splitlines():
            loads(line)
    return time.perf_counter() - start, time.process_time() - cpu


def timed_audit(log_dir: Path, jobs: int | None = None) -> tuple[float, Any]:
    return _timed(log_dir, jobs)[::2]


def _timed(log_dir: Path, jobs: int | None) -> tuple[float, float, Any]:
    """(wall, CPU of this process, result) of one audit."""
    from lifecycle.audit import audit

    start, cpu = time.perf_counter(), time.process_time()
    result = audit([str(log_dir)], jobs=jobs)
    return time.perf_counter() - start, time.process_time() - cpu, result


def peak_bytes(log_dir: Path) -> int:
    from lifecycle.audit import audit

    tracemalloc.start()
    audit([str(log_dir)], jobs=1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def _jobs(log_dir: Path) -> int:
    from lifecycle.testing import default_workers

    return default_workers([str(log_dir)])


def _ratios(log_dir: Path, jobs: int | None, repeat: int) -> tuple[list[float], list[float], list[float], Any]:
    """Per run: bare and audit back to back (the machine may be shared: pairs see the same load).
    Returns the wall ratios, the CPU ratios (this process only) and the audit's wall times."""
    walls, cpus, audits, result = [], [], [], None
    for _ in range(repeat):
        bare_s, bare_cpu = _bare(log_dir)
        audit_s, audit_cpu, result = _timed(log_dir, jobs)
        walls.append(bare_s / audit_s)
        cpus.append(bare_cpu / audit_cpu)
        audits.append(audit_s)
    return walls, cpus, audits, result


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=30, help="step_completed records per rank")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each measurement (at least 3)")
    parser.add_argument(
        "--memory-ranks",
        default=None,
        metavar="N,N",
        help="rank counts to measure peak memory at (default: ranks/4 and ranks)",
    )
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/results.toml")
    args = parser.parse_args()
    repeat = max(3, args.repeat)
    root = args.dir or Path(tempfile.mkdtemp(prefix="lifecycle-audit-bench-"))
    full = root / f"ranks-{args.ranks}"
    lines = write_run(full, args.ranks, steps=args.steps)
    size = sum(p.stat().st_size for p in full.glob("rank-*.jsonl"))
    one, one_cpu, one_s, result = _ratios(full, 1, repeat)
    jobs = _jobs(full)
    many, _, many_s, par_result = _ratios(full, None, repeat)
    if par_result.findings != result.findings:
        raise SystemExit("parallel and single-process audits disagree")
    rules = Counter(f.rule for f in result.findings)
    print(f"logs: {args.ranks} ranks x {lines / args.ranks:.1f} records = {lines} lines, {size / 2**20:.1f} MiB")
    print(f"injected faults: {sorted(fault_ranks(args.ranks).items())}")
    print(f"findings: {dict(sorted(rules.items()))} exit={result.exit_code}")
    print(f"ONE PROCESS (jobs=1): audit/bare throughput ratio {_spread(one)} over {repeat} runs (target >= 0.5)")
    print(
        f"    audit {statistics.median(one_s):.3f} s median ({lines / statistics.median(one_s):,.0f} lines/s); "
        f"CPU-time ratio {_spread(one_cpu)}"
    )
    print(f"default jobs ({jobs} processes): ratio {_spread(many)}; audit {statistics.median(many_s):.3f} s median")
    counts = (
        [int(n) for n in args.memory_ranks.split(",")] if args.memory_ranks else [max(args.ranks // 4, 1), args.ranks]
    )
    for ranks in counts:
        log_dir = full if ranks == args.ranks else root / f"ranks-{ranks}"
        if log_dir != full:
            write_run(log_dir, ranks, steps=args.steps)
        peak = peak_bytes(log_dir)
        print(f"peak traced memory at {ranks} ranks: {peak / 2**20:.1f} MiB ({peak / ranks / 1024:.2f} KiB/rank)")
    if args.record:  # the memory of the last count measured
        from _results import record, spread

        figures = spread("ratio", one) | spread("cpu_ratio", one_cpu) | {"jobs_ratio": statistics.median(many)}
        record("audit", figures | {"peak_mib": peak / 2**20, "kib_per_rank": peak / ranks / 1024})
    return 0


if __name__ == "__main__":
    sys.exit(main())
