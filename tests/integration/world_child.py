"""One rank of the one-world tests (test_one_world.py), started with RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT and its job's LIFECYCLE_RUN_ID: `python -m tests.integration.world_child LOG_DIR`.

It drives a real Lifecycle to DISTRIBUTED and prints one JSON line: how it ended (`ok`, or the error's
type and text) and the seconds from the Lifecycle's creation to that end."""

from __future__ import annotations

import json
import sys
import time


def main(log_dir: str) -> None:
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


if __name__ == "__main__":
    main(sys.argv[1])
