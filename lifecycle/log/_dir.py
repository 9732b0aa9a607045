"""The one owner of a lifecycle's log directory: which directory it is (`Lifecycle(log_dir=)`, else
`logging.log_dir`), whether it can hold the startup log (asked once), claiming it for this run under
`logging.existing`, and opening the log in it after the listeners that must see the log before it
opens (the live export, registered from outside the engine).

Everything else asks this owner: the environment probe, the engine's VALIDATE, the failure path and
`lifecycle simulate`. Per rank it costs what `check_log_dir` costs (a few `stat` calls), once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lifecycle.log._files import check_log_dir
from lifecycle.log._writer import AuditLog

BeforeOpen = Callable[[AuditLog], None]
"""Called with the log before it opens: what it adds (a sink) sees the held records too."""


class LogDir:
    """This lifecycle's log directory, or none (`path` None: the log stays in memory)."""

    def __init__(self, path: str | Path | None, *, existing: str = "refuse") -> None:
        self.path = Path(path) if path is not None else None
        self.existing = existing
        """`logging.existing`: what this run does with another run's logs there."""
        self._problem: str | None = None
        self._asked = False
        self._before_open: list[BeforeOpen] = []

    @classmethod
    def resolve(cls, given: str | Path | None, configured: str | None, *, existing: str) -> LogDir:
        """The directory `Lifecycle(log_dir=)` names, else the config's `logging.log_dir`."""
        return cls(given if given is not None else configured, existing=existing)

    def problem(self) -> str | None:
        """Why the directory cannot hold the startup log, or None (also when there is none). Asked
        of the file system once; a later answer is the same line."""
        if self.path is None:
            return None
        if not self._asked:
            self._problem, self._asked = check_log_dir(self.path), True
        return self._problem

    def before_open(self, listener: BeforeOpen) -> None:
        """Call `listener` with the log before `open` opens it."""
        self._before_open.append(listener)

    def claim(self, log: AuditLog) -> tuple[str, str] | None:
        """Make the directory this run's for `log` (`AuditLog.claim`) once `problem` finds none;
        (field, why) when it cannot be had."""
        if self.path is None:
            return None
        problem = self.problem()
        if problem is not None:
            return "logging.log_dir", problem
        return log.claim(self.path, self.existing)

    def open(self, log: AuditLog) -> Path | None:
        """The run's open, once validated and claimed: the listeners see the log first, then it
        opens under `existing` (`overwrite` replaces this rank's file). None when the file could not
        take the records, or when there is no directory or the log is already open."""
        if self.path is None or log.is_open:
            return None
        for listener in self._before_open:
            listener(log)
        return log.open(self.path, overwrite=self.existing == "overwrite")

    def open_after_failure(self, log: AuditLog) -> tuple[Path | None, str | None]:
        """A failure before VALIDATED finished: (the opened file or None, the directory's problem or
        None). Nothing is replaced and no listener is called (nothing was validated to export)."""
        if self.path is None:
            return None, None
        refused = self.claim(log)
        if refused is not None:
            return None, refused[1]
        return log.open(self.path), None
