"""A node leader's round at the store (_watch.py): the node's beat, then `first` and the next node's beat
in one `multi_get`. Two operations a round for each node, and a round lasts long enough that the store's
host sees at most HOST_OPS_PER_S of them, all nodes together (`WatchSettings.round_s`). The nodes' rounds
fall at their own point of the round (`Ring.phase_s`), each on its own grid (`next_due`), so the host gets
them spread out: the watcher threads start together at the end of the check-in, and rounds at once would
reach the host as one burst of 2 operations a node (32,768 at 16,384 nodes) in front of the rendezvous
and NCCL's bootstrap."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lifecycle.rankwatch._failure import Failure
from lifecycle.rankwatch._settings import WatchSettings

if TYPE_CHECKING:
    from torch.distributed import Store


def next_due(due: float, now: float, interval_s: float) -> float:
    """A leader's next round after the one due at `due` and made at `now`: one round on, or, when it came a
    round or more late (a slow host, a stopped process), the next point of its own grid (`due` plus whole
    rounds), so late rounds do not bring the nodes' rounds together."""
    return due + (math.floor((now - due) / interval_s) + 1) * interval_s  # `now` >= `due`: rounds are made when due


def next_tick(now: float, poll_s: float, round_due: float | None) -> float:
    """When a watcher ticks after `now`: `poll_s` on, or sooner (at once when overdue) when its round is due."""
    return now + poll_s if round_due is None else min(now + poll_s, max(now, round_due))


class Ring:
    """Node `index` of `nodes`: its beat, and the watch over the next node's (the last node watches the first)."""

    def __init__(self, index: int, nodes: int, settings: WatchSettings) -> None:
        self.index = index
        self.successor = None if nodes <= 1 else index % nodes + 1
        self.interval_s = settings.round_s(nodes)
        """How often the leader talks to the store."""
        self.stale_s = settings.node_stale_s(nodes)
        """How long the next node's beat may stand still."""
        self.phase_s = self.interval_s * ((index - 1) % max(1, nodes)) / max(1, nodes)
        """How far into a round this node's rounds fall: node i of n at (i - 1) / n of it."""
        self._seq = 0
        self._last: tuple[bytes, float] | None = None  # the next node's last beat, and since when
        self._reported = False

    def round(self, store: Store, state: str, now: float) -> tuple[bytes, Failure | None]:
        """One round: (the raw `first`, empty before any failure; the next node if its beat stood still)."""
        self._seq += 1
        store.set(f"beat/{self.index}", f"{self._seq}:{state}".encode())
        if self.successor is None:
            return store.multi_get(["first"])[0], None
        first, beat = store.multi_get(["first", f"beat/{self.successor}"])
        return first, self._silent(store, beat, now)

    def _silent(self, store: Store, beat: bytes, now: float) -> Failure | None:
        last = self._last
        if beat == b"done" or last is None or last[0] != beat:
            self._last = (beat, now)
            return None
        if now - last[1] < self.stale_s or self._reported:
            return None
        self._reported = True  # once: the next rounds read no more than two keys
        rank, _, name = store.get(f"node/{self.successor}").decode(errors="replace").partition(":")
        state = beat.decode(errors="replace").partition(":")[2] or "unknown"
        error = f"its node {name} sent no heartbeat for {now - last[1]:.0f} s: the node is lost or stopped responding"
        return Failure(rank=int(rank) if rank.isdigit() else -1, state=state, error=error, kind="lost")

    def done(self, store: Store) -> None:
        """The node's end: its beat says so, and the node before it never takes the silence for a loss."""
        store.set(f"beat/{self.index}", b"done")
