"""The scale report of `lifecycle simulate --scale`: what a job of N ranks asks of its store host and
how many process groups each rank creates, counted by running the real code, not by a formula.

- The rank watch: N real `RankWatch` objects (lifecycle/rankwatch), `ranks_per_node` to a
  node, each on its own connection to one counting in-memory store (`StoreHost`), the node-local
  boards in a temporary directory (on /dev/shm where there is one, as on a node's tmpfs). Phases:
  - check_in: every rank arrives at its node's meeting, each node's leader checks the node in, then
    every rank waits for all (`register`, `report`, `await_all`);
  - join: node by node, every rank joins its node (`join_node`), then the node's watches `tick` once (a
    leader's first round at the store, which opens its watch connection);
  - steady: `intervals` more rounds on a simulated clock, one a `interval_s` (a leader's round is
    due at each: the host's load is the same as with a tick every `poll_s`); the host's operations
    in it divided by its length are `watch_store_ops_per_s`;
  - stop: every watch stops.
  Within a round the ranks of a node tick together, the leader last, so its look at its node-mates'
  heartbeats (file times, wall clock) sees them fresh. A watch that publishes a failure or tries to
  end its process in a simulation where no rank fails raises `WatchEndedProcess`.
- Above `full_nodes` nodes (a tick costs about 0.4 ms of CPU here, mostly the look at the node's
  other ranks: 131,072 ranks a round would take a minute), every rank still registers and waits
  (check_in, counted in full), but join, steady and stop run for `sample_nodes` whole nodes spread
  over the job, and their host figures are multiplied by nodes / `sample_nodes` (`sampled` in the
  JSON says so). The watch's round depends on the job's node count, which the sampled leaders read
  from the store as every leader would.
- Process groups: one rank driven to DISTRIBUTED through the engine on the fake backend, megatron's
  `initialize_model_parallel` with every `new_group` call recorded (`count_groups`), under each
  creation (`distributed.groups`: `own`, `megatron`).
"""

from __future__ import annotations

import dataclasses
import os
import resource
import tempfile
import time
from dataclasses import dataclass

from lifecycle.config import RunConfig
from lifecycle.core_entry.groups import Creation
from lifecycle.log import JSONValue
from lifecycle.rankwatch import RankWatch, WatchSettings, World
from lifecycle.simulate._groups import GroupCount, count_groups
from lifecycle.simulate._store import StoreHost, Tally

PHASES = ("check_in", "join", "steady", "stop")
CREATIONS: tuple[Creation, ...] = ("own", "megatron")
FULL_NODES = 2048
SAMPLE_NODES = 1024


