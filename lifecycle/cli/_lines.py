"""The one place that finishes the lines `lifecycle COMMAND` prints for a person at a shell.

Every `lifecycle COMMAND: ...` line (a refusal, an error, a note) goes through `finished`: its
credentials redacted (`lifecycle.redaction`), control characters written as escapes, the advice
that errors give to a library caller ("call restart() or shutdown()", "create a new Lifecycle")
replaced by what to do at a shell, and a full stop at the end (a question keeps its question
mark). A message of several lines is finished line by line; a line ending in `:` (the head of the
lines below it) ends with `.` instead.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

_SHELL_ADVICE: tuple[tuple[re.Pattern[str], str], ...] = (
    # lifecycle.engine's way out of FAILED, written for a caller who holds the Lifecycle; the CLI
    # has shut it down before it prints (`with Lifecycle(...)`), so what is left is to run it again.
    (
        re.compile(
            r"\.?[ \t]*The lifecycle is FAILED with nothing validated, so restart\(\) cannot help: fix the config "
            r"and create a new Lifecycle with it\."
        ),
        ". Fix the config and run the command again.",
    ),
    (
        re.compile(r"\.?[ \t]*The lifecycle is now [A-Z_]+; call restart\(\) or shutdown\(\)\."),
        ". Everything it started was released; fix the cause and run the command again.",
    ),
    (
        re.compile(r"The lifecycle is ([A-Z_]+): call shutdown\(\) \(it releases everything\), then "),
        r"The lifecycle is \1 and released everything; ",
    ),
)
_END = (".", "?")  # a question ("did you mean ...?") is finished as it is


def finished(message: str) -> str:
    """`message` as a person at a shell reads it (see the module docstring)."""
    from lifecycle.redaction import redact_text

    text = redact_text(message)
    for pattern, shell in _SHELL_ADVICE:
        text = pattern.sub(shell, text)
    return "\n".join(_stopped(_escaped(line)) for line in text.strip().split("\n"))


def clause(message: str | BaseException) -> str:
    """`message` as the first part of a longer line: without its own full stop."""
    return str(message).rstrip().removesuffix(".")


def tell(command: str, message: str | BaseException, *, file: TextIO | None = None) -> None:
    """Print `lifecycle COMMAND: message`, finished, on stderr (or `file`)."""
    print(f"lifecycle {command}: {finished(str(message))}", file=file or sys.stderr, flush=True)


def _escaped(line: str) -> str:
    if line.isprintable():
        return line
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in line)


def _stopped(line: str) -> str:
    line = line.rstrip()
    if line.endswith(":"):
        return line[:-1] + "."
    return line if line.endswith(_END) or not line else line + "."
