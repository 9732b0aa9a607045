"""Benchmark `lifecycle audit` at scale: N ranks x ~60 records, a few injected faults.

Prints the audit's throughput as a ratio to a bare `orjson.loads` loop over the same lines
(target >= 0.5) and the audit's peak traced memory at N/4 and N ranks (it should grow linearly).

    python benchmarks/audit.py [--ranks 4096] [--steps 30] [--dir DIR]

The logs are written by `write_run`, a direct writer that reproduces AuditLog's exact bytes
(sorted-keys orjson, SHA-256 chain, `hash` appended last) without structlog's per-record cost.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lifecycle.log import GENESIS, rank_file

STATES = ("VALIDATED", "SERVICES_READY", "DISTRIBUTED", "MODEL_BUILT", "CALLBACKS_BOUND")
TRIGGERS = ("validate", "start_services", "init_distributed", "build_model", "bind_callbacks")
SOURCES = ("CONFIGURED", *STATES[:-1])
BASE_S = {"validate": 0.2, "start_services": 1.5, "init_distributed": 3.0, "build_model": 4.0,
          "bind_callbacks": 0.05}
EFFECTS = {"start_services": ("files", "tokenizer", "writers"),
           "init_distributed": ("process_group", "parallel_state", "rng", "cuda_device"),
           "build_model": ("model",), "bind_callbacks": ("callbacks",)}
FAULTS = {"died": "rank died during init_distributed", "tampered": "a loss value edited",
          "wrong_target": "callbacks bound to the provider's config", "straggler": "build_model 10x slower"}


class ChainWriter:
    """Writes one rank's records exactly as lifecycle.log.AuditLog does."""

    def __init__(self, run_id: str, rank: int, world: int) -> None:
        self.base = {"run_id": run_id, "rank": rank, "world_size": world, "generation": 0}
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
    w.emit(t, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise",
           pid=1000 + rank, host=f"node{rank // 8:04d}", rehearsal=None)
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
        w.emit(t, "transition_completed", trigger=trigger, source=source, dest=dest,
               duration_s=duration, config_fingerprint=fingerprint)
    for step in range(1, steps + 1):
        t += 0.5
        w.emit(t, "step_completed", step=step, loss=10.0 / step, duration_s=0.5)
        if step == 1:
            w.emit(t, "first_step_finalized", finalizer_calls=1)
    w.emit(t, "lifecycle_shutdown", source="CALLBACKS_BOUND")
    w.emit(t, "transition_started", trigger="shutdown", source="CALLBACKS_BOUND")
    w.emit(t + 0.1, "transition_completed", trigger="shutdown", source="CALLBACKS_BOUND", dest="SHUT_DOWN",
           duration_s=0.1, config_fingerprint=fingerprint)


def _entry_record(w: ChainWriter, ts: float, trigger: str, fingerprint: str, model_id: str,
                  provider_id: str, fault: str | None) -> None:
    if trigger == "validate":
        config = {"model": {"num_layers": 2, "hidden_size": 64}, "parallel": {"tp": 1, "pp": 1},
                  "train": {"seed": 1234, "micro_batch_size": 2}}
        w.emit(ts, "config_validated", fingerprint=fingerprint, config=config, environment=True)
    elif trigger == "start_services":
        w.emit(ts, "services_ready", tokenizer="NullTokenizer", vocab_size=128, vocab_source="explicit")
    elif trigger == "init_distributed":
        w.emit(ts, "distributed_initialized", backend="nccl", tp=1, pp=1, cp=1, ep=1, dp=w.base["world_size"],
               vpp=None)
    elif trigger == "build_model":
        w.emit(ts, "model_built", chunks=1, model_config_id=model_id, provider_config_id=provider_id,
               optimizer=True)
    else:
        target = provider_id if fault == "wrong_target" else model_id
        w.emit(ts, "callbacks_bound", target_type="TransformerConfig", target_id=target,
               scheduler_config_id=model_id, provider_config_id=provider_id, copied=True,
               slots=["finalize_model_grads_func", "grad_scale_func", "no_sync_func"], chunks=1,
               overlap_grad_reduce=False, overlap_param_gather=False, policy="replace")