class WatchEndedProcess(RuntimeError):
    """A simulated watch found a failure where no rank fails: a bug in the watch or the simulation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Unhurried(WatchSettings):
    """A run's watch settings, but a rank's beat is never stale: the simulation ticks every rank of a round
    one after another, and on a loaded machine a round outlasts `stale_s` (the counts do not depend on it)."""

    @property
    def stale_s(self) -> float:
        return 3600.0


def _no_exit(code: int) -> None:
    raise WatchEndedProcess(f"a simulated rank watch tried to end its process (exit {code}) with no rank failed")


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchCount:
    """What the store host served the rank watch of `ranks` ranks on `nodes` nodes, per phase; the
    phases after check_in counted on `sampled_nodes` nodes and multiplied by `scale`."""

    ranks: int
    nodes: int
    leaders: int
    interval_s: float
    poll_s: float
    window_s: float
    connections: float
    sampled_nodes: int
    phases: dict[str, Tally]

    @property
    def scale(self) -> float:
        return self.nodes / self.sampled_nodes

    def factor(self, phase: str) -> float:
        return 1.0 if phase == "check_in" else self.scale

    @property
    def ops_per_s(self) -> float:
        return self.phases["steady"].total * self.scale / self.window_s

    def to_json(self) -> dict[str, JSONValue]:
        out: dict[str, JSONValue] = {
            "leaders": self.leaders,
            "interval_s": round(self.interval_s, 4),
            "poll_s": self.poll_s,
            "steady_window_s": round(self.window_s, 4),
            "sampled": None
            if self.sampled_nodes == self.nodes
            else {
                "nodes": self.sampled_nodes,
                "ranks": self.sampled_nodes * self.ranks // self.nodes,
                "scale": self.scale,
            },
        }
        counted = self.sampled_nodes * self.ranks // self.nodes
        for name in PHASES:
            tally = self.phases[name]
            ranks = self.ranks if name == "check_in" else counted
            if name == "steady":
                out["steady_second"] = _phase_json(tally, ranks, self.window_s, self.scale)
            else:
                out[name] = _phase_json(tally, ranks, 1.0, self.factor(name))
        return out


def _phase_json(tally: Tally, ranks: int, per: float, scale: float) -> dict[str, JSONValue]:
    """The host's counts of one phase (× `scale`, / `per` seconds), and per rank (of the `ranks` counted)."""

    def host(value: float) -> float:
        return round(value * scale / per, 3)

    rank_ops, rank_bytes = tally.rank_ops.values(), tally.rank_bytes.values()
    return {
        "host": {
            "ops": host(tally.total),
            "ops_by_kind": {kind: host(n) for kind, n in sorted(tally.ops.items())},
            "keys": host(tally.keys),
            "bytes": host(tally.bytes),
            "connections_opened": round(tally.connections * scale),
        },
        "per_rank": {
            "ranks_with_ops": round(len(tally.rank_ops) * scale),
            "ops_max": round(max(rank_ops, default=0) / per, 3),
            "ops_mean": round(sum(rank_ops) / ranks / per, 3),
            "bytes_max": round(max(rank_bytes, default=0) / per, 3),
            "bytes_mean": round(sum(rank_bytes) / ranks / per, 3),
            "connections_max": max(tally.rank_connections.values(), default=0),
        },
    }


