"""Intrinsic checks on values: sizes, dtype, optimizer ranges, vocab, sequence length, DDP flags."""

from __future__ import annotations

from lifecycle.config._problems import Problem
from lifecycle.config._problems import intrinsic as _p
from lifecycle.config._records import RunConfig


def check_positive_sizes(c: RunConfig) -> list[Problem]:
    """Sizes and counts are >= 1 (steps >= 0); optional ones are >= 1 when set."""
    m, par, t = c.model, c.parallel, c.training
    required = {
        "model.num_layers": m.num_layers,
        "model.hidden_size": m.hidden_size,
        "model.num_attention_heads": m.num_attention_heads,
        "model.seq_length": m.seq_length,
        "parallel.tp": par.tp,
        "parallel.pp": par.pp,
        "parallel.cp": par.cp,
        "parallel.ep": par.ep,
        "training.micro_batch_size": t.micro_batch_size,
        "training.num_microbatches": t.num_microbatches,
    }
    optional = {
        "model.num_query_groups": m.num_query_groups,
        "model.ffn_hidden_size": m.ffn_hidden_size,
        "model.max_position_embeddings": m.max_position_embeddings,
        "model.num_moe_experts": m.num_moe_experts,
        "parallel.etp": par.etp,
        "parallel.vpp": par.vpp,
        "parallel.world_size": par.world_size,
        "ddp.bucket_size": c.ddp.bucket_size,
    }
    out = [
        _p("positive_sizes", k, v, "must be at least 1", f"set {k} to a positive integer")
        for k, v in {**required, **{k: v for k, v in optional.items() if v is not None}}.items()
        if v < 1
    ]
    return out + _steps(c.training.steps) + _startup_deadline(c)


def _steps(steps: int) -> list[Problem]:
    """training.steps is 0 or more."""
    out: list[Problem] = []
    if steps < 0:
        out.append(
            _p(
                "positive_sizes",
                "training.steps",
                steps,
                "must not be negative",
                "set training.steps to 0 or more",
            )
        )
    return out


def _startup_deadline(c: RunConfig) -> list[Problem]:
    """startup.timeout_s is a positive, finite number of seconds."""
    timeout = c.startup.timeout_s
    if 0 < timeout < float("inf"):  # NaN fails both comparisons
        return []
    return [
        _p(
            "positive_sizes",
            "startup.timeout_s",
            timeout,
            "must be positive and finite: it bounds the rendezvous and each collective state",
            "set startup.timeout_s to a number of seconds > 0 (default 600)",
        )
    ]


def check_dtype(c: RunConfig) -> list[Problem]:
    """A static loss scale applies only to fp16 and must be positive."""
    scale, out = c.optimizer.loss_scale, []
    if scale is not None and c.model.dtype != "fp16":
        out.append(
            _p(
                "dtype",
                "optimizer.loss_scale",
                scale,
                f"loss scaling applies only to fp16 (model.dtype={c.model.dtype})",
                "remove optimizer.loss_scale or set model.dtype=fp16",
            )
        )
    if scale is not None and scale <= 0:
        out.append(
            _p(
                "dtype",
                "optimizer.loss_scale",
                scale,
                "must be positive",
                "set a positive static scale, or null for dynamic scaling",
            )
        )
    return out


def check_optimizer(c: RunConfig) -> list[Problem]:
    """lr, min_lr, weight decay, Adam betas/eps and clip_grad are in range."""
    o, m = c.optimizer, c.model
    probability, positive = ("must be in [0, 1]", "use a probability"), "must be positive"
    bounds = [
        ("optimizer.lr", o.lr, o.lr >= 0, "must not be negative", "set lr >= 0"),
        (
            "optimizer.min_lr",
            o.min_lr,
            0 <= o.min_lr <= max(o.lr, 0),
            f"must be in [0, optimizer.lr={o.lr}]",
            "set min_lr between 0 and lr",
        ),
        (
            "optimizer.weight_decay",
            o.weight_decay,
            o.weight_decay >= 0,
            "must not be negative",
            "set weight_decay >= 0",
        ),
        ("optimizer.adam_beta1", o.adam_beta1, 0 <= o.adam_beta1 < 1, "must be in [0, 1)", "use e.g. 0.9"),
        ("optimizer.adam_beta2", o.adam_beta2, 0 <= o.adam_beta2 < 1, "must be in [0, 1)", "use e.g. 0.999"),
        ("optimizer.adam_eps", o.adam_eps, o.adam_eps > 0, positive, "use e.g. 1e-8"),
        (
            "optimizer.clip_grad",
            o.clip_grad,
            o.clip_grad >= 0,
            "must not be negative",
            "set clip_grad >= 0 (0 disables clipping)",
        ),
        ("model.init_method_std", m.init_method_std, m.init_method_std > 0, positive, "use e.g. 0.02"),
        ("model.hidden_dropout", m.hidden_dropout, 0 <= m.hidden_dropout <= 1, *probability),
        ("model.attention_dropout", m.attention_dropout, 0 <= m.attention_dropout <= 1, *probability),
    ]
    return [_p("optimizer", f, v, msg, fix) for f, v, ok, msg, fix in bounds if not ok]


