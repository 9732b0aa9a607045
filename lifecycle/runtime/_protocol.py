"""The entry-work protocol: what each state's phase receives (`PhaseContext`) and returns (`Runtime`).

Each state's phase (`_phases.py`) is called inside the owning transition and returns the next
`Runtime` (derived with `dataclasses.replace`). Megatron's own classes
cannot be named here (this layer imports neither torch nor megatron), so the fields are typed by
the Protocols below: what the engine and the training loop use of those objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from bindings import BindingReport, Policy, SchedulerConfig
from lifecycle.errors import ConfigError
from states import Plan, SideEffect, Trigger

if TYPE_CHECKING:
    from lifecycle.config import RunConfig


class Tokenizer(Protocol):
    """What the startup reads of a tokenizer (megatron's `MegatronTokenizer` has it)."""

    @property
    def vocab_size(self) -> int: ...


class ModelChunk(Protocol):
    """One model chunk (a `MegatronModule`, usually wrapped in megatron's DDP)."""

    def parameters(self) -> Iterator[Any]: ...


class Optimizer(Protocol):
    """What training and binding use of megatron's optimizer."""

    def step(self) -> Any: ...
    def zero_grad(self) -> Any: ...
    def scale_loss(self, loss: Any) -> Any: ...


@runtime_checkable
class Closeable(Protocol):
    """Something a release must close (the CPU rehearsal)."""

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """What exists now. Fields stay None until the phase that owns them has run."""

    config: RunConfig
    generation: int = 0
    fingerprint: str | None = None
    services_ready: bool = False
    tokenizer: Tokenizer | None = None
    vocab_size: int | None = None
    vocab_source: str | None = None
    writers: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    distributed: bool = False
    rank: int = 0
    world_size: int = 1
    backend: str | None = None
    pg_collection: object | None = None
    transformer_config: SchedulerConfig | None = None
    provider_config: object | None = None
    model: tuple[ModelChunk, ...] | None = None
    optimizer: Optimizer | None = None
    ddp_config: object | None = None
    binding: BindingReport | None = None
    rehearsal: Closeable | None = None
    extras: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def validated(self) -> bool:
        return self.fingerprint is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """Engine options. `Lifecycle(options={...})` takes a mapping of these names too."""

    keep_records: bool = False
    """Keep every record in memory (`Lifecycle.records`): tests and the fuzzer read them."""
    environment_checks: bool = True
    """Run the environment checks at VALIDATED (the convert plan never does)."""
    binding_policy: Policy | None = None
    """What binding does when a slot holds another callable: refuse (None), 'keep' or 'replace'."""
    capture_warnings: bool = True
    """Write library warnings to this lifecycle's log as `warning` records, rank 0 printing one
    closing line that counts them. `lifecycle simulate` turns it off: its simulated ranks share one
    process and console, and their logs describe the layout, the same on every environment."""

    @classmethod
    def of(cls, value: Options | Mapping[str, object] | None) -> Options:
        """`value` as Options; a misspelt or unknown name is a ConfigError naming the valid ones."""
        if value is None:
            return cls()
        if isinstance(value, Options):
            return value
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise ConfigError(
                f"unknown option(s) {', '.join(map(repr, unknown))}; valid options are {', '.join(names)}",
                field="options",
                problems=unknown,
            )
        return cls(**value)  # type: ignore[arg-type]  # names checked above; values are the caller's


class PhaseContext(Protocol):
    """What a phase may use. Side effects are declared (or caught by tripwires) here."""

    @property
    def runtime(self) -> Runtime: ...
    @property
    def provider(self) -> Any: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def trigger(self) -> Trigger: ...
    @property
    def options(self) -> Options: ...

    def side_effect(self, kind: SideEffect) -> None:
        """Declare a side effect; raises unless the active transition owns it and VALIDATED passed."""

    def emit(self, event: str, **fields: Any) -> None:
        """Write a startup-log record (event names from lifecycle/log/events.py)."""

    def set_rank(self, *, rank: int, world_size: int) -> None:
        """Tell the log this process's rank once the process group knows it."""
