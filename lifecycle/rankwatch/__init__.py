"""The rank watch: check-in, deadlines and failure broadcast for a job's collective states
(docs/failures.md). Imports neither torch nor megatron at import time (`lone_watch` imports torch
when called).

One name for each thing called a watch:
- `RankWatch` (`_watch.py`), the rank watch: one per rank and initialization. It checks the rank in,
  publishes a failure, and runs the watcher.
- `CheckIn` (`_rank_checkin.py`, `RankWatch.checkin`): the rank watch's check-in of its rank: its arrival,
  the wait for every rank, what it learns of its node, and what it logs when that fails.
- the watcher: the rank watch's thread. Every `poll_s` it beats on the node's board, looks for gone
  peers, and ends the main thread's work past its grace or deadline.
- `WatchSettings` (`_settings.py`): how the watch polls and how long it waits, in one record;
  `WatchSettings.of(config)` gives a run's.
- the meeting (`_meeting.py`): where the ranks of a node arrive before the store; the first checks them
  all in (`launch_key` names it, `local_size` is the launcher's count of the node's ranks).
- `lone_watch` (`_lone.py`): the rank watch of a one-rank job (its deadlines only).
- `watched`, `watched_step`, `mark_failed` (`_watched.py`): the phases' ways in, through
  `Runtime.rank_watch` (typed as `lifecycle.runtime.Watch`).
Not this package: the signal watch (`lifecycle.runtime.signals.SignalWatch`) and the group watch
(`lifecycle.core_entry.timeouts.GroupWatch`).
"""

from __future__ import annotations

from lifecycle.rankwatch._failure import Failure
from lifecycle.rankwatch._liveness import await_store_host, is_timeout
from lifecycle.rankwatch._lone import lone_watch
from lifecycle.rankwatch._meeting import launch_key, local_size
from lifecycle.rankwatch._settings import HOST_OPS_PER_S, WatchSettings
from lifecycle.rankwatch._watch import EXIT_CODE, RankWatch
from lifecycle.rankwatch._watched import mark_failed, watched, watched_step
from lifecycle.rankwatch._world import World, checked

__all__ = [
    "EXIT_CODE",
    "HOST_OPS_PER_S",
    "Failure",
    "RankWatch",
    "WatchSettings",
    "World",
    "await_store_host",
    "checked",
    "is_timeout",
    "launch_key",
    "local_size",
    "lone_watch",
    "mark_failed",
    "watched",
    "watched_step",
]
