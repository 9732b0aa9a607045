"""The per-rank startup log: event names, the hash-chained writer, its chain verifier, redaction,
and the log directory policy (`logging.existing`): whether a file is one of our logs and where its
chain ends (`inspect_log`, `ChainEnd`), which run a directory holds, and what `--overwrite` removes;
the complete lines of a rank file still being written (`Tail`).

The writer (`AuditLog`) and every reader (`lifecycle audit`, `lifecycle.testing.check_log`) share
one chain definition (`_chain`). Imports neither torch nor megatron.
"""

from __future__ import annotations

from lifecycle.log import events
from lifecycle.log._chain import GENESIS, SUFFIX, ChainVerifier, line_hash_matches, record_hash
from lifecycle.log._files import (
    EXISTING_POLICIES,
    ChainEnd,
    check_log_dir,
    existing_policy_problem,
    first_run_id,
    inspect_log,
    other_run,
    own_file_problem,
    rank_file,
    removable_ranks,
)
from lifecycle.log._lock import LOCK_NAME
from lifecycle.log._redact import REDACTED, is_secret_key, redact, redact_text
from lifecycle.log._tail import Tail
from lifecycle.log._values import Fields, JSONValue
from lifecycle.log._writer import AuditLog

__all__ = [
    "EXISTING_POLICIES",
    "GENESIS",
    "LOCK_NAME",
    "REDACTED",
    "SUFFIX",
    "AuditLog",
    "ChainEnd",
    "ChainVerifier",
    "Fields",
    "JSONValue",
    "Tail",
    "check_log_dir",
    "events",
    "existing_policy_problem",
    "first_run_id",
    "inspect_log",
    "is_secret_key",
    "line_hash_matches",
    "other_run",
    "own_file_problem",
    "rank_file",
    "record_hash",
    "redact",
    "redact_text",
    "removable_ranks",
]
