"""The fault corpus: each startup or training fault made with real processes, its verdict
(`lifecycle audit --format verdict --follow`) checked against the expected culprit, state and class,
and the time from the fault to the verdict.

    python benchmarks/verdicts.py [--timeout 20] [--cases never_starts,...] [--world 2] [--repeat 1] [--load 0]
                                  [--record]
    python benchmarks/verdicts.py --scale 4096 [--repeat 3]

The faults are `benchmarks/faults.py`'s cases (gloo jobs of `--world` ranks, 2 unless told, on the tiny
GPT, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set by hand) and its launch faults: two jobs on one
endpoint, a WORLD_SIZE that differs, every node a world of its own (torchrun `--standalone` under a 2-node srun step), a
refused setting. For each, a follower (`follow_verdict`, as the CLI runs it: at once for a rank's own
failure or one its peers name lost, up to 1 s more when they name another failure) watches the log
directory from the launch; its verdict is compared with `CORPUS`.
Each case runs `--repeat` times (1 unless told), beside `--load` busy processes (a CPU load generator,
0 unless told: each spins at full speed until the corpus ends). Prints one row a run and, last,
`verdicts right: R of N`, the fault-to-verdict seconds (median, max) and the load average at the end.
`tests/integration/test_deadlines.py` checks the verdict of each case it runs against `CORPUS`.

`--scale N`: the verdict's own cost on N ranks' clean logs (`benchmarks/audit.py`'s writer, one process):
the audit's seconds, the verdict's seconds on its result (median of `--repeat`, lowest and highest), and
both extrapolated linearly to 131,072 ranks.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.faults import LONG_DEADLINE, run_case

if TYPE_CHECKING:
    from collections.abc import Iterator


@dataclass(frozen=True, slots=True)
class Expected:
    """What the verdict must say: the culprit rank (None: any rank), the state it names, the class, the
    outcome (`stopped`: a signal from outside, no rank's own failure)."""

    culprit: int | None
    state: str
    klass: str
    outcome: str = "failed"


CORPUS: dict[str, Expected] = {
    "never_starts": Expected(1, "DISTRIBUTED", "infrastructure"),  # named by rank 0 at the rendezvous deadline
    "rank_0_never_starts": Expected(0, "DISTRIBUTED", "infrastructure"),
    "raise_in_model_built": Expected(1, "DISTRIBUTED", "user-code"),
    "raise_and_linger": Expected(1, "DISTRIBUTED", "user-code"),
    "sigterm_in_model_built": Expected(1, "DISTRIBUTED", "infrastructure", "stopped"),
    "kill_in_distributed": Expected(1, "SERVICES_READY", "infrastructure"),
    "kill_in_model_built": Expected(1, "DISTRIBUTED", "infrastructure"),
    "raise_at_step_2": Expected(1, "CALLBACKS_BOUND", "user-code"),
    "kill_at_step_2": Expected(1, "CALLBACKS_BOUND", "infrastructure"),
    "stop_at_step_2": Expected(1, "CALLBACKS_BOUND", "infrastructure"),
    "kill_rank_0_at_step_2": Expected(0, "CALLBACKS_BOUND", "infrastructure"),
    "world_split_job": Expected(None, "SERVICES_READY", "config"),
    "world_size_mismatch": Expected(None, "SERVICES_READY", "config"),
    "worlds_of_one": Expected(None, "SERVICES_READY", "config"),
    "bad_config": Expected(None, "CONFIGURED", "config"),
    "config_on_one_rank": Expected(1, "CONFIGURED", "config"),  # rank 0 then waits at the rendezvous for it
    "kill_rank_0_in_model_built": Expected(0, "DISTRIBUTED", "infrastructure"),  # the store's host
    "stop_in_model_built": Expected(1, "DISTRIBUTED", "infrastructure"),  # hung: alive, silent
    "raise_rank_0_at_step_2": Expected(0, "CALLBACKS_BOUND", "user-code"),
    "sigterm_at_step_2": Expected(1, "CALLBACKS_BOUND", "infrastructure", "stopped"),  # stopped from outside
    "raise_in_services": Expected(1, "VALIDATED", "infrastructure"),  # an I/O error building the tokenizer
    "kill_in_services": Expected(1, "DISTRIBUTED", "infrastructure"),  # named missing at rank 0's deadline
    "sigterm_in_services": Expected(1, "VALIDATED", "infrastructure", "stopped"),
    "disk_full_in_model_built": Expected(1, "DISTRIBUTED", "infrastructure"),  # its log stops; its peer names it
    "kill_rank_0_in_rendezvous": Expected(0, "SERVICES_READY", "infrastructure"),  # the store's host, mid-check-in
    # one rank skips a group's lazy first collective after binding (Megatron-LM #6955): the other waits in it (the
    # group's 30 min), the skipper times out in its next step's collective; a restart hangs again: STOP (user-code)
    "lazy_group_skipped": Expected(1, "CALLBACKS_BOUND", "user-code"),
    "group_timeout_shorter_than_work": Expected(1, "MODEL_BUILT", "config"),  # timed out entering it; LA028: STOP
}


def wrong(case: str, doc: dict[str, object]) -> list[str]:
    """What the verdict `doc` gets wrong for `case` (empty: right)."""
    want, out = CORPUS[case], []
    culprit = doc.get("culprit")
    rank = culprit.get("rank") if isinstance(culprit, dict) else None
    if doc.get("outcome") != want.outcome:
        return [f"outcome {doc.get('outcome')!r}, expected {want.outcome!r}"]
    if want.culprit is not None and rank != want.culprit:
        out.append(f"culprit {rank}, expected {want.culprit}")
    if doc.get("state") != want.state:
        out.append(f"state {doc.get('state')}, expected {want.state}")
    if doc.get("class") != want.klass:
        out.append(f"class {doc.get('class')}, expected {want.klass}")
    return out


@dataclass(frozen=True, slots=True)
class Judged:
    case: str
    doc: dict[str, object]
    fault_to_verdict_s: float


def judge(case: str, timeout_s: float, workdir: Path, world: int = 2) -> Judged:
    """Run the case with a follower on its log directory; the verdict and when it came after the fault."""
    from lifecycle.testing import follow_verdict

    log_dir = workdir / case
    log_dir.mkdir(parents=True, exist_ok=True)
    found: dict[str, object] = {}
    done = threading.Event()

    def follower() -> None:
        # idle from the launch: 8 ranks importing torch and megatron beside a load can write nothing for 80 s
        found["doc"] = follow_verdict(log_dir, idle_timeout_s=timeout_s + 600, stop=done.is_set)
        found["at"] = time.time()

    thread = threading.Thread(target=follower, daemon=True)
    thread.start()
    result = run_case(case, timeout_s, workdir, world)
    thread.join(timeout=timeout_s + 90)
    done.set()
    thread.join()
    doc = found["doc"]
    assert isinstance(doc, dict)
    return Judged(case, doc, float(str(found["at"])) - result.fault_at)


def scale(ranks: int, repeat: int) -> int:
    """The verdict's cost on `ranks` clean logs, beside the audit's."""
    from benchmarks.audit import write_run
    from lifecycle.audit import audit, judge

    with tempfile.TemporaryDirectory() as tmp:
        write_run(Path(tmp), ranks, faults={})
        audits, verdicts, outcome = [], [], None
        for _ in range(repeat):
            start = time.perf_counter()
            result = audit([tmp], jobs=1)
            mid = time.perf_counter()
            outcome = judge(result)["outcome"]
            audits.append(mid - start)
            verdicts.append(time.perf_counter() - mid)
    factor = 131_072 / ranks
    for name, values in (("audit", audits), ("verdict", verdicts)):
        median = statistics.median(values)
        print(
            f"{name:<8} {ranks} ranks: median {median:.4f} s (min {min(values):.4f}, max {max(values):.4f}); "
            f"131,072 ranks: ~{median * factor:.2f} s"
        )
    print(f"verdict/audit: {statistics.median(verdicts) / statistics.median(audits):.4f}; outcome {outcome}")
    return 0 if outcome == "clean" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=20.0, help="deadline for the cases that wait it out")
    parser.add_argument("--cases", default=",".join(CORPUS))
    parser.add_argument("--scale", type=int, default=0, metavar="N", help="the verdict's cost on N ranks' clean logs")
    parser.add_argument("--repeat", type=int, default=0, help="runs of each case (--scale: 3, else 1)")
    parser.add_argument("--world", type=int, default=2, help="ranks a job")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the corpus")
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/results.toml")
    args = parser.parse_args(argv)
    if args.scale:
        return scale(args.scale, args.repeat or 3)
    with load_generator(args.load):
        judged = corpus(args.cases.split(","), args.timeout, args.world, args.repeat or 1)
    if args.record:
        from _results import record

        seconds = [j.fault_to_verdict_s for j in judged]
        right = sum(not wrong(j.case, j.doc) for j in judged)
        figures = {"right": right, "runs": len(judged), "world": args.world}
        record("verdicts", figures | {"median_s": statistics.median(seconds), "max_s": max(seconds)})
    return 0 if all(not wrong(j.case, j.doc) for j in judged) else 1


