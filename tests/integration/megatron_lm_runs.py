"""Children for test_megatron_lm.py: every case's two runs (`megatron_lm_cases.run`, Megatron-LM's
`pretrain` and the drop-in) one after the other in one pair of rank processes, so megatron is
imported once per rank for all of them (as `megatron_lm_script_cases.runs` does for the entry script)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.integration.megatron_lm_cases import ROOT, run
from tests.integration.ports import new_rendezvous


def runs(
    order: list[tuple[str, str, int, tuple[str, ...]]],
    log_root: str,
    hooks: Mapping[str, Callable[[Any], None]] | None = None,
) -> dict[str, dict[str, Any]]:
    """`run(which, tp, log_dir, extra)` for each (case, which, tp, extra) in `order`, each from what a
    new process has: between runs the script's process group and parallel state are gone
    (`after_return` destroyed them), what a run wrapped or patched (`train_step`, the script's
    `forward_step` and dataset provider, the device-architecture answer) is put back, Megatron-LM's
    global variables, rerun state machine and micro-batch calculator are unset, and the rendezvous
    port is a new one. `hooks[case]`, where given, is called with the script module before its run
    (to change what the script does), and the names of Megatron-LM's modules that `_late.LOOKUPS` lists
    are put back after it. Keyed "case-which"; the drop-in's logs go to `log_root/case`."""
    import sys

    from megatron.core import num_microbatches_calculator, rerun_state_machine
    from megatron.training import arguments, global_vars, initialize, training

    from lifecycle.lm_dropin.entry import LOOKUPS

    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script

    home = {"megatron.training.training": training, "megatron.training.initialize": initialize}
    held = [(home[where.partition(":")[0]], name) for where in LOOKUPS for name in LOOKUPS[where]]
    held_values = [(m, name, vars(m)[name]) for m, name in held if name in vars(m)]  # some only where installed
    out = {}
    provider = script.train_valid_test_datasets_provider
    originals = (training.train_step, script.forward_step, arguments.get_device_arch_version)
    for i, (case, which, tp, extra) in enumerate(order):
        new_rendezvous(log_root, f"{i}-{case}-{which}")
        log_dir = str(Path(log_root) / case) if which == "lifecycle" else ""
        if hooks and case in hooks:
            hooks[case](script)
        out[f"{case}-{which}"] = run(which, tp, log_dir, extra)
        for kept in ("stages_asked", "late_calls"):  # what a hook's dataset provider was asked, its patches' calls
            if kept in vars(script):
                out[f"{case}-{which}"][kept] = vars(script).pop(kept)
        for module, name, value in held_values:  # the module globals a hook replaced
            setattr(module, name, value)
        training.train_step, script.forward_step, arguments.get_device_arch_version = originals
        script.train_valid_test_datasets_provider = provider
        global_vars.unset_global_variables()
        rerun_state_machine.destroy_rerun_state_machine()
        num_microbatches_calculator.destroy_num_microbatches_calculator()
    return out
