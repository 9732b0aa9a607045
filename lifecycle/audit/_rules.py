"""The audit's rules: stable ids, a slug and a one-line summary each; docs/rules/<id>.md explains them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One check. `id` never changes meaning; `slug` is its readable alias for --select/--ignore."""

    id: str
    slug: str
    summary: str

    @property
    def doc(self) -> str:
        return f"docs/rules/{self.id}.md"


RULES: tuple[Rule, ...] = (
    Rule(id="LA001", slug="side-effect-before-validated",
         summary="a side effect was performed before the config was VALIDATED"),
    Rule(id="LA002", slug="binding-before-model-built",
         summary="callbacks were bound before a model was built in this generation"),
    Rule(id="LA003", slug="binding-wrong-target",
         summary="callbacks were bound to an object other than the config the scheduler reads"),
    Rule(id="LA004", slug="rebuild-without-rebind",
         summary="after a rebuild or restart the new model was not rebound, or the old one was"),
    Rule(id="LA005", slug="config-changed-after-validated",
         summary="the validated config changed after VALIDATED"),
    Rule(id="LA006", slug="fingerprint-disagreement",
         summary="ranks validated configs with different fingerprints"),
    Rule(id="LA007", slug="final-state-disagreement",
         summary="ranks ended in different states"),
    Rule(id="LA008", slug="transition-sequence-disagreement",
         summary="ranks went through different sequences of transitions"),
    Rule(id="LA009", slug="hash-chain-broken",
         summary="a log's hash chain is broken or missing: records changed, removed, reordered or truncated"),
    Rule(id="LA010", slug="rank-died",
         summary="a rank's log stops mid-transition, or before its plan's target state without a failure "
                 "or shutdown record"),
    Rule(id="LA011", slug="first-step-not-finalized",
         summary="the first training step did not run the gradient finalizer exactly once"),
    Rule(id="LA012", slug="tripwire-violation",
         summary="a tripwire caught a side effect outside its owning transition"),
    Rule(id="LA013", slug="startup-failed",
         summary="a rank's startup failed (a transition failed, a signal, a peer's failure or a timeout) "
                 "and it did not recover"),
    Rule(id="LA014", slug="missing-ranks",
         summary="world_size names more ranks than there are logs"),
    Rule(id="LA015", slug="duplicate-ranks",
         summary="more than one log claims the same rank of one run"),
    Rule(id="LA016", slug="mixed-runs",
         summary="the logs belong to more than one run"),
    Rule(id="LA017", slug="time-went-backwards",
         summary="a record's timestamp is earlier than the record before it in the same log"),
    Rule(id="LA018", slug="root-cause",
         summary="a startup failed: the rank whose own failure came first, and the ranks that failed after it"),
    Rule(id="LA019", slug="file-rank-mismatch",
         summary="a rank-NNNNN.jsonl file holds another rank's records, or a log's rank changes"),
    Rule(id="LA020", slug="not-a-regular-file",
         summary="a directory entry named like a rank log is not a regular file and was skipped"),
    Rule(id="LA021", slug="incomplete",
         summary="a log ends without a shutdown or a failure record after reaching its plan's target"),
    Rule(id="LA030", slug="step-without-binding",
         summary="a training step was logged outside CALLBACKS_BOUND in a plan that binds callbacks"),
    Rule(id="LA031", slug="first-step-unchecked",
         summary="steps ran on a binding without the first-step watchdog's record"),
)

BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}
_BY_SLUG: dict[str, Rule] = {rule.slug: rule for rule in RULES}


def resolve(names: Iterable[str], option: str = "--select") -> frozenset[str]:
    """Rule ids for ids, id prefixes (`LA00`) or slugs; raises ValueError naming the unknown one,
    or a value that names no rule at all (`--select ""` must not pass a log by checking nothing)."""
    chosen: set[str] = set()
    for raw in names:
        if not raw.replace(",", "").strip():
            raise ValueError(f"{option} {raw!r} names no rule: give rule ids (LA003), id prefixes (LA00) or "
                             "slugs (binding-wrong-target), comma-separated")
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
