"""The predicted critical path of a job's startup, per state (`lifecycle simulate --plan`).

A model, not a measurement of the job: constants measured on this machine, combined with counts
taken from the real code at the job's size, under assumptions that `Plan.assumptions` names.

    plan = startup_plan(RunConfig.preset("gpt-131072"), world_size=131072)
    print(plan_text(plan))

Per phase, on the slowest rank (the critical path):
- imports: `import_s` (torch, megatron-core and the lifecycle's entry work, one process alone), of
  which its CPU time `import_cpu_s` × `contention` = max(1, ranks a node / cores a node) and the rest
  (waiting on the page cache and the disk) once;
- VALIDATED and SERVICES_READY: one rank's engine time, measured, × `contention`;
- rendezvous: every rank's store operations at check-in (torch's connect, counted as an assumption,
  plus the rank watch's, counted by running it) served one after another by the store's host at
  `host_ops_per_s`, or one rank's own operations at `store_rtt_s` each, whichever is longer;
- groups: under `distributed.groups: megatron`, the group-constructor calls of one rank (counted at
  two sizes on the fake backend, an affine function of the world size) × the CPU of one call,
  measured, × `contention`; under `own`, one rank's DISTRIBUTED CPU measured at the job's size (its
  own groups only: cheap to run at any size) × `contention`. Both are predicted (`distributed_s`);
  the config's is on the critical path;
- MODEL_BUILT: one rank's build of the layout's shrunken model, measured, × `contention`;
- first step: the lazy communicator bootstrap, one store operation per member of every group a
  rank joins, served by the store's host, plus `step_s` where it was measured.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from lifecycle.config import RunConfig
from lifecycle.log import JSONValue

HOST_OPS_PER_S = 16_000.0
"""Store operations a second one TCPStore host serves to 512 or more connections on a loaded
2-core machine (`benchmarks/store.py` measures it)."""
TORCH_CONNECT_OPS = 4
"""Store operations of torch's own `init_process_group` on a TCPStore a rank (connect, validate, the
rank counter and its wait): an assumption, not counted (the fake backend has no TCPStore)."""
PHASES = ("imports", "VALIDATED", "SERVICES_READY", "rendezvous", "groups", "MODEL_BUILT", "first step")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanConstants:
    """What the plan takes from this machine (seconds unless named otherwise)."""

    import_s: float
    import_cpu_s: float | None = None
    """The CPU part of `import_s` (user and system time): the part a node's ranks share its cores for.
    None: all of it."""
    store_rtt_s: float
    host_ops_per_s: float = HOST_OPS_PER_S
    group_call_s: float
    validated_s: float
    services_s: float
    model_s: float
    step_s: float | None = None
    own_groups_s: float | None = None
    """CPU seconds of one rank's DISTRIBUTED under `distributed.groups: own`, measured at the job's size
    (a rank's own groups cost O(their sizes), not O(world): not extrapolated). None: not measured."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanCounts:
    """What the plan takes from the real code at the job's size."""

    groups_created: int
    """new_group calls a rank makes under megatron's creation (every group of the job)."""
    groups_joined: int
    checkin_ops_per_rank: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    ranks: int
    ranks_per_node: int
    cores_per_node: int
    constants: PlanConstants
    counts: PlanCounts
    phases: dict[str, float]
    formulas: dict[str, str]
    assumptions: tuple[str, ...]
    creation: str = "megatron"
    """`distributed.groups`: the creation whose groups phase is on the critical path."""
    distributed_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """DISTRIBUTED (rendezvous + groups) under each creation that could be predicted."""

    @property
    def total_s(self) -> float:
        return sum(self.phases.values())

    def to_json(self) -> dict[str, JSONValue]:
        return {
            "ranks": self.ranks,
            "nodes": self.ranks // self.ranks_per_node,
            "ranks_per_node": self.ranks_per_node,
            "cores_per_node": self.cores_per_node,
            "phases_s": {name: round(s, 3) for name, s in self.phases.items()},
            "total_s": round(self.total_s, 3),
            "creation": self.creation,
            "distributed_s": {name: round(s, 3) for name, s in self.distributed_s.items()},
            "formulas": self.formulas,
            "constants": dataclasses.asdict(self.constants),
            "counts": dataclasses.asdict(self.counts),
            "assumptions": list(self.assumptions),
        }


def predict(
    constants: PlanConstants,
    counts: PlanCounts,
    *,
    ranks: int,
    ranks_per_node: int,
    cores_per_node: int | None = None,
    creation: str = "megatron",
) -> Plan:
    """The plan for `ranks` ranks from `constants` and `counts`, its groups created as `creation` says
    (pure: see the module for the model)."""
    cores = cores_per_node or ranks_per_node
    contention = max(1.0, ranks_per_node / cores)
    by_creation = {"megatron": counts.groups_created * constants.group_call_s * contention}
    if constants.own_groups_s is not None:
        by_creation["own"] = constants.own_groups_s * contention
    if creation not in by_creation:
        raise ValueError(f"creation {creation!r}: its groups were not measured (own_groups_s is None)")
    phases = _phases(constants, counts, ranks=ranks, contention=contention)
    phases["groups"] = by_creation[creation]
    formulas = _formulas(constants, counts, ranks=ranks, contention=contention)
    if creation == "own":
        formulas["groups"] = (
            f"own groups only: {counts.groups_joined} new_group calls, measured {phases['groups']:.3f} s"
        )
    return Plan(
        ranks=ranks,
        ranks_per_node=ranks_per_node,
        cores_per_node=cores,
        constants=constants,
        counts=counts,
        phases=phases,
        formulas=formulas,
        assumptions=_assumptions(cores_per_node is None),
        creation=creation,
        distributed_s={name: phases["rendezvous"] + s for name, s in sorted(by_creation.items())},
    )


def _rank_ops(counts: PlanCounts) -> float:
    """Store operations one rank makes at rendezvous: torch's connect (assumed) and the rank watch's."""
    return TORCH_CONNECT_OPS + counts.checkin_ops_per_rank


def _phases(c: PlanConstants, counts: PlanCounts, *, ranks: int, contention: float) -> dict[str, float]:
    """Each phase's seconds on the critical path (see the module for the model)."""
    rank_ops = _rank_ops(counts)
    host_rdzv = ranks * rank_ops / c.host_ops_per_s
    bootstrap = counts.groups_joined * ranks / c.host_ops_per_s
    return {
        "imports": _imports_s(c, contention),
        "VALIDATED": c.validated_s * contention,
        "SERVICES_READY": c.services_s * contention,
        "rendezvous": max(host_rdzv, rank_ops * c.store_rtt_s) + c.store_rtt_s,
        "groups": counts.groups_created * c.group_call_s * contention,
        "MODEL_BUILT": c.model_s * contention,
        "first step": bootstrap + (c.step_s or 0.0) * contention,
    }


def _imports_s(c: PlanConstants, contention: float) -> float:
    """The imports' wall time: their CPU part shares the node's cores, their waiting does not."""
    cpu = c.import_s if c.import_cpu_s is None else min(c.import_cpu_s, c.import_s)
    return c.import_s - cpu + cpu * contention


def _formulas(c: PlanConstants, counts: PlanCounts, *, ranks: int, contention: float) -> dict[str, str]:
    """How each phase of `_phases` was computed, with the figures filled in."""
    rank_ops = _rank_ops(counts)
    return {
        "imports": (
            f"import_s {c.import_s:.2f} × contention {contention:g}"
            if c.import_cpu_s is None
            else f"wait {c.import_s - c.import_cpu_s:.2f} + CPU {c.import_cpu_s:.2f} × contention {contention:g}"
        ),
        "VALIDATED": f"validated_s {c.validated_s:.3f} × contention",
        "SERVICES_READY": f"services_s {c.services_s:.3f} × contention",
        "rendezvous": (
            f"max({ranks:,} ranks × {rank_ops:g} ops / {c.host_ops_per_s:,.0f} ops/s at the host, "
            f"{rank_ops:g} ops × rtt {c.store_rtt_s * 1e6:.0f} µs) + rtt"
        ),
        "groups": f"{counts.groups_created:,} new_group calls × {c.group_call_s * 1e6:.1f} µs × contention",
        "MODEL_BUILT": f"model_s {c.model_s:.3f} × contention",
        "first step": (
            f"{counts.groups_joined} groups joined × {ranks:,} members / {c.host_ops_per_s:,.0f} ops/s"
            + (f" + step_s {c.step_s:.3f} × contention" if c.step_s is not None else " (the step itself: not modelled)")
        ),
    }


def _assumptions(core_a_rank: bool) -> tuple[str, ...]:
    return (
        ("every rank has a core of its own (contention 1)" if core_a_rank else "a node's ranks share its cores")
        + "; CPU-bound phases slow down by ranks a node / cores a node beyond that (imports only in their "
        "CPU time: their waiting on the page cache does not)",
        "all ranks start at once: launch skew and a slow node's lateness are not modelled",
        "imports read a warm page cache; a shared file system at scale is not modelled",
        f"the store's host serves {HOST_OPS_PER_S:,.0f} ops/s whatever the connection count (one "
        "TCPStore served that to 512 connections on a loaded 2-core machine: benchmarks/store.py)",
        f"torch's own init_process_group costs {TORCH_CONNECT_OPS} store ops a rank (not counted)",
        "group creation costs on the job's backend what it costs on the fake backend (communicators "
        "created lazily, no eager NCCL init); the first step then bootstraps each joined group's "
        "communicator through the store: one op per member",
        "MODEL_BUILT builds the layout's shrunken model on CPU: the real model's allocation and "
        "initialization on the GPU are not modelled",
        "the first step's compute is not modelled at scale (only where step_s was measured)",
    )


def plan_text(plan: Plan) -> str:
    out = [
        f"startup plan for {plan.ranks:,} ranks on {plan.ranks // plan.ranks_per_node:,} nodes "
        f"({plan.ranks_per_node} ranks, {plan.cores_per_node} cores a node): {plan.total_s:,.1f} s "
        "on the critical path (predicted)",
    ]
    out += [f"  {name:<15} {s:>10,.2f} s  {plan.formulas[name]}" for name, s in plan.phases.items()]
    if plan.distributed_s:
        each = ", ".join(f"{name} {s:,.2f} s" for name, s in plan.distributed_s.items())
        out.append(f"DISTRIBUTED (rendezvous + groups) by distributed.groups: {each} (the plan: {plan.creation})")
    out.append("assumptions:")
    out += [f"  - {a}" for a in plan.assumptions]
    return "\n".join(out)


def measure_constants(config: RunConfig, *, world_size: int) -> tuple[PlanConstants, int, int]:
    """Measure on this machine: import time (a fresh process), a store round trip, and one rank of
    `config`'s layout at its two smallest world sizes. Also returns those two sizes' group counts'
    affine fit evaluated at `world_size` (created, joined)."""
    from lifecycle.simulate._groups import count_groups

    small = _smallest_world(config)
    one = count_groups(config, world_size=small, creation="megatron")
    two = count_groups(config, world_size=2 * small, creation="megatron")
    per_rank = (two.created - one.created) / small
    created = round(one.created + per_rank * (world_size - small))
    import_s, import_cpu_s = measure_import()
    own = count_groups(config, world_size=world_size, creation="own")
    constants = PlanConstants(
        own_groups_s=own.distributed_s,
        import_s=import_s,
        import_cpu_s=import_cpu_s,
        store_rtt_s=measure_store_rtt_s(),
        group_call_s=two.distributed_s / max(1, two.created),
        validated_s=two.state_s.get("VALIDATED", 0.0),
        services_s=two.state_s.get("SERVICES_READY", 0.0),
        model_s=_model_s(config, small),
    )
    return constants, created, two.member


def _smallest_world(config: RunConfig) -> int:
    import math

    p = config.parallel
    return math.lcm(p.tp * p.pp * p.cp, (p.etp or p.tp) * p.ep * p.pp)


def measure_import() -> tuple[float, float]:
    """Wall and CPU (user + system) seconds to import torch, megatron-core's parallel state and the
    lifecycle's entry work in a fresh process (alone: nothing else imported first)."""
    code = (
        "import time; t, c = time.perf_counter(), time.process_time(); import torch, "
        "megatron.core.parallel_state, lifecycle.core_entry.distributed; "
        "print(time.perf_counter() - t, time.process_time() - c)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def measure_store_rtt_s(count: int = 300) -> float:
    """Median seconds of a `get` from a TCPStore client to a TCPStore host (libuv) on this machine."""
    import socket
    import statistics
    from datetime import timedelta

    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    timeout = timedelta(seconds=10)
    host = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, use_libuv=True, timeout=timeout)
    client = dist.TCPStore("127.0.0.1", port, is_master=False, use_libuv=True, timeout=timeout)
    client.set("plan/rtt", b"1")
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.get("plan/rtt")
        times.append(time.perf_counter() - started)
    del client, host
    return statistics.median(times)


def _model_s(config: RunConfig, world: int) -> float:
    """Wall seconds of one rank's MODEL_BUILT for the layout's shrunken model (cp 1: the local
    layers cannot build context parallelism)."""
    from lifecycle.engine import Lifecycle
    from lifecycle.simulate._simulation import at_rank, prepare, shrunken_gpt_provider, warm_up
    from states import STARTUP_ORDER, State

    parallel = dataclasses.replace(config.parallel, cp=1)
    simulated = prepare(dataclasses.replace(config, parallel=parallel), world_size=world, until=State.MODEL_BUILT)
    warm_up(simulated)
    lc = Lifecycle(
        at_rank(simulated, 0),
        shrunken_gpt_provider,
        None,
        run_id="sim-plan",
        options={"environment_checks": False, "capture_warnings": False},
    )
    try:
        for state in STARTUP_ORDER[1 : STARTUP_ORDER.index(State.MODEL_BUILT)]:
            lc.advance_to(state)
        started = time.perf_counter()
        lc.advance_to(State.MODEL_BUILT)
        return time.perf_counter() - started
    finally:
        lc.shutdown()


def checkin_ops_per_rank(ranks_per_node: int) -> float:
    """Store operations a rank makes at check-in and join (with its leader's first round), counted
    by running the real rank watch of a job of four nodes (a rank's do not depend on the job's size:
    `lifecycle simulate --scale` shows it at any size)."""
    from lifecycle.simulate._scale import count_watch

    ranks = 4 * ranks_per_node
    watch = count_watch(ranks, ranks_per_node, intervals=1)
    return (watch.phases["check_in"].total + watch.phases["join"].total) / ranks


def startup_plan(
    config: RunConfig, *, world_size: int, ranks_per_node: int = 8, cores_per_node: int | None = None
) -> Plan:
    """Measure the constants here, count at `world_size`, predict (see the module). ConfigError,
    before anything is measured, when the config is invalid at `world_size`."""
    from lifecycle.simulate._simulation import prepare

    prepare(config, world_size=world_size)
    constants, created, joined = measure_constants(config, world_size=world_size)
    counts = PlanCounts(
        groups_created=created, groups_joined=joined, checkin_ops_per_rank=checkin_ops_per_rank(ranks_per_node)
    )
    return predict(
        constants,
        counts,
        ranks=world_size,
        ranks_per_node=ranks_per_node,
        cores_per_node=cores_per_node,
        creation=config.distributed.groups,
    )
