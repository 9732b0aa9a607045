"""Children for test_inprocess_call_wrapper.py: a function declared like the drop-in `pretrain`
under nvidia-resiliency-ext's real `inprocess.Wrapper` (one rank), and the drop-in `pretrain` run
with a call wrapper given as is (2 ranks)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from lifecycle.launchers.local import free_port
from lifecycle.testing import cycle_and_store, injectable
from tests.integration.ports import shared_port


def pretrain_like(
    cfg_container: Any,
    forward_step_func: Any,
    store: Any = None,
    inprocess_call_wrapper: Any = None,
    *,
    log_dir: str | None = None,
) -> Any:
    """Declared as the drop-in's `pretrain` is: postponed (string) annotations."""
    cycle, prefixed = cycle_and_store(inprocess_call_wrapper, store)
    prefixed.set("joined", b"1")
    CALLS.append(
        {
            "cycle": cycle,
            "wrapper": type(inprocess_call_wrapper).__module__ + "." + type(inprocess_call_wrapper).__name__,
        }
    )
    if cycle == 0:
        raise RuntimeError("fault in cycle 0")
    return cycle


CALLS: list[dict[str, Any]] = []


def under_nvrx() -> dict[str, Any]:
    """`injectable(pretrain_like)` under the real Wrapper on one rank: cycle 0 fails, cycle 1 returns.
    Also what nvrx does with the function as declared (its annotations are strings)."""
    import torch.distributed as dist
    from nvidia_resiliency_ext import inprocess
    from nvidia_resiliency_ext.inprocess import param_utils

    try:
        param_utils.substitute_param_value(pretrain_like, (None, None), {}, {inprocess.CallWrapper: "cw"})
        plain = "injected"
    except TypeError as exc:
        plain = f"TypeError: {exc}"
    store = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=30))  # one rank
    fast = timedelta(seconds=0.2)
    wrapped = inprocess.Wrapper(
        store_kwargs={"port": free_port()},
        initialize=inprocess.initialize.RetryController(max_iterations=3),
        abort=inprocess.abort.AbortTorchDistributed(),
        health_check=None,
        monitor_thread_interval=fast,
        monitor_process_interval=fast,
        progress_watchdog_interval=fast,
        last_call_wait=fast,
    )(injectable(pretrain_like))
    result = wrapped("container", "forward", store=store)
    return {
        "plain": plain,
        "result": result,
        "calls": list(CALLS),
        "joined": [store.check([f"{c}/joined"]) for c in (0, 1)],
    }


@dataclass
class GivenWrapper:
    """A call wrapper handed to `pretrain` by the caller (no nvidia-resiliency-ext installed)."""

    iteration: int


def dropin_with_given_wrapper(log_dir: str) -> dict[str, Any]:
    """The example script with the drop-in `pretrain`, `inprocess_call_wrapper=GivenWrapper(4)` and
    a store of the script's: the records carry cycle 4, the rendezvous keys sit under `4/`."""
    import sys
    from functools import partial
    from pathlib import Path

    import torch.distributed as dist

    from lifecycle.lm_dropin import pretrain
    from lifecycle.rankwatch import RankWatch

    interruptible: list[bool] = []  # each rank watch's: the wrapper's restart request must land
    init = RankWatch.__init__

    def recorded(self: RankWatch, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        interruptible.append(self.checkin.interruptible)

    RankWatch.__init__ = recorded  # type: ignore[method-assign]
    rank = int(os.environ["RANK"])
    port = shared_port(f"{log_dir}-ports", "wrapper-store")  # beside the log directory, not in it
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, timeout=timedelta(seconds=60))
    sys.argv = ["pretrain_gpt_tiny.py"]
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import pretrain_gpt_tiny as script

    result = script.main(
        pretrain=partial(pretrain, log_dir=log_dir, store=store, inprocess_call_wrapper=GivenWrapper(4)),
        extra_argv=["--train-iters", "2"],
    )
    RankWatch.__init__ = init  # type: ignore[method-assign]
    # Rank 0 hosts the store and may exit first: only its own count is read (the test reads rank 0's).
    prefixed = store.num_keys() if rank == 0 else None
    return {"iteration": result.get("iteration"), "prefixed": prefixed, "interruptible": interruptible}
