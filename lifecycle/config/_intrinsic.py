"""Intrinsic checks on the parallel layout, and the list `validate` runs. None raises.

Rules follow megatron-core 0.16: `parallel_state.initialize_model_parallel`, `TransformerConfig`
and `ModelParallelConfig.__post_init__`, `MoELayer`, `DotProductAttention` and the schedules.
"""

from __future__ import annotations

from lifecycle.config._intrinsic_values import (
    check_ddp,
    check_dtype,
    check_optimizer,
    check_positive_sizes,
    check_recompute,
    check_sequence,
    check_vocab,
)
from lifecycle.config._problems import Problem
from lifecycle.config._problems import environment as _e
from lifecycle.config._problems import intrinsic as _p
from lifecycle.config._records import RunConfig

_TRAINING_PLANS = ("training", "rl")


def _dims_ok(c: RunConfig) -> bool:
    p = c.parallel
    return min(p.tp, p.pp, p.cp, p.ep, p.etp or 1, p.vpp or 1) >= 1


def world_problems(c: RunConfig, world: int | None, field: str, check: str, *, environment: bool) -> list[Problem]:
    """world size divisible by tp·pp·cp (dense) and by etp·ep·pp (experts)."""
    p = c.parallel
    if world is None or world < 1 or not _dims_ok(c):
        return []
    make = _e if environment else _p
    out = []
    model = p.tp * p.pp * p.cp
    if world % model:
        out.append(
            make(
                check,
                field,
                world,
                f"not divisible by tp·pp·cp = {p.tp}·{p.pp}·{p.cp} = {model}",
                f"use a world size that is a multiple of {model}, or change tp/pp/cp",
            )
        )
    expert = (p.etp or p.tp) * p.ep * p.pp
    if p.ep > 1 and world % expert:
        out.append(
            make(
                check,
                field,
                world,
                f"not divisible by etp·ep·pp = {p.etp or p.tp}·{p.ep}·{p.pp} = {expert}",
                f"use a world size that is a multiple of {expert}, or change ep/etp",
            )
        )
    return out


def check_world_divisible(c: RunConfig) -> list[Problem]:
    """parallel.world_size (when set) is divisible by tp·pp·cp and, with ep > 1, by etp·ep·pp."""
    return world_problems(c, c.parallel.world_size, "parallel.world_size", "world_divisible", environment=False)


def check_rank(c: RunConfig) -> list[Problem]:
    """parallel.rank is in [0, world_size); the fake backend needs both set."""
    p, out = c.parallel, []
    if c.backend == "fake":
        for name in ("world_size", "rank"):
            if getattr(p, name) is None:
                out.append(
                    _p(
                        "rank",
                        f"parallel.{name}",
                        None,
                        "the fake backend simulates one rank and needs it set",
                        f"set parallel.{name} (e.g. parallel.world_size=4096 parallel.rank=0)",
                    )
                )
    if p.rank is not None and (p.rank < 0 or (p.world_size is not None and p.rank >= p.world_size)):
        out.append(
            _p(
                "rank",
                "parallel.rank",
                p.rank,
                f"outside [0, world_size={p.world_size})",
                "set parallel.rank between 0 and parallel.world_size - 1",
            )
        )
    return out


def check_attention(c: RunConfig) -> list[Problem]:
    """heads divisible by tp; hidden by heads; query groups divide heads and are a multiple or
    divisor of tp."""
    m, tp = c.model, c.parallel.tp
    out: list[Problem] = []
    if m.num_attention_heads < 1 or tp < 1:
        return out
    if m.num_attention_heads % tp:
        out.append(
            _p(
                "attention",
                "model.num_attention_heads",
                m.num_attention_heads,
                f"not divisible by parallel.tp={tp}",
                f"use a head count that is a multiple of {tp}, or a tp that divides it",
            )
        )
    if m.hidden_size >= 1 and m.hidden_size % m.num_attention_heads:
        out.append(
            _p(
                "attention",
                "model.hidden_size",
                m.hidden_size,
                f"not divisible by model.num_attention_heads={m.num_attention_heads}",
                "use a hidden size that is a multiple of the head count",
            )
        )
    return out + _query_groups(m.num_query_groups, m.num_attention_heads, tp)


