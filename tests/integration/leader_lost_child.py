"""One rank of test_a_killed_leader_rank_is_named.py: `python leader_lost_child.py PORT WORLD RANK NODE
BOARD_DIR OUT`. It checks in on the test's TCPStore as RANK on node NODE through the node's meeting (the
first rank of a node leads it; every rank but 0 waits for rank 0's check-in, so rank 0 leads node a),
starts its watcher, writes "ready" to OUT and blocks in a state until its watcher ends it; each record its
watch logs is a JSON line of OUT."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def main(port: str, world: str, rank: str, node: str, board_dir: str, out: str) -> None:
    import torch.distributed as dist

    from lifecycle.rankwatch import RankWatch, WatchSettings
    from lifecycle.testing import fields_written

    path = Path(out)

    def emit(record: Any) -> None:
        event, fields = fields_written(record)
        with path.open("a") as f:
            f.write(json.dumps({"event": event, **fields}) + "\n")

    def connect() -> dist.TCPStore:
        return dist.TCPStore("127.0.0.1", int(port), int(world), is_master=False)

    store = connect()
    if rank != "0":  # rank 0 checks in first, so it leads node a (the first rank of a node to check in leads it)
        store.wait(["checkin/0"])
    watch = RankWatch(
        store,
        rank=int(rank),
        world_size=int(world),
        settings=WatchSettings(timeout_s=20.0, poll_s=0.1, grace_s=0.5),
        node=node,
        board_dir=board_dir,
        watcher_store=connect,
        meeting="job",  # the ranks of a node check in through its first (all of them children of the test)
    )
    watch.check_in(SimpleNamespace(emit=emit, trigger=SimpleNamespace(value="init_distributed")))
    watch.start()
    with watch.watching(emit, "train_step", "CALLBACKS_BOUND", deadline=False):
        with path.open("a") as f:
            f.write('{"event": "ready"}\n')
        time.sleep(600)  # as a collective blocked on the lost rank: the watcher ends the process


if __name__ == "__main__":
    main(*sys.argv[1:])
