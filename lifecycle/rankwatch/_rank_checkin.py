"""One rank's check-in (`RankWatch.check_in`, `RankWatch.checkin`): its arrival, at its node's meeting or
at the store, the wait for every rank, what it then learns of its node, and what it logs and raises when
the check-in fails. The store operations and the keys are `_checkin.py`'s."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

from lifecycle.errors import DistributedError
from lifecycle.log import records
from lifecycle.rankwatch import _checkin, _world
from lifecycle.rankwatch._board import board_root
from lifecycle.rankwatch._failure import Failure, rank_list
from lifecycle.rankwatch._liveness import is_timeout, store_closed
from lifecycle.rankwatch._meeting import Meeting, Word, launch_key
from lifecycle.rankwatch._node import Node
from lifecycle.rankwatch._settings import WatchSettings
from lifecycle.rankwatch._sweep import sweep
from lifecycle.rankwatch._watched import Emit
from lifecycle.runtime import PhaseContext

if TYPE_CHECKING:
    from torch.distributed import Store


class CheckIn:
    """A rank's check-in for one initialization. Its rank watch builds it, and publishes and names failures
    for it (`publish`; `peer_failed`, which logs `peer_failed` once)."""

    def __init__(
        self,
        store: Store,
        *,
        rank: int,
        world_size: int,
        settings: WatchSettings,
        node: str,
        publish: Callable[[Failure], None],
        peer_failed: Callable[[Emit, Failure], None],
        store_host: int | None,
        interruptible: bool,
        board_dir: str | None,
        world: _world.World | None,
        meeting: str | None,
        local_size: int | None,
    ) -> None:
        """`interruptible`: under an in-process restart wrapper the check-in waits in short steps. `board_dir`:
        the node-local board's place (the temp directory when None); `world`: what this rank believes its world
        is, agreed at check-in (`_world.py`); `meeting`: where the ranks of this node meet to check in through
        one of them (`_meeting.launch_key`; none: each rank checks itself in), and `local_size`: how many the
        launcher starts on this node (`_meeting.local_size`). `store_host`: the rank that hosts the store (None:
        torchrun's agent), named when the store's connection closes."""
        self.store, self.rank, self.world_size, self.world, self.node = store, rank, world_size, world, node
        self.timeout_s, self.stale_s = settings.timeout_s, settings.stale_s
        self.store_host, self.interruptible, self.board_dir = store_host, interruptible, board_dir
        self._publish, self._peer_failed = publish, peer_failed
        self._meeting_key, self._local_size = meeting, local_size
        self.meeting: Meeting | None = None  # this rank's arrival at its node's meeting (`register`)
        self.own_index: int | None = None  # this rank's node index, when it leads the node
        self._joined: tuple[list[bytes], int] | None = None  # the node's entries and node count, from a meeting
        self._missing: list[int] | None = None  # the ranks this rank found missing at the check-in

    def run(self, ctx: PhaseContext) -> None:
        """Register this rank and wait until all have; on the deadline log `state_timeout` and raise. The
        store's host (another rank) closing the connection meanwhile is its loss: log `peer_failed` naming it.
        In a meeting (`meeting`), its leader checks the node in, and tells the others what it learned."""
        self.register()
        try:
            self.await_all()
        except _checkin.LeaderSaid as said:
            self.leave()
            raise self._leader_failed(ctx, said.result) from None
        except Exception as exc:
            error = self._failed(ctx, exc)
            if self.meeting is not None:
                with suppress(OSError):
                    self.meeting.post(_checkin.failed(error, exc, self._missing))
                self.leave()
            raise error from exc

    def _failed(self, ctx: PhaseContext, exc: Exception) -> Exception:
        if self.store_host not in (None, self.rank) and store_closed(exc):
            lost, error = _checkin.host_lost(self.store_host, self.rank, exc)
            self._peer_failed(ctx.emit, lost)
            return error
        return self._rendezvous_timed_out(ctx) if is_timeout(exc) else exc

    def register(self) -> None:
        """This rank's arrival at its node's meeting (`meeting`; none where its directory cannot be made),
        else its check-in writes (`_checkin.register`); the first on its node leads it."""
        if self._meeting_key is not None:
            with suppress(OSError):
                root = board_root(self.board_dir)
                key = launch_key(self._meeting_key, self.node)
                self.meeting = Meeting(root, key, self.rank, self._local_size)
                if self.meeting.leads:  # once a node and launch: the leftovers of killed ranks
                    sweep(root)
        if self.meeting is None:
            self.own_index = _checkin.register(self.store, self.rank, self.world_size, self.node, self.world)

    def report(self) -> None:
        """A meeting's leader: check in the node's ranks that arrived (`Meeting.due`), in one batch."""
        meeting = self.meeting
        if meeting is None or not meeting.leads or not (batch := meeting.due(time.monotonic())):
            return
        world = None if meeting.pushed else self.world  # the first batch agrees on the world
        index = _checkin.register_node(self.store, batch, self.world_size, self.node, (self.rank, meeting.nonce), world)
        meeting.pushed |= batch.keys()
        self.own_index = index if index is not None else self.own_index

    def await_all(self) -> None:
        """Until every rank has checked in, at most `timeout_s` (polled when `interruptible`). In a meeting,
        its leader waits at the store and tells the others (`LeaderSaid` when it failed)."""
        meeting = self.meeting
        if meeting is None:
            _checkin.await_all(self.store, self.timeout_s, interruptible=self.interruptible, world=self.world)
        elif meeting.leads:
            _checkin.lead(self.store, meeting, self.report, self.timeout_s, interruptible=self.interruptible)
            if self.world is not None:
                _world.gate(self.store, self.world)
            self._joined = _checkin.node_entries(self.store, self.node)
            meeting.post(_checkin.joined(*self._joined))
        else:
            self._joined = _checkin.follow(meeting, self.timeout_s + self.stale_s)

    def join(self) -> Node:
        """After every rank checked in: this node's ranks, leader and board, and the node count."""
        if self._joined is None:
            return _checkin.join(self.store, self.rank, self.node, board_dir=self.board_dir)
        node = _checkin.node_of(*self._joined, self.rank, board_dir=self.board_dir)
        self.leave()
        return node

    def leave(self) -> None:
        if self.meeting is not None:
            self.meeting.leave()

    def _rendezvous_timed_out(self, ctx: PhaseContext) -> DistributedError:
        """Log `state_timeout`; the first rank of each node names the missing ranks (the others count them)."""
        if self.own_index is None and (self.meeting is None or not self.meeting.leads):
            ctx.emit(records.StateTimeout(state="DISTRIBUTED", trigger=ctx.trigger.value, timeout_s=self.timeout_s))
            return _checkin.timed_out(self.world_size, self.timeout_s, arrived=int(self.store.add("arrived", 0)))
        self._missing = self.missing()
        self._timed_out(ctx, self._missing)
        error = f"rendezvous timed out; missing: {rank_list(self._missing)}"
        self._publish(Failure(rank=self.rank, state="DISTRIBUTED", error=error, kind="timeout"))
        return _checkin.timed_out(self.world_size, self.timeout_s, missing=self._missing)

    def _timed_out(self, ctx: PhaseContext, missing: list[int]) -> None:
        trigger = ctx.trigger.value
        ctx.emit(records.StateTimeout(state="DISTRIBUTED", trigger=trigger, timeout_s=self.timeout_s, missing=missing))

    def _leader_failed(self, ctx: PhaseContext, result: Word) -> DistributedError:
        """What this rank raises when its meeting's leader failed to check the node in (`_checkin.follow`)."""
        said, leader = result.get("failed"), self.meeting.leader if self.meeting is not None else -1
        missing = result.get("missing")
        if said == "timeout" and isinstance(missing, list):
            self._timed_out(ctx, missing)
            return _checkin.timed_out(self.world_size, self.timeout_s, missing=missing)
        if said == "host_lost" and self.store_host not in (None, self.rank):
            lost, error = _checkin.host_lost(self.store_host, self.rank, RuntimeError(str(result.get("detail"))))
            self._peer_failed(ctx.emit, lost)
            return error
        if said in ("leader_gone", "silent") and self.meeting is not None:
            lost = _checkin.leader_lost(self.meeting, said)
            self._peer_failed(ctx.emit, lost)
            self._publish(lost)
        return _checkin.leader_error(leader, self.rank, result)

    def missing(self) -> list[int]:  # ranks not checked in (about 2·m·log2(N) operations for m of N)
        return _checkin.missing(self.store, self.world_size)