def _query_groups(g: int | None, heads: int, tp: int) -> list[Problem]:
    """Query groups divide the heads and are a multiple or divisor of tp."""
    out: list[Problem] = []
    if g is not None and g >= 1:
        if heads % g:
            out.append(
                _p(
                    "attention",
                    "model.num_query_groups",
                    g,
                    f"does not divide model.num_attention_heads={heads}",
                    "use a divisor of the head count",
                )
            )
        if g % tp and tp % g:
            out.append(
                _p(
                    "attention",
                    "model.num_query_groups",
                    g,
                    f"neither a multiple nor a divisor of parallel.tp={tp}",
                    f"use a multiple or divisor of {tp}",
                )
            )
    return out


def check_pipeline(c: RunConfig) -> list[Problem]:
    """layers divisible by pp (by pp·vpp with vpp); vpp needs pp > 1 and num_microbatches >= pp."""
    m, p, out = c.model, c.parallel, []
    if p.vpp is not None and p.vpp >= 1 and p.pp == 1:
        out.append(
            _p(
                "pipeline",
                "parallel.vpp",
                p.vpp,
                "the interleaved schedule needs pipeline parallelism (parallel.pp > 1)",
                "set parallel.pp > 1 or remove parallel.vpp",
            )
        )
    if m.num_layers < 1 or p.pp < 1 or (p.vpp is not None and p.vpp < 1):
        return out
    stages = p.pp * (p.vpp or 1)
    if p.pp > 1 and m.num_layers % stages:
        what = f"pp·vpp = {p.pp}·{p.vpp} = {stages}" if p.vpp else f"parallel.pp={p.pp}"
        out.append(
            _p(
                "pipeline",
                "model.num_layers",
                m.num_layers,
                f"not divisible by {what}",
                f"use a multiple of {stages} layers, or change pp/vpp",
            )
        )
    if p.vpp and p.pp > 1 and c.training.num_microbatches < p.pp:
        out.append(
            _p(
                "pipeline",
                "training.num_microbatches",
                c.training.num_microbatches,
                f"the interleaved schedule needs at least parallel.pp={p.pp} microbatches",
                f"set training.num_microbatches >= {p.pp}",
            )
        )
    return out


def check_experts(c: RunConfig) -> list[Problem]:
    """ep > 1 needs MoE; experts divisible by ep; MoE training with tp > 1 needs sequence
    parallelism; bias in MoE layers needs an expert tensor parallel size of 1."""
    m, p, out = c.model, c.parallel, []
    if p.ep > 1 and m.num_moe_experts is None:
        out.append(
            _p(
                "experts",
                "parallel.ep",
                p.ep,
                "expert parallelism needs an MoE model",
                "set model.num_moe_experts, or parallel.ep=1",
            )
        )
    n = m.num_moe_experts
    if n is not None and n >= 1 and p.ep >= 1 and n % p.ep:
        out.append(
            _p(
                "experts",
                "model.num_moe_experts",
                n,
                f"not divisible by parallel.ep={p.ep}",
                f"use a multiple of {p.ep} experts, or change parallel.ep",
            )
        )
    return out + _moe_layers(c, n)


def _moe_layers(c: RunConfig, n: int | None) -> list[Problem]:
    """MoE training with tp > 1 needs sequence parallelism; bias in MoE layers needs etp 1."""
    m, p, out = c.model, c.parallel, []
    moe_training = n is not None and c.plan in _TRAINING_PLANS
    if moe_training and p.tp > 1 and not p.sequence_parallel:
        out.append(
            _p(
                "experts",
                "parallel.sequence_parallel",
                False,
                f"MoE training with parallel.tp={p.tp} needs sequence parallelism",
                "set parallel.sequence_parallel=true",
            )
        )
    etp = p.etp or p.tp
    if n is not None and m.add_bias_linear and etp != 1:
        out.append(
            _p(
                "experts",
                "model.add_bias_linear",
                True,
                f"megatron supports bias in MoE layers only with expert tensor parallel size 1, not {etp}",
                "set model.add_bias_linear=false, or parallel.etp=1",
            )
        )
    return out


