"""The schema's events the audit reads no field of, each with the reason nothing in the verdict or the
rules depends on it. Every event of the schema is either here or has a handler (`_handlers.HANDLERS`):
a test fails when an event is added with neither, so a new record cannot go unread by accident (a
`restarts_exhausted` once audited "clean")."""

from __future__ import annotations

from typing import Final

from lifecycle.log import events

_REASONS: Final[dict[str, str]] = {
    events.GUARD_REJECTED: "the refusal is raised to the caller; a rank that does not recover is judged by how "
    "its log ends (LA010, LA013)",
    events.INVALID_TRANSITION: "raised to the caller like a guard's refusal; the rank is judged by how its log ends",
    events.CONFIG_NORMALIZED: "a rewrite made before config_validated, whose fingerprint covers the result",
    events.SIDE_EFFECT_REFUSED: "the refused call raised, and did not happen; what did happen is a side_effect",
    events.SERVICES_READY: "what SERVICES_READY built; its transition_completed says it was reached",
    events.REHEARSAL_ENABLED: "how DISTRIBUTED ran (CPU stand-ins); no rule depends on it",
    events.REHEARSAL_DISABLED: "how DISTRIBUTED ran (the real devices); no rule depends on it",
    events.DISTRIBUTED_INITIALIZED: "the parallel sizes, shown by `lifecycle report`; the timeouts are timeouts_read's",
    events.PARAM_GATHER_DEFERRED: "step 1's gather deferred as Megatron-LM does; the binding's first step is "
    "checked by first_step_finalized",
    events.PARAM_GATHER_RESUMED: "the gather's return after step 1; nothing can go wrong that the steps do not show",
    events.PARAMS_SYNCED: "a gather outside a step, for the export's spans; no rule depends on it",
    events.CHECKPOINT_LOADED: "the load's place and time, for the export; LA027 reads streams_checked",
    events.STREAMS_RESTORED: "the hashes after the load; streams_checked carries them again with what moved (LA027)",
    events.CHECKPOINT_SAVED: "the save's place and time, for the export; no rule depends on it",
    events.GENERATION_STARTED: "a restart's new generation: the envelope's `generation` says it on every record",
    events.LOG_WRITE_FAILED: "written to stderr, not to the file; the rank's FAILED transition after it is read",
    events.RESOURCE_LINGERED: "a resource gone within the settle time: not a leak (resource_leaked is LA023)",
    events.RESOURCES_HANDED_OVER: "the drop-in's hand-over of Megatron-LM's resources at pretrain's return: "
    "no longer the lifecycle's to release, so nothing to judge",
    events.LAUNCH_ENDED: "not a rank's record: `lifecycle run` writes it to launcher-NNNNN.jsonl, which the verdict "
    "reads apart (lifecycle/audit/_launches.py)",
}
INFORMATIONAL: Final[dict[str, str]] = {event: why for event, why in _REASONS.items() if event in events.ALL}
"""Event → why the audit need not read it (an entry whose event the schema does not hold is left out)."""