def _sample(nodes: int, full_nodes: int, sample_nodes: int) -> list[int]:
    """The nodes driven past check-in: all, or `sample_nodes` spread evenly over the job."""
    if nodes <= full_nodes:
        return list(range(nodes))
    return sorted({n * nodes // sample_nodes for n in range(sample_nodes)})


def count_watch(
    ranks: int,
    ranks_per_node: int = 8,
    *,
    settings: WatchSettings | None = None,
    intervals: int = 2,
    full_nodes: int = FULL_NODES,
    sample_nodes: int = SAMPLE_NODES,
) -> WatchCount:
    """Run the real rank watch of a `ranks`-rank job against a counting store (see the module); `settings`:
    the watch's (a default `RunConfig`'s by default)."""
    settings = Unhurried(**dataclasses.asdict(settings or WatchSettings.of(RunConfig())))
    host = StoreHost("check_in")
    nodes = -(-ranks // ranks_per_node)
    with tempfile.TemporaryDirectory(prefix="lifecycle-scale-", dir=_board_parent()) as board:
        watches = _watches(host, ranks, ranks_per_node, board, settings)
        _check_in(watches)
        sampled = _sample(nodes, full_nodes, sample_nodes)
        now = time.monotonic()
        by_node = _join(host, watches, sampled, ranks_per_node, now)
        interval = _run_rounds(host, by_node, intervals, now)
        _stop(host, by_node)
    scale = nodes / len(sampled)
    return WatchCount(
        ranks=ranks,
        nodes=nodes,
        leaders=round(sum(1 for node in by_node for w in node if w.leader) * scale),
        interval_s=interval,
        poll_s=settings.poll_s,
        window_s=intervals * interval,
        connections=host.phases["check_in"].connections + host.phases["join"].connections * scale,
        sampled_nodes=len(sampled),
        phases={name: host.phases.get(name, Tally()) for name in PHASES},
    )


def _board_parent() -> str | None:
    """Where the node-local boards go: /dev/shm where there is one (as on a node's tmpfs), else the default."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _watches(host: StoreHost, ranks: int, ranks_per_node: int, board: str, settings: WatchSettings) -> list[RankWatch]:
    """One real `RankWatch` a rank, each on its own connection to `host`, boards under `board`."""
    watches = []
    for rank in range(ranks):
        store = host.connect(rank)
        watches.append(
            RankWatch(
                store,
                rank=rank,
                world_size=ranks,
                settings=settings,
                watcher_store=store.clone,
                exit_process=_no_exit,
                node=f"node{rank // ranks_per_node}",
                board_dir=board,
                world=World(job="simulated", world_size=ranks, endpoint="simulated", generation=0, rank=rank),
                meeting=f"node{rank // ranks_per_node}",
                local_size=ranks_per_node,
            )
        )
    return watches


def _check_in(watches: list[RankWatch]) -> None:
    """check_in: every rank arrives at its node's meeting, then each node's leader checks it in, then every
    rank waits for all (a leader in the store, the others on their meeting's word)."""
    for watch in watches:
        watch.checkin.register()
    for watch in watches:
        watch.checkin.report()
    for watch in watches:
        watch.checkin.await_all()


def _join(
    host: StoreHost, watches: list[RankWatch], sampled: list[int], ranks_per_node: int, now: float
) -> list[list[RankWatch]]:
    """join (on the `sampled` nodes): every rank of a node joins it, then the node ticks once at `now` (its
    leader's first round, which opens its watch connection), as a real node's watchers start once joined.
    Returns the sampled nodes' watches, each node's ordered so that its leader ticks last."""
    host.begin("join")
    by_node = []
    for n in sampled:
        node = sorted(watches[n * ranks_per_node : (n + 1) * ranks_per_node], key=lambda w: w.rank)
        for watch in node:
            watch.join_node()
        by_node.append(sorted(node, key=lambda w: w.leader))  # the leader ticks last
        _round(by_node[-1:], now)
    return by_node


def _run_rounds(host: StoreHost, by_node: list[list[RankWatch]], intervals: int, now: float) -> float:
    """`intervals` rounds one interval after the first (at `now`, counted in join) on a simulated clock
    (counted in steady). Returns the interval, the longest of any driven watch."""
    interval = max(w.interval_s for node in by_node for w in node)
    host.begin("steady")
    for n in range(1, intervals + 1):
        _round(by_node, now + n * interval)
    return interval


def _stop(host: StoreHost, by_node: list[list[RankWatch]]) -> None:
    """stop: every driven watch stops; WatchEndedProcess if any published a failure."""
    host.begin("stop")
    for node in by_node:
        for watch in node:
            watch.stop()
    if host.data.get("first"):
        raise WatchEndedProcess(f"a simulated rank watch published a failure: {host.data['first'][:200]!r}")


def _round(by_node: list[list[RankWatch]], now: float) -> None:
    """One tick of every driven watch at `now`, node by node."""
    for node in by_node:
        for watch in node:
            watch.tick(now)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleReport:
    """`lifecycle simulate --scale`: the rank watch's store traffic and one rank's process groups."""

    ranks: int
    ranks_per_node: int
    watch: WatchCount
    groups: GroupCount | None
    """The config's creation (`distributed.groups`)."""
    creations: dict[str, GroupCount]
    """Both creations, `own` and `megatron` (empty without groups)."""
    cpu_s: float
    peak_rss_mb: float

    @property
    def startup_store_ops(self) -> float:
        """The lifecycle's own operations at the store host to start: every rank's check-in and join."""
        return sum(self.watch.phases[p].total * self.watch.factor(p) for p in ("check_in", "join"))

    @property
    def nodes(self) -> int:
        return self.watch.nodes

    @property
    def groups_creation(self) -> str | None:
        return None if self.groups is None else self.groups.creation

    def to_json(self) -> dict[str, JSONValue]:
        return {
            "ranks": self.ranks,
            "nodes": self.nodes,
            "ranks_per_node": self.ranks_per_node,
            "watch_store_ops_per_s": round(self.watch.ops_per_s, 1),
            "store_connections": round(self.watch.connections),
            "groups_creation": None if self.groups is None else self.groups.creation,
            "groups_per_rank": None if self.groups is None else self.groups.created,
            "groups_joined_per_rank": None if self.groups is None else self.groups.member,
            "startup_store_ops": round(self.startup_store_ops),
            "distributed_cpu_s": {name: round(g.distributed_s, 3) for name, g in sorted(self.creations.items())},
            "watch": self.watch.to_json(),
            "groups": None if self.groups is None else self.groups.to_json(),
            "creations": {name: g.to_json() for name, g in sorted(self.creations.items())},
            "cpu_s": round(self.cpu_s, 1),
            "peak_rss_mb": round(self.peak_rss_mb),
        }


def scale_report(config: RunConfig, *, world_size: int, ranks_per_node: int = 8, groups: bool = True) -> ScaleReport:
    """Count the watch's store traffic and (with `groups`) one rank's process groups for `config` at
    `world_size` ranks. ConfigError when the config is invalid at that size."""
    started = time.process_time()
    creations: dict[str, GroupCount] = {}
    if groups:
        creations = {c: count_groups(config, world_size=world_size, creation=c) for c in CREATIONS}
    watch = count_watch(world_size, ranks_per_node, settings=WatchSettings.of(config))
    return ScaleReport(
        ranks=world_size,
        ranks_per_node=ranks_per_node,
        watch=watch,
        groups=creations.get(config.distributed.groups),
        creations=creations,
        cpu_s=time.process_time() - started,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def scale_text(report: ScaleReport) -> str:
    """The scale report for a terminal: the headline figures, then the watch's phases."""
    w = report.watch
    out = [
        f"{report.ranks:,} ranks on {report.nodes:,} nodes ({report.ranks_per_node} a node): counted in "
        f"{report.cpu_s:.1f} s CPU, peak {report.peak_rss_mb:,.0f} MB",
        f"rank watch: {w.leaders:,} node leaders at the store every {w.interval_s:g} s (the others on their "
        f"node's board); {w.ops_per_s:,.0f} store ops/s at the host; {w.connections:,.0f} store connections",
    ]
    if w.sampled_nodes != w.nodes:
        out.append(
            f"  (every rank's check-in counted; join, steady and stop counted on {w.sampled_nodes:,} whole nodes "
            f"spread over the job and multiplied by {w.scale:g})"
        )
    out.append(f"the lifecycle's startup at the store (check-in and join): {report.startup_store_ops:,.0f} ops")
    for name, g in sorted(report.creations.items(), key=lambda item: item[0] != report.groups_creation):
        out.append(
            f"process groups ({name}{', the config' if name == report.groups_creation else ''}): each rank calls "
            f"new_group {g.created:,} times and joins {g.member} of them (DISTRIBUTED {g.distributed_s:.2f} s CPU: "
            f"rank lists {g.megatron_s:.2f} s, non-member new_group calls {g.non_member_s:.2f} s)"
        )
    out.append(f"  {'phase':<14} {'host ops':>12} {'keys':>12} {'bytes':>14} {'conns':>8} {'ops/rank max':>13}")
    for name in PHASES:
        t = w.phases[name]
        per = (w.window_s if name == "steady" else 1.0) / w.factor(name)
        label = "steady (a s)" if name == "steady" else name
        busiest = max(t.rank_ops.values(), default=0) * w.factor(name) / per
        out.append(
            f"  {label:<14} {t.total / per:>12,.0f} {t.keys / per:>12,.0f} {t.bytes / per:>14,.0f} "
            f"{t.connections * w.factor(name):>8,.0f} {busiest:>13,.1f}"
        )
        kinds = ", ".join(f"{k} {n / per:,.0f}" for k, n in sorted(t.ops.items()))
        out.append(f"  {'':<14} {kinds}")
    return "\n".join(out)
