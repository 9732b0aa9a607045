"""The ordering rules (`states.ORDERING`) as a log shows them: read by the audit's handlers here and
by `lifecycle.testing.check_log`, so neither spells a rule's condition.

A rule with an audit id constrains one record:

- a rule on every kind of side effect, the `side_effect` records (of any `kind`);
- a rule on kinds that have a record of their own, that record (the binding: `callbacks_bound`);
- any other rule, the `side_effect` records of its kinds.

It holds once the record that shows its `needs` state's work was read (`SHOWN`): the audit keeps
that as a `RankState` field (`validated`: since `config_validated` or the transition into
VALIDATED; `model_gen`: since a `model_built` record of this generation); `check_log` until a
transition releases the state (`states.releases`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lifecycle.audit import _reads
from lifecycle.log import events
from states import ORDERING, Ordering, SideEffect, State

if TYPE_CHECKING:
    from lifecycle.audit._state import RankState


@dataclass(frozen=True, slots=True)
class Shown:
    """How a log shows that a state's work exists."""

    record: str
    """The record that shows it."""
    fact: str
    """The `RankState` field the audit keeps it in."""
    missing: str
    """How the audit's finding says it was missing."""


SHOWN: dict[State, Shown] = {
    State.VALIDATED: Shown(events.CONFIG_VALIDATED, "validated", "before the config was VALIDATED"),
    State.MODEL_BUILT: Shown(events.MODEL_BUILT, "model_gen", "before any model_built record"),
}
SHOWN_BY: dict[str, State] = {shown.record: state for state, shown in SHOWN.items()}
"""By record: the state whose work it shows exists."""
OWN_RECORDS: dict[SideEffect, tuple[str, str]] = {SideEffect.CALLBACKS: (events.CALLBACKS_BOUND, "callbacks bound")}
"""Kinds of side effect with a record of their own: that record, and what it says happened."""


@dataclass(frozen=True, slots=True)
class LogOrdering:
    """One ordering rule with an audit id, as a log shows it."""

    id: str
    needs: State
    record: str
    """The record it constrains."""
    kinds: frozenset[str] | None
    """The `kind`s of `side_effect` records it constrains; None: every record `record` names."""
    shown: Shown

    def applies(self, kind: str | None) -> bool:
        """Whether it constrains a record of its `record` whose `kind` field is `kind` (None: it has none)."""
        return self.kinds is None or kind in self.kinds

    def what(self, kind: str | None) -> str:
        """What a record of its `record` with `kind` says happened, for `check_log`'s problem."""
        if self.record == events.SIDE_EFFECT:
            return f"side effect {kind}"
        return next(said for record, said in OWN_RECORDS.values() if record == self.record)


def _in_logs(rule: Ordering, rule_id: str) -> LogOrdering:
    shown = SHOWN.get(rule.needs)
    if shown is None:
        raise ValueError(f"{rule_id}: no record shows that {rule.needs.name}'s work exists (see SHOWN)")
    own = {OWN_RECORDS[kind][0] for kind in rule.kinds if kind in OWN_RECORDS}
    if rule.kinds == frozenset(SideEffect):
        return LogOrdering(rule_id, rule.needs, events.SIDE_EFFECT, None, shown)
    if len(own) == 1 and rule.kinds <= OWN_RECORDS.keys():
        return LogOrdering(rule_id, rule.needs, own.pop(), None, shown)
    return LogOrdering(rule_id, rule.needs, events.SIDE_EFFECT, frozenset(k.value for k in rule.kinds), shown)


def in_logs(rules: tuple[Ordering, ...]) -> dict[str, tuple[LogOrdering, ...]]:
    """By record: the rules with an audit id that constrain it, in the order of `rules`."""
    by_record: dict[str, list[LogOrdering]] = {}
    for rule in rules:
        if rule.id is not None:
            found = _in_logs(rule, rule.id)
            by_record.setdefault(found.record, []).append(found)
    return {record: tuple(found) for record, found in by_record.items()}


LOG_ORDERING = in_logs(ORDERING)
"""By record: the ordering rules it can break."""
_ON_SIDE_EFFECT = LOG_ORDERING.get(events.SIDE_EFFECT, ())
_ON_BINDING = LOG_ORDERING.get(events.CALLBACKS_BOUND, ())
SIDE_EFFECTS_SETTLE = all(rule.shown.fact == "validated" for rule in _ON_SIDE_EFFECT)
"""Whether no `side_effect` record can break a rule once the config is validated (the batch
reader then skips them)."""


def side_effect(audit: RankState, rec: _reads.SideEffect, ts: float) -> None:
    for rule in _ON_SIDE_EFFECT:
        if not getattr(audit, rule.shown.fact) and rule.applies(rec.kind):
            audit.flag(
                rule.id,
                f"side effect {str(rec.kind)!r} (trigger {rec.trigger!r}) in state {audit.state}, {rule.shown.missing}",
            )


def binding_ordered(audit: RankState) -> None:
    """A `callbacks_bound` record: the rules on the binding (LA002)."""
    for rule in _ON_BINDING:
        if not getattr(audit, rule.shown.fact):
            audit.flag(
                rule.id,
                f"callbacks bound in state {audit.state} of generation {audit.generation} {rule.shown.missing}",
            )
