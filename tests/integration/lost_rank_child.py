"""One rank of the lost-rank test (test_restart_lost_rank.py), started with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT: `python lost_rank_child.py ROOT MIN_WORLD_SIZE WRAPPER_PORT`.

In cycle 0, after every rank has finished step 1, rank 1 SIGKILLs itself at step 2: the process is
gone, as after an OOM kill. Rank 0 writes what the restart wrapper did to ROOT/rank0.json."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any


def train(lc: Any) -> dict[str, Any]:
    import torch.distributed as dist

    from lifecycle.core_entry.train import train_steps

    worlds = [dist.get_world_size()]

    def on_step(result: Any) -> None:
        if lc.cycle == 0 and result.step == 1:
            dist.barrier()  # both ranks have trained a step: the loss is mid-training, not at startup
        if lc.cycle == 0 and result.step == 2 and os.environ["RANK"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)

    train_steps(lc, 3, on_step)
    return {"world_sizes": worlds, "cycle": lc.cycle}


def main(root: str, min_world_size: str, port: str) -> None:
    import torch

    from lifecycle import RunConfig
    from lifecycle.resilience import InProcessRestart, RestartsExhausted

    torch.set_num_threads(1)
    config = RunConfig.preset(
        "tiny-gpt", ["model.hidden_size=32", f"logging.log_dir={root}/logs", "startup.timeout_s=10"]
    )
    floor = None if min_world_size == "default" else int(min_world_size)
    restart = InProcessRestart(config, "gpt", port=int(port), max_cycles=3, min_world_size=floor)
    out: dict[str, Any] = {}
    try:
        out = restart.run(train)
    except RestartsExhausted as exc:
        out = {"error": str(exc)}
    if os.environ["RANK"] == "0":
        Path(root, "rank0.json").write_text(json.dumps({**out, "cycles": restart.cycles}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
