"""A real TCPStore under the lifecycle's real rank watch: what a rendezvous or NCCL's bootstrap on the
same store sees while N simulated ranks watch each other.

    python benchmarks/store.py [--ranks 256,1024,4096] [--procs 8] [--repeats 3] [--window 4] [--fresh-up-to 1024]

One process hosts a TCPStore (the libuv backend, torchrun's). `--procs` worker processes (on the
CPUs other than the host's and the timed client's: the ranks' own CPU would be on other machines)
hold the simulated ranks, 8 a node, as real
client connections: each rank's `RankWatch` (lifecycle/rankwatch) on its own connection, and
one watch connection a node, which its leader's watch opens (made ahead, in parallel: a TCPStore
connection takes 0.1-0.2 s here). The node boards are in one temporary directory. Each worker
drives `tick(now)` of its ranks when each asks for it (`first_tick`, `next_tick`: a leader's round
at its node's point of the round, as the watcher thread does; no thread a rank). A separate client, in this
process, times a foreground `set` (until the host confirms it) and `get`, alternately with the
watch ticking and paused (`--repeats` pairs of `--window` seconds; a pause stays under the watch's
`stale_s`), and the workers count the operations their connections made (ops/s served).

Then a node lost: its 8 ranks stop ticking (their heartbeats stand still), and the time is measured
from then until every surviving rank's watch knows a failure (`peer_failure()` is not None: on its
node's board, or for a leader in the store); then, in a fresh job of the same size, one rank
publishes a failure (`mark_failed`), and the same time is measured.

Prints per size the median and the spread (min-max) over the repeats, and the ratio of the summed set
and get p99 with the watch to without, per pair (median and spread) and pooled (the p99 of every sample
of the windows with the watch, over that of every sample without: a pair's window of a few seconds holds
some 2,000 samples, so its p99 is its 20th slowest, and one busy moment of another process on the
host's CPU moves it). The last line is `foreground p99 with watch / without: R`, pooled, for the
largest size.

`--control`: the node leaders' watch connections go to a second host, on the simulated ranks' CPUs
(the keys their rounds read copied there after the check-in). The workers do the same work and
make the same operations, but none at the timed host: what is left of the ratio is not the host's
work for the watch (no node-lost or published-failure figure then).
"""

from __future__ import annotations

import argparse
import heapq
import multiprocessing as mp
import os
import resource
import socket
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lifecycle.rankwatch import WatchSettings

RANKS_PER_NODE = 8
SETTINGS = WatchSettings(timeout_s=600.0)
"""The watch's settings: the default poll (`POLL_S`), and 600 s, `startup.timeout_s`'s default."""
POLL_S = SETTINGS.poll_s
OTHERS_S = 4.0
"""How often a rank that does not lead its node ticks while the host's load is measured (half its
`stale_s`): it makes no store operation, and a tick costs about 0.4 ms of CPU, which 4,096 ranks
every 0.5 s would take from the store's host on a 2-core machine. While a failure spreads,
every rank ticks every `POLL_S`."""


CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def _pin(*, ranks: bool) -> None:
    """The host and the timed client on the first CPU, the simulated ranks on the others (on a real
    job they run on other machines), where the platform allows."""
    if len(CPUS) > 1:
        os.sched_setaffinity(0, set(CPUS[1:]) if ranks else {CPUS[0]})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _store(port: int, *, host: bool = False) -> Any:
    import torch.distributed as dist

    return dist.TCPStore(
        "127.0.0.1",
        port,
        is_master=host,
        wait_for_workers=False,
        use_libuv=True,
        timeout=timedelta(seconds=120),
        multi_tenant=False,
    )


def serve(port: int, ready: Any, stop: Any, beside_ranks: bool = False) -> None:
    """The store's host: a TCPStore server (libuv) until `stop` is set (`beside_ranks`: the control's
    second host, on the simulated ranks' CPUs)."""
    _pin(ranks=beside_ranks)
    store = _store(port, host=True)
    ready.set()
    stop.wait()
    del store


class Counted:
    """A TCPStore client connection that counts the operations made on it (`ops[0]`, shared by a
    worker's connections)."""

    OPS = ("set", "get", "add", "compare_set", "wait", "check", "multi_get", "multi_set", "delete_key", "append")

    def __init__(self, inner: Any, ops: list[int]) -> None:
        self._inner, self._ops = inner, ops

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self.OPS:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._ops[0] += 1
            return attr(*args, **kwargs)

        return counted