def check_vocab(c: RunConfig) -> list[Problem]:
    """Vocab sizes >= 1; explicit size not below the null tokenizer's; build=false needs a vocab;
    a huggingface tokenizer needs a path."""
    m, tok, out = c.model, c.tokenizer, []
    sized = {
        "model.vocab_size": m.vocab_size,
        "checkpoint.vocab_size": c.checkpoint.vocab_size,
        "model.make_vocab_size_divisible_by": m.make_vocab_size_divisible_by,
    }
    if tok.type == "null" and tok.build:
        sized["tokenizer.vocab_size"] = tok.vocab_size
    out += [
        _p("vocab", name, v, "must be at least 1", f"set {name} to a positive integer")
        for name, v in sized.items()
        if v is not None and v < 1
    ]
    null_size = tok.vocab_size + 1  # megatron's null tokenizer adds an end-of-document id
    if tok.type == "null" and tok.build and m.vocab_size is not None and 1 <= m.vocab_size < null_size:
        out.append(
            _p(
                "vocab",
                "model.vocab_size",
                m.vocab_size,
                f"smaller than the tokenizer's {null_size} ids (tokenizer.vocab_size + eod)",
                f"set model.vocab_size >= {null_size} or remove it to pad automatically",
            )
        )
    return out + _tokenizer_source(c)


def _tokenizer_source(c: RunConfig) -> list[Problem]:
    """build=false needs an explicit or restored vocab size; a huggingface tokenizer needs a path."""
    m, tok, out = c.model, c.tokenizer, []
    if not tok.build and m.vocab_size is None and c.checkpoint.vocab_size is None:
        out.append(
            _p(
                "vocab",
                "tokenizer.build",
                False,
                "without a tokenizer the vocab size must be explicit or restored",
                "set model.vocab_size (or checkpoint.vocab_size), or tokenizer.build=true",
            )
        )
    if tok.type == "huggingface" and tok.build and not tok.path:
        out.append(
            _p(
                "vocab",
                "tokenizer.path",
                tok.path,
                "a huggingface tokenizer is loaded from a local directory",
                "set tokenizer.path to a directory holding tokenizer files (no downloads)",
            )
        )
    return out


def check_sequence(c: RunConfig) -> list[Problem]:
    """seq_length <= max_position_embeddings."""
    m = c.model
    if m.max_position_embeddings is not None and m.seq_length > m.max_position_embeddings >= 1:
        return [
            _p(
                "sequence",
                "model.seq_length",
                m.seq_length,
                f"longer than model.max_position_embeddings={m.max_position_embeddings}",
                "shorten seq_length or raise max_position_embeddings",
            )
        ]
    return []


def check_ddp(c: RunConfig) -> list[Problem]:
    """overlap_param_gather needs the distributed optimizer and overlap_grad_reduce."""
    d, out = c.ddp, []
    if d.overlap_param_gather and not d.use_distributed_optimizer:
        out.append(
            _p(
                "ddp",
                "ddp.overlap_param_gather",
                True,
                "parameter all-gather overlap exists only with the distributed optimizer",
                "set ddp.use_distributed_optimizer=true or ddp.overlap_param_gather=false",
            )
        )
    if d.overlap_param_gather and not d.overlap_grad_reduce:
        out.append(
            _p(
                "ddp",
                "ddp.overlap_param_gather",
                True,
                "needs ddp.overlap_grad_reduce (megatron overlaps both or neither)",
                "set ddp.overlap_grad_reduce=true",
            )
        )
    return out


def check_recompute(c: RunConfig) -> list[Problem]:
    """Activation recompute as `TransformerConfig.__post_init__` accepts it: `full` needs a method
    and a layer count, `selective` takes no layer count, and neither is set without a granularity."""
    m = c.model
    full, selective, unset = (m.recompute_granularity == g for g in ("full", "selective", None))
    method, layers = m.recompute_method, m.recompute_num_layers
    needed = "is required with model.recompute_granularity=full"
    rules = [
        ("model.recompute_method", method, full and method is None, needed, "set model.recompute_method=uniform"),
        ("model.recompute_num_layers", layers, full and layers is None, needed, "set model.recompute_num_layers=1"),
        (
            "model.recompute_num_layers",
            layers,
            selective and layers is not None,
            "must be null with model.recompute_granularity=selective",
            "remove model.recompute_num_layers",
        ),
        (
            "model.recompute_granularity",
            None,
            unset and (method is not None or layers is not None),
            "is null, so recompute_method/recompute_num_layers would do nothing",
            "set model.recompute_granularity=full, or remove recompute_method and recompute_num_layers",
        ),
    ]
    return [_p("recompute", f, v, msg, fix) for f, v, bad, msg, fix in rules if bad]
