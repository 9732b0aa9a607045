"""Rehearse chosen ranks of a large job on one machine: each rank driven through the real engine on
torch's fake process-group backend, one after another, megatron's parallel state released between.

    config = prepare(RunConfig.preset("gpt-4096"))          # validated once: ConfigError otherwise
    layout = Layout(config.parallel, config.parallel.world_size)
    result = simulate(Simulation(config=config, ranks=(0, 4095), run_id="sim"), layout)

Every rank writes the same startup log `lifecycle run` writes (when `log_dir` is set), plus a
`simulation_started` record (how many ranks this simulation drives, so `lifecycle audit` reports a
partial set as simulated rather than missing) and a `rank_simulated` record (where megatron placed
the rank, and whether `RankGenerator` agrees). Fake collectives move no data: what is rehearsed is
the startup's bookkeeping (validation, group construction, model partitioning), not its traffic.
torch and megatron are imported inside functions only.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lifecycle.config import RunConfig
from lifecycle.errors import ConfigError, LifecycleError
from lifecycle.log import records
from lifecycle.simulate._counting import counting
from lifecycle.simulate._layout import Layout, Placement, observe
from states import STARTUP_ORDER, State

if TYPE_CHECKING:
    from megatron.core.transformer import TransformerConfig
    from torch.nn import Module

    from lifecycle.engine import Lifecycle
    from lifecycle.runtime import ModelInputs

UNTIL = (State.DISTRIBUTED, State.MODEL_BUILT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Simulation:
    """What to simulate: the config every rank runs (from `prepare`), the ranks, and where to stop."""

    config: RunConfig
    ranks: tuple[int, ...]
    until: State = State.DISTRIBUTED
    log_dir: str | None = None
    run_id: str = dataclasses.field(default_factory=lambda: f"sim-{uuid.uuid4().hex[:8]}")
    selection: str = "ranks"

    @property
    def world_size(self) -> int:
        return self.config.parallel.world_size or 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RankReport:
    """One simulated rank: the state it reached, megatron's placement and RankGenerator's."""

    rank: int
    state: str
    duration_s: float
    expected: Placement
    observed: Placement | None = None
    mismatches: tuple[str, ...] = ()
    parameters: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.observed is not None and not self.mismatches


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    simulation: Simulation
    reports: tuple[RankReport, ...]
    duration_s: float

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.reports)

    @property
    def median_rank_s(self) -> float:
        """Median time to drive one rank there and back (the first use of megatron's tokenizer
        module, paid once per process before the first rank, is not in it)."""
        import statistics

        return statistics.median(r.duration_s for r in self.reports) if self.reports else 0.0

    @property
    def failed(self) -> tuple[RankReport, ...]:
        return tuple(r for r in self.reports if not r.ok)


def prepare(config: RunConfig, *, world_size: int | None = None, until: State = State.DISTRIBUTED) -> RunConfig:
    """The config the simulated ranks run (rank 0's; `at_rank` gives the others): the fake backend,
    `world_size` if given, and for MODEL_BUILT a shrunken model (`shrink`). Validated once, here,
    without environment checks (the job's GPUs are not this machine's): raises ConfigError listing
    every problem of the job's config before any rank is simulated."""
    from lifecycle.config import raise_for, validate

    if until not in UNTIL:
        raise ConfigError(
            f"until={until.name}: a simulation stops at DISTRIBUTED or MODEL_BUILT",
            field="until",
            problems=[until.name],
        )
    parallel = dataclasses.replace(config.parallel, rank=0, world_size=world_size or config.parallel.world_size)
    simulated = dataclasses.replace(config, backend="fake", parallel=parallel)
    raise_for(validate(simulated, environment=False))
    if until is State.MODEL_BUILT:
        simulated = shrink(simulated)
        raise_for(validate(simulated, environment=False))
    return simulated


def shrink(config: RunConfig) -> RunConfig:
    """The same parallel layout with a model small enough to build on CPU: one layer per (virtual)
    pipeline stage, 8 channels per head, a feed-forward of 8 per tensor/expert-tensor rank; heads,
    query groups, experts, vocabulary and sequence length kept (they are what must divide).
    megatron's local layers (what runs without transformer-engine) support neither sequence
    parallelism nor context parallelism, so SP is turned off, CP > 1 is refused, and the plan is
    `inference`: model chunks only, no DDP or optimizer (MoE training with TP > 1 needs SP)."""
    m, p = config.model, config.parallel
    if p.cp > 1:
        raise ConfigError(
            f"parallel.cp={p.cp}: a MODEL_BUILT simulation builds megatron's local layers, and context "
            "parallelism needs transformer-engine attention on CUDA; simulate until DISTRIBUTED, or "
            "set parallel.cp=1 to build the rest of the layout",
            field="parallel.cp",
            problems=[p.cp],
        )
    model = dataclasses.replace(
        m,
        num_layers=p.pp * (p.vpp or 1),
        hidden_size=m.num_attention_heads * 8,
        ffn_hidden_size=math.lcm(p.tp, p.etp or p.tp) * 8,
        transformer_impl="local",
    )
    parallel = dataclasses.replace(p, sequence_parallel=False, tp_comm_overlap=False)
    return dataclasses.replace(config, model=model, parallel=parallel, plan="inference")


def at_rank(config: RunConfig, rank: int) -> RunConfig:
    return dataclasses.replace(config, parallel=dataclasses.replace(config.parallel, rank=rank))


def simulate(
    sim: Simulation, layout: Layout, *, jobs: int = 1, on_report: Callable[[RankReport], None] | None = None
) -> SimulationResult:
    """Drive every rank of `sim` to `sim.until` and back, in this process (`jobs=1`) or a pool of
    `jobs` forked processes; `on_report` is called as each rank finishes (for a progress bar).
    Reports come back in rank order."""
    _check(sim, layout)
    started = time.perf_counter()
    work = [(rank, layout.placement(rank)) for rank in sim.ranks]
    reports: list[RankReport] = []
    for report in _run(sim, work, jobs):
        reports.append(report)
        if on_report is not None:
            on_report(report)
    reports.sort(key=lambda r: r.rank)
    return SimulationResult(simulation=sim, reports=tuple(reports), duration_s=time.perf_counter() - started)


def _check(sim: Simulation, layout: Layout) -> None:
    problem = None
    if sim.config.backend != "fake" or sim.until not in UNTIL:
        problem = (
            "the config is not a simulation's (backend fake) or until is not DISTRIBUTED/MODEL_BUILT; "
            "build Simulation(config=prepare(config, until=...), until=...)"
        )
    elif layout.world != sim.world_size:
        problem = f"the layout is for {layout.world} ranks, the config for {sim.world_size}"
    elif outside := [rank for rank in sim.ranks if not 0 <= rank < sim.world_size]:
        problem = f"ranks must lie in [0, {sim.world_size}); got {outside[:8]}"
    if problem:
        raise ConfigError(f"cannot simulate: {problem}", field="simulation", problems=[problem])


def _run(sim: Simulation, work: list[tuple[int, Placement]], jobs: int) -> Iterator[RankReport]:
    if jobs <= 1 or len(work) < 2:
        for rank, expected in work:
            yield simulate_rank(sim, rank, expected)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    size = max(1, min(16, len(work) // (jobs * 4)))  # small chunks: steady progress, balanced load
    chunks = [work[i : i + size] for i in range(0, len(work), size)]
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context(method)) as pool:
        futures = [pool.submit(_simulate_chunk, sim, chunk) for chunk in chunks]
        for future in as_completed(futures):
            yield from future.result()


def _simulate_chunk(sim: Simulation, chunk: Sequence[tuple[int, Placement]]) -> list[RankReport]:
    return [simulate_rank(sim, rank, expected) for rank, expected in chunk]


def simulate_rank(sim: Simulation, rank: int, expected: Placement) -> RankReport:
    """One rank: a Lifecycle on `at_rank(sim.config, rank)` up to `sim.until`, observe, shut down."""
    from lifecycle.engine import Lifecycle

    warm_up(sim.config)
    started = time.perf_counter()
    provider = shrunken_gpt_provider if sim.until is State.MODEL_BUILT else None
    lc = Lifecycle(
        at_rank(sim.config, rank),
        provider,
        sim.log_dir,
        run_id=sim.run_id,
        options={"environment_checks": False, "capture_warnings": False},
    )
    observed: Placement | None = None
    mismatches: tuple[str, ...] = ()
    parameters: int | None = None
    error: str | None = None
    try:
        observed, mismatches, parameters = _drive(sim, lc, rank, expected)
    except LifecycleError as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        state = lc.state.name
        lc.shutdown()
    return RankReport(
        rank=rank,
        state=state,
        duration_s=time.perf_counter() - started,
        expected=expected,
        observed=observed,
        mismatches=mismatches,
        parameters=parameters,
        error=error,
    )


def _drive(
    sim: Simulation, lc: Lifecycle, rank: int, expected: Placement
) -> tuple[Placement, tuple[str, ...], int | None]:
    """Advance `lc` state by state, counting what each state creates; compare the placement."""
    lc.record(records.SimulationStarted(simulated=len(sim.ranks), selection=sim.selection, until=sim.until.name))
    with counting() as counts:
        for reached in STARTUP_ORDER[1 : STARTUP_ORDER.index(sim.until) + 1]:
            counts.state = reached.name
            lc.advance_to(reached)
    observed = observe(rank)
    mismatches = observed.differences(expected)
    parameters = None
    if lc.runtime.model is not None:
        parameters = sum(p.numel() for chunk in lc.runtime.model for p in chunk.parameters())
    lc.record(
        records.RankSimulated(
            placement=dict(observed.summary()),
            agrees=not mismatches,
            mismatches=list(mismatches),
            parameters=parameters,
            counts=counts.table,
        )
    )
    return observed, mismatches, parameters


@functools.cache
def _warm_up_tokenizer(vocab_size: int) -> None:
    """megatron's null tokenizer imports transformers on first use (1-4 s): pay it once per process,
    before the first rank, so that rank's SERVICES_READY is timed like the others'."""
    from lifecycle.core_entry.compat import megatron_null_tokenizer

    megatron_null_tokenizer(vocab_size)


def warm_up(config: RunConfig) -> None:
    """Pay once per process the import a rank of `config` would pay first: megatron's tokenizer
    module and `transformers` (done before each rank; a no-op after the first)."""
    if config.tokenizer.type == "null" and config.tokenizer.build:
        _warm_up_tokenizer(config.tokenizer.vocab_size)


def shrunken_gpt_provider(
    config: TransformerConfig, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: ModelInputs
) -> Module:
    """A GPTModel on megatron's local layer spec, with MoE layers when the config has experts (so
    each rank builds `num_moe_experts / ep` local experts, as the real job would)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    spec = get_gpt_layer_local_spec(num_experts=config.num_moe_experts, moe_grouped_gemm=False)
    return GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=inputs.vocab_size,
        max_sequence_length=inputs.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        share_embeddings_and_output_weights=inputs.share_embeddings_and_output_weights,
        vp_stage=vp_stage,
    )
