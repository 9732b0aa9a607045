"""Deadlines, check-in and failure broadcast for the collective states (docs/failures.md).

The check-in is `_rank_checkin.py`'s, its store's keys are listed in `_checkin.py`. The store's host sees
O(nodes) operations, not O(ranks) (docs/failures.md#the-rank-watch-at-scale): each node's leader owns its
one watch connection and, every `interval_s`, beats and reads `first` and the next node's beat, at its
node's own point of the round (`_ring.py`); the other ranks talk only to the node-local board
(`_board.py`). Every watcher checks, each `poll_s`, that the ranks of its node exist (`_node.py`), ends
its main thread's work past its grace or deadline, and leaves it to SIGTERM/SIGINT when one came
(`runtime/signals.py`). gloo cannot abort a collective in flight (torch 2.13: tried), so a victim leaves
one when the failed rank's sockets close, at the collective's timeout, or `grace_s` after the watcher saw
the failure: it logs `peer_failed` or `state_timeout` and ends the process (`EXIT_CODE`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import TYPE_CHECKING

from lifecycle.errors import DistributedError
from lifecycle.log import records
from lifecycle.rankwatch import _world
from lifecycle.rankwatch._failure import Failure, read_first
from lifecycle.rankwatch._liveness import HOST, connection_lost, kind_of, store_closed, timeout_error
from lifecycle.rankwatch._node import Node
from lifecycle.rankwatch._rank_checkin import CheckIn
from lifecycle.rankwatch._ring import Ring, next_due, next_tick
from lifecycle.rankwatch._settings import WatchSettings
from lifecycle.rankwatch._watched import ActiveWork, Emit
from lifecycle.runtime import PhaseContext, signals

if TYPE_CHECKING:
    from torch.distributed import Store

EXIT_CODE = 75
"""The exit status of a process the watcher ends (EX_TEMPFAIL: a peer failed or a deadline passed)."""


class RankWatch:
    """Check-in, failure publishing and the watcher thread for one initialization of the job."""

    def __init__(
        self,
        store: Store,
        *,
        rank: int,
        world_size: int,
        settings: WatchSettings,
        watcher_store: Callable[[], Store] | None = None,
        store_host: int | None = 0,
        exit_process: Callable[[int], None] = os._exit,
        interruptible: bool = False,
        node: str | None = None,
        board_dir: str | None = None,
        world: _world.World | None = None,
        meeting: str | None = None,
        local_size: int | None = None,
    ) -> None:
        """`settings`: its deadline, poll and graces (`WatchSettings.of(config)` for a run); `node`: this rank's
        node (the host by default); the others are its check-in's (`CheckIn`)."""
        self.store, self.rank, self.settings = store, rank, settings
        self.store_host, self._state = store_host, "DISTRIBUTED"
        # The settings the watch reads most, by their short names (`_settings.py` defines them).
        self.timeout_s, self.poll_s, self.grace_s = settings.timeout_s, settings.poll_s, settings.grace_s
        self.stale_s, self.lost_s = settings.stale_s, settings.lost_s
        self.interval_s, self.node_stale_s = settings.poll_s, settings.stale_s
        """How often a node's leader talks to the store; how long a node may be silent (`join_node`)."""
        self._watcher_store, self._exit, self._lock = watcher_store, exit_process, threading.Lock()
        self._active: ActiveWork | None = None
        self._noticed: tuple[Failure, float] | None = None  # `_state`: what the main thread's work is in
        self._named: Failure | None = None  # the failure this rank's `peer_failed` named (logged once)
        self._store_gone, self.failed, self._stop = False, False, threading.Event()
        self._thread: threading.Thread | None = None
        self._node = Node(peers={}, leader=None, board=None)  # what `join_node` learns
        self._connection: Store | None = None  # the watch connection (`_watch_store`)
        self._ring: Ring | None = None  # a leader's round at the store, once joined
        self._next_round = 0.0
        self._failing_since: float | None = None  # since when the store has not answered
        self.checkin = CheckIn(  # the rank's check-in: its arrival, the wait for all, its node (`_rank_checkin.py`)
            store, rank=rank, world_size=world_size, settings=settings, node=HOST if node is None else node,
            publish=self.publish, peer_failed=self._peer_failed, store_host=store_host, interruptible=interruptible,
            board_dir=board_dir, world=world, meeting=meeting, local_size=local_size,
        )  # fmt: skip

    @property
    def leader(self) -> bool:
        """This rank talks to the store for its node (also: before `join_node`, or without a board)."""
        return self._node.leads(self.rank)

    @property
    def verdict_s(self) -> float:  # the wait for a lost peer's verdict: the silence, two rounds, three polls
        return self.node_stale_s + 2 * self.interval_s + 3 * self.poll_s

    @property
    def nodes(self) -> int:  # after `join_node` (1 before)
        return self._node.nodes

    def check_in(self, ctx: PhaseContext) -> None:
        """Check this rank in (`CheckIn.run`: register, wait for every rank, or log and raise), then join its node."""
        self.checkin.run(ctx)
        self.join_node()

    def join_node(self) -> None:
        """After every rank checked in: this node's ranks, leader, board, the node count and the round."""
        self._node = self.checkin.join()
        self.interval_s = self.settings.round_s(self._node.nodes)
        self.node_stale_s = self.settings.node_stale_s(self._node.nodes)
        if self.checkin.own_index is not None:
            self._ring = Ring(self.checkin.own_index, self._node.nodes, self.settings)

    # -- failures -----------------------------------------------------------------------------
    def publish(self, failure: Failure, store: Store | None = None) -> None:
        """Tell every rank that `failure.rank` failed (the first published wins, and goes on this node's
        board). Best effort: the store may be gone with its host."""
        store = self.store if store is None else store
        try:
            raw = failure.encode()
            store.set(f"failure/{failure.rank}", raw)
            first = store.compare_set("first", b"", raw)
        except Exception:  # the store's host may be the rank that died
            first = failure.encode()
        if self._node.board is not None:
            with suppress(Exception):
                self._node.board.post(Failure.decode(first or failure.encode()))

    def first_failure(self, store: Store | None = None) -> Failure | None:
        """The first failure any rank published, or None (also when the store cannot be reached)."""
        if self._store_gone:
            return None
        try:
            return read_first(self.store if store is None else store)
        except Exception:  # an unreachable store means no news, not a new failure
            return None

    def peer_failure(self) -> Failure | None:
        """The first failure published by another rank (read in the store by a node's leader, on the
        board by the others), or the one the watcher noticed (a peer on this node that is gone, a node
        gone silent, or the store's host gone with the store), or None."""
        if self.leader:
            failure = self.first_failure()
            if failure is not None and failure.rank != self.rank:
                return failure
        if self._node.board is not None:
            with suppress(Exception):
                posted = self._node.board.first()
                if posted is not None and posted.rank != self.rank:
                    return posted
        noticed = self._noticed
        return noticed[0] if noticed is not None and noticed[0].rank != self.rank else None

    def mark_failed(self, state: str, reason: str) -> None:
        """The lifecycle failed (any state, also after startup): publish it unless it was already, or
        a peer failed first, so the others stop waiting; and the closing barrier is skipped."""
        published, self.failed = self.failed, True
        if not published and self.peer_failure() is None:
            self.publish(Failure(rank=self.rank, state=state, error=reason, kind="exception"))

    def _notice(self, failure: Failure, now: float) -> None:
        """The watcher learned of a peer's failure: keep it, and put it on the node's board."""
        self._noticed = (failure, now)
        if self._node.board is not None:
            with suppress(Exception):
                self._node.board.post(failure)

    def phase(self, ctx: PhaseContext, state: str) -> AbstractContextManager[None]:
        """Run a collective state's entry work under the deadline and the failure broadcast."""
        return self.watching(ctx.emit, ctx.trigger.value, state)

    @contextmanager
    def watching(self, emit: Emit, trigger: str, state: str, *, deadline: bool = True) -> Iterator[None]:
        """Run work that may wait on other ranks under the failure broadcast (and, with `deadline`,
        the watcher's `timeout_s` backstop); `emit` logs, `trigger` names the work in `state_timeout`.

        A failure here is published (exception, signal, timeout), unless a peer failed first: then
        this rank is a victim, logs `peer_failed` naming it, and raises `DistributedError`. The state
        reaches the node's board at the watcher's next beat (what a lost rank was doing); no store write.
        """
        with self._lock:
            self._active = ActiveWork(emit, trigger, state, time.monotonic(), deadline)
            self._state = state
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
            peer = self._await_peer_failure(self.verdict_s)
        if peer is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            self._peer_failed(emit, peer, trigger)
            return DistributedError(
                f"rank {peer.rank} failed in {peer.state} ({peer.error}); rank {self.rank} stopped "
                f"waiting for it in {state}. The root cause is on rank {peer.rank}",
                field="startup",
            )
        kind = kind_of(exc)
        self.publish(Failure(rank=self.rank, state=state, error=f"{type(exc).__name__}: {exc}", kind=kind))
        if kind != "timeout":
            return exc
        self._timed_out(emit, trigger, state)
        return timeout_error(exc, state=state, rank=self.rank, timeout_s=self.timeout_s)

    def _await_peer_failure(self, limit_s: float) -> Failure | None:
        until = time.monotonic() + limit_s
        while (peer := self.peer_failure()) is None and time.monotonic() < until:
            time.sleep(self.poll_s)
        return peer

    def _peer_failed(self, emit: Emit, peer: Failure, trigger: str | None = None) -> None:
        """Log `peer_failed` naming `peer`, and the work this rank was doing (`trigger`: `step 2`), once (the
        watcher may name a lost peer before the main thread does)."""
        with self._lock:
            if self._named == peer:
                return
            self._named = peer
        doing = records.UNSET if trigger is None else trigger
        emit(
            records.PeerFailed(
                peer_rank=peer.rank, peer_state=peer.state, error=peer.error, peer_kind=peer.kind, trigger=doing
            )
        )

    def _timed_out(self, emit: Emit, trigger: str, state: str) -> None:
        emit(records.StateTimeout(state=state, trigger=trigger, timeout_s=self.timeout_s, missing=records.UNSET))

    # -- the watcher thread ---------------------------------------------------------------------
    def start(self) -> None:  # the watcher: a daemon thread, stopped by `stop`
        self._thread = threading.Thread(target=self._watch, name="lifecycle-rank-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the watcher; mark the node's beat (a leader) and this rank's on the board done: no loss."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.poll_s + 5)
        self._thread = None
        with suppress(Exception):
            if self._ring is not None and not self._store_gone:
                self._ring.done(self._connection or self.store)
        with suppress(Exception):
            if self._node.board is not None:
                self._node.board.leave()
        self._connection = None

    def _watch(self) -> None:
        wake = self.first_tick(time.monotonic())
        while not self._stop.wait(max(0.0, wake - time.monotonic())):
            self.tick(now := time.monotonic())
            wake = self.next_tick(now)

    def first_tick(self, now: float) -> float:
        """The watcher starts at `now`: when it first ticks; a leader's first round is its `phase_s` away."""
        self._next_round = now + (self._ring.phase_s if self._ring is not None else 0.0)
        return self.next_tick(now)

    def next_tick(self, now: float) -> float:
        """When the watcher ticks after `now`: `poll_s` on, or sooner when its round at the store is due."""
        leading = self.leader and self._ring is not None and not self._store_gone
        return next_tick(now, self.poll_s, self._next_round if leading else None)

    def tick(self, now: float) -> None:
        """One round of the watcher at monotonic time `now` (its thread calls it every `poll_s`): beat on
        the board, look for gone peers on this node, read the board (not leading) or, every
        `interval_s`, the store (leading), and end the main thread's work if it must end."""
        if self._node.board is not None:
            with suppress(OSError):
                self._node.board.beat(self._state)
        if self._noticed is None:
            self._find_gone_peers(now)
        if self._noticed is None and not self.leader and self._node.board is not None:
            with suppress(Exception):
                posted = self._node.board.first()
                if posted is not None and posted.rank != self.rank:
                    self._noticed = (posted, now)
        if self.leader and not self._store_gone and now >= self._next_round:
            self._store_round(now)
        with self._lock:
            active = self._active
        if active is not None:
            self._escalate(active, now)

    def _store_round(self, now: float) -> None:
        try:
            self._poll(self._watch_store(), now)
            self._failing_since = None
            self._next_round = next_due(self._next_round or now, now, self.interval_s)  # 0: never due yet
        except Exception as exc:  # the store's host is slow or gone: ask again at the next poll
            self._failing_since = now if self._failing_since is None else self._failing_since
            self._store_lost(exc, now - self._failing_since, now)
            self._next_round = now + self.poll_s

    def _watch_store(self) -> Store:
        """The leader's watch connection (the main thread's may be blocked), opened at first use."""
        if self._connection is None:
            self._connection = self._watcher_store() if self._watcher_store is not None else self.store
        return self._connection

    def _find_gone_peers(self, now: float) -> None:
        """A rank of this node gone (or silent `stale_s`) unfinished: the leader publishes it (`lost`). The
        others notice a gone leader, and the lowest of them still running publishes it, on a connection it
        opens then (`Node.speaks_for`): the leader is named as the rank it is, not its node as lost."""
        gone = self._node.gone_peer(self.stale_s)
        if gone is None:
            return
        lost = Failure(rank=gone[0], state=self._node.state_of(gone[0]), error=gone[1], kind="lost")
        if not self.leader:
            if self._node.leader is None or gone[0] != self._node.leader.rank:
                return
            self._notice(lost, now)
            if not self._node.speaks_for(self.rank, gone[0]):
                return
        try:
            store = self._watch_store()
        except Exception:  # the store cannot be reached: the ring names the node at the store
            return
        first = self.first_failure(store)
        if first is None:
            self.publish(lost, store)
            first = self.first_failure(store) or lost
        if first.rank != self.rank:
            self._notice(first, now)

    def _poll(self, store: Store, now: float) -> None:
        """A leader's round (`Ring.round`): what it read of `first`, and a next node gone silent, are noticed."""
        if self._ring is None:  # not joined to a node (a watch without check-in): `first` only
            raw, lost = (store.get("first") if store.check(["first"]) else b""), None
        else:
            raw, lost = self._ring.round(store, self._state, now)
        if lost is not None and self._noticed is None:
            self.publish(lost, store)
            raw = store.get("first")
        if raw and self._noticed is None:
            failure = Failure.decode(raw)
            if failure.rank != self.rank:
                self._notice(failure, now)

    def _store_lost(self, exc: BaseException, silent_s: float, now: float) -> None:
        """The store failed for `silent_s`: a closed connection after `lost_s` (its host is gone), any
        other error after `stale_s`. Then stop using it, and name its host (unless that is us)."""
        if silent_s < (self.lost_s if store_closed(exc) else self.stale_s):
            return
        self._store_gone = True
        if self._noticed is None and self.store_host not in (None, self.rank):
            error = f"the rendezvous store it hosts stopped answering for {silent_s:.0f} s ({exc})"
            self._notice(Failure(rank=self.store_host, state="unknown", error=error, kind="lost"), now)

    def _escalate(self, active: ActiveWork, now: float) -> None:
        """End a process whose main thread stayed blocked past the grace or the deadline (unless it got a
        signal). A `lost` peer gets a shorter grace: no process is left to close the collective's sockets;
        and it is named in the log one poll after it was noticed, not at the grace's end: no record of its
        own will come, so a follower of the logs (`lifecycle audit --format verdict --follow`) has its verdict
        sooner. The poll lets a signal that came with it (a stopped process continued with SIGINT pending, its
        peer gone meanwhile) reach the signal watch first: then the signal, not the peer, ends this rank."""
        noticed = self._noticed
        lost = noticed is not None and noticed[0].kind == "lost"
        grace = min(self.grace_s, self.settings.lost_grace_s) if lost else self.grace_s
        if signals.pending_signal() is not None:  # the signal watch logs `startup_aborted` and ends it
            return
        if noticed is not None and lost and now >= noticed[1] + self.poll_s:  # the next tick, or later
            self._peer_failed(active.emit, noticed[0], active.trigger)  # once; the main thread's error logs no second
        if noticed is not None and now - max(noticed[1], active.started) >= grace:
            self._peer_failed(active.emit, noticed[0], active.trigger)
        elif active.deadline and now - active.started >= self.timeout_s + self.grace_s:
            self._timed_out(active.emit, active.trigger, active.state)
            error = f"{active.state} still running after {self.timeout_s:g} s"
            self.publish(Failure(rank=self.rank, state=active.state, error=error, kind="timeout"))
        else:
            return
        self._stop.set()  # once: the process is ending
        if self._node.board is not None:
            with suppress(Exception):
                self._node.board.leave(done=False)
        self._exit(EXIT_CODE)
