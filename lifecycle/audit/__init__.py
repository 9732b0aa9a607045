"""`lifecycle audit`: read per-rank startup logs, check the rules, find where startup time went.

Streams: memory grows with the number of ranks, not of records. Imports neither torch nor megatron.
The batch reader's parts (one handler per event, the fields each reads, the typed records it
decodes) are internals: the checks that hold it to the record-by-record audit take them from
`lifecycle.testing`. Names re-exported `as` themselves below serve `lifecycle.cli` and
`lifecycle.export`, not users.
"""

from __future__ import annotations

from lifecycle.audit._audit import EXIT_UNREADABLE as EXIT_UNREADABLE
from lifecycle.audit._audit import MAX_LOGS_PER_INPUT, audit, audit_tapped
from lifecycle.audit._audit import AuditResult as AuditResult
from lifecycle.audit._audit import no_gc as no_gc
from lifecycle.audit._cause import RootCause as RootCause
from lifecycle.audit._cause import root_causes
from lifecycle.audit._cycles import diff as diff
from lifecycle.audit._feed import Tap as Tap
from lifecycle.audit._ordering import LOG_ORDERING
from lifecycle.audit._output import Appender as Appender
from lifecycle.audit._output import write_output as write_output
from lifecycle.audit._plot import plot
from lifecycle.audit._rank import RankAudit as RankAudit
from lifecycle.audit._records import Failure as Failure
from lifecycle.audit._records import Finding as Finding
from lifecycle.audit._records import Segment as Segment
from lifecycle.audit._render import as_json as as_json
from lifecycle.audit._render import counts
from lifecycle.audit._render import printable as printable
from lifecycle.audit._render import text as text
from lifecycle.audit._render import timeout_maps as timeout_maps
from lifecycle.audit._rules import RULES
from lifecycle.audit._timing import ChainLink as ChainLink
from lifecycle.audit._timing import StateBlame as StateBlame
from lifecycle.audit._timing import blame, critical_chain, stragglers
from lifecycle.audit._verdict import EXIT as VERDICT_EXIT
from lifecycle.audit._verdict import judge as judge
from lifecycle.audit._verdict import ours as verdict_ours
from lifecycle.audit._verdict import verdict
from lifecycle.audit._verdict_follow import follow_verdict as follow_verdict

__all__ = [
    "LOG_ORDERING",
    "MAX_LOGS_PER_INPUT",
    "RULES",
    "VERDICT_EXIT",
    "audit",
    "audit_tapped",
    "blame",
    "counts",
    "critical_chain",
    "plot",
    "root_causes",
    "stragglers",
    "verdict",
    "verdict_ours",
]
