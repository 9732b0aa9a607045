"""The rank watch of a process that is the whole job (`distributed.init_process_group`, the drop-in's
`_watch`): one rank, no launcher."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from lifecycle.rankwatch._settings import WatchSettings
from lifecycle.rankwatch._watch import RankWatch


def lone_watch(settings: WatchSettings) -> RankWatch:
    """The watch of a process that is the whole job (one rank, no launcher): no peer to check in with
    or hear from, so only the deadline of its collective states (a provider or a build that hangs ends
    the process with `state_timeout` after `settings.timeout_s` and the grace, as on many ranks). Its
    store is the process's own `HashStore`: no connection, no file."""
    import torch.distributed as dist

    ending = _lone_exit(settings.timeout_s)
    watch = RankWatch(dist.HashStore(), rank=0, world_size=1, settings=settings, store_host=None, exit_process=ending)
    watch.start()
    return watch


def _lone_exit(timeout_s: float) -> Callable[[int], None]:
    """How a lone watch ends its process: one line on stderr (no launcher reports it), then the exit."""

    def exit_process(code: int) -> None:
        print(
            f"lifecycle: a startup state did not end within startup.timeout_s = {timeout_s:g} s (the log's "
            f"state_timeout names it and its work); the process ends with status {code}. Find what it waits for "
            "(a provider, a build, a file system), or raise startup.timeout_s.",
            file=sys.stderr,
            flush=True,
        )
        os._exit(code)

    return exit_process
