"""The torchrun re-launch of `lifecycle run --nproc N`: its command line and the run id it shares.

torchrun's multi-node options pass through unchanged; `lifecycle run`'s own launch options are
dropped from the ranks' command line (each rank already runs inside the launch).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from types import FrameType
from typing import IO, TextIO

from lifecycle import launchers
from lifecycle.cli._lines import tell

# (our option, torchrun's option): passed through when given.
PASS_THROUGH = (
    ("--nnodes", "--nnodes"),
    ("--node-rank", "--node-rank"),
    ("--rdzv-endpoint", "--rdzv-endpoint"),
    ("--rdzv-backend", "--rdzv-backend"),
    ("--rdzv-id", "--rdzv-id"),
    ("--max-restarts", "--max-restarts"),
)
LAUNCH_ONLY = ("--nproc", *(ours for ours, _ in PASS_THROUGH))


def add_launch_options(p: argparse.ArgumentParser) -> None:
    """`--nproc` and torchrun's multi-node options."""
    g = p.add_argument_group("launch (torchrun; `--nproc 1` without these runs in this process)")
    g.add_argument("--nproc", type=int, default=1, help="ranks to launch on this node (torchrun --nproc-per-node)")
    g.add_argument("--nnodes", default="1", help="nodes in the job, or MIN:MAX for an elastic job (default 1)")
    g.add_argument("--node-rank", type=int, help="this node's rank, 0..nnodes-1 (static rendezvous)")
    g.add_argument("--rdzv-endpoint", help="HOST:PORT every node reaches (required with --nnodes > 1)")
    g.add_argument("--rdzv-backend", help="torchrun rendezvous backend: static (default) or c10d")
    g.add_argument("--rdzv-id", help="job id shared by all nodes; also the startup log's run id")
    g.add_argument("--max-restarts", type=int, help="torchrun restarts of the worker group after a failure")


def wants_launch(args: argparse.Namespace) -> bool:
    """Launch torchrun: more than one local rank or more than one node, and not inside a launch."""
    from lifecycle.launchers import inside_torchrun

    return (args.nproc > 1 or args.nnodes != "1") and not inside_torchrun()


def launch_world_size(args: argparse.Namespace) -> int | None:
    """Ranks the launch will start in all: nnodes × nproc; None for an elastic MIN:MAX range."""
    nodes = str(args.nnodes)
    return int(nodes) * args.nproc if nodes.isdigit() else None


def launch_problem(args: argparse.Namespace) -> str | None:
    """A launch option that cannot work, as one line naming it and the fix; None when all can."""
    nodes = str(args.nnodes)
    lo, _, hi = nodes.partition(":")
    if not lo.isdigit() or int(lo) < 1 or (hi and (not hi.isdigit() or int(hi) < int(lo))):
        return f"--nnodes {nodes!r} is not a node count; write e.g. --nnodes 2 or --nnodes 1:4"
    if args.nproc < 1:
        return f"--nproc {args.nproc} must be at least 1; write e.g. --nproc 2"
    if nodes != "1" and not args.rdzv_endpoint:
        return (
            f"--nnodes {nodes} needs a rendezvous every node reaches; add --rdzv-endpoint HOST:PORT (node 0's address)"
        )
    if args.max_restarts is not None and args.max_restarts < 0:
        return f"--max-restarts {args.max_restarts} must be 0 or more"
    if args.node_rank is not None and nodes.isdigit() and not 0 <= args.node_rank < int(nodes):
        return f"--node-rank {args.node_rank} must be in 0..{int(nodes) - 1} for --nnodes {nodes}"
    return None


def strip_launch_options(argv: Sequence[str]) -> list[str]:
    """`argv` without the launch options (both `--opt V` and `--opt=V` forms)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in LAUNCH_ONLY:
            skip = True
            continue
        if arg.split("=", 1)[0] in LAUNCH_ONLY and "=" in arg:
            continue
        out.append(arg)
    return out


def torchrun_command(args: argparse.Namespace, port: int | None) -> list[str]:
    """The torchrun command that runs `lifecycle run` (without launch options) on every rank."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}"]
    for ours, theirs in PASS_THROUGH:
        value = getattr(args, ours.removeprefix("--").replace("-", "_"))
        if value is not None:
            cmd.append(f"{theirs}={value}")
    if not args.rdzv_endpoint:
        cmd += ["--master-addr=127.0.0.1", f"--master-port={port}"]
    return [*cmd, "-m", "lifecycle", *strip_launch_options(args.argv)]


