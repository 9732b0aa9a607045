"""The audit's rules: stable ids, a slug and a one-line summary each; docs/rules/<id>.md explains them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from states import BINDING_NEEDS_A_MODEL, SIDE_EFFECTS_NEED_VALIDATION, Ordering


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One check. `id` never changes meaning; `slug` is its readable alias for --select/--ignore."""

    id: str
    slug: str
    summary: str

    @property
    def doc(self) -> str:
        return f"docs/rules/{self.id}.md"


def _id(ordering: Ordering) -> str:
    if ordering.id is None:
        raise ValueError(f"the ordering rule of {ordering.guard} has no audit id")
    return ordering.id


class RuleId:
    """Every rule's id, named by its slug (`RuleId.BINDING_WRONG_TARGET` is "LA003"): code flags a rule
    through these, never a literal id. An ordering rule's id is its rule's (`states.ORDERING`)."""

    SIDE_EFFECT_BEFORE_VALIDATED: Final = _id(SIDE_EFFECTS_NEED_VALIDATION)
    BINDING_BEFORE_MODEL_BUILT: Final = _id(BINDING_NEEDS_A_MODEL)
    BINDING_WRONG_TARGET: Final = "LA003"
    REBUILD_WITHOUT_REBIND: Final = "LA004"
    CONFIG_CHANGED_AFTER_VALIDATED: Final = "LA005"
    FINGERPRINT_DISAGREEMENT: Final = "LA006"
    FINAL_STATE_DISAGREEMENT: Final = "LA007"
    TRANSITION_SEQUENCE_DISAGREEMENT: Final = "LA008"
    HASH_CHAIN_BROKEN: Final = "LA009"
    RANK_DIED: Final = "LA010"
    FIRST_STEP_NOT_FINALIZED: Final = "LA011"
    TRIPWIRE_VIOLATION: Final = "LA012"
    STARTUP_FAILED: Final = "LA013"
    MISSING_RANKS: Final = "LA014"
    DUPLICATE_RANKS: Final = "LA015"
    MIXED_RUNS: Final = "LA016"
    TIME_WENT_BACKWARDS: Final = "LA017"
    ROOT_CAUSE: Final = "LA018"
    FILE_RANK_MISMATCH: Final = "LA019"
    NOT_A_REGULAR_FILE: Final = "LA020"
    INCOMPLETE: Final = "LA021"
    IMPOSSIBLE_TIMESTAMP: Final = "LA022"
    RESOURCE_LEAKED: Final = "LA023"
    FINALIZER_UNBOUND: Final = "LA024"
    WORLD_SHRUNK: Final = "LA025"
    SETTING_NOT_LANDED: Final = "LA026"
    RESUME_DIVERGED: Final = "LA027"
    GROUP_TIMEOUT: Final = "LA028"
    GROUP_AFTER_BINDING: Final = "LA029"
    STEP_WITHOUT_BINDING: Final = "LA030"
    FIRST_STEP_UNCHECKED: Final = "LA031"


