"""How the processes that `run_ranks` and `lifecycle run --nproc` start end with their owner.

- `die_with_parent`: the kernel signals a process when the thread that started it exits (Linux
  `prctl(PR_SET_PDEATHSIG)`), even when that process was SIGKILLed.
- `end_group`: a rank runs in its own process group (its pid), which keeps what the rank forks;
  signalling the group reaches those too, even after the rank itself ended.

Cost per rank: one `prctl`, one `setpgid` at its start; one or two `killpg` at its end.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1  # linux/prctl.h
KILL_AFTER_S = 5.0
"""How long a rank the owner stopped with SIGTERM has to release before SIGKILL."""


def die_with_parent(signum: int = signal.SIGTERM, *, parent: int | None = None) -> bool:
    """Have the kernel send `signum` to this process when the thread that started it exits (Linux
    `prctl(PR_SET_PDEATHSIG)`): a launcher killed even by SIGKILL takes what it launched with it.
    With `parent` (its pid), a parent already gone before the call is caught too: the signal is sent
    at once. False where the platform has no such call."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = int(libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)) == 0
    except (OSError, AttributeError):  # not Linux
        return False
    if armed and parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signum)
    return armed


def end_group(pid: int | None, signum: int, *, alive: bool) -> None:
    """Send `signum` to the process group a rank made (its pid), which holds what it forked even
    once it ended; to the rank alone when it is `alive` and made none yet (stopped before)."""
    if pid is None:
        return
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        if alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
    except PermissionError:  # the number is another user's group now: not ours
        pass
