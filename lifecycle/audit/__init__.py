"""`lifecycle audit`: read per-rank startup logs, check the rules, find where startup time went.

Streams: memory grows with the number of ranks, not of records. Imports neither torch nor megatron.
The batch reader's parts are public for the checks that hold it to the record-by-record audit:
`HANDLERS` (one per event), the fields each reads (`READS`), the typed records it decodes
(`RECORD_TYPES`, `decode_typed`), and a `Tap`'s `applied` hook, told of each run it applies at once.
"""

from __future__ import annotations

from lifecycle.audit._audit import (
    EXIT_CLEAN,
    EXIT_UNREADABLE,
    EXIT_VIOLATION,
    MAX_LOGS_PER_INPUT,
    AuditResult,
    audit,
    audit_tapped,
    default_workers,
    no_gc,
)
from lifecycle.audit._cause import RootCause, Victim, root_causes
from lifecycle.audit._cycles import Attempt, attempts, diff
from lifecycle.audit._feed import RECORD_TYPES, Tap, decode_typed
from lifecycle.audit._handlers import HANDLERS, READS
from lifecycle.audit._ordering import LOG_ORDERING, SHOWN_BY, LogOrdering
from lifecycle.audit._output import Appender, write_output
from lifecycle.audit._plot import plot
from lifecycle.audit._rank import RankAudit
from lifecycle.audit._records import Failure, Finding, Segment
from lifecycle.audit._render import TimeoutSummary, as_json, counts, printable, text, timeout_maps
from lifecycle.audit._rules import RULES, Rule, RuleId, enabled, resolve
from lifecycle.audit._timing import (
    ChainLink,
    RankBlame,
    StateBlame,
    Straggler,
    blame,
    critical_chain,
    rank_blame,
    stragglers,
)
from lifecycle.audit._verdict import VERSION as VERDICT_VERSION
from lifecycle.audit._verdict import classify, verdict
from lifecycle.audit._verdict import ours as verdict_ours
from lifecycle.audit._verdict_follow import follow_verdict

__all__ = [
    "EXIT_CLEAN",
    "EXIT_UNREADABLE",
    "EXIT_VIOLATION",
    "HANDLERS",
    "LOG_ORDERING",
    "MAX_LOGS_PER_INPUT",
    "READS",
    "RECORD_TYPES",
    "RULES",
    "SHOWN_BY",
    "VERDICT_VERSION",
    "Appender",
    "Attempt",
    "AuditResult",
    "ChainLink",
    "Failure",
    "Finding",
    "LogOrdering",
    "RankAudit",
    "RankBlame",
    "RootCause",
    "Rule",
    "RuleId",
    "Segment",
    "StateBlame",
    "Straggler",
    "Tap",
    "TimeoutSummary",
    "Victim",
    "as_json",
    "attempts",
    "audit",
    "audit_tapped",
    "blame",
    "classify",
    "counts",
    "critical_chain",
    "decode_typed",
    "default_workers",
    "diff",
    "enabled",
    "follow_verdict",
    "no_gc",
    "plot",
    "printable",
    "rank_blame",
    "resolve",
    "root_causes",
    "stragglers",
    "text",
    "timeout_maps",
    "verdict",
    "verdict_ours",
    "write_output",
]
