"""Children for test_lm_dropin_rank_watch_ends_a_hang_and_names_a_lost_store_host.py: the example
script with the drop-in `pretrain` on launched gloo ranks, DISTRIBUTED made to hang after the process
group is up, or MODEL_BUILT made to hang, or the rank that hosts the store killed in the rank watch's
check-in."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from tests.integration.megatron_lm_cases import ROOT

TIMEOUT_MINUTES = 0.1
"""Megatron-LM's `--distributed-timeout-minutes` (6 s): the watch's deadline, `startup.timeout_s`."""


def _script() -> Any:
    sys.argv = ["pretrain_gpt_tiny.py"]
    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script

    return script


def _pretrain(log_dir: str) -> Any:
    """The drop-in's `pretrain`, with the script's parsed distributed timeout cut to TIMEOUT_MINUTES."""
    from megatron.training import get_args

    from lifecycle.lm_dropin import pretrain

    def short(*args: Any) -> Any:
        get_args().distributed_timeout_minutes = TIMEOUT_MINUTES  # as if parsed (it takes whole minutes)
        return pretrain(*args, log_dir=log_dir)

    return short


def hang_in_distributed(log_dir: str, hang_s: float) -> dict[str, Any]:
    """Megatron-LM's dataset-helper build (`_compile_dependencies`, DISTRIBUTED's step after the
    process group) waits `hang_s` on every rank, far past the deadline; then training goes on."""
    from megatron.training import initialize

    compile_dependencies = initialize._compile_dependencies

    def hangs() -> None:
        time.sleep(hang_s)  # a build on a file system that stopped answering
        compile_dependencies()

    initialize._compile_dependencies = hangs
    result = _script().main(pretrain=_pretrain(log_dir), extra_argv=["--train-iters", "1"])
    return {"iteration": result["iteration"]}


def hang_in_model_built(log_dir: str, hang_s: float) -> dict[str, Any]:
    """Megatron-LM's `setup_model_and_optimizer` (MODEL_BUILT's work) waits `hang_s` first, far past
    the deadline (a checkpoint read from a mount that stopped answering); then the model is built."""
    from megatron.training import training

    setup = training.setup_model_and_optimizer

    def hangs(*args: Any, **kwargs: Any) -> Any:
        time.sleep(hang_s)
        return setup(*args, **kwargs)

    training.setup_model_and_optimizer = hangs
    result = _script().main(pretrain=_pretrain(log_dir), extra_argv=["--train-iters", "1"])
    return {"iteration": result["iteration"]}


def kill_store_host_in_check_in(log_dir: str) -> dict[str, Any]:
    """Rank 0, which hosts the process group's store, SIGKILLs itself in the rank watch's check-in
    once rank 1 has checked in and waits there for every rank: the store's host lost mid-rendezvous."""
    from lifecycle.rankwatch import RankWatch

    check_in = RankWatch.check_in

    def killed(self: RankWatch, ctx: Any) -> None:
        while not self.store.check(["checkin/1"]):
            time.sleep(0.02)
        time.sleep(0.5)  # rank 1 is in its wait for every rank by now
        os.kill(os.getpid(), signal.SIGKILL)

    if int(os.environ["RANK"]) == 0:
        RankWatch.check_in = killed  # type: ignore[method-assign]  # the fault's injection point
    try:
        result = _script().main(pretrain=_pretrain(log_dir), extra_argv=["--train-iters", "1"])
    finally:
        RankWatch.check_in = check_in  # type: ignore[method-assign]
    return {"iteration": result["iteration"]}
