"""What a resume must bring back of a megatron optimizer: Adam's step counts and the loss scale.

`optimizer_counts` reads them from an optimizer in memory; `saved_counts` from the optimizer state megatron
keeps in a checkpoint's common state, where Megatron-LM's `save_checkpoint` puts it (`optimizer`): each
optimizer's torch state dict, Adam's shared step as `state.common_step` (`MegatronOptimizer.
_extract_common_per_param_step`; the distributed optimizer writes it into its parameter groups, as Transformer
Engine's and Apex's fused Adam keep it), and the grad scaler's state. Both give the same shape, so the resume
window compares a Megatron-LM checkpoint's counts with the optimizer's after the load (`streams.ResumeWindow`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

from lifecycle.log import JSONValue

if TYPE_CHECKING:
    import torch
    from megatron.core.optimizer import MegatronOptimizer

Saved: TypeAlias = (
    "torch.Tensor | str | int | float | bool | Sequence[Saved] | Mapping[str, Saved] | Mapping[int, Saved] | None"
)
"""What a checkpoint's common state holds: numbers, strings, tensors, and lists and dicts of them (a
ChainedOptimizer's state keyed by its optimizers' indices)."""


def optimizer_counts(optimizer: MegatronOptimizer) -> dict[str, JSONValue]:
    """The counts of a megatron optimizer (each of a ChainedOptimizer's): the distinct step counts in its
    parameters' states, else in its parameter groups (Adam's `step`, which a fused Adam keeps per group; a
    group's may be a stale copy the distributed optimizer's load left beside the states'; [] before the
    first step) and its loss scale (None without a grad scaler)."""
    steps: set[float] = set()
    scales: list[float] = []
    for inner in inner_optimizers(optimizer):
        torch_optimizer = getattr(inner, "optimizer", None)
        states = getattr(torch_optimizer, "state", {})
        own = {float(state["step"]) for state in states.values() if "step" in state}
        steps.update(own or _group_steps(getattr(torch_optimizer, "param_groups", [])))
        if getattr(inner, "grad_scaler", None) is not None:
            scales.append(float(inner.get_loss_scale()))  # it has a grad scaler
    return {"steps": sorted(steps), "loss_scale": scales[0] if scales else None}


def inner_optimizers(optimizer: MegatronOptimizer) -> list[MegatronOptimizer]:
    """A ChainedOptimizer's optimizers, or the optimizer itself."""
    return list(getattr(optimizer, "chained_optimizers", None) or [optimizer])


def saved_counts(state: Saved, constant_scale: float | None = None) -> dict[str, JSONValue]:
    """`optimizer_counts` of the optimizer state a checkpoint's common state keeps (its `optimizer` entry: a
    ChainedOptimizer's per optimizer, in order). A constant grad scaler saves no state: its scale is
    `constant_scale` (Megatron-LM's `--loss-scale`, in the checkpoint's args)."""
    steps: set[float] = set()
    scales: list[float] = []
    _collect(state, steps, scales, constant_scale)
    return {"steps": sorted(steps), "loss_scale": scales[0] if scales else None}


def _collect(node: Saved, steps: set[float], scales: list[float], constant_scale: float | None) -> None:
    """The step counts and the loss scales under `node`, in the chained optimizers' order."""
    if isinstance(node, list | tuple):
        for item in node:
            _collect(item, steps, scales, constant_scale)
        return
    if not isinstance(node, dict):
        return
    groups = node.get("param_groups")
    if isinstance(groups, list):  # a torch optimizer's state dict
        state = node.get("state")
        states = state if isinstance(state, dict) else {}
        own = {_number(value) for key, value in states.items() if key == "common_step"}
        own.update(_number(s["step"]) for s in states.values() if isinstance(s, dict) and "step" in s)
        steps.update(own or _group_steps(groups))
        return
    scaler = node.get("grad_scaler")
    if isinstance(scaler, dict):
        scale = scaler.get("scale", constant_scale)
        if scale is not None:
            scales.append(_number(scale))
    for key, value in node.items():
        if key != "grad_scaler":
            _collect(value, steps, scales, constant_scale)


def _group_steps(groups: Iterable[Saved]) -> set[float]:
    """The step counts of the parameter groups that hold parameters (a fused Adam does not count an empty
    group's; the distributed optimizer saves its groups without their parameters)."""
    return {
        _number(group["step"])
        for group in groups
        if isinstance(group, dict) and "step" in group and group.get("params", True)
    }


def _number(value: Saved) -> float:
    """A step count or a scale as a float: an int, a float, or a one-element tensor."""
    return float(value)  # type: ignore[arg-type]  # a checkpoint's value: a number or a one-element tensor