RULES: tuple[Rule, ...] = (
    Rule(
        id=RuleId.SIDE_EFFECT_BEFORE_VALIDATED,
        slug="side-effect-before-validated",
        summary="a side effect was performed before the config was VALIDATED",
    ),
    Rule(
        id=RuleId.BINDING_BEFORE_MODEL_BUILT,
        slug="binding-before-model-built",
        summary="callbacks were bound before a model was built in this generation",
    ),
    Rule(
        id=RuleId.BINDING_WRONG_TARGET,
        slug="binding-wrong-target",
        summary="callbacks were bound to an object other than the config the scheduler reads",
    ),
    Rule(
        id=RuleId.REBUILD_WITHOUT_REBIND,
        slug="rebuild-without-rebind",
        summary="after a rebuild or restart the new model was not rebound, or the old one was",
    ),
    Rule(
        id=RuleId.CONFIG_CHANGED_AFTER_VALIDATED,
        slug="config-changed-after-validated",
        summary="the validated config changed after VALIDATED",
    ),
    Rule(
        id=RuleId.FINGERPRINT_DISAGREEMENT,
        slug="fingerprint-disagreement",
        summary="ranks validated configs with different fingerprints",
    ),
    Rule(
        id=RuleId.FINAL_STATE_DISAGREEMENT, slug="final-state-disagreement", summary="ranks ended in different states"
    ),
    Rule(
        id=RuleId.TRANSITION_SEQUENCE_DISAGREEMENT,
        slug="transition-sequence-disagreement",
        summary="ranks went through different sequences of transitions",
    ),
    Rule(
        id=RuleId.HASH_CHAIN_BROKEN,
        slug="hash-chain-broken",
        summary="a log's hash chain is broken or missing: records changed, removed, reordered or truncated",
    ),
    Rule(
        id=RuleId.RANK_DIED,
        slug="rank-died",
        summary="a rank's log stops mid-transition, or before its plan's target state without a failure "
        "or shutdown record",
    ),
    Rule(
        id=RuleId.FIRST_STEP_NOT_FINALIZED,
        slug="first-step-not-finalized",
        summary="the first training step did not run the gradient finalizer exactly once",
    ),
    Rule(
        id=RuleId.TRIPWIRE_VIOLATION,
        slug="tripwire-violation",
        summary="a tripwire caught a side effect outside its owning transition",
    ),
    Rule(
        id=RuleId.STARTUP_FAILED,
        slug="startup-failed",
        summary="a rank's startup failed (a transition failed, a signal, a peer's failure or a timeout) "
        "and it did not recover",
    ),
    Rule(id=RuleId.MISSING_RANKS, slug="missing-ranks", summary="world_size names more ranks than there are logs"),
    Rule(
        id=RuleId.DUPLICATE_RANKS, slug="duplicate-ranks", summary="more than one log claims the same rank of one run"
    ),
    Rule(id=RuleId.MIXED_RUNS, slug="mixed-runs", summary="the logs belong to more than one run"),
    Rule(
        id=RuleId.TIME_WENT_BACKWARDS,
        slug="time-went-backwards",
        summary="a record's timestamp is earlier than the record before it in the same log",
    ),
    Rule(
        id=RuleId.ROOT_CAUSE,
        slug="root-cause",
        summary="a startup failed: the rank whose own failure came first, and the ranks that failed after it",
    ),
    Rule(
        id=RuleId.FILE_RANK_MISMATCH,
        slug="file-rank-mismatch",
        summary="a rank-NNNNN.jsonl file holds another rank's records, or a log's rank changes",
    ),
    Rule(
        id=RuleId.NOT_A_REGULAR_FILE,
        slug="not-a-regular-file",
        summary="a directory entry named like a rank log is not a regular file and was skipped",
    ),
    Rule(
        id=RuleId.INCOMPLETE,
        slug="incomplete",
        summary="a log ends without a shutdown or a failure record after reaching its plan's target",
    ),
    Rule(
        id=RuleId.IMPOSSIBLE_TIMESTAMP,
        slug="impossible-timestamp",
        summary="a record's timestamp is before 2000 or after 2100, or more than a minute earlier than the "
        "record before it in the same log",
    ),
    Rule(
        id=RuleId.RESOURCE_LEAKED,
        slug="resource-leaked",
        summary="a resource a state made was still alive after its release (rebuild, restart or shutdown)",
    ),
    Rule(
        id=RuleId.FINALIZER_UNBOUND,
        slug="finalizer-unbound",
        summary="a script's write during Megatron-LM's train() left finalize_model_grads_func unbound: the "
        "scheduler no longer finalizes gradients",
    ),
    Rule(
        id=RuleId.WORLD_SHRUNK,
        slug="world-shrunk",
        summary="an in-process restart cycle trained with fewer ranks than were launched (min_world_size allowed it)",
    ),
    Rule(
        id=RuleId.SETTING_NOT_LANDED,
        slug="setting-not-landed",
        summary="a setting asked for is not what the model that trains carries (a copy, a rebuild, a field set "
        "after validation)",
    ),
    Rule(
        id=RuleId.RESUME_DIVERGED,
        slug="resume-diverged",
        summary="between a checkpoint load and the first step a random stream moved, or the first step or the data "
        "position does not continue the checkpoint's",
    ),
    Rule(
        id=RuleId.GROUP_TIMEOUT,
        slug="group-timeout",
        summary="a process group's timeout, read back from the group, is not startup.timeout_s (a new_group "
        "without timeout= takes the backend's default, not the world's)",
    ),
    Rule(
        id=RuleId.GROUP_AFTER_BINDING,
        slug="group-after-binding",
        summary="a process group was created after CALLBACKS_BOUND: its communicator is made lazily, inside a step",
    ),
    Rule(
        id=RuleId.STEP_WITHOUT_BINDING,
        slug="step-without-binding",
        summary="a training step was logged outside CALLBACKS_BOUND in a plan that binds callbacks",
    ),
    Rule(
        id=RuleId.FIRST_STEP_UNCHECKED,
        slug="first-step-unchecked",
        summary="steps ran on a binding without the first-step watchdog's record",
    ),
)

BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}
_BY_SLUG: dict[str, Rule] = {rule.slug: rule for rule in RULES}


def resolve(names: Iterable[str], option: str = "--select") -> frozenset[str]:
    """Rule ids for ids, id prefixes (`LA00`) or slugs; raises ValueError naming the unknown one,
    or a value that names no rule at all (`--select ""` must not pass a log by checking nothing)."""
    chosen: set[str] = set()
    for raw in names:
        if not raw.replace(",", "").strip():
            raise ValueError(
                f"{option} {raw!r} names no rule: give rule ids (LA003), id prefixes (LA00) or "
                "slugs (binding-wrong-target), comma-separated"
            )
        for name in (part.strip() for part in raw.split(",")):
            if not name:
                continue
            matched = {r.id for r in RULES if r.id.startswith(name.upper())}
            if name in _BY_SLUG:
                matched.add(_BY_SLUG[name].id)
            if not matched:
                known = ", ".join(f"{r.id} ({r.slug})" for r in RULES)
                raise ValueError(f"unknown rule {name!r}: use an id, an id prefix or a slug: {known}")
            chosen |= matched
    return frozenset(chosen)


def enabled(select: Iterable[str] = (), ignore: Iterable[str] = ()) -> frozenset[str]:
    """The rule ids to report: all (or `select`) minus `ignore`."""
    selected = list(select)
    base = resolve(selected, "--select") if selected else frozenset(BY_ID)
    return base - resolve(ignore, "--ignore")