def check_tensor_parallel_features(c: RunConfig) -> list[Problem]:
    """sequence_parallel needs tp > 1; tp_comm_overlap needs sequence_parallel and TE; cp > 1 needs
    TE attention."""
    p, out = c.parallel, []
    if p.sequence_parallel and p.tp == 1:
        out.append(
            _p(
                "tensor_parallel_features",
                "parallel.sequence_parallel",
                True,
                "sequence parallelism needs tensor parallelism (parallel.tp=1)",
                "set parallel.tp > 1 or parallel.sequence_parallel=false",
            )
        )
    if p.tp_comm_overlap and not p.sequence_parallel:
        out.append(
            _p(
                "tensor_parallel_features",
                "parallel.tp_comm_overlap",
                True,
                "TP communication overlap needs sequence parallelism",
                "set parallel.sequence_parallel=true or parallel.tp_comm_overlap=false",
            )
        )
    needs_te = {"parallel.tp_comm_overlap": p.tp_comm_overlap, "parallel.cp": p.cp > 1}
    for name, wanted in needs_te.items():
        if wanted and c.model.transformer_impl != "transformer_engine":
            out.append(
                _p(
                    "tensor_parallel_features",
                    name,
                    getattr(p, name.split(".")[1]),
                    "needs transformer-engine layers (model.transformer_impl=local)",
                    "set model.transformer_impl=transformer_engine",
                )
            )
    return out


def check_splits(c: RunConfig) -> list[Problem]:
    """Dimensions megatron splits evenly: an explicit or restored vocab across tp
    (VocabParallelEmbedding), the sequence across tp with sequence parallelism, and across 2·cp
    with context parallelism (load-balanced chunks)."""
    p, m = c.parallel, c.model
    if min(p.tp, p.cp) < 1:
        return []
    out: list[Problem] = []
    for name, size in (("model.vocab_size", m.vocab_size), ("checkpoint.vocab_size", c.checkpoint.vocab_size)):
        if size is not None and size >= 1 and size % p.tp:
            out.append(
                _p(
                    "splits",
                    name,
                    size,
                    f"not divisible by parallel.tp={p.tp}",
                    f"use a multiple of {p.tp} (the embedding is split across TP ranks)",
                )
            )
    parts = {"tp": p.tp if p.sequence_parallel else 1, "2·cp": 2 * p.cp if p.cp > 1 else 1}
    for what, n in parts.items():
        if m.seq_length >= 1 and m.seq_length % n:
            out.append(
                _p(
                    "splits",
                    "model.seq_length",
                    m.seq_length,
                    f"not divisible by {what}={n}",
                    f"use a sequence length that is a multiple of {n}",
                )
            )
    return out


def check_backend(c: RunConfig) -> list[Problem]:
    """A forced CPU rehearsal runs on gloo or fake, not nccl."""
    if c.rehearsal is True and c.backend == "nccl":
        return [
            _p(
                "backend",
                "backend",
                "nccl",
                "the CPU rehearsal runs on gloo (or fake), not NCCL",
                "set backend=gloo, or rehearsal=null to rehearse only without CUDA",
            )
        ]
    return []


INTRINSIC = (
    check_positive_sizes,
    check_world_divisible,
    check_rank,
    check_attention,
    check_pipeline,
    check_experts,
    check_tensor_parallel_features,
    check_dtype,
    check_optimizer,
    check_vocab,
    check_sequence,
    check_recompute,
    check_ddp,
    check_splits,
    check_backend,
)
