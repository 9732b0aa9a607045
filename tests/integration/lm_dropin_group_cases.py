"""Children for test_lm_dropin_adopts_the_scripts_process_group.py and
test_lm_dropin_pretrains_twice_with_teardown.py: the example script (`examples/pretrain_gpt_tiny.py`)
run on 2 spawned gloo ranks with a process group it made itself, and with `pretrain` called twice in
one process."""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

from tests.integration.megatron_lm_cases import ROOT, _record
from tests.integration.ports import new_rendezvous


def _script() -> Any:
    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script

    return script


def pretrain_with(which: str, log_dir: str, pretrain: Any = None) -> dict[str, Any]:
    """The example script's `main()` with Megatron-LM's `pretrain` (in the CPU stand-ins) or the
    drop-in's (`pretrain`, default `lifecycle.lm_dropin.pretrain` logging to `log_dir`); each
    `train_step`'s losses. A failure is returned, as `error`, not raised."""
    from megatron.training import training

    script, original = _script(), training.train_step
    sys.argv = ["pretrain_gpt_tiny.py"]
    out: dict[str, Any] = {"losses": [], "finalizer_calls": []}
    _record(out)
    try:
        if which == "megatron":
            from megatron.training import pretrain as megatron

            from lifecycle.testing import cuda_as_cpu

            with cuda_as_cpu():
                script.main(pretrain=megatron)
        else:
            from lifecycle.lm_dropin import pretrain as dropin

            out["result"] = script.main(pretrain=pretrain or partial(dropin, log_dir=log_dir))
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        training.train_step = original
    return out


def group_state(group: Any) -> dict[str, Any]:
    """Whether `group` is still the default process group and usable: a barrier and an all-reduce on it."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return {"initialized": False}
    total = torch.tensor([dist.get_rank() + 1.0])
    dist.barrier()
    dist.all_reduce(total)
    return {
        "initialized": True,
        "same": dist.distributed_c10d._get_default_group() is group,
        "sum": float(total.item()),
    }


def end_megatron_lms_state() -> None:
    """What a script ends after Megatron-LM's `pretrain` to call it again, the process group kept:
    global variables, micro-batch calculator, rerun state machine, parallel state."""
    from megatron.core import mpu, num_microbatches_calculator, rerun_state_machine
    from megatron.training import global_vars

    global_vars.unset_global_variables()
    num_microbatches_calculator.destroy_num_microbatches_calculator()
    rerun_state_machine.destroy_rerun_state_machine()
    mpu.destroy_model_parallel()


def failing_forward_step(script: Any) -> Any:
    """The script's forward step made to raise on every rank at the first step."""
    original = script.forward_step

    def forward_step(data_iterator: Any, model: Any) -> Any:
        raise RuntimeError("the script's forward step fails on every rank")

    script.forward_step = forward_step
    return original


def own_group(log_root: str) -> dict[str, Any]:
    """The script makes its process group (`init_process_group('gloo')` and a barrier); Megatron-LM's
    `pretrain` trains on it; then the drop-in's, `teardown()`, a drop-in `pretrain` that fails at its
    first step, and a last drop-in `pretrain`: after each, the group's state."""
    import torch.distributed as dist

    from lifecycle.lm_dropin import teardown

    dist.init_process_group("gloo")
    dist.barrier()
    group = dist.distributed_c10d._get_default_group()
    out: dict[str, Any] = {"megatron": pretrain_with("megatron", "")}
    end_megatron_lms_state()
    out["lifecycle"] = pretrain_with("lifecycle", f"{log_root}/first")
    out["after_return"] = group_state(group)
    out["teardown"] = teardown()
    out["after_teardown"] = group_state(group)
    script = _script()
    original = failing_forward_step(script)
    try:
        out["failed"] = pretrain_with("lifecycle", f"{log_root}/failed")
    finally:
        script.forward_step = original
    out["after_failure"] = group_state(group)
    out["left_after_failure"] = _still_up()
    end_megatron_lms_state()  # the script's own arguments, which the failed call left as they were
    out["again"] = pretrain_with("lifecycle", f"{log_root}/again")
    teardown()
    out["after_again"] = group_state(group)
    dist.destroy_process_group()
    return out


def _still_up() -> list[str]:
    from lifecycle.lm_dropin.entry import still_up

    return still_up()


def twice(log_root: str) -> dict[str, Any]:
    """The drop-in's `pretrain` called twice in one process: first as the script calls it; then again
    with the same arguments, without `teardown()`; then `teardown()` and the script's `main()` again."""
    from lifecycle.lm_dropin import pretrain as dropin
    from lifecycle.lm_dropin import teardown

    calls: list[tuple[Any, ...]] = []

    def kept(*args: Any) -> Any:
        calls.append(args)
        return dropin(*args, log_dir=f"{log_root}/first")

    out: dict[str, Any] = {"first": pretrain_with("lifecycle", "", pretrain=kept)}
    out["up_after_first"] = _still_up()
    try:
        dropin(*calls[0], log_dir=f"{log_root}/refused")
        out["refused"] = None
    except Exception as exc:
        out["refused"] = f"{type(exc).__name__}: {exc}"
    out["up_after_refusal"] = _still_up()
    out["teardown"] = teardown()
    out["up_after_teardown"] = _still_up()
    new_rendezvous(log_root, "second")
    out["second"] = pretrain_with("lifecycle", f"{log_root}/second")
    out["teardown_second"] = teardown()
    return out