def launch_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment of the launch: one run id for every rank (the rendezvous id where given;
    across nodes without one, the ranks derive it from the shared rendezvous address)."""
    from lifecycle.runtime import new_run_id

    env = {**os.environ, launchers.LAUNCHED: "1"}
    if not env.get("LIFECYCLE_RUN_ID"):
        if args.rdzv_id:
            env["LIFECYCLE_RUN_ID"] = args.rdzv_id
        elif args.nnodes == "1":
            env["LIFECYCLE_RUN_ID"] = new_run_id()
    return env


def launch(args: argparse.Namespace, log_dir: str | None = None) -> int:
    """Run torchrun and wait for it; its exit status, or 128 + N when signal N stopped the launch.

    torchrun runs in its own session (a terminal's Ctrl-C reaches it once, forwarded from here, not
    twice) and dies with this process, even when this one is SIGKILLed (`die_with_parent`; each
    rank does the same with torchrun). SIGTERM and SIGINT here are forwarded to torchrun, which
    stops its ranks with the same signal: each logs `startup_aborted` and releases everything (or,
    its main thread blocked in native code, ends 3 s later: docs/failures.md). With a log directory,
    how the ranks ended goes to `launcher-<node>.jsonl` there (`launch_ended`, `_launch_record.py`).
    """
    from lifecycle.launchers.local import die_with_parent, free_port

    port = None if args.rdzv_endpoint else free_port()
    torchrun = subprocess.Popen(
        torchrun_command(args, port),
        env=launch_env(args),
        start_new_session=True,
        preexec_fn=die_with_parent,  # prctl must run in the child
        stderr=subprocess.PIPE,
    )
    assert torchrun.stderr is not None  # stderr=PIPE
    report = TorchrunReport(sys.stderr)
    copier = threading.Thread(target=report.copy, args=(torchrun.stderr,), name="lifecycle-torchrun-stderr")
    copier.start()
    status = wait_forwarding(torchrun, report.received)
    copier.join()
    written = _record(args, log_dir, status, report) if log_dir else None
    line = report.stopped_line(log_dir) if report.received else report.summary(log_dir) if status != 0 else None
    for text in (line, written):
        if text:
            tell("run", text)
    return status


def _record(args: argparse.Namespace, log_dir: str, status: int, report: TorchrunReport) -> str | None:
    """Write this node agent's `launch_ended`; a line to say when it could not be written."""
    from lifecycle.cli._launch_record import host, run_id_of, write_launch_ended
    from lifecycle.log import records

    run_id = run_id_of(Path(log_dir))
    if run_id is None or not Path(log_dir).is_dir():
        return None  # no rank wrote a log here: there is nothing to tie the record to
    node = args.node_rank or 0
    received = signal.Signals(report.received[0]).name if report.received else None
    record = records.LaunchEnded(
        node_rank=node, host=host(), nproc=args.nproc, exit=status, signal=received, ended=report.ended()
    )
    try:
        wrote = write_launch_ended(
            log_dir, run_id=run_id, node_rank=node, world_size=launch_world_size(args) or 0, record=record
        )
    except OSError as exc:
        return f"the launcher record could not be written to {log_dir}: {exc.strerror or exc}"
    return None if isinstance(wrote, Path) else wrote


_ELASTIC_FAILED = re.compile(r"^[EWI]\d{4} .*torch/distributed/elastic/.*\] failed \(exitcode: ")
_ELASTIC_STOPPING = re.compile(
    r"^[EWI]\d{4} .*torch/distributed/elastic/.*\] (Received \d+ death signal|Sending process \d+ closing signal)"
)
_SIGNAL_EXCEPTION = "torch.distributed.elastic.multiprocessing.api.SignalException"
_FIELD = re.compile(r"^\s*(time|rank|exitcode)\s*: (\S+)(?: \(local_rank: (\d+)\))?")


