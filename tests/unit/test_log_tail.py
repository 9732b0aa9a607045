"""A followed rank file gives each complete line once, and a line still being written when it is complete."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from lifecycle.testing import Tail, follow_verdict


def test_each_complete_line_is_read_once_and_a_partial_line_once_it_is_complete(tmp_path: Path) -> None:
    path = tmp_path / "rank-00000.jsonl"
    tail = Tail(path)
    assert tail.read() == []  # not there yet: no news, no error
    path.write_bytes(b'{"seq": 0}\n{"seq": 1}\n{"se')
    assert tail.read() == [b'{"seq": 0}', b'{"seq": 1}']
    assert tail.offset == len(b'{"seq": 0}\n{"seq": 1}\n')
    assert tail.read() == []
    with path.open("ab") as fh:
        fh.write(b'q": 2}\n')
    assert tail.read() == [b'{"seq": 2}']
    assert tail.read() == []


def test_a_file_removed_while_followed_reads_as_no_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "rank-00001.jsonl"
    path.write_bytes(b"{}\n")
    tail = Tail(path)
    assert tail.read() == [b"{}"]
    path.unlink()
    assert tail.read() == []


def _returns(call: Callable[[], object]) -> list[object]:
    """`call`'s result, run in a thread: empty when it is still blocked 30 s later (the test then fails)."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(timeout=30.0)
    return out


def test_a_fifo_named_as_a_rank_file_reads_as_no_lines_and_never_blocks_a_follower(tmp_path: Path) -> None:
    """No process writes to the FIFO: opening it to read would wait for one forever."""
    fifo = tmp_path / "rank-00002.jsonl"
    os.mkfifo(fifo)
    assert _returns(Tail(fifo).read) == [[]]
    [doc] = _returns(lambda: follow_verdict(tmp_path, poll_s=0.01, idle_timeout_s=0.2))
    assert isinstance(doc, dict) and doc["outcome"] != "clean"
