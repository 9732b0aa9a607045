"""The entry-work protocol: what each state's phase receives (`PhaseContext`) and returns (`Runtime`).

Each state's phase (`_phases.py`) is called inside the owning transition and returns the next
`Runtime` (derived with `dataclasses.replace`). This layer imports neither torch nor megatron at
run time (nor `lifecycle.core_entry`, a layer above), so the fields are typed by the Protocols below
(what the engine, the phases and the training loop use of those objects), or by megatron's and
torch's classes named for the type checker only (`TYPE_CHECKING`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Generic, Protocol, TypedDict, TypeVar, runtime_checkable

from bindings import BindingReport, Module, Policy, SchedulerConfig
from lifecycle.errors import ConfigError
from lifecycle.log import records
from lifecycle.log.records import Record
from lifecycle.runtime._providers import GivenProvider
from states import Plan, SideEffect, Trigger

if TYPE_CHECKING:
    import torch
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.timers import Timers
    from megatron.core.transformer import TransformerConfig
    from torch.distributed import Store
    from torch.utils.tensorboard import SummaryWriter

    from lifecycle.config import RunConfig


T = TypeVar("T")


class Tokenizer(Protocol):
    """What the startup reads of a tokenizer (megatron's `MegatronTokenizer` has it)."""

    @property
    def vocab_size(self) -> int: ...


class ModelChunk(Module, Protocol):
    """One model chunk (a `MegatronModule`, usually wrapped in megatron's DDP): a torch module, as
    `bindings` reads one, with its parameters."""

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...


class Optimizer(Protocol):
    """What training and binding use of megatron's optimizer."""

    def step(self) -> tuple[bool, float | None, int | None] | None: ...
    def zero_grad(self) -> None: ...
    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class Closeable(Protocol):
    """Something a release must close (the CPU rehearsal)."""

    def close(self) -> None: ...


class ResumeCheck(Protocol):
    """The window from a checkpoint load to the first step (`lifecycle.resume.streams.ResumeWindow`):
    `check` at the first step's start gives the `streams_checked` record (None after the first call);
    `close` ends it unchecked."""

    def check(self, step: int) -> records.StreamsChecked | None: ...
    def close(self) -> None: ...


class Watch(Protocol):
    """The deadlines and failure broadcast of a multi-rank job (`lifecycle.rankwatch.RankWatch`):
    what the phases, the step loop and the release use of it."""

    failed: bool
    """This rank failed (or the lifecycle did): the closing barrier is skipped."""

    def phase(self, ctx: PhaseContext, state: str) -> AbstractContextManager[None]: ...
    def watching(
        self, emit: Callable[[Record], None], trigger: str, state: str, *, deadline: bool = True
    ) -> AbstractContextManager[None]: ...
    def peer_failure(self) -> object | None: ...
    def mark_failed(self, state: str, reason: str) -> None: ...
    def stop(self) -> None: ...


class Imports(TypedDict):
    """VALIDATED's heavy imports, as its `imports` record logs them (`lifecycle run` shows them)."""

    modules: dict[str, float]
    started_ts: float
    duration_s: float
    waited_s: float
    failed: dict[str, str]


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
    writers: Mapping[str, SummaryWriter | Timers] = field(default_factory=lambda: MappingProxyType({}))
    """SERVICES_READY's writers by name: "tensorboard" (a `SummaryWriter`), "timers" (megatron's)."""
    distributed: bool = False
    rank: int = 0
    world_size: int = 1
    backend: str | None = None
    pg_collection: ProcessGroupCollection | None = None
    rank_watch: Watch | None = None
    """DISTRIBUTED's rank watch (multi-rank gloo/nccl only)."""
    group_watch: Closeable | None = None
    """DISTRIBUTED's wrapper of `new_group` (gloo/nccl): it logs every group created later."""
    rendezvous_store: Store | None = None
    """A store someone else hosts (`Lifecycle.provide`: the restart wrapper's store for this cycle);
    DISTRIBUTED rendezvouses on it instead of MASTER_ADDR/MASTER_PORT."""
    rendezvous_generation: int = 0
    """The generation `Lifecycle.provide` handed `rendezvous_store` in. DISTRIBUTED's keys on it are
    prefixed by the restarts since: 0 under the restart wrapper, which provides each cycle's store
    anew, whatever restarts a rank made before (they differ between ranks: measured)."""
    transformer_config: SchedulerConfig | None = None
    provider_config: TransformerConfig | None = None
    """The config MODEL_BUILT gave the provider (a provider may copy it into the model)."""
    model: tuple[ModelChunk, ...] | None = None
    optimizer: Optimizer | None = None
    ddp_config: DistributedDataParallelConfig | None = None
    transformer_config_snapshot: Mapping[str, object] | None = None
    """Every field of the model's TransformerConfig when MODEL_BUILT built it (for `drift`)."""
    checkpoint_step: int | None = None
    """The step of the checkpoint MODEL_BUILT loaded (0 for fresh weights)."""
    resume_window: ResumeCheck | None = None
    """Open from MODEL_BUILT's checkpoint load to the first step's start, None otherwise."""
    te_user_buffers: bool = False
    """MODEL_BUILT initialized transformer-engine's user buffers (its release destroys them)."""
    scheduler: OptimizerParamScheduler | None = None
    """The Megatron-LM drop-in's optimizer parameter scheduler, built with the optimizer at MODEL_BUILT."""
    megatron_lm_globals: bool = False
    """The Megatron-LM drop-in's SERVICES_READY set Megatron-LM's global variables (they are ours)."""
    binding: BindingReport | None = None
    rehearsal: Closeable | None = None
    imports: Imports | None = None
    """VALIDATED's heavy imports, for `lifecycle run`'s summary."""
    slot_values: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    """What states added outside the project made, by `Slot` name: read and written through `slot`,
    `with_slot` and `without_slot`, which check each value's type (docs/extending.md). The project's
    own phases never use it: what they make has a typed field above."""

    @property
    def validated(self) -> bool:
        return self.fingerprint is not None

    def slot(self, slot: Slot[T]) -> T | None:
        """The value in `slot`, None when empty."""
        value = self.slot_values.get(slot.name)
        return None if value is None else slot.checked(value)

    def with_slot(self, slot: Slot[T], value: T) -> Runtime:
        """This record with `value` in `slot` (a TypeError if it is not the slot's type)."""
        return replace(self, slot_values=MappingProxyType({**self.slot_values, slot.name: slot.checked(value)}))

    def without_slot(self, slot: Slot[T]) -> Runtime:
        """This record with `slot` empty (what the release of the state that filled it returns)."""
        rest = {name: value for name, value in self.slot_values.items() if name != slot.name}
        return replace(self, slot_values=MappingProxyType(rest))


@dataclass(frozen=True, slots=True)
class Slot(Generic[T]):
    """A typed place in `Runtime` for what a state added outside the project makes:
    `DATA = Slot("data", DataIterators)`, then `rt.with_slot(DATA, it)`, `rt.slot(DATA)` (a
    `DataIterators | None`) and, in its release, `rt.without_slot(DATA)`."""

    name: str
    kind: type[T]
    """The type every value in the slot has (a Protocol must be `runtime_checkable`)."""

    def checked(self, value: object) -> T:
        """`value`, when it is the slot's type; else a TypeError naming the slot."""
        if not isinstance(value, self.kind):
            raise TypeError(
                f"runtime slot {self.name!r} holds {self.kind.__name__}, not {type(value).__name__}; "
                f"put a {self.kind.__name__} in it, or declare another Slot"
            )
        return value


class OptionValues(TypedDict, total=False):
    """`Options` as a mapping (`Lifecycle(options={"keep_records": True})`): any of its names, each
    with its field's type; `Options.of` refuses a name that is not one."""

    keep_records: bool
    environment_checks: bool
    binding_policy: Policy | None
    capture_warnings: bool


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
    def of(cls, value: Options | OptionValues | None) -> Options:
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
        return cls(**value)


class PhaseContext(Protocol):
    """What a phase may use. Side effects are declared (or caught by tripwires) here."""

    @property
    def runtime(self) -> Runtime: ...
    @property
    def provider(self) -> GivenProvider: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def trigger(self) -> Trigger: ...
    @property
    def options(self) -> Options: ...
    @property
    def log_dir(self) -> Path | None:
        """The run's startup-log directory (`Lifecycle(log_dir=)`, else `logging.log_dir`), or None."""

    def side_effect(self, kind: SideEffect) -> None:
        """Declare a side effect; raises unless the active transition owns it and VALIDATED passed."""

    def emit(self, record: Record) -> None:
        """Write a startup-log record: an event's type from `lifecycle.log.records`, its fields set."""

    def set_rank(self, *, rank: int, world_size: int) -> None:
        """Tell the log this process's rank once the process group knows it."""