class TorchrunReport:
    """Copies torchrun's stderr (its ranks' lines among it) to `out`, without torchrun's own failure
    report: the traceback ending in `ChildFailedError` and its table, and the agent's
    `failed (exitcode: N)` line; and without the traceback of its `SignalException` and the agent's
    lines about the signal when this process took one and forwarded it (`received`). `summary()`
    says the failure in one line: which rank exited how; `ended()` the same for the record."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.held: list[str] = []  # a traceback being read: shown unless it is torchrun's own
        self.failures: list[tuple[int, int]] = []  # (rank, exit code) from the report
        self.entries: list[dict[str, str]] = []  # each failure's fields: time, rank, local_rank, exitcode
        self.root = 0  # how many entries came before the report's Root Cause (the first observed failure)
        self.received: list[int] = []  # the signals this process took and forwarded to torchrun
        self.in_report = self.root_seen = False

    def copy(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self.line(raw.decode(errors="replace"))
        self._flush()

    def line(self, text: str) -> None:
        if self.in_report:
            self._read_report(text)
        elif self.held:
            if text.startswith("torch.distributed.elastic.multiprocessing.errors.ChildFailedError"):
                self.held, self.in_report = [], True
            elif text.startswith(_SIGNAL_EXCEPTION):
                self.held = []  # torchrun stopped by a signal: `lifecycle run:` says it in one line
            elif text[:1].isspace() or text.startswith("Traceback"):
                self.held.append(text)
            else:  # another error's traceback ends here: not torchrun's report
                self.held.append(text)
                self._flush()
        elif text.startswith("Traceback (most recent call last):"):
            self.held.append(text)
        elif not _ELASTIC_FAILED.match(text) and not (self.received and _ELASTIC_STOPPING.match(text)):
            self.out.write(text)
            self.out.flush()

    def _read_report(self, text: str) -> None:
        field = _FIELD.match(text)
        if field and field.group(1) == "time":
            self.entries.append({"time": field.group(2)})
        elif field and field.group(1) == "rank" and field.group(2).lstrip("-").isdigit():
            self.failures.append((int(field.group(2)), 0))
            if not self.entries or "rank" in self.entries[-1]:
                self.entries.append({})
            self.entries[-1] |= {"rank": field.group(2), "local_rank": field.group(3) or ""}
        elif field and field.group(1) == "exitcode" and self.failures and field.group(2).lstrip("-").isdigit():
            self.failures[-1] = (self.failures[-1][0], int(field.group(2)))
            self.entries[-1]["exitcode"] = field.group(2)
        if text.startswith("Root Cause"):
            self.root_seen, self.root = True, len(self.entries)
        elif text.startswith("=") and self.root_seen:
            self.in_report = False

    def _flush(self) -> None:
        self.out.write("".join(self.held))
        self.out.flush()
        self.held = []

    def ended(self) -> list[dict[str, object]]:
        """The ranks the report named, the first observed failure (its Root Cause) first, each once."""
        from lifecycle.cli._launch_record import ended_entry

        order = self.entries[self.root :] + self.entries[: self.root]
        out, seen = [], set()
        for entry in order:
            rank = entry.get("rank", "")
            if not rank.isdigit() or rank in seen:
                continue
            seen.add(rank)
            local, code = entry.get("local_rank", ""), entry.get("exitcode", "")
            out.append(
                ended_entry(
                    int(rank),
                    int(local) if local.isdigit() else None,
                    int(code) if code.lstrip("-").isdigit() else None,
                    entry.get("time"),
                )
            )
        return out

    def summary(self, log_dir: str | None) -> str | None:
        """One line for torchrun's report: each failed rank and its exit; None when there was none."""
        if not self.failures:
            return None
        seen = dict(sorted(set(self.failures)))
        ranks = ", ".join(f"rank {r} {_ended(code)}" for r, code in seen.items())
        audit = f"`lifecycle audit {log_dir}` names the cause" if log_dir else "each rank's own line is above"
        return f"the launch failed: {ranks} ({audit})"

    def stopped_line(self, log_dir: str | None) -> str:
        """One line when this process took a signal: it stopped the launch."""
        name = signal.Signals(self.received[0]).name
        audit = f"; `lifecycle audit {log_dir}` shows where each rank was" if log_dir else ""
        return f"stopped by {name}: torchrun stopped its ranks with it{audit}"


def _ended(code: int) -> str:
    if code < 0 and -code in signal.valid_signals():
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited {code}"


def wait_forwarding(child: subprocess.Popen[bytes], received: list[int] | None = None) -> int:
    """Wait for `child`, forwarding SIGTERM and SIGINT to it (main thread only); each signal taken is
    appended to `received` (before it is forwarded)."""
    received = [] if received is None else received

    def forward(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        with suppress(ProcessLookupError):
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        status = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 + received[0] if received and status != 0 else status
