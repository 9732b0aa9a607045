"""What a rank knows of its node once every rank checked in (_watch.py, _checkin.py): the other ranks
and their pids, the node's leader, and the node-local board; and what it finds on the node."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from lifecycle.rankwatch._board import Board
from lifecycle.rankwatch._liveness import process_alive


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLeader:
    """The rank that leads a node, as its check-in entry says: its pid, its board's name, its ring index."""

    rank: int
    pid: int
    nonce: str
    index: int

    def entry(self) -> bytes:
        return f"{self.rank}:{self.pid}:{self.nonce}:{self.index}".encode()

    @classmethod
    def parse(cls, raw: bytes) -> NodeLeader | None:
        parts = raw.decode(errors="replace").split(":")
        if len(parts) != 4 or not (parts[0].isdigit() and parts[1].isdigit() and parts[3].isdigit()):
            return None
        return cls(rank=int(parts[0]), pid=int(parts[1]), nonce=parts[2], index=int(parts[3]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """What a rank knows of its node once every rank checked in."""

    peers: dict[int, int]
    """rank -> pid of the other ranks on this node."""
    leader: NodeLeader | None
    board: Board | None
    nodes: int = 1
    """How many nodes the job has."""
    finished: set[int] = field(default_factory=set)
    """The other ranks of the node that left the board as done."""

    def leads(self, rank: int) -> bool:
        """`rank` talks to the store for the node (also: before joining, or without a board)."""
        return self.board is None or self.leader is None or self.leader.rank == rank

    def gone_peer(self, stale_s: float) -> tuple[int, str] | None:
        """The first rank of the node whose process is gone (or whose watcher stood still `stale_s`)
        without leaving the board as done: (rank, why)."""
        wall = time.time()
        for peer, pid in sorted(self.peers.items()):
            if peer in self.finished:
                continue
            beat = self.board.last_beat(peer) if self.board is not None else None
            silent = beat is not None and wall - beat >= stale_s
            if process_alive(pid) and not silent:
                continue
            if self.board is not None and self.board.said_done(peer):
                self.finished.add(peer)
                continue
            if silent and process_alive(pid):
                return peer, f"its watcher (pid {pid}) stood still for {wall - (beat or wall):.0f} s: stopped or hung"
            return peer, f"its process (pid {pid}) is gone without a failure record: killed or crashed"
        return None

    def speaks_for(self, rank: int, gone_leader: int) -> bool:
        """Whether `rank` tells the store that the node's leader `gone_leader` is gone: the lowest rank
        of the node whose process still runs. None does when the whole node is gone: then the node
        before it in the ring finds its beat standing still and names the node."""
        running = [peer for peer, pid in self.peers.items() if peer != gone_leader and process_alive(pid)]
        return rank < min(running, default=rank + 1)

    def state_of(self, peer: int) -> str:
        return self.board.state_of(peer) if self.board is not None else "unknown"
