"""LA028 `group-timeout` and LA029 `group-after-binding`: the process-group records DISTRIBUTED and its
`new_group` watch write (`lifecycle.core_entry.timeouts`), read back.

LA028: a group whose timeout, read back from the group, is not `startup.timeout_s`. One shorter is the
dangerous one: every rank waiting in that group while one rank does work of its own for longer (a
dataset build, a conversion, a long first step) is ended at the group's timeout, not at the state's
budget, with an error that names no timeout (Megatron-Bridge #4011; the class of Megatron-LM #2238).
One longer outlives the state's budget: the rank watch ends the wait first. LA029: a group created
after CALLBACKS_BOUND, while training: every rank must create it in the same order, and its
communicator is made lazily, at its first collective, inside a step (Megatron-LM #6955)."""

from __future__ import annotations

from lifecycle.audit._reads import GroupCreated, ProcessGroupAdopted, TimeoutsRead
from lifecycle.audit._records import TimeoutMap
from lifecycle.audit._rules import RuleId
from lifecycle.audit._state import RankState

_CORRECTED_SHOWN = 5


def _map(configured: float, rec: TimeoutsRead) -> TimeoutMap:
    found: dict[float | None, int] = {}
    corrected: list[tuple[str, float]] = []
    for group in rec.groups or ():
        t = _seconds(group.get("timeout_s"))
        found[t] = found.get(t, 0) + 1
        was = _seconds(group.get("corrected_from"))
        if was is not None and len(corrected) < _CORRECTED_SHOWN:
            corrected.append((str(group.get("name", "?"))[:80], was))
    order = sorted(found.items(), key=lambda item: -(item[0] or 0.0))
    return TimeoutMap(
        configured,
        rec.world_s,
        rec.store_s,
        rec.watch_s,
        sum(found.values()),
        tuple(order),
        tuple(corrected),
    )


_SHOWN = 3


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


SHORTER = "before the state's budget"
"""In an LA028 finding: the group times out before `startup.timeout_s` (the verdict reads it)."""


def _differs(name: str, by: str, found: float, configured: float) -> str:
    if found < configured:
        return (
            f"group {name[:80]} (made by {by[:120]}) times out after {found:g} s, {SHORTER} "
            f"startup.timeout_s={configured:g} s: ranks waiting in it while one rank works alone are ended at "
            f"{found:g} s with an error that names no timeout. Pass timeout= to new_group (or "
            "distributed_timeout_minutes to megatron)"
        )
    return (
        f"group {name[:80]} (made by {by[:120]}) times out after {found:g} s, not startup.timeout_s="
        f"{configured:g} s: the rank watch ends a wait there first, and the group's own error comes later than "
        "the configured one. Pass timeout= to new_group"
    )


def timeouts_read(audit: RankState, rec: TimeoutsRead, ts: float) -> None:
    configured = rec.configured_s
    if configured is None:
        return
    audit.configured_timeout_s = configured
    audit.timeouts = _map(configured, rec)
    world = rec.world_s
    if world is not None and world != configured:
        audit.flag(RuleId.GROUP_TIMEOUT, _differs("the default process group", "init_process_group", world, configured))
    for group in rec.groups or ():
        found = _seconds(group.get("timeout_s"))
        if found is not None and found != configured:
            name, by = str(group.get("name", "?")), str(group.get("created_by", "?"))
            audit.flag(RuleId.GROUP_TIMEOUT, _differs(name, by, found, configured))


def group_adopted(audit: RankState, rec: ProcessGroupAdopted, ts: float) -> None:
    """The drop-in took the script's process group (`process_group_adopted`): its timeout, read back,
    is the world's in the rank's timeout map, marked as the script's."""
    known = audit.timeouts or TimeoutMap(None, None, None, None, 0, (), ())
    audit.timeouts = known._replace(world_s=_seconds(rec.timeout_s), adopted=True)


def group_created(audit: RankState, rec: GroupCreated, ts: float) -> None:
    name, by = str(rec.name or "?"), str(rec.created_by or "?")
    found, configured = rec.timeout_s, audit.configured_timeout_s
    if found is not None and configured is not None and found != configured:
        audit.flag(RuleId.GROUP_TIMEOUT, _differs(name, by, found, configured))
    if audit.state == "CALLBACKS_BOUND":
        audit.fresh_group = (audit.bound_steps, f"{name[:80]} (made by {by[:160]})", rec.member is False)
        audit.flag(
            RuleId.GROUP_AFTER_BINDING,
            f"group {name[:80]} was created after CALLBACKS_BOUND by {by[:160]}: every rank must create it in "
            "the same order, and its communicator is made at its first collective, inside a step. Create it "
            "before the model is built (a provider) or in DISTRIBUTED",
        )
