"""How the rank watch polls and how long it waits: every figure it is tuned by, in one record.

`WatchSettings.of(config)` is the record a run's `RunConfig` gives: its `startup.timeout_s`, and this
file's defaults for the rest (no YAML key sets them). The watch, its ring and the scale simulation
read this record; to change how the watch polls, change this file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lifecycle.config import RunConfig

HOST_OPS_PER_S = 6000.0
"""The most operations a second the watch asks of the store's host, all nodes together: each node leader
makes two a round, so a round lasts at least `2 * nodes / HOST_OPS_PER_S` (`round_s`: 5.5 s at 16,384 nodes).
torchrun's c10d rendezvous keeps alive once per node every 5 s: 3,277 a second at 16,384 nodes."""

POLLS_A_ROUND = 2
"""A leader's round across nodes is at least this many polls (1 s at the default `poll_s` of 0.5 s), as
torchrun's agents keep alive at intervals, not every poll: at 512 nodes (4,096 ranks) the host serves
1,024 watch operations a second, not 2,048 (benchmarks/store.py). A failure then reaches the other nodes
up to one poll later. A lone node keeps a round of one poll: its leader is the watch's only client."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchSettings:
    """The rank watch's deadline, poll and graces; what follows from them (`stale_s`, `lost_s`, a round)."""

    timeout_s: float
    """`startup.timeout_s`: the rendezvous's and each collective state's deadline."""
    poll_s: float = 0.5
    """How often the watcher ticks: it beats on the node's board, looks for gone peers, reads the board."""
    grace_s: float = 3.0
    """How long a main thread still blocked after a peer's failure, or past its deadline, is left before
    the watcher ends the process."""
    lost_grace_s: float = 1.0
    """The grace (at most `grace_s`) after a `lost` peer: no process is left to close its sockets."""

    @classmethod
    def of(cls, config: RunConfig) -> WatchSettings:
        """The settings of a run: its `startup.timeout_s`, the defaults for the rest."""
        return cls(timeout_s=config.startup.timeout_s)

    @property
    def stale_s(self) -> float:
        """A rank (or node) whose heartbeat stood still this long is lost: `timeout_s / 4`, within 5 to 8 s."""
        return max(5.0, min(8.0, self.timeout_s / 4))

    @property
    def lost_s(self) -> float:
        """A store whose host closed the connection this long is gone with its host."""
        return max(1.0, 2 * self.poll_s)

    def round_s(self, nodes: int) -> float:
        """How long a leader's round lasts: POLLS_A_ROUND polls (one for a lone node), or longer past HOST_OPS_PER_S."""
        return max(self.poll_s * (1 if nodes <= 1 else POLLS_A_ROUND), 2 * nodes / HOST_OPS_PER_S)

    def node_stale_s(self, nodes: int) -> float:
        """How long a node's beat may stand still before it is lost: `stale_s`, or three rounds when longer."""
        return max(self.stale_s, 3 * self.round_s(nodes))
