"""A training script for `torchrun --max-restarts 1` (test_restart_torchrun.py, benchmarks/restart.py):
6 steps of the tiny GPT with a checkpoint at step 2; in the first process attempt, rank 1 kills
itself with SIGKILL at step 3 (`--fault`). Writes each rank's losses and weights to ROOT/NAME/out-<rank>.json."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(root: str, name: str, fault: bool) -> None:
    from lifecycle import Lifecycle
    from lifecycle.core_entry.train import checkpoint_step, save_after_steps, train_steps
    from states import State
    from tests.integration.restart_cases import config, weights_digest

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    with Lifecycle(config(root, name), "gpt") as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        start = checkpoint_step(lc.runtime)
        losses: list[tuple[int, float | None]] = []

        def on_step(result: object) -> None:
            step = result.step
            losses.append((step, result.loss))
            if step == 2:
                save_after_steps(lc, 2)
            if fault and attempt == 0 and step == 3 and lc.runtime.rank == 1:
                Path(root, name, "fault_ts").write_text(f"{time.time()}\n")
                os.kill(os.getpid(), signal.SIGKILL)

        train_steps(lc, 6 - start, on_step)
        out = {"losses": losses, "weights": weights_digest(lc), "start": start, "attempt": attempt}
        rank = lc.runtime.rank  # shutdown resets it
    Path(root, name, f"out-{rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--fault" in sys.argv)
