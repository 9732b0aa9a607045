"""Deadlines, check-in and failure broadcast for the collective states (docs/failures.md).

Keys, under this initialization's rendezvous prefix and `ranks/`:

    checkin/<rank>   each rank, before `init_process_group`
    arrived          a counter; the rank that brings it to world_size sets `all_arrived`
    failure/<rank>   what a failed rank publishes: {rank, state, error, kind}
    first            the first failure published (`compare_set`: the first writer wins)

A watcher thread polls `first` on its own store connection (the main thread's may be blocked in a
`wait`). gloo on torch 2.13 cannot abort a collective in flight: `_abort_process_group`,
`ProcessGroupGloo.abort()` and `set_timeout` all leave it blocked (tried). So a victim leaves a
blocked collective when the failed rank destroys its process group (its sockets close and the
victim's op raises at once), when the collective's own timeout (`startup.timeout_s`) expires, or,
when neither happened `grace_s` after the watcher saw the failure or the state's deadline passed,
because the watcher writes `peer_failed` / `state_timeout` and ends the process (`EXIT_CODE`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson

from lifecycle.errors import DistributedError
from lifecycle.log import events
from lifecycle.runtime import PhaseContext

WATCH = "rank_watch"
"""The `Runtime.extras` key of this initialization's `RankWatch` (multi-rank gloo/nccl only)."""

EXIT_CODE = 75
"""The exit status of a process the watcher ends (EX_TEMPFAIL: a peer failed or a deadline passed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """What a failed rank publishes. `kind`: exception, signal or timeout."""

    rank: int
    state: str
    error: str
    kind: str

    def encode(self) -> bytes:
        return orjson.dumps({"rank": self.rank, "state": self.state, "error": self.error, "kind": self.kind})

    @classmethod
    def decode(cls, raw: bytes) -> Failure:
        data = orjson.loads(raw)
        return cls(rank=int(data["rank"]), state=str(data["state"]), error=str(data["error"]),
                   kind=str(data["kind"]))


def rank_list(ranks: list[int]) -> str:
    """'rank 1' or 'ranks 1, 3'."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def kind_of(exc: BaseException) -> str:
    """How a rank failed: a signal (KeyboardInterrupt, SystemExit), a timeout, or an exception."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return "signal"
    return "timeout" if is_timeout(exc) else "exception"


def is_timeout(exc: BaseException) -> bool:
    """A store wait or collective that ran out of time: torch raises `DistStoreError`/`DistError` or,
    from gloo, a plain RuntimeError citing gloo's source; a user's error mentioning time is not one."""
    if isinstance(exc, TimeoutError):
        return True
    text = str(exc).lower()
    from_torch = type(exc).__module__.startswith("torch") or "gloo" in text or "c10d" in text
    return from_torch and ("timed out" in text or "timeout" in text)


def connection_lost(exc: BaseException) -> bool:
    """gloo's error when a peer process went away mid-collective."""
    text = str(exc).lower()
    return any(words in text for words in ("connection closed by peer", "connection reset", "broken pipe"))


