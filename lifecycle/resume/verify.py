"""`lifecycle verify-resume`'s rank work: train, and after each step a digest of what a resume must
reproduce bit for bit (imports torch: only the ranks load it).

A run is one of three parts, each in fresh processes (`lifecycle.cli.verify_resume`, which trains):
`whole` trains 2K steps; `first` trains K and saves; `second` loads that save and trains K more. After
each step the rank records (`digest`) its loss (`repr`, so every bit counts), the norm of this rank's
gradients, and a short hash of every parameter and every optimizer state tensor, by name;
`first_difference` compares the histories.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lifecycle.resume._counts import inner_optimizers

if TYPE_CHECKING:
    import torch

    from lifecycle.runtime import Optimizer, Runtime


@dataclass(slots=True)
class StepDigest:
    """What one rank had after one step."""

    step: int
    loss: str
    grad_norm: str
    tensors: dict[str, str] = field(default_factory=dict)
    """`param <name>` and `optimizer <name>.<state>` → a short hash of the tensor's bytes."""


def _bytes(tensor: torch.Tensor) -> bytes:
    """The tensor's bytes as stored (any dtype), for a hash: equal bytes, equal tensor."""
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def digest(rt: Runtime, step: int, loss: float | None) -> StepDigest:
    """This rank's loss, gradient norm and tensor hashes after step `step`."""
    out = StepDigest(step=step, loss=repr(loss), grad_norm="")
    squares = 0.0
    names: dict[int, str] = {}
    for index, chunk in enumerate(rt.model or ()):
        for name, param in chunk.named_parameters():  # type: ignore[attr-defined]
            names[id(param)] = f"{index}.{name}"
            out.tensors[f"param {index}.{name}"] = _short(_bytes(param))
            grad = getattr(param, "main_grad", None)
            if grad is not None:
                squares += float(grad.detach().double().pow(2).sum())
    out.grad_norm = repr(math.sqrt(squares))
    out.tensors.update(_optimizer_tensors(rt.optimizer, names))
    return out


def _optimizer_tensors(optimizer: Optimizer | None, names: dict[int, str]) -> dict[str, str]:
    """Each optimizer's parameters that are not the model's (fp32 main copies, distributed shards)
    and every state tensor, by the model parameter's name where it is one."""
    out: dict[str, str] = {}
    for position, inner in enumerate(inner_optimizers(optimizer)):
        torch_optimizer = getattr(inner, "optimizer", None)
        groups = getattr(torch_optimizer, "param_groups", [])
        params = [param for group in groups for param in group["params"]]
        states = getattr(torch_optimizer, "state", {})
        for number, param in enumerate(params):
            label = names.get(id(param), f"{position}.{number}")
            if id(param) not in names:
                out[f"optimizer {label}.param"] = _short(_bytes(param))
            for key, value in sorted(states.get(param, {}).items()):
                out[f"optimizer {label}.{key}"] = _short(_bytes(value)) if hasattr(value, "numpy") else repr(value)
    return out


def _short(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def first_difference(whole: list[list[StepDigest]], resumed: list[list[StepDigest]]) -> str | None:
    """The first step (then rank, then value or tensor, in the model's order) where the uninterrupted and
    the resumed histories differ, in one line; None when every step is equal on every rank. A step
    either run lacks is a difference, and so are a rank count that differs and histories without any
    step: nothing was compared."""
    if len(whole) != len(resumed):
        return f"ranks recorded: {len(whole)} uninterrupted, {len(resumed)} resumed"
    longest = max((len(steps) for steps in [*whole, *resumed]), default=0)
    if longest == 0:
        return "no step was recorded on any rank"
    for index in range(longest):
        for rank, (ours, theirs) in enumerate(zip(whole, resumed, strict=True)):
            found = _step_difference(ours[index] if index < len(ours) else None, theirs, index)
            if found is not None:
                return f"rank {rank}: {found}"
    return None


def _step_difference(a: StepDigest | None, resumed: list[StepDigest], index: int) -> str | None:
    if a is None:
        return f"the uninterrupted run has no step {index + 1}"
    if index >= len(resumed):
        return f"the resumed run has no step {a.step}"
    b = resumed[index]
    if a.step != b.step:
        return f"step {a.step} uninterrupted is step {b.step} resumed"
    for ours_value, theirs_value, label in ((a.loss, b.loss, "loss"), (a.grad_norm, b.grad_norm, "gradient norm")):
        if ours_value != theirs_value:
            return f"step {a.step}: {label} {ours_value} uninterrupted, {theirs_value} resumed"
    ours, theirs = a.tensors, b.tensors
    for name in [*ours, *(n for n in theirs if n not in ours)]:
        if ours.get(name) != theirs.get(name):
            return (
                f"step {a.step}: {name} differs (hash {ours.get(name, 'absent')} uninterrupted, "
                f"{theirs.get(name, 'absent')} resumed)"
            )
    return None