def fault_ranks(ranks: int) -> dict[int, str]:
    """A handful of deterministic faults spread over the ranks (none below 4 ranks)."""
    if ranks < 4:
        return {}
    names = list(FAULTS)
    return {(ranks * (i + 1)) // (len(names) + 1): name for i, name in enumerate(names)}


def write_run(log_dir: Path, ranks: int, *, steps: int = 30, run_id: str = "bench",
              faults: dict[int, str] | None = None, t0: float = 1.7e9) -> int:
    """Write `ranks` rank files under `log_dir`; returns the number of lines written."""
    log_dir.mkdir(parents=True, exist_ok=True)
    faults = fault_ranks(ranks) if faults is None else faults
    total = 0
    for rank in range(ranks):
        fault = faults.get(rank)
        w = ChainWriter(run_id, rank, ranks)
        rank_records(w, t0 + (rank % 13) * 0.01, steps=steps, slow=10.0 if fault == "straggler" else 1.0,
                     fault=fault)
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
    from lifecycle.audit._audit import _workers

    return _workers(None, sorted(str(p) for p in log_dir.glob("rank-*.jsonl")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=30, help="step_completed records per rank")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="lifecycle-audit-bench-"))
    full, quarter = root / "full", root / "quarter"
    lines = write_run(full, args.ranks, steps=args.steps)
    write_run(quarter, max(args.ranks // 4, 1), steps=args.steps)
    size = sum(p.stat().st_size for p in full.glob("rank-*.jsonl"))
    bare, single, parallel = [], [], []
    for _ in range(args.repeat):  # interleaved, best of each: the machine may be shared
        bare.append(_bare(full))
        single.append(_timed(full, 1))
        parallel.append(_timed(full, None))
    bare_s, bare_cpu = min(b[0] for b in bare), min(b[1] for b in bare)
    audit_s, result = min(((s[0], s[2]) for s in single), key=lambda r: r[0])
    audit_cpu = min(s[1] for s in single)
    par_s, par_result = min(((p[0], p[2]) for p in parallel), key=lambda r: r[0])
    assert par_result.findings == result.findings, "parallel and single-process audits disagree"
    peak_full, peak_quarter = peak_bytes(full), peak_bytes(quarter)
    rules = Counter(f.rule for f in result.findings)
    print(f"logs: {args.ranks} ranks x {lines / args.ranks:.1f} records = {lines} lines, {size / 2**20:.1f} MiB")
    print(f"injected faults: {sorted(fault_ranks(args.ranks).items())}")
    print(f"findings: {dict(sorted(rules.items()))} exit={result.exit_code}")
    print(f"bare orjson.loads loop:           {bare_s:.3f} s ({lines / bare_s:,.0f} lines/s)")
    print(f"lifecycle audit, 1 process:       {audit_s:.3f} s ({lines / audit_s:,.0f} lines/s)")
    print(f"lifecycle audit, default jobs ({_jobs(full)}): {par_s:.3f} s ({lines / par_s:,.0f} lines/s)")
    print(f"throughput ratio (audit / bare): 1 process {bare_s / audit_s:.2f}, "
          f"default jobs {bare_s / par_s:.2f}  (target >= 0.5)")
    print(f"CPU-time ratio, 1 process (less sensitive to other load): {bare_cpu / audit_cpu:.2f} "
          f"({bare_cpu:.3f} s / {audit_cpu:.3f} s)")
    print(f"peak traced memory: {peak_quarter / 2**20:.1f} MiB at {max(args.ranks // 4, 1)} ranks, "
          f"{peak_full / 2**20:.1f} MiB at {args.ranks} ranks ({peak_full / args.ranks / 1024:.1f} KiB/rank)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
