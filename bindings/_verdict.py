"""The frozen report of `bindings.check`: one verdict per slot, and where the callbacks went."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final, Literal

from bindings._errors import BindingError

Verdict = Literal["ok", "missing", "wrong", "stale"]

PRECEDENCE: Final[tuple[Verdict, ...]] = ("stale", "missing", "wrong", "ok")
"""The report's verdict is its slots' first verdict in this order: a stale binding explains the
rest, a missing callback loses gradient reduction, a wrong one may only misplace it."""

_FIX: Final[dict[str, str]] = {
    "missing": "install the callbacks on get_model_config(model[0]), the config the scheduler "
    "reads (bindings.bind_callbacks(model, optimizer, ddp_config) does), not on the provider's "
    "config",
    "wrong": "set the slot to what the rules ask for these DDP settings, or rebind with "
    "bindings.bind_callbacks(model, optimizer, ddp_config, policy='replace')",
    "stale": "rebind after the rebuild: bindings.unbind_callbacks(old_report), then "
    "bindings.bind_callbacks(new_model, new_optimizer, ddp_config)",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigSeen:
    """A config reachable from the model or given as the provider's, other than the scheduler's."""

    id: str
    type: str
    where: str
    slots: tuple[str, ...]

    def label(self) -> str:
        return f"{self.type} at {self.id} ({self.where})"


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotCheck:
    """One slot of the scheduler's config: its verdict, what the rules ask, what it holds, and the
    other configs holding something in that slot when it is not right."""

    slot: str
    verdict: Verdict
    expected: str
    found: str
    elsewhere: tuple[str, ...] = ()

    def line(self) -> str:
        text = f"{self.slot:<26} {self.verdict:<8} expected {self.expected}; found {self.found}"
        if self.elsewhere:
            text += "; set on " + ", ".join(self.elsewhere) + ", which the scheduler never reads"
        return text


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckReport:
    """What `bindings.check` found, slot by slot, on the config the scheduler reads."""

    scheduler_config_type: str
    scheduler_config_id: str
    chunks: int
    slots: tuple[SlotCheck, ...]
    others: tuple[ConfigSeen, ...] = ()
    chunk_config_ids: tuple[str, ...] = ()
    provider_config_id: str | None = None

    @property
    def verdict(self) -> Verdict:
        found = {s.verdict for s in self.slots}
        return next(v for v in PRECEDENCE if v in found or v == "ok")

    @property
    def bad(self) -> tuple[SlotCheck, ...]:
        return tuple(s for s in self.slots if s.verdict != "ok")

    def slot(self, name: str) -> SlotCheck:
        for check in self.slots:
            if check.slot == name:
                return check
        raise KeyError(name)

    def with_chunk_configs(self, chunk_config_ids: tuple[str, ...], provider_config_id: str | None) -> CheckReport:
        return dataclasses.replace(self, chunk_config_ids=chunk_config_ids, provider_config_id=provider_config_id)

    def render(self) -> str:
        """The report as text: a head line, then one line per slot."""
        head = (
            f"binding check: {self.verdict} (scheduler config {self.scheduler_config_type} at "
            f"{self.scheduler_config_id}, {self.chunks} chunk{'s' if self.chunks != 1 else ''}"
        )
        if any(c != self.scheduler_config_id for c in self.chunk_config_ids):
            head += ", chunk configs " + " ".join(self.chunk_config_ids)
        return "\n".join([head + ")"] + ["  " + s.line() for s in self.slots])

    def raise_if_bad(self) -> None:
        """Raise `BindingError` naming the first bad slot, the configs involved and the fix."""
        bad = sorted(self.bad, key=lambda s: PRECEDENCE.index(s.verdict))
        if not bad:
            return
        first = bad[0]
        where = (
            f"; it is set on {', '.join(first.elsewhere)}, which the scheduler never reads" if first.elsewhere else ""
        )
        raise BindingError(
            f"{first.slot} is {first.verdict} on the config the scheduler reads "
            f"({self.scheduler_config_type} at {self.scheduler_config_id}): expected "
            f"{first.expected}, found {first.found}{where}. Fix: {_FIX[first.verdict]}"
            + (f" (also not ok: {', '.join(s.slot for s in bad[1:])})" if bad[1:] else ""),
            slot=first.slot,
            verdict=first.verdict,
            scheduler_config_id=self.scheduler_config_id,
            elsewhere=first.elsewhere,
        )