class Control:
    """What the benchmark tells its workers, shared: `mode` 0 paused, 1 ticking, 2 rank `target`
    stops ticking (dead), 3 rank `target` publishes a failure, -1 end."""

    def __init__(self, ctx: Any, procs: int) -> None:
        self.mode = ctx.Value("i", 0)
        self.target = ctx.Value("i", -1)
        self.ops = [ctx.Value("q", 0) for _ in range(procs)]
        self.known = [ctx.Value("i", 0) for _ in range(procs)]
        self.ready = [ctx.Event() for _ in range(procs)]

    def served(self) -> int:
        return sum(v.value for v in self.ops)

    def knowing(self) -> int:
        return sum(v.value for v in self.known)


def work(port: int, ranks: range, world: int, board: str, control: Control, me: int, watch_port: int) -> None:
    """A worker: its ranks' watches, registered, checked in, then ticked as `control` says; the leaders'
    watch connections go to `watch_port` (the timed host's own port, but for the control)."""
    import warnings

    warnings.filterwarnings("ignore")
    _pin(ranks=True)
    from lifecycle.rankwatch import RankWatch

    counter = [0]
    nodes = len({rank // RANKS_PER_NODE for rank in ranks})
    with ThreadPoolExecutor(32) as pool:  # a connection takes 0.1-0.2 s here (round trips), not CPU
        stores = list(pool.map(lambda _: Counted(_store(port), counter), range(len(ranks))))
        stores += list(pool.map(lambda _: Counted(_store(watch_port), counter), range(nodes)))
    spare = stores[len(ranks) :]  # the node leaders' watch connections, made ahead (the watch opens one a node)
    watches = []
    for rank, store in zip(ranks, stores, strict=False):
        watch = RankWatch(
            store,
            rank=rank,
            world_size=world,
            settings=SETTINGS,
            watcher_store=spare.pop,
            exit_process=lambda code: None,
            node=f"node{rank // RANKS_PER_NODE}",
            board_dir=board,
        )
        watch.checkin.register()
        watches.append(watch)
    for watch in watches:
        watch.checkin.await_all()
    for watch in watches:
        watch.join_node()
    counter[0] = 0
    control.ready[me].set()
    silent: set[int] = set()
    published = False
    others_at = known_at = 0.0
    wakes: list[tuple[float, int]] = []  # the leaders' next ticks, as their watcher threads would ask
    while (mode := control.mode.value) != -1:
        now = time.monotonic()
        if mode == 0:
            time.sleep(0.02)
            continue
        if not wakes:  # the watcher threads start: each leader's first round at its node's point of the round
            wakes = [(watch.first_tick(now), i) for i, watch in enumerate(watches) if watch.leader]
            heapq.heapify(wakes)
        target = control.target.value
        if mode == 2:  # the target's whole node goes silent: a node lost
            silent |= {r for r in ranks if r // RANKS_PER_NODE == target // RANKS_PER_NODE}
        if mode == 3 and target in ranks and not published:
            published = True
            watches[target - ranks.start].mark_failed("CALLBACKS_BOUND", "benchmark: a published failure")
        if now >= others_at:  # the other ranks: no store operation
            for watch in watches:
                if not watch.leader and watch.rank not in silent:
                    watch.tick(time.monotonic())
            others_at = now + (POLL_S if mode >= 2 else OTHERS_S)
        tick_due(wakes, watches, silent, control, mode)
        control.ops[me].value += counter[0]
        counter[0] = 0
        if mode >= 2 and now >= known_at:  # what a survivor's main thread would find (its board, or the store)
            known_at = now + POLL_S
            control.known[me].value = sum(
                1 for w in watches if w.rank not in silent and w.rank != target and w.peer_failure() is not None
            )
        time.sleep(max(0.0, min(wakes[0][0], others_at) - time.monotonic()))
    for watch in watches:
        watch.stop()


def tick_due(wakes: list[tuple[float, int]], watches: list[Any], silent: set[int], control: Control, mode: int) -> None:
    """Tick each leader whose time came (`wakes`, a heap of (when, index)), and queue its next tick; back to
    the caller after 0.1 s or when `control`'s mode changed (a worker behind its ranks must still pause)."""
    until = time.monotonic() + 0.1
    while wakes[0][0] <= (at := time.monotonic()) < until and control.mode.value == mode:
        i = heapq.heappop(wakes)[1]
        if watches[i].rank in silent:
            heapq.heappush(wakes, (at + POLL_S, i))
            continue
        watches[i].tick(at)
        heapq.heappush(wakes, (watches[i].next_tick(at), i))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def foreground(client: Any, seconds: float) -> dict[str, list[float]]:
    """Latencies (µs) of a `set` and a `get` from one client for `seconds`. TCPStore's `set` does not
    wait for the host's answer, so a set is timed until the host confirms it (`set`, then `wait` on
    the key: what a rendezvous peer waiting for that key sees); a `get` is one round trip."""
    out: dict[str, list[float]] = {"set": [], "get": []}
    until = time.monotonic() + seconds
    n = 0
    while time.monotonic() < until:
        key = f"fg/{n}"
        t = time.perf_counter()
        client.set(key, b"x" * 64)
        client.wait([key])
        out["set"].append((time.perf_counter() - t) * 1e6)
        t = time.perf_counter()
        client.get(key)
        out["get"].append((time.perf_counter() - t) * 1e6)
        n += 1
        time.sleep(0.002)  # a rendezvous client's pace, not a flood
    return out


class Job:
    """A store host and `procs` workers holding `world` simulated ranks, checked in and joined."""

    def __init__(self, world: int, procs: int, *, elsewhere: bool = False) -> None:
        """`elsewhere`: the control, the leaders' watch connections to a second host on the ranks' CPUs."""
        self.ctx = mp.get_context("fork")
        self.port = _free_port()
        self.stop = self.ctx.Event()
        watch_port = _free_port() if elsewhere else self.port
        self.servers = []
        for port, beside in ((self.port, False), (watch_port, True))[: 1 + elsewhere]:
            hosted = self.ctx.Event()
            server = self.ctx.Process(target=serve, args=(port, hosted, self.stop, beside), daemon=True)
            server.start()
            hosted.wait(30)
            self.servers.append(server)
        self.board = tempfile.TemporaryDirectory(prefix="lifecycle-bench-store-")
        self.control = Control(self.ctx, procs)
        nodes = world // RANKS_PER_NODE
        cuts = [round(i * nodes / procs) * RANKS_PER_NODE for i in range(procs + 1)]
        self.slices = [range(cuts[i], cuts[i + 1]) for i in range(procs)]
        started = time.monotonic()
        self.workers = [
            self.ctx.Process(
                target=work, args=(self.port, part, world, self.board.name, self.control, i, watch_port), daemon=True
            )
            for i, part in enumerate(self.slices)
        ]
        for worker in self.workers:
            worker.start()
        for event in self.control.ready:
            if not event.wait(600):
                raise SystemExit("the simulated ranks did not check in within 600 s")
        self.checkin_s = time.monotonic() - started
        if elsewhere:  # the keys the leaders' rounds read, as the check-in left them on the timed host
            source, copy = _store(self.port), _store(watch_port)
            copy.set("first", source.get("first"))
            for index in range(1, nodes + 1):
                copy.set(f"beat/{index}", source.get(f"beat/{index}"))
        self.control.mode.value = 1  # every watch starts at once, as the job's watcher threads would
        self.world = world

    def close(self) -> None:
        self.control.mode.value = -1
        for worker in self.workers:
            worker.join(30)
            if worker.is_alive():
                worker.kill()
        self.stop.set()
        for server in self.servers:
            server.join(10)
        self.board.cleanup()


def until_known(job: Job, mode: int, target: int, limit_s: float) -> float:
    """Seconds from telling the workers (`mode` 2: `target`'s node stops ticking; 3: it publishes) until
    every surviving rank's watch knows a failure; inf after `limit_s`."""
    survivors = job.world - (RANKS_PER_NODE if mode == 2 else 1)
    job.control.mode.value = 1
    time.sleep(2 * POLL_S)
    job.control.target.value = target
    started = time.monotonic()
    job.control.mode.value = mode
    while time.monotonic() - started < limit_s:
        if job.control.knowing() >= survivors:
            return time.monotonic() - started
        time.sleep(0.05)
    return float("inf")


def measure(world: int, procs: int, repeats: int, window: float, fresh_up_to: int, control: bool) -> dict[str, Any]:
    job = Job(world, procs, elsewhere=control)
    client = _store(job.port)
    rows: dict[str, list[float]] = {}
    pooled: dict[str, list[float]] = {}  # every sample of the windows with the watch, and without
    try:
        for _ in range(repeats):  # the pauses stay under the watch's stale_s (8 s): a pause is no failure
            for mode, name in ((1, "with"), (0, "without")):
                job.control.mode.value = mode
                time.sleep(POLL_S)
                before, started = job.control.served(), time.monotonic()
                lat = foreground(client, window)
                served = (job.control.served() - before) / (time.monotonic() - started)
                for op in ("set", "get"):
                    rows.setdefault(f"{op} p50 {name}", []).append(pct(lat[op], 0.50))
                    rows.setdefault(f"{op} p99 {name}", []).append(pct(lat[op], 0.99))
                    pooled.setdefault(f"{op} {name}", []).extend(lat[op])
                rows.setdefault(f"watch ops/s {name}", []).append(served)
        published = client.get("first") if client.check(["first"]) else b""
        if published:  # a false alarm: the simulated ranks fell behind their own stale_s
            print(f"  a failure was published while the load was measured: {published[:300]!r}", flush=True)
        if not control:  # the control's failures go to the other host
            target = (world // 2) // RANKS_PER_NODE * RANKS_PER_NODE
            rows["node lost, known by all s"] = [until_known(job, 2, target, 60)]
    finally:
        job.close()
    rows["check-in s"] = [job.checkin_s]
    for key, samples in pooled.items():
        rows[f"{key.split()[0]} p99 {key.split()[1]}, pooled"] = [pct(samples, 0.99)]
    if world <= fresh_up_to and not control:  # a fresh job: the store of the first one holds the lost node's failure
        job = Job(world, procs)
        try:
            rows["published failure known by all s"] = [until_known(job, 3, world // 3, 60)]
        finally:
            job.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="256,1024,4096")
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=float, default=4.0)
    parser.add_argument("--fresh-up-to", type=int, default=1024, help="a published failure up to this size")
    parser.add_argument(
        "--control",
        action="store_true",
        help="the leaders' watch connections go to a second host on the ranks' CPUs: the same work and traffic, "
        "none of it at the timed host (what of the ratio is not the host's work for the watch)",
    )
    args = parser.parse_args()
    # The reverse lookup torch makes as a TCPStore connects ("The hostname of the client socket cannot be
    # retrieved") waits for a resolver that never answers here, 5 s for about one connection in 25, one at
    # a time in a process: most of the check-in's time (465 s at 4,096 ranks). One try of 1 s bounds it;
    # it changes no store operation timed here.
    os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")
    import torch.distributed  # noqa: F401  # imported once here, inherited by the forked host and workers

    _pin(ranks=False)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sizes = [int(n) for n in args.ranks.split(",")]
    print(
        f"TCPStore (libuv) under the rank watch; {args.procs} worker processes, {RANKS_PER_NODE} ranks a node, "
        f"poll {POLL_S} s; {args.repeats} ABAB pairs of {args.window:g} s; CPUs {os.cpu_count()}, "
        f"load {os.getloadavg()[0]:.1f}; RLIMIT_NOFILE {soft} -> {hard}"
    )
    ratio, control = float("nan"), args.control
    for world in sizes:
        rows = measure(world, args.procs, args.repeats, args.window, args.fresh_up_to, args.control)
        print(f"{world:,} ranks ({world // RANKS_PER_NODE:,} nodes): median (min-max) over {args.repeats}")
        for name, values in rows.items():
            unit = "" if name.endswith(" s") or "ops/s" in name else " µs"
            print(f"  {name:<36} {statistics.median(values):>10,.1f}{unit} ({min(values):,.1f}-{max(values):,.1f})")
        names = ("set p99 with", "get p99 with", "set p99 without", "get p99 without")
        pairs = zip(*(rows[name] for name in names), strict=True)
        ratios = [(sw + gw) / (so + go) for sw, gw, so, go in pairs]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"  foreground p99 with / without, per pair: {statistics.median(ratios):.2f} ({spread})")
        summed = {n: rows[f"set p99 {n}, pooled"][0] + rows[f"get p99 {n}, pooled"][0] for n in ("with", "without")}
        with_, without = summed["with"], summed["without"]
        ratio = with_ / without
        print(f"  foreground p99 with / without, pooled: {ratio:.2f} ({with_:,.0f} / {without:,.0f} µs)")
        where = "the second host (control)" if control else "the host"
        print(f"  ops/s served by {where} with the watch: {statistics.median(rows['watch ops/s with']):,.0f}")
    print(f"load at the end: {os.getloadavg()[0]:.1f}")
    print(f"foreground p99 with watch{' elsewhere (control)' if args.control else ''} / without: {ratio:.2f}")


if __name__ == "__main__":
    main()
