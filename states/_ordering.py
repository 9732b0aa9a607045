"""The ordering rules, in one place: what must exist before what.

Each rule says that the work of one startup state (`needs`) exists before a kind of side effect is
made. Three readers, none of which spells a condition again:

- the engine, through the guard each rule makes (`states._guards.requiring`), placed on the table's
  rows (`TABLE`); the guard's name and its rule's `says` are what a refusal reports; and through its
  side-effect rules, which refuse a declared side effect or a tripwire call whose rule is unmet now
  (`states.unmet`; a side effect before VALIDATED is `SideEffectBeforeValidation`);
- `lifecycle audit`, which flags a rule that has an `id` (its audit rule, `RuleId`) in a log;
- the fuzzer's `lifecycle.testing.check_log`, which reports every rule with an `id` in records.

The table implies more than the rules state (the chain makes every side effect after SERVICES_READY
need VALIDATED too); `tests/unit/test_ordering.py` checks that the table enforces each rule.

LA004 (a model rebuilt after a rebuild or restart is bound again before training) is not one of
them: it compares the model a binding targets with the one built, not the order of states. Which
triggers call for it is derived from the table (`states.rebinds`), like everything else it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from states._enums import SideEffect, State


@dataclass(frozen=True, slots=True, kw_only=True)
class Ordering:
    """One rule: a side effect of any of `kinds` needs the work of `needs` to exist (the state was
    entered and not released since)."""

    needs: State
    kinds: frozenset[SideEffect]
    guard: str
    """The name of the guard that enforces it: the name a refusal (`GuardRejected`, the log's
    `guard_rejected` record) reports."""
    says: str
    """The rule in one line: the guard's docstring and a refusal's reason."""
    id: str | None = None
    """Its audit rule (`lifecycle.audit.RuleId`), for a rule a log can show; None: the engine's alone."""


SIDE_EFFECTS_NEED_VALIDATION = Ordering(
    id="LA001",
    needs=State.VALIDATED,
    kinds=frozenset(SideEffect),
    guard="config_is_validated",
    says="Side effects need a validated config: services, process groups and RNG start only after VALIDATED.",
)
DISTRIBUTED_NEEDS_SERVICES = Ordering(
    needs=State.SERVICES_READY,
    kinds=frozenset({SideEffect.PROCESS_GROUP, SideEffect.PARALLEL_STATE, SideEffect.RNG, SideEffect.CUDA_DEVICE}),
    guard="services_are_ready",
    says="Runtime services (tokenizer, vocab size, writers) exist before distributed and RNG setup.",
)
MODEL_NEEDS_DISTRIBUTED = Ordering(
    needs=State.DISTRIBUTED,
    kinds=frozenset({SideEffect.MODEL}),
    guard="distributed_is_initialized",
    says="Process groups, parallel state and RNG exist before a model is (re)built: Megatron's layers read them.",
)
BINDING_NEEDS_A_MODEL = Ordering(
    id="LA002",
    needs=State.MODEL_BUILT,
    kinds=frozenset({SideEffect.CALLBACKS}),
    guard="model_is_built",
    says="Callbacks are bound only to a built model: the scheduler reads get_model_config(model[0]).",
)

ORDERING: tuple[Ordering, ...] = (
    SIDE_EFFECTS_NEED_VALIDATION,
    DISTRIBUTED_NEEDS_SERVICES,
    MODEL_NEEDS_DISTRIBUTED,
    BINDING_NEEDS_A_MODEL,
)
"""Every ordering rule; the table's guards of the same names are made from them."""
