"""Run the audit over some inputs: stream every input into its ranks' audits, then the cross-rank
rules and the root cause."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent import futures  # futures.ProcessPoolExecutor looked up per audit: tests take it away
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from lifecycle.audit._cause import RootCause, root_causes
from lifecycle.audit._cross import cross_rank
from lifecycle.audit._feed import Feeder, Tap
from lifecycle.audit._launches import Launch, read_launches
from lifecycle.audit._rank import RankAudit
from lifecycle.audit._reader import STDIN, STDIN_NAME, Input, discover, file_rank, open_input
from lifecycle.audit._records import Finding, unreadable
from lifecycle.audit._rules import RuleId, enabled
from lifecycle.errors import LogUnreadable

EXIT_CLEAN, EXIT_VIOLATION, EXIT_UNREADABLE = 0, 1, 2
PARALLEL_FROM = 256
MAX_LOGS_PER_INPUT = 1 << 17
"""How many logs one input (a file, stdin) may start before the audit refuses it as unreadable:
the audit keeps a summary per log, so a stream of endless log heads must not grow it unbounded."""
_EMPTY = "the log is empty (0 records): truncated to nothing, or its rank died before writing a record"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditResult:
    """Findings (rules enabled by select/ignore), unreadable inputs, each rank's summary, and the
    root cause of each run whose startup failed."""

    findings: tuple[Finding, ...]
    errors: tuple[LogUnreadable, ...]
    ranks: tuple[RankAudit, ...]
    sources: int
    records: int
    root_causes: tuple[RootCause, ...] = ()
    launches: tuple[Launch, ...] = ()
    """The launchers' own records (`launcher-*.jsonl`: `lifecycle run`, one per node agent)."""
    launch_broken: tuple[str, ...] = ()
    """`file:line` of each launcher file whose chain does not verify (also an LA009 finding)."""

    @property
    def exit_code(self) -> int:
        if self.errors:
            return EXIT_UNREADABLE
        return EXIT_VIOLATION if self.findings else EXIT_CLEAN


@dataclass(slots=True)
class _Read:
    """What reading some inputs gave: the ranks' audits, unreadable inputs, findings about inputs
    (skipped ones), and the LA009 findings of empty rank files (dropped when no input had a record)."""

    streams: list[RankAudit] = field(default_factory=list)
    errors: list[LogUnreadable] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    empty: list[Finding] = field(default_factory=list)
    taps: list[Tap] = field(default_factory=list)

    def extend(self, other: _Read) -> None:
        self.streams += other.streams
        self.errors += other.errors
        self.notes += other.notes
        self.empty += other.empty
        self.taps += other.taps


def audit(
    paths: Sequence[str],
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    jobs: int | None = None,
    max_logs_per_input: int = MAX_LOGS_PER_INPUT,
) -> AuditResult:
    """Audit the logs under `paths` (files, directories, FIFOs or "-" for stdin).

    `jobs` processes read the files (default: one per CPU, up to 8, from PARALLEL_FROM files on);
    the result does not depend on it. An input that starts more than `max_logs_per_input` logs is
    refused (an error of the result, exit code 2). Raises ValueError for an unknown or empty rule
    name.
    """
    rules = enabled(select, ignore)
    with no_gc():
        return _audit(paths, rules, jobs, None, max_logs_per_input)[0]


def audit_tapped(
    paths: Sequence[str],
    tap: Callable[[str], Tap],
    *,
    jobs: int | None = None,
) -> tuple[AuditResult, list[Tap]]:
    """`audit(paths, jobs=jobs)`, with `tap(input name)` given each batch of each input's records as
    the audit decodes them (see `Tap`); the taps are returned (from the reading processes too)."""
    with no_gc():
        return _audit(paths, enabled((), ()), jobs, tap, MAX_LOGS_PER_INPUT)


def _audit(
    paths: Sequence[str],
    rules: frozenset[str],
    jobs: int | None,
    tap: Callable[[str], Tap] | None,
    limit: int,
) -> tuple[AuditResult, list[Tap]]:
    found = discover(paths)
    read = _read_all(found.inputs, jobs, tap, limit)
    launched = read_launches(found.launchers)
    errors = [*found.errors, *read.errors, *launched.errors]
    records = sum(s.records for s in read.streams)
    notes = read.notes + read.empty if records else read.notes
    if not records and found.inputs and not read.errors:  # an unreadable first record says more on its own
        errors.append(_no_records(paths, found.inputs))
    causes = root_causes(read.streams)
    findings = (
        [f for s in read.streams for f in s.findings()]
        + cross_rank(read.streams)
        + notes
        + [c.finding() for c in causes]
        + [_broken_launch(where) for where in launched.broken]
    )
    kept = tuple(sorted((f for f in findings if f.rule in rules), key=_order))
    return AuditResult(
        findings=kept,
        errors=tuple(errors),
        ranks=tuple(read.streams),
        sources=len(found.inputs),
        records=records,
        root_causes=tuple(causes),
        launches=tuple(launched.launches),
        launch_broken=tuple(launched.broken),
    ), read.taps


