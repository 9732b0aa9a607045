"""The per-rank startup log: event names, the hash-chained writer, its chain verifier, redaction.

The writer (`AuditLog`) and every reader (`lifecycle audit`, `lifecycle.testing.check_log`) share
one chain definition (`_chain`). Imports neither torch nor megatron.
"""

from __future__ import annotations

from lifecycle.log import events
from lifecycle.log._chain import GENESIS, ChainVerifier, line_hash_matches, record_hash
from lifecycle.log._redact import REDACTED, is_secret_key, redact
from lifecycle.log._writer import AuditLog, check_log_dir, rank_file

__all__ = [
    "GENESIS",
    "REDACTED",
    "AuditLog",
    "ChainVerifier",
    "check_log_dir",
    "events",
    "is_secret_key",
    "line_hash_matches",
    "rank_file",
    "record_hash",
    "redact",
]
