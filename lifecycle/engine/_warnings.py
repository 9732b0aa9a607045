"""Third-party warnings during a lifecycle: into the startup log, and one line on the console.

Python warnings (`warnings.warn`: megatron's `MimoModelConfig is experimental`, torch's
deprecations) and the library loggers' WARNING records (megatron's `log_single_rank(...,
WARNING, "GPTModel IS DEPRECATED ...")`) each become a `warning` record with its category and source
module, so `lifecycle audit` lists them. None is printed as it comes: at shutdown rank 0 prints one
line saying how many there were and where to read them (2 ranks or 4,096, one line a run; no
deprecation notice of megatron-core's reaches the console). INFO and DEBUG lines of the library
loggers are dropped.

A process has one capture at a time (the newest lifecycle's); it is undone at shutdown, restoring
`warnings.showwarning` and the loggers as they were. A warning never changes the lifecycle's state:
it is written with the log's own `emit` (a full disk is noticed by the engine at its next step, as
for any record). Only the thread that can take the lifecycle's lock writes to its log; a warning
raised on another thread while it is held (the imports thread beside VALIDATED) waits in a queue
for the next write.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from lifecycle.log import records
from lifecycle.redaction import redact_text

if TYPE_CHECKING:
    from lifecycle.log import AuditLog

LIBRARY_LOGGERS = ("megatron", "transitions", "torch.distributed.checkpoint", "torch.utils.cpp_extension")
"""Loggers whose records go to the startup log instead of the console (torch's cpp_extension says
`No CUDA runtime is found, using CUDA_HOME=...` at megatron's import on every CPU-only rank)."""
_MESSAGE_CAP = 500


class _Recorder(Protocol):
    """What the capture uses of a lifecycle's shared record (`engine/_shared.py`)."""

    lock: threading.RLock
    log: AuditLog


def _module_of(filename: str) -> str:
    """`.../site-packages/megatron/core/models/gpt/gpt_model.py` → `megatron.core.models.gpt.gpt_model`."""
    path = Path(filename)
    for root in sorted((Path(p) for p in sys.path if p), key=lambda p: len(str(p)), reverse=True):
        try:
            relative = path.with_suffix("").relative_to(root)
        except ValueError:
            continue
        if relative.parts and all(part.isidentifier() for part in relative.parts):
            return ".".join(relative.parts)
    return path.stem


class WarningCapture:
    """Routes warnings to one lifecycle's log while installed."""

    def __init__(self, lc: _Recorder, *, console: bool) -> None:
        self._lc = lc
        self._console = console
        self._seen: set[tuple[str, str, str]] = set()
        self._count = 0
        self._queue: deque[records.WarningRecorded] = deque()
        self._previous_show: Callable[..., None] = warnings.showwarning
        self._loggers: list[tuple[logging.Logger, bool, logging.Handler]] = []
        self._installed = False

    def install(self) -> WarningCapture:
        global _ACTIVE
        if _ACTIVE is not None:
            _ACTIVE.release()
        self._previous_show = warnings.showwarning
        warnings.showwarning = self._show_warning
        handler = _Handler(self)
        for name in LIBRARY_LOGGERS:
            logger = logging.getLogger(name)
            self._loggers.append((logger, logger.propagate, handler))
            logger.addHandler(handler)
            logger.propagate = False
        self._installed = True
        _ACTIVE = self
        return self

    def flush(self) -> None:
        """Write what other threads queued (the engine calls it before shutting down, so that the
        log still ends with the shutdown)."""
        self._flush(block=True)

    def release(self) -> None:
        """Put `showwarning` and the loggers back (idempotent). Runs after the log's last record:
        what is still queued is counted in the closing line, not written."""
        global _ACTIVE
        if not self._installed:
            return
        self._installed = False
        if self._console and self._count:
            _console_line(
                f"{self._count} library warning(s), {len(self._seen)} distinct, are in the startup log "
                "as `warning` records: `lifecycle audit LOG_DIR` lists them"
            )
        if warnings.showwarning == self._show_warning:
            warnings.showwarning = self._previous_show
        for logger, propagate, handler in self._loggers:
            logger.removeHandler(handler)
            logger.propagate = propagate
        self._loggers.clear()
        if _ACTIVE is self:
            _ACTIVE = None

    def add(self, category: str, module: str, message: str, lineno: int | None) -> None:
        """One warning, queued for the log (and counted for the closing line)."""
        text = redact_text(message)[:_MESSAGE_CAP]
        self._queue.append(records.WarningRecorded(category=category, module=module, message=text, lineno=lineno))
        self._seen.add((category, module, text))
        self._count += 1
        self._flush(block=False)

    def _flush(self, *, block: bool) -> None:
        lock = self._lc.lock
        if not lock.acquire(blocking=block):
            return
        try:
            while self._queue:  # the log itself, not `record`: a log that fails here is the engine's to
                self._lc.log.write(self._queue.popleft())  # notice at its next step
        finally:
            lock.release()

    def _show_warning(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        self.add(category.__name__, _module_of(filename), str(message), lineno)


LIBRARY_PACKAGES = frozenset(
    {"torch", "megatron", "transitions", "transformer_engine", "apex", "triton", "pynvml", "nvidia_resiliency_ext"}
)
"""Packages whose Python warnings outside a lifecycle (the command's own imports) are dropped."""


def quiet_library_loggers() -> None:
    """For the whole process (the `lifecycle` command calls it first): the library loggers' lines
    and the libraries' Python warnings never reach the console, also outside a lifecycle
    (`lifecycle simulate`'s imports, torch's pynvml notice); inside one, the capture still writes
    them to the startup log. Warnings from other code (a user's provider) print as before. Needs no
    torch: the loggers are made by name before torch configures its own."""
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.propagate = False
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
    shown = warnings.showwarning
    if getattr(shown, "_drops_library_warnings", False):
        return

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if _module_of(filename).split(".")[0] not in LIBRARY_PACKAGES:
            shown(message, category, filename, lineno, file, line)

    show._drops_library_warnings = True  # type: ignore[attr-defined]  # marks it installed
    warnings.showwarning = show


class _Off:
    """What a lifecycle holds when it captures nothing (`Options.capture_warnings=False`)."""

    def flush(self) -> None:
        pass

    def release(self) -> None:
        pass


def capture(lc: _Recorder, *, console: bool, enabled: bool = True) -> WarningCapture | _Off:
    """Route this process's library warnings to `lc`'s log until `release()` (nothing if not `enabled`)."""
    return WarningCapture(lc, console=console).install() if enabled else _Off()


class _Handler(logging.Handler):
    def __init__(self, capture: WarningCapture) -> None:
        super().__init__(level=logging.WARNING)
        self._capture = capture

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._capture.add(f"logging.{record.levelname}", record.name, record.getMessage(), record.lineno)
        except Exception:  # a warning must never break the run it describes
            self.handleError(record)


def _console_line(text: str) -> None:
    try:
        sys.stderr.write(f"lifecycle: {text}{'' if text.endswith(('.', '?', '!')) else '.'}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


_ACTIVE: WarningCapture | None = None