@contextlib.contextmanager
def load_generator(n: int) -> Iterator[None]:
    """`n` processes spinning at full speed beside the corpus; each dies with this one (PR_SET_PDEATHSIG)."""
    spin = "import ctypes, signal\nctypes.CDLL(None).prctl(1, signal.SIGKILL)\nwhile True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def corpus(cases: list[str], timeout_s: float, world: int, repeat: int) -> list[Judged]:
    """Each case `repeat` times in a world of `world` ranks: a row a run, then the tally."""
    print(f"{'case':<24} {'class':<15} {'culprit':>7} {'state':<16} {'verdict s':>9}  wrong")
    judged = []
    for case in [c for c in cases for _ in range(repeat)]:
        with tempfile.TemporaryDirectory() as tmp:
            j = judge(case, 600.0 if case in LONG_DEADLINE else timeout_s, Path(tmp), world)
        judged.append(j)
        culprit = j.doc.get("culprit")
        rank = culprit.get("rank") if isinstance(culprit, dict) else None
        problems = "; ".join(wrong(case, j.doc)) or "-"
        row = f"{case:<24} {j.doc.get('class')!s:<15} {rank!s:>7} {j.doc.get('state')!s:<16}"
        print(f"{row} {j.fault_to_verdict_s:>9.2f}  {problems}", flush=True)
        if problems != "-":  # why, in the verdict's own words
            print(f"    {j.doc.get('reason')!s:.300}; evidence {j.doc.get('evidence')!s:.300}", flush=True)
    right = sum(not wrong(j.case, j.doc) for j in judged)
    seconds = [j.fault_to_verdict_s for j in judged]
    print(f"fault to verdict: median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s")
    print(f"verdicts right: {right} of {len(judged)} ({world} ranks a job; load average {os.getloadavg()[0]:.1f})")
    return judged


if __name__ == "__main__":
    sys.exit(main())
