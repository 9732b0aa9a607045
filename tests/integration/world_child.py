"""One rank of the one-world tests (test_one_world.py), started (`start_process`) with RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT and its job's LIFECYCLE_RUN_ID in its environment.

It drives a real Lifecycle to DISTRIBUTED and prints one JSON line: how it ended (`ok`, or the error's
type and text) and the seconds from the Lifecycle's creation to that end."""

from __future__ import annotations

import json
import time


def main(log_dir: str) -> int:
    import torch

    from lifecycle import Lifecycle, LifecycleError, RunConfig
    from states import State

    torch.set_num_threads(1)
    config = RunConfig.preset("tiny-gpt", [f"logging.log_dir={log_dir}", "startup.timeout_s=60"])
    start, out = time.monotonic(), {"ok": True}
    try:
        with Lifecycle(config, provider="gpt") as lc:
            lc.advance_to(State.DISTRIBUTED)
    except LifecycleError as exc:
        out = {"ok": False, "type": type(exc).__name__, "error": str(exc)}
    print(json.dumps({**out, "elapsed_s": round(time.monotonic() - start, 3)}), flush=True)
    return 0