def _broken_launch(where: str) -> Finding:
    source, _, line = where.rpartition(":")
    return Finding(
        rule=RuleId.HASH_CHAIN_BROKEN,
        source=source,
        line=int(line),
        message="the launcher record's hash chain does not verify: a record was changed, removed or reordered",
    )


def _no_records(paths: Sequence[str], inputs: Sequence[Input]) -> LogUnreadable:
    shown = " ".join("<stdin>" if p == STDIN else p for p in paths)
    where = shown if len(shown) <= 200 else shown[:200] + "…"
    what = "the input holds no" if len(inputs) == 1 else f"none of the {len(inputs)} inputs holds a"
    return unreadable(
        where,
        None,
        f"no records: {what} startup-log record, so nothing was audited; pass a "
        "run's log_dir or its rank-*.jsonl files",
    )


def _read_all(inputs: Sequence[Input], jobs: int | None, tap: Callable[[str], Tap] | None, limit: int) -> _Read:
    workers = _workers(jobs, inputs)
    if workers > 1:
        try:
            return _read_parallel(inputs, workers, tap, limit)
        except (OSError, BrokenProcessPool):  # no processes to be had here: read them all ourselves
            pass
    return _read_files(inputs, limit, tap)


def default_workers(paths: Sequence[str]) -> int:
    """How many processes `audit(paths)` reads the files with when `jobs` is not given."""
    return _workers(None, discover(paths).inputs)


def _workers(jobs: int | None, inputs: Sequence[Input]) -> int:
    if any(i.stream for i in inputs):  # stdin, pipes and FIFOs are read once, by this process
        return 1
    if jobs is None:
        jobs = min(_cpus(), 8) if len(inputs) >= PARALLEL_FROM else 1
    return max(1, min(jobs, len(inputs)))


def _cpus() -> int:
    """CPUs this process may run on (a container's share, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _read_files(inputs: Sequence[Input], limit: int, tap: Callable[[str], Tap] | None = None) -> _Read:
    read = _Read()
    with no_gc():
        for source in inputs:
            _read_source(source, read, limit, tap)
    return read


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic collector paused while auditing (and in each reading process, and while the
    export reads the same logs): reading allocates hundreds of thousands of small objects and keeps
    the ranks' summaries, so the collector would rescan them again and again for cycles that the
    audit never makes (5-10% of its time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read_parallel(inputs: Sequence[Input], workers: int, tap: Callable[[str], Tap] | None, limit: int) -> _Read:
    """Inputs split into contiguous chunks, read by this process and `workers - 1` others; results
    kept in input order. This process reads its share itself rather than wait idle."""
    chunks = workers * 4
    size = -(-len(inputs) // chunks)
    parts = [inputs[i : i + size] for i in range(0, len(inputs), size)]
    own = len(parts) // workers
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    read = _Read()
    with futures.ProcessPoolExecutor(max_workers=workers - 1, mp_context=mp.get_context(method)) as pool:
        others = [pool.submit(_read_files, part, limit, tap) for part in parts[own:]]
        mine = [_read_files(part, limit, tap) for part in parts[:own]]
        for part in [*mine, *(f.result() for f in others)]:
            read.extend(part)
    return read


def _order(finding: Finding) -> tuple[str, str, int, str, int]:
    return (
        finding.rule,
        finding.run_id or "",
        -1 if finding.rank is None else finding.rank,
        finding.source or "",
        finding.line or 0,
    )


def _read_source(source: Input, read: _Read, limit: int, tap: Callable[[str], Tap] | None) -> None:
    name = STDIN_NAME if source.name == STDIN else source.name
    feeder = Feeder(name, limit, None if tap is None else tap(name))
    if feeder.tap is not None:
        read.taps.append(feeder.tap)
    try:
        lines, skipped = open_input(source)
        if lines is None:
            read.notes += [skipped] if skipped is not None else []
            return
        try:
            feeder.feed(lines)
        finally:
            lines.close()
        if not lines.count and not source.stream:
            read.empty.append(
                Finding(rule=RuleId.HASH_CHAIN_BROKEN, rank=file_rank(source.name), source=source.name, message=_EMPTY)
            )
    except LogUnreadable as exc:
        read.errors.append(exc.with_traceback(None))  # its frames would keep this input's records alive
    except OSError as exc:
        read.errors.append(unreadable(feeder.name, None, f"cannot read: {exc.strerror or exc}"))
    finally:
        for stream in feeder.streams:
            stream.finish()
        read.streams += feeder.streams
