"""The process of the timeout-map tests (test_group_timeouts.py): `python -m tests.integration.timeouts_child
LOG_DIR LATE TIMEOUT_S` drives a real Lifecycle (one rank, gloo, megatron's real groups) to CALLBACKS_BOUND; with
LATE=late it then creates a group the way a training script or a hook would, `new_group` without a
timeout (Megatron-Bridge #4011's class), and shuts down."""

from __future__ import annotations

import sys


def make_late_group() -> None:
    import torch.distributed as dist

    dist.new_group([0], group_desc="SCRIPTS_OWN_GROUP")


def main(log_dir: str, late: str, timeout_s: str) -> None:
    import torch

    from lifecycle import Lifecycle, RunConfig
    from states import State

    torch.set_num_threads(1)
    config = RunConfig.preset("tiny-gpt", [f"logging.log_dir={log_dir}", f"startup.timeout_s={timeout_s}"])
    with Lifecycle(config, provider="gpt") as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        if late == "late":
            make_late_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