class RankWatch:
    """Check-in, failure publishing and the watcher thread for one initialization of the job."""

    def __init__(
        self, store: Any, *, rank: int, world_size: int, timeout_s: float,
        watcher_store: Callable[[], Any] | None = None, store_host: int | None = 0,
        poll_s: float = 0.5, grace_s: float = 3.0, exit_process: Callable[[int], object] = os._exit,
    ) -> None:
        self.store, self.rank, self.world_size, self.timeout_s = store, rank, world_size, timeout_s
        self.poll_s, self.grace_s, self.store_host = poll_s, grace_s, store_host
        self.stale_s = max(5.0, min(30.0, timeout_s / 4))
        """A rank whose heartbeat stood still this long is lost (rank 0's watcher checks)."""
        self._watcher_store = watcher_store
        self._exit = exit_process
        self._lock = threading.Lock()
        self._active: tuple[PhaseContext, str, float] | None = None
        self._noticed: tuple[Failure, float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failed = False

    # -- check-in -----------------------------------------------------------------------------
    def check_in(self, ctx: PhaseContext) -> None:
        """Register this rank and wait until all have; on the deadline log `state_timeout` and raise."""
        self.store.add(f"alive/{self.rank}", 1)
        self.store.set(f"checkin/{self.rank}", b"1")
        if int(self.store.add("arrived", 1)) >= self.world_size:
            self.store.set("all_arrived", b"1")
        try:
            self.store.wait(["all_arrived"], timedelta(seconds=self.timeout_s))
        except Exception as exc:
            if not is_timeout(exc):
                raise
            missing = self.missing()
            self._timed_out(ctx, "DISTRIBUTED", missing, rendezvous=True)
            raise DistributedError(
                f"rendezvous timed out after {self.timeout_s:g} s: {self.world_size - len(missing)} of "
                f"{self.world_size} ranks arrived; missing: {rank_list(missing)}. Start the missing "
                "ranks, or raise startup.timeout_s if they are slow to start",
                field="startup.timeout_s",
            ) from exc

    def missing(self) -> list[int]:
        """Ranks that have not checked in (one `check` per rank: `multi_get` would block on them)."""
        return [r for r in range(self.world_size) if not self.store.check([f"checkin/{r}"])]

    # -- failures -----------------------------------------------------------------------------
    def publish(self, failure: Failure, store: Any = None) -> None:
        """Tell every rank that `failure.rank` failed. Best effort: the store may be gone with its host."""
        store = self.store if store is None else store
        try:
            raw = failure.encode()
            store.set(f"failure/{failure.rank}", raw)
            store.compare_set("first", b"", raw)
        except Exception:  # the store's host may be the rank that died
            return

    def first_failure(self, store: Any = None) -> Failure | None:
        """The first failure any rank published, or None (also when the store cannot be reached)."""
        try:
            return _read_first(self.store if store is None else store)
        except Exception:  # an unreachable store means no news, not a new failure
            return None

    def peer_failure(self) -> Failure | None:
        """The first failure published by another rank, or None."""
        failure = self.first_failure()
        return failure if failure is not None and failure.rank != self.rank else None

    # -- the main thread's collective phases ------------------------------------------------------
    @contextmanager
    def phase(self, ctx: PhaseContext, state: str) -> Iterator[None]:
        """Run a collective state's entry work under the deadline and the failure broadcast.

        A failure here is published (exception, signal, timeout), unless a peer failed first: then
        this rank is a victim, logs `peer_failed` naming it, and raises `DistributedError`.
        """
        with self._lock:
            self._active = (ctx, state, time.monotonic())
        with suppress(Exception):  # what a lost rank was doing, for the failure rank 0 publishes
            self.store.set(f"state/{self.rank}", state.encode())
        try:
            yield
        except BaseException as exc:
            self.failed = True
            with self._lock:
                self._active = None  # the main thread has control back: nothing for the watcher to end
            error = self._classify(ctx, state, exc)
            if error is exc:
                raise
            raise error from exc
        finally:
            with self._lock:
                self._active = None

    def _classify(self, ctx: PhaseContext, state: str, exc: BaseException) -> BaseException:
        peer = self.peer_failure()
        if peer is None and connection_lost(exc):  # a peer died: wait for rank 0 to declare it lost
            peer = self._await_peer_failure(self.stale_s + 3 * self.poll_s)
        if peer is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            self._peer_failed(ctx, peer)
            return DistributedError(
                f"rank {peer.rank} failed in {peer.state} ({peer.error}); rank {self.rank} stopped "
                f"waiting for it in {state}. The root cause is on rank {peer.rank}",
                field="startup",
            )
        kind = kind_of(exc)
        self.publish(Failure(rank=self.rank, state=state, error=f"{type(exc).__name__}: {exc}", kind=kind))
        if kind != "timeout":
            return exc
        self._timed_out(ctx, state, None, rendezvous=False)
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

    def _peer_failed(self, ctx: PhaseContext, peer: Failure) -> None:
        ctx.emit(events.PEER_FAILED, peer_rank=peer.rank, peer_state=peer.state, error=peer.error)

    def _timed_out(self, ctx: PhaseContext, state: str, missing: list[int] | None, *, rendezvous: bool) -> None:
        fields: dict[str, Any] = {"missing": missing} if missing is not None else {}
        ctx.emit(events.STATE_TIMEOUT, state=state, trigger=ctx.trigger.value, timeout_s=self.timeout_s,
                 **fields)
        if not rendezvous:
            return
        error = f"rendezvous timed out; missing: {rank_list(missing or [])}"
        self.publish(Failure(rank=self.rank, state=state, error=error, kind="timeout"))

    # -- the watcher thread ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the watcher (a daemon thread, stopped by `stop`)."""
        self._thread = threading.Thread(target=self._watch, name="lifecycle-rank-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the watcher and mark this rank done, so rank 0 does not take its silence for a loss."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.poll_s + 5)
        self._thread = None
        with suppress(Exception):
            self.store.set(f"alive/{self.rank}", b"done")

    def _watch(self) -> None:
        store = self._watcher_store() if self._watcher_store is not None else self.store
        beats: dict[int, tuple[bytes, float]] = {}
        unreachable_since: float | None = None
        while not self._stop.wait(self.poll_s):
            now = time.monotonic()
            try:
                self._poll(store, beats, now)
                unreachable_since = None
            except Exception:  # the store's host is slow or gone
                unreachable_since = now if unreachable_since is None else unreachable_since
                self._store_lost(now - unreachable_since, now)
            with self._lock:
                active = self._active
            if active is not None:
                self._escalate(active, now)

    def _poll(self, store: Any, beats: dict[int, tuple[bytes, float]], now: float) -> None:
        store.add(f"alive/{self.rank}", 1)
        if self._noticed is None:
            failure = _read_first(store)
            if failure is not None and failure.rank != self.rank:
                self._noticed = (failure, now)
        if self.rank == 0 and self._noticed is None:
            self._find_lost(store, beats, now)

    def _find_lost(self, store: Any, beats: dict[int, tuple[bytes, float]], now: float) -> None:
        """Rank 0: publish, for the first peer whose heartbeat stood still `stale_s`, a `lost` failure."""
        peers = [r for r in range(self.world_size) if r != self.rank]
        values = store.multi_get([f"alive/{r}" for r in peers])  # every rank set its beat at check-in
        for peer, value in zip(peers, values, strict=True):
            last = beats.get(peer)
            if value == b"done" or last is None or last[0] != value:
                beats[peer] = (value, now)
            elif now - last[1] >= self.stale_s:
                state = store.get(f"state/{peer}").decode() if store.check([f"state/{peer}"]) else "unknown"
                error = f"no heartbeat for {now - last[1]:.0f} s: the process died or stopped responding"
                self.publish(Failure(rank=peer, state=state, error=error, kind="lost"), store)
                return

    def _store_lost(self, silent_s: float, now: float) -> None:
        if self._noticed is None and self.store_host not in (None, self.rank) and silent_s >= self.stale_s:
            error = f"the rendezvous store it hosts stopped answering for {silent_s:.0f} s"
            self._noticed = (Failure(rank=self.store_host, state="unknown", error=error, kind="lost"), now)

    def _escalate(self, active: tuple[PhaseContext, str, float], now: float) -> None:
        """End a process whose main thread stayed blocked past the grace or the deadline."""
        ctx, state, started = active
        if self._noticed is not None and now - self._noticed[1] >= self.grace_s:
            self._peer_failed(ctx, self._noticed[0])
        elif now - started >= self.timeout_s + self.grace_s:
            self._timed_out(ctx, state, None, rendezvous=False)
            error = f"{state} still running after {self.timeout_s:g} s"
            self.publish(Failure(rank=self.rank, state=state, error=error, kind="timeout"))
        else:
            return
        self._stop.set()  # once: the process is ending
        self._exit(EXIT_CODE)


def _read_first(store: Any) -> Failure | None:
    return Failure.decode(store.get("first")) if store.check(["first"]) else None


def watched(ctx: PhaseContext, state: str) -> AbstractContextManager[None]:
    """`RankWatch.phase` when DISTRIBUTED started a watch for this job, else nothing."""
    watch = ctx.runtime.extras.get(WATCH)
    return watch.phase(ctx, state) if isinstance(watch, RankWatch) else nullcontext()
