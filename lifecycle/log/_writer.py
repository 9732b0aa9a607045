"""The per-rank startup log: structlog records, hash-chained, one JSON line each, flushed per record.

Format: docs/log-format.md. Records made before the log directory is validated are kept in memory
and written, unchanged, when `open()` is called.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import structlog

from lifecycle.log import events
from lifecycle.log._chain import GENESIS


def rank_file(log_dir: Path, rank: int) -> Path:
    return log_dir / f"rank-{rank:05d}.jsonl"


class _ChainWriter:
    """structlog's final 'logger': chains, serializes and writes (or buffers) each record."""

    def __init__(self) -> None:
        self.seq = 0
        self.prev = GENESIS
        self.pending: list[bytes] = []
        self.records: list[dict[str, Any]] = []
        self.keep_records = False
        self.file: BinaryIO | None = None

    def chain(self, _logger: Any, _name: str, event_dict: Any) -> bytes:
        event_dict["ts"] = time.time()
        event_dict["seq"] = self.seq
        event_dict["prev_hash"] = self.prev
        body = orjson.dumps(event_dict, option=orjson.OPT_SORT_KEYS, default=str)
        digest = hashlib.sha256(body).hexdigest()
        self.seq += 1
        self.prev = digest
        if self.keep_records:
            self.records.append({**event_dict, "hash": digest})
        return body[:-1] + b',"hash":"' + digest.encode() + b'"}\n'

    def msg(self, line: bytes) -> None:
        if self.file is None:
            self.pending.append(line)
        else:
            self.file.write(line)


class AuditLog:
    """One rank's startup log. `emit(event, **fields)`; `open(dir)` once the directory is validated."""

    def __init__(self, *, run_id: str, rank: int, world_size: int, keep_records: bool = False) -> None:
        self._writer = _ChainWriter()
        self._writer.keep_records = keep_records
        self.run_id = run_id
        self.rank = rank
        self.world_size = world_size
        self.generation = 0
        self.path: Path | None = None
        self._logger = self._make_logger()

    def _make_logger(self) -> Any:
        base = structlog.wrap_logger(
            self._writer,
            processors=[self._writer.chain],
            wrapper_class=structlog.BoundLogger,
            cache_logger_on_first_use=True,
        )
        return base.bind(
            run_id=self.run_id, rank=self.rank, world_size=self.world_size, generation=self.generation
        )

    def rebind(self, *, rank: int | None = None, world_size: int | None = None, generation: int | None = None) -> None:
        """Change the per-process context (after distributed init, or at a restart)."""
        self.rank = self.rank if rank is None else rank
        self.world_size = self.world_size if world_size is None else world_size
        self.generation = self.generation if generation is None else generation
        self._logger = self._make_logger()

    def emit(self, event: str, **fields: Any) -> None:
        if event not in events.ALL:
            raise ValueError(f"unknown log event {event!r}: add it to lifecycle/events.py")
        self._logger.msg(event, **fields)

    @property
    def is_open(self) -> bool:
        return self._writer.file is not None

    @property
    def records(self) -> list[dict[str, Any]]:
        """Records emitted so far (only when created with keep_records=True)."""
        return self._writer.records

    def open(self, log_dir: Path) -> Path:
        """Create the rank file and write the held records. The directory must already be validated."""
        log_dir.mkdir(parents=True, exist_ok=True)
        path = rank_file(log_dir, self.rank)
        handle = open(path, "ab", buffering=0)  # noqa: SIM115 - held open for the run
        for line in self._writer.pending:
            handle.write(line)
        self._writer.pending.clear()
        self._writer.file = handle
        self.path = path
        return path

    def close(self) -> None:
        if self._writer.file is not None:
            self._writer.file.close()
            self._writer.file = None


def check_log_dir(log_dir: Path) -> str | None:
    """Why `log_dir` cannot hold the startup log, or None when it can. Pure: creates nothing."""
    if log_dir.exists():
        if not log_dir.is_dir():
            return f"log_dir {str(log_dir)!r} exists and is not a directory: choose a directory path"
        if not os.access(log_dir, os.W_OK | os.X_OK):
            return f"log_dir {str(log_dir)!r} is not writable: choose a writable directory"
        return None
    parent = log_dir.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"log_dir {str(log_dir)!r} cannot be created under {str(parent)!r}: choose a writable location"
    return None
