"""Deadlines, check-in and failure broadcast for the collective states (docs/failures.md).

Keys, under this initialization's rendezvous prefix and `ranks/`:
    checkin/<rank>   each rank, before `init_process_group`
    host/<name>[/n]  a count of the ranks on host <name>, and the n-th one's `rank:pid` (check-in)
    arrived          a counter; the rank that brings it to world_size sets `all_arrived`
    failure/<rank>   what a failed rank publishes: {rank, state, error, kind}
    first            the first failure published (`compare_set`: the first writer wins)

A watcher thread polls `first` on its own store connection (the main thread's may be blocked), checks that the ranks
on its host exist (`_liveness.py`) and the store's host answers; it watches the collective states, each training step
and the shutdown's closing barrier. gloo on torch 2.13 cannot abort a collective in flight (`_abort_process_group`,
`abort()`, `set_timeout`: tried). So a victim leaves a blocked collective when the failed rank destroys its process
group (its sockets close: the op raises at once), when the collective's timeout (`startup.timeout_s`) expires, or
`grace_s` after the watcher saw the failure or the deadline passed, because the watcher writes `peer_failed` /
`state_timeout` and ends the process (`EXIT_CODE`), unless it got SIGTERM/SIGINT (`runtime/signals.py` ends it).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from lifecycle.errors import DistributedError
from lifecycle.log import events
from lifecycle.megatron._failure import Failure, rank_list, read_first  # Failure, rank_list: public here too
from lifecycle.megatron._liveness import (
    connection_lost,
    host_key,
    identity,
    is_timeout,
    kind_of,
    local_pids,
    process_alive,
    store_closed,
)
from lifecycle.runtime import PhaseContext, Watch, signals

if TYPE_CHECKING:
    from torch.distributed import Store

EXIT_CODE = 75
"""The exit status of a process the watcher ends (EX_TEMPFAIL: a peer failed or a deadline passed)."""


Emit = Callable[..., None]


@dataclass(frozen=True, slots=True)
class ActiveWork:
    """What the main thread is doing under the watch: the state, how to log, since when, and whether the watcher
    enforces `timeout_s` on it (collective states; a training step relies on its collectives' own timeout).
    `RankWatch.watching` makes one; the watcher only reads it."""

    emit: Emit
    trigger: str
    state: str
    started: float
    deadline: bool


class RankWatch:
    """Check-in, failure publishing and the watcher thread for one initialization of the job."""

    def __init__(
        self,
        store: Store,
        *,
        rank: int,
        world_size: int,
        timeout_s: float,
        watcher_store: Callable[[], Store] | None = None,
        store_host: int | None = 0,
        poll_s: float = 0.5,
        grace_s: float = 3.0,
        exit_process: Callable[[int], object] = os._exit,
        interruptible: bool = False,
    ) -> None:
        """`interruptible`: under an in-process restart wrapper, whose restart request is raised
        between bytecodes: the check-in then waits in short steps, not one wait in the store."""
        self.store, self.rank, self.world_size, self.timeout_s = store, rank, world_size, timeout_s
        self.interruptible = interruptible
        self.poll_s, self.grace_s, self.store_host = poll_s, grace_s, store_host
        self.stale_s = max(5.0, min(8.0, timeout_s / 4))
        """A rank whose heartbeat stood still this long is lost (rank 0's watcher checks)."""
        self.lost_s = max(1.0, 2 * poll_s)
        """A store whose host closed the connection this long is gone with its host."""
        self._watcher_store = watcher_store
        self._exit = exit_process
        self._lock = threading.Lock()
        self._active: ActiveWork | None = None
        self._noticed: tuple[Failure, float] | None = None
        self._peers: dict[int, int] = {}  # rank -> pid of the other ranks on this host
        self._finished: set[int] = set()
        self._store_gone = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failed = False

    # -- check-in -----------------------------------------------------------------------------
    def check_in(self, ctx: PhaseContext) -> None:
        """Register this rank and wait until all have; on the deadline log `state_timeout` and raise."""
        self.store.add(f"alive/{self.rank}", 1)
        self.store.set(f"{host_key()}/{int(self.store.add(host_key(), 1))}", identity(self.rank))
        self.store.set(f"checkin/{self.rank}", b"1")
        if int(self.store.add("arrived", 1)) >= self.world_size:
            self.store.set("all_arrived", b"1")
        try:
            self._wait_all_arrived()
        except Exception as exc:
            if not is_timeout(exc):
                raise
            missing = self.missing()
            self._timed_out(ctx.emit, ctx.trigger.value, "DISTRIBUTED", missing, rendezvous=True)
            raise DistributedError(
                f"rendezvous timed out after {self.timeout_s:g} s: {self.world_size - len(missing)} of "
                f"{self.world_size} ranks arrived; missing: {rank_list(missing)}. Start the missing "
                "ranks, or raise startup.timeout_s if they are slow to start",
                field="startup.timeout_s",
            ) from exc
        here = int(self.store.add(host_key(), 0))  # every rank here has written its entry by now
        self._peers = local_pids(self.store.multi_get([f"{host_key()}/{n}" for n in range(1, here + 1)]), self.rank)

    def _wait_all_arrived(self) -> None:
        """Until every rank has checked in, at most `timeout_s`. Interruptible: polled, 1 ms at first
        and doubling to 0.1 s, so the wrapper's restart request lands within 0.1 s (in one wait in
        the store it landed only at the deadline, `startup.timeout_s`: measured)."""
        if not self.interruptible:
            self.store.wait(["all_arrived"], timedelta(seconds=self.timeout_s))
            return
        deadline, pause = time.monotonic() + self.timeout_s, 0.001
        while not self.store.check(["all_arrived"]):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"not every rank checked in within {self.timeout_s:g} s")
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(2 * pause, 0.1)

    def missing(self) -> list[int]:
        """Ranks that have not checked in (one `check` per rank: `multi_get` would block on them)."""
        return [r for r in range(self.world_size) if not self.store.check([f"checkin/{r}"])]

    # -- failures -----------------------------------------------------------------------------
    def publish(self, failure: Failure, store: Store | None = None) -> None:
        """Tell every rank that `failure.rank` failed. Best effort: the store may be gone with its host."""
        store = self.store if store is None else store
        try:
            raw = failure.encode()
            store.set(f"failure/{failure.rank}", raw)
            store.compare_set("first", b"", raw)
        except Exception:  # the store's host may be the rank that died
            return

    def first_failure(self, store: Store | None = None) -> Failure | None:
        """The first failure any rank published, or None (also when the store cannot be reached)."""
        if self._store_gone:
            return None
        try:
            return read_first(self.store if store is None else store)
        except Exception:  # an unreachable store means no news, not a new failure
            return None

    def peer_failure(self) -> Failure | None:
        """The first failure published by another rank, or the one the watcher noticed (a peer on
        this host that is gone, or the store's host gone with the store), or None."""
        failure = self.first_failure()
        if failure is not None and failure.rank != self.rank:
            return failure
        noticed = self._noticed
        return noticed[0] if noticed is not None and noticed[0].rank != self.rank else None

    def mark_failed(self, state: str, reason: str) -> None:
        """The lifecycle failed (any state, also after startup): publish it unless it was already, or
        a peer failed first, so the others stop waiting; and the closing barrier is skipped."""
        published, self.failed = self.failed, True
        if not published and self.peer_failure() is None:
            self.publish(Failure(rank=self.rank, state=state, error=reason, kind="exception"))

    # -- the main thread's collective phases ------------------------------------------------------
    def phase(self, ctx: PhaseContext, state: str) -> AbstractContextManager[None]:
        """Run a collective state's entry work under the deadline and the failure broadcast."""
        return self.watching(ctx.emit, ctx.trigger.value, state)

    @contextmanager
    def watching(self, emit: Emit, trigger: str, state: str, *, deadline: bool = True) -> Iterator[None]:
        """Run work that may wait on other ranks under the failure broadcast (and, with `deadline`,
        the watcher's `timeout_s` backstop); `emit` logs, `trigger` names the work in `state_timeout`.

        A failure here is published (exception, signal, timeout), unless a peer failed first: then
        this rank is a victim, logs `peer_failed` naming it, and raises `DistributedError`.
        """
        with self._lock:
            self._active = ActiveWork(emit, trigger, state, time.monotonic(), deadline)
        with suppress(Exception):  # what a lost rank was doing, for the failure rank 0 publishes
            if not self._store_gone:
                self.store.set(f"state/{self.rank}", state.encode())
        try:
            yield
        except BaseException as exc:
            self.failed = True
            with self._lock:
                self._active = None  # the main thread has control back: nothing for the watcher to end
            error = self._classify(emit, trigger, state, exc)
            if error is exc:
                raise
            raise error from exc
        finally:
            with self._lock:
                self._active = None

    def _classify(self, emit: Emit, trigger: str, state: str, exc: BaseException) -> BaseException:
        if not isinstance(exc, (Exception, KeyboardInterrupt, SystemExit)):
            return exc  # a wrapper's control flow (nvidia-resiliency-ext's RankShouldRestart), passed on
        peer = self.peer_failure()
        if peer is None and connection_lost(exc):  # a peer died: wait for the verdict naming it
            peer = self._await_peer_failure(self.stale_s + 3 * self.poll_s)
        if peer is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            self._peer_failed(emit, peer)
            return DistributedError(
                f"rank {peer.rank} failed in {peer.state} ({peer.error}); rank {self.rank} stopped "
                f"waiting for it in {state}. The root cause is on rank {peer.rank}",
                field="startup",
            )
        kind = kind_of(exc)
        self.publish(Failure(rank=self.rank, state=state, error=f"{type(exc).__name__}: {exc}", kind=kind))
        if kind != "timeout":
            return exc
        self._timed_out(emit, trigger, state, None, rendezvous=False)
        return DistributedError(
            f"{state} timed out after {self.timeout_s:g} s on rank {self.rank} ({type(exc).__name__}: "
            f"{exc}); no rank reported a failure. Raise startup.timeout_s if this state is slow",
            field="startup.timeout_s",
        )

    def _await_peer_failure(self, limit_s: float) -> Failure | None:
        until = time.monotonic() + limit_s
        while (peer := self.peer_failure()) is None and time.monotonic() < until:
            time.sleep(self.poll_s)
        return peer

    def _peer_failed(self, emit: Emit, peer: Failure) -> None:
        emit(events.PEER_FAILED, peer_rank=peer.rank, peer_state=peer.state, error=peer.error)

    def _timed_out(self, emit: Emit, trigger: str, state: str, missing: list[int] | None, *, rendezvous: bool) -> None:
        fields: dict[str, object] = {"missing": missing} if missing is not None else {}
        emit(events.STATE_TIMEOUT, state=state, trigger=trigger, timeout_s=self.timeout_s, **fields)
        if not rendezvous:
            return
        error = f"rendezvous timed out; missing: {rank_list(missing or [])}"
        self.publish(Failure(rank=self.rank, state=state, error=error, kind="timeout"))

    # -- the watcher thread ---------------------------------------------------------------------
    def start(self) -> None:  # the watcher: a daemon thread, stopped by `stop`
        self._thread = threading.Thread(target=self._watch, name="lifecycle-rank-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the watcher and mark this rank done, so no rank takes its silence for a loss."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.poll_s + 5)
        self._thread = None
        with suppress(Exception):
            self.store.set(f"alive/{self.rank}", b"done")

    def _watch(self) -> None:
        store = self._watcher_store() if self._watcher_store is not None else self.store
        beats: dict[int, tuple[bytes, float]] = {}
        failing_since: float | None = None
        while not self._stop.wait(self.poll_s):
            now = time.monotonic()
            if self._noticed is None:
                self._find_gone_peers(store, now)
            if not self._store_gone:
                try:
                    self._poll(store, beats, now)
                    failing_since = None
                except Exception as exc:  # the store's host is slow or gone
                    failing_since = now if failing_since is None else failing_since
                    self._store_lost(exc, now - failing_since, now)
            with self._lock:
                active = self._active
            if active is not None:
                self._escalate(active, now)

    def _find_gone_peers(self, store: Store, now: float) -> None:
        """A rank on this host whose process is gone without `done`: publish it (kind `lost`)."""
        for peer, pid in self._peers.items():
            if peer in self._finished or process_alive(pid):
                continue
            if self._said_done(store, peer):
                self._finished.add(peer)
                continue
            first = self.first_failure(store)
            if first is None:
                state = self._state_of(store, peer)
                error = f"its process (pid {pid}) is gone without a failure record: killed or crashed"
                first = Failure(rank=peer, state=state, error=error, kind="lost")
                self.publish(first, store)
            if first.rank != self.rank:
                self._noticed = (first, now)
            return

    def _said_done(self, store: Store, peer: int) -> bool:
        if self._store_gone:
            return False
        try:
            return bool(store.check([f"alive/{peer}"]) and store.get(f"alive/{peer}") == b"done")
        except Exception:  # the store went with its host: the peer did not finish
            return False

    def _state_of(self, store: Store, peer: int) -> str:
        if self._store_gone:
            return "unknown"
        try:
            return store.get(f"state/{peer}").decode() if store.check([f"state/{peer}"]) else "unknown"
        except Exception:
            return "unknown"

    def _poll(self, store: Store, beats: dict[int, tuple[bytes, float]], now: float) -> None:
        store.add(f"alive/{self.rank}", 1)
        if self._noticed is None:
            failure = read_first(store)
            if failure is not None and failure.rank != self.rank:
                self._noticed = (failure, now)
        if self.rank == 0 and self._noticed is None:
            self._find_lost(store, beats, now)

    def _find_lost(self, store: Store, beats: dict[int, tuple[bytes, float]], now: float) -> None:
        """Rank 0: publish, for the first peer whose heartbeat stood still `stale_s`, a `lost` failure."""
        peers = [r for r in range(self.world_size) if r != self.rank]
        values = store.multi_get([f"alive/{r}" for r in peers])  # every rank set its beat at check-in
        for peer, value in zip(peers, values, strict=True):
            last = beats.get(peer)
            if value == b"done" or last is None or last[0] != value:
                beats[peer] = (value, now)
            elif now - last[1] >= self.stale_s:
                state = self._state_of(store, peer)
                error = f"no heartbeat for {now - last[1]:.0f} s: the process died or stopped responding"
                self.publish(Failure(rank=peer, state=state, error=error, kind="lost"), store)
                return

    def _store_lost(self, exc: BaseException, silent_s: float, now: float) -> None:
        """The store failed for `silent_s`: a closed connection after `lost_s` (its host is gone), any
        other error after `stale_s`. Then stop using it, and name its host (unless that is us)."""
        if silent_s < (self.lost_s if store_closed(exc) else self.stale_s):
            return
        self._store_gone = True
        if self._noticed is None and self.store_host not in (None, self.rank):
            error = f"the rendezvous store it hosts stopped answering for {silent_s:.0f} s ({exc})"
            self._noticed = (Failure(rank=self.store_host, state="unknown", error=error, kind="lost"), now)

    def _escalate(self, active: ActiveWork, now: float) -> None:
        """End a process whose main thread stayed blocked past the grace or the deadline (unless it got a
        signal). A `lost` peer gets a shorter grace: no process is left to close the collective's sockets."""
        noticed = self._noticed
        grace = min(self.grace_s, 1.0) if noticed is not None and noticed[0].kind == "lost" else self.grace_s
        if signals.pending_signal() is not None:  # the signal watch logs `startup_aborted` and ends it
            return
        if noticed is not None and now - max(noticed[1], active.started) >= grace:
            self._peer_failed(active.emit, noticed[0])
        elif active.deadline and now - active.started >= self.timeout_s + self.grace_s:
            self._timed_out(active.emit, active.trigger, active.state, None, rendezvous=False)
            error = f"{active.state} still running after {self.timeout_s:g} s"
            self.publish(Failure(rank=self.rank, state=active.state, error=error, kind="timeout"))
        else:
            return
        self._stop.set()  # once: the process is ending
        self._exit(EXIT_CODE)


def watched(ctx: PhaseContext, state: str) -> AbstractContextManager[None]:
    """`RankWatch.phase` when DISTRIBUTED started a watch for this job (`Runtime.rank_watch`), else nothing."""
    watch = ctx.runtime.rank_watch
    return watch.phase(ctx, state) if watch is not None else nullcontext()


def watched_step(watch: Watch | None, emit: Emit, step: int) -> AbstractContextManager[None]:
    """A training step (after startup) under the failure broadcast of `watch` (`Runtime.rank_watch`),
    without the state deadline: its collectives time out after `startup.timeout_s` by themselves."""
    if watch is None:
        return nullcontext()
    return watch.watching(emit, f"step {step}", "CALLBACKS_BOUND", deadline=False)


def mark_failed(watch: Watch | None, state: str, reason: str) -> None:
    """Tell this job's watch (`Runtime.rank_watch`, if any) that the lifecycle failed: see `RankWatch.mark_failed`."""
    if watch is not None:
        with suppress(Exception):
            watch.mark_failed(state, reason)
