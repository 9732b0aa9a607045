"""The per-rank startup log: event names, the record types writers build (`records`), the
hash-chained writer, its chain verifier, redaction, the log directory's one owner (`LogDir`: which
directory, whether it can hold the log, claiming and opening it), and the log directory policy
(`logging.existing`): whether a file is one of our logs and where its chain ends (`inspect_log`,
`ChainEnd`), which run a directory holds, and what `--overwrite` removes; the complete lines of a
rank file still being written (`Tail`).

The writer (`AuditLog`) and every reader (`lifecycle audit`, `lifecycle.testing.check_log`) share
one chain definition (`_chain`). Imports neither torch nor megatron.
"""

from __future__ import annotations

from lifecycle.log import events as events
from lifecycle.log import records as records
from lifecycle.log._chain import GENESIS, ChainVerifier, record_hash
from lifecycle.log._chain import SUFFIX as SUFFIX
from lifecycle.log._chain import line_hash_matches as line_hash_matches
from lifecycle.log._dir import LogDir
from lifecycle.log._files import check_log_dir
from lifecycle.log._tail import Tail as Tail
from lifecycle.log._values import Fields as Fields
from lifecycle.log._values import JSONValue as JSONValue
from lifecycle.log._writer import AuditLog

__all__ = [
    "GENESIS",
    "AuditLog",
    "ChainVerifier",
    "LogDir",
    "check_log_dir",
    "events",
    "record_hash",
    "records",
]
