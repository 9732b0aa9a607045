"""Intrinsic checks on every number's range and every path's form: no value that passes validation
makes a later step crash (an integer beyond what the log or megatron can hold, an infinite rate, a
seed numpy refuses, a URL or a NUL byte where a local path is expected)."""

from __future__ import annotations

import math
import re

from lifecycle.config._intrinsic import check_rank
from lifecycle.config._intrinsic_values import check_dtype, check_optimizer, check_positive_sizes, check_vocab
from lifecycle.config._problems import Problem
from lifecycle.config._problems import intrinsic as _p
from lifecycle.config._records import RunConfig
from lifecycle.log import JSONValue
from lifecycle.redaction import redact_text

_K = 1 << 10
_M = 1 << 20
VOCAB = 1 << 24
# field -> (lowest, highest) accepted, both included: every int and float field of RunConfig
BOUNDS: dict[str, tuple[float, float]] = {
    "model.num_layers": (1, 10 * _K),
    "model.hidden_size": (1, _M),
    "model.num_attention_heads": (1, 64 * _K),
    "model.num_query_groups": (1, 64 * _K),
    "model.ffn_hidden_size": (1, 4 * _M),
    "model.seq_length": (1, 16 * _M),
    "model.max_position_embeddings": (1, 16 * _M),
    "model.vocab_size": (1, VOCAB),
    "model.make_vocab_size_divisible_by": (1, 64 * _K),
    "model.init_method_std": (1e-12, 100.0),
    "model.hidden_dropout": (0.0, 1.0),
    "model.attention_dropout": (0.0, 1.0),
    "model.num_moe_experts": (1, 64 * _K),
    "model.recompute_num_layers": (1, 10 * _K),
    "parallel.tp": (1, _M),
    "parallel.pp": (1, _M),
    "parallel.cp": (1, _M),
    "parallel.ep": (1, _M),
    "parallel.etp": (1, _M),
    "parallel.vpp": (1, _M),
    "parallel.world_size": (1, 16 * _M),
    "parallel.rank": (0, 16 * _M - 1),
    "ddp.bucket_size": (1, 1 << 40),
    "optimizer.lr": (0.0, 1e3),
    "optimizer.min_lr": (0.0, 1e3),
    "optimizer.weight_decay": (0.0, 1e3),
    "optimizer.adam_beta1": (0.0, 1.0 - 1e-12),
    "optimizer.adam_beta2": (0.0, 1.0 - 1e-12),
    "optimizer.adam_eps": (1e-30, 1.0),
    "optimizer.clip_grad": (0.0, 1e9),
    "optimizer.loss_scale": (1e-30, float(1 << 64)),
    "training.micro_batch_size": (1, _M),
    "training.num_microbatches": (1, 16 * _M),
    "training.steps": (0, 1 << 40),
    "training.seed": (0, (1 << 31) - 1),
    "tokenizer.vocab_size": (1, VOCAB),
    "checkpoint.vocab_size": (1, VOCAB),
    "startup.timeout_s": (1e-3, 1e6),
}
LOCAL_PATHS = ("checkpoint.load", "checkpoint.save", "logging.log_dir", "tokenizer.path")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
ENDPOINT = re.compile(r"https?://[^\s/?#]+", re.IGNORECASE)
"""An OTLP/HTTP endpoint (`logging.otel`): any other URL is refused."""
# The checks that already report a value below its lowest bound (with their own words).
_OWNERS = (check_positive_sizes, check_optimizer, check_dtype, check_vocab, check_rank)


def value_of(c: RunConfig, name: str) -> JSONValue:
    section, _, key = name.partition(".")
    value: JSONValue = getattr(getattr(c, section), key)
    return value


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


def check_bounds(c: RunConfig) -> list[Problem]:
    """Every number is finite and within its field's bounds (`BOUNDS`), unless another check already
    reported the same field."""
    reported = {p.field for owner in _OWNERS for p in owner(c)}
    out = []
    for name, (lo, hi) in BOUNDS.items():
        value = value_of(c, name)
        if value is None or name in reported or not isinstance(value, (int, float)):
            continue
        if (isinstance(value, float) and not math.isfinite(value)) or not lo <= value <= hi:
            out.append(
                _p(
                    "bounds",
                    name,
                    value,
                    f"out of range: must be a finite number in [{_fmt(lo)}, {_fmt(hi)}]",
                    f"set {name} between {_fmt(lo)} and {_fmt(hi)}",
                )
            )
    return out


def check_local_paths(c: RunConfig) -> list[Problem]:
    """Checkpoint, log and tokenizer paths are local paths: no URL, no NUL byte or line break."""
    out = []
    for name in LOCAL_PATHS:
        value = value_of(c, name)
        if not isinstance(value, str):
            continue
        if _URL.match(value.strip()):
            out.append(
                _p(
                    "local_paths",
                    name,
                    value,
                    "is a URL, and a local path is expected here",
                    f"copy or mount it locally and set {name} to the local path",
                )
            )
        elif any(ch in value for ch in "\0\n\r"):
            out.append(
                _p(
                    "local_paths",
                    name,
                    value,
                    "holds a NUL byte or a line break",
                    f"set {name} to a path without control characters",
                )
            )
    return out


def check_otel(c: RunConfig) -> list[Problem]:
    """logging.otel is a local file path or an http(s) OTLP endpoint (shown redacted). Its spans are
    derived from the startup log's records: a run without a log directory writes none."""
    value = c.logging.otel
    if value is None:
        return []
    shown = redact_text(value)
    if not value.strip() or any(ch in value for ch in "\0\n\r"):
        return [
            _p(
                "otel",
                "logging.otel",
                shown,
                "is empty or holds a NUL byte or a line break",
                "set logging.otel to a file path or an http(s) OTLP endpoint",
            )
        ]
    if _URL.match(value.strip()) and not ENDPOINT.match(value.strip()):
        return [
            _p(
                "otel",
                "logging.otel",
                shown,
                "is a URL but not an http(s) OTLP endpoint",
                "set logging.otel to a local file path, or to http(s)://HOST:4318/v1/traces",
            )
        ]
    return []
