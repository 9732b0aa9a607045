"""A state is one phase object: `enter(ctx)` does the state's work, `release(ctx)` undoes it. A
`PhaseSet` is a registry of them, one per state; the engine looks a state's phase up when it
enters the state, and walks them newest first when a release leaves states (what a release keeps
is the table's: `states.kept_by`). The real Megatron phases, the Megatron-LM-driven ones and the
light in-process ones are three registries of this one shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from lifecycle.config import Change
from lifecycle.errors import ConfigError
from lifecycle.runtime._protocol import PhaseContext, Runtime
from states import STARTUP_ORDER, State


class Phase(Protocol):
    """One state's work. `release` must tolerate a partial build (after a failure) and undo only
    what this state's `enter` made; the engine calls it with the runtime as the later states'
    releases left it."""

    def enter(self, ctx: PhaseContext) -> Runtime: ...
    def release(self, ctx: PhaseContext) -> Runtime: ...


class PhaseSet(Protocol):
    """The phase registered for each state (None: nothing to do there), and `drift`."""

    def phase_for(self, state: State) -> Phase | None: ...

    def drift(self, runtime: Runtime) -> list[Change]:
        """Fields of objects built from the validated config that changed since (empty if none)."""


Entry = Callable[[PhaseContext], Runtime]
"""A phase's entry work or release as a function."""
Wrapper = Callable[[PhaseContext, Entry], Runtime]


def _nothing(ctx: PhaseContext) -> Runtime:
    return ctx.runtime


@dataclass(frozen=True, slots=True)
class Work:
    """A phase from two functions: `enter(ctx)` and `undo(ctx)` (default: nothing to undo)."""

    run: Entry
    undo: Entry = _nothing

    def enter(self, ctx: PhaseContext) -> Runtime:
        return self.run(ctx)

    def release(self, ctx: PhaseContext) -> Runtime:
        return self.undo(ctx)


@dataclass(frozen=True, slots=True)
class Around:
    """`inner`, with its `enter` and/or `release` run through a wrapper: `wrap(ctx, inner.enter)`."""

    inner: Phase
    on_enter: Wrapper | None = None
    on_release: Wrapper | None = None

    def enter(self, ctx: PhaseContext) -> Runtime:
        return self.on_enter(ctx, self.inner.enter) if self.on_enter else self.inner.enter(ctx)

    def release(self, ctx: PhaseContext) -> Runtime:
        return self.on_release(ctx, self.inner.release) if self.on_release else self.inner.release(ctx)


class Phases:
    """A PhaseSet: a registry of one Phase per state. Subclasses register theirs in `__init__`;
    `register` adds (or replaces) one, `around` wraps one (tests, hooks)."""

    def __init__(self, phases: Mapping[State, Phase] | None = None) -> None:
        self._by_state: dict[State, Phase] = {}
        for state, phase in (phases or {}).items():
            self.register(state, phase)

    def register(self, state: State, phase: Phase) -> Phases:
        """Make `phase` the work of `state`; returns the registry (calls chain)."""
        if state not in STARTUP_ORDER[1:]:
            raise ConfigError(
                f"a phase is registered for a startup state after {STARTUP_ORDER[0].name}, not {state.name}; "
                f"use one of {', '.join(s.name for s in STARTUP_ORDER[1:])}",
                field="state",
                problems=[state.name],
            )
        self._by_state[state] = phase
        return self

    def around(self, state: State, *, enter: Wrapper | None = None, release: Wrapper | None = None) -> Phases:
        """Wrap `state`'s registered phase: `enter(ctx, inner_enter)` runs in place of its entry
        work (and `release(ctx, inner_release)` of its release); returns the registry."""
        inner = self.phase_for(state)
        if inner is None:
            raise ConfigError(
                f"no phase is registered for {state.name} to wrap; register one first",
                field="state",
                problems=[state.name],
            )
        return self.register(state, Around(inner, enter, release))

    def phase_for(self, state: State) -> Phase | None:
        return self._by_state.get(state)

    def drift(self, runtime: Runtime) -> list[Change]:
        """Nothing built here is checked for drift unless a subclass says how."""
        return []
