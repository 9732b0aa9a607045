"""A signal handled by one lifecycle's handler while the wakeup fd feeds another's watch (a lifecycle
left mid-startup keeps its watch armed; the fd goes back to it when a later lifecycle's watch
disarms) is handled: the old watch must not end the process `grace_s` later. Real signals, a real
child process (the failure mode is the process ending with 130)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from lifecycle import InProcessPhases, Lifecycle, RunConfig
    from lifecycle.errors import StartupAborted
    from states import State

    class CtrlCInRelease(InProcessPhases):
        def __init__(self):
            super().__init__()
            self.around(State.CALLBACKS_BOUND, release=self.interrupted)

        def interrupted(self, ctx, release):
            os.kill(os.getpid(), signal.SIGINT)
            return release(ctx)

    left = Lifecycle(RunConfig(), None, sys.argv[1] + "/left", phases=InProcessPhases())
    left.advance_to(State.DISTRIBUTED)  # left mid-startup: its handlers and watch stay
    later = Lifecycle(RunConfig(), None, sys.argv[1] + "/later", phases=CtrlCInRelease())
    later.advance_to(State.CALLBACKS_BOUND)  # at its target: its own watch is disarmed
    try:
        later.shutdown()
    except StartupAborted as aborted:
        print("aborted", aborted.code, flush=True)
    time.sleep(4.5)  # longer than the grace (3 s)
    print("alive", flush=True)
""")


def test_a_signal_handled_by_a_later_lifecycle_does_not_end_the_process_through_an_older_watch(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout.split()) == (0, ["aborted", "130", "alive"]), done.stderr[-2000:]
