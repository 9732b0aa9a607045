"""The records of faults and restarts: signals, deadlines, failed peers, the log's own faults,
warnings, restart cycles, the ledger; and `lifecycle simulate`'s records (`lifecycle.log.schema`
puts them in order)."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Meta, UnsetType

from lifecycle.log._schema_base import Record

Signal = Annotated[str, Meta(description='the signal\'s name (`"SIGTERM"`, `"SIGINT"`)')]
Cause = Annotated[str | None, Meta(description='what it published (`"Type: message"`), or null')]
CauseRank = Annotated[int | None, Meta(description="the rank that failed first; null when none published")]
Resource = Annotated[str, Meta(description="the ledger entry's resource")]


class StartupAborted(Record, frozen=True, kw_only=True, tag="startup_aborted"):
    """A SIGTERM or SIGINT during the startup: the startup is abandoned and its releases run
    ([failures](failures.md#sigterm-or-sigint-during-startup-torchrun-slurm-scancel-kubernetes-ctrl-c))."""

    signal: Signal
    state: Annotated[str, Meta(description="where it arrived")]
    trigger: Annotated[str | None, Meta(description="the transition running then, or null")]
    blocked_s: Annotated[
        float | UnsetType,
        Meta(
            description="only when the main thread, blocked in native code, could not take it and the process "
            "ended without the releases: how long it waited"
        ),
    ] = UNSET


class SignalReceived(Record, frozen=True, kw_only=True, tag="signal_received"):
    """A SIGTERM/SIGINT after the startup, logged once before it is handed on to the handler before
    ours or the default action
    ([failures](failures.md#sigterm-or-sigint-during-training-the-launcher-ending-the-survivors-of-a-failure))."""

    signal: Signal
    state: Annotated[str, Meta(description="the plan's target")]


class StateTimeout(Record, frozen=True, kw_only=True, tag="state_timeout"):
    """A collective state's deadline passed
    ([failures](failures.md#dead-and-stuck-ranks-deadlines-check-in-failure-broadcast))."""

    state: Annotated[str, Meta(description="the state being entered")]
    trigger: Annotated[str, Meta(description="the transition entering it")]
    timeout_s: Annotated[float, Meta(description="`startup.timeout_s`")]
    missing: Annotated[
        list[int] | UnsetType,
        Meta(description="ranks that never checked in; only when known, i.e. at the rendezvous"),
    ] = UNSET


class PeerFailed(Record, frozen=True, kw_only=True, tag="peer_failed"):
    """Another rank failed during a collective state
    ([failures](failures.md#dead-and-stuck-ranks-deadlines-check-in-failure-broadcast))."""

    peer_rank: Annotated[int, Meta(description="the rank that failed first")]
    peer_state: Annotated[str, Meta(description='the state it was entering, or `"unknown"`')]
    error: Annotated[
        str,
        Meta(description='what it published: `"Type: message"`, or for a lost rank why it was declared lost'),
    ]
    peer_kind: Annotated[
        str | UnsetType,
        Meta(
            description="how it failed: `exception`, `signal`, `timeout`, or `lost` (gone, or silent past "
            "`stale_s`: it writes no record of its own); absent in logs written before it was added"
        ),
    ] = UNSET
    trigger: Annotated[
        str | UnsetType, Meta(description="what this rank was doing then (`step 2`), when in a watched step or phase")
    ] = UNSET


class LogWriteFailed(Record, frozen=True, kw_only=True, tag="log_write_failed"):
    """The log file could not take a record: this and every later record go to stderr."""

    path: Annotated[str, Meta(description="the rank file")]
    errno: Annotated[int | None, Meta(description="the error's `errno`")]
    error: Annotated[str, Meta(description="the error (redacted)")]
    failed_event: Annotated[
        str | None,
        Meta(description="the record the file could not take; null when it failed while opening"),
    ]


class WarningRecorded(Record, frozen=True, kw_only=True, tag="warning"):
    """A library warning during the lifecycle (`warnings.warn`, a library logger's WARNING), or a
    log sink that failed (`category` `LogSinkFailed`, `OtelExportFailed`)."""

    category: Annotated[str, Meta(description="the warning's category (class name)")]
    module: Annotated[str, Meta(description="the module it came from")]
    message: Annotated[str, Meta(description="its text (redacted, cut to 500 characters)")]
    lineno: Annotated[int | None, Meta(description="the line it was raised at, or null")]


class CycleStarted(Record, frozen=True, kw_only=True, tag="cycle_started"):
    """At CALLBACKS_BOUND, before training, in each in-process restart cycle
    ([restart.md](restart.md#in-the-log-and-the-audit))."""

    ledger: Annotated[list[str], Meta(description="`STATE:resource` entries now in the ledger")]
    fingerprint: Annotated[str | None, Meta(description="the validated config's fingerprint")]
    hooks: Annotated[
        dict[str, int] | UnsetType,
        Meta(description="counts of `forward_pre_hooks`, `forward_hooks`, `grad_hooks`, `callbacks`"),
    ] = UNSET
    resumed_step: Annotated[int | UnsetType, Meta(description="the checkpoint step, 0 for fresh weights")] = UNSET
    restart_s: Annotated[
        float | UnsetType | None,
        Meta(description="from the fault of the cycle before to this rank ready to train; null in cycle 0"),
    ] = UNSET
    pid: Annotated[int | UnsetType, Meta(description="the process id")] = UNSET
    world_size: Annotated[int, Meta(description="this cycle's world size (the envelope's, written again)")]
    launched_world_size: Annotated[
        int | UnsetType,
        Meta(
            description="the world size launched; `world_size` is smaller only where `min_world_size` let the job "
            "shrink: [LA025](rules/LA025.md)"
        ),
    ] = UNSET
    restart_timeouts: Annotated[
        dict[str, float | None] | UnsetType,
        Meta(
            description="the in-process restart wrapper's own timeouts, read back from it, in seconds: `soft_s`, "
            "`hard_s`, `barrier_s`, `completion_s`, `heartbeat_s` (null where the release keeps none); and "
            "`store_client_s`, the timeout of this rank's own connection to the wrapper's store (each cycle's "
            "rendezvous and cause), read back from the client; the audit's timeout map shows them"
        ),
    ] = UNSET


class CycleEnded(Record, frozen=True, kw_only=True, tag="cycle_ended"):
    """On every rank, in the cycle that ends, before its `restart`."""

    cause_rank: Annotated[
        int | UnsetType | None, Meta(description="the rank that failed first; null when none published")
    ] = UNSET
    cause: Annotated[str | UnsetType | None, Meta(description='what it published (`"Type: message"`), or null')] = UNSET
    fault_ts: Annotated[float | UnsetType | None, Meta(description="when the fault was published")] = UNSET
    state: Annotated[str, Meta(description="where this rank was")]


class ResourceLeaked(Record, frozen=True, kw_only=True, tag="resource_leaked"):
    """A ledger entry still alive after the release of a rebuild or restart; `ResourceLeak` follows
    ([restart.md](restart.md#the-ledger))."""

    resource: Resource
    state: Annotated[str, Meta(description="the state that made it")]


class ResourceLingered(Record, frozen=True, kw_only=True, tag="resource_lingered"):
    """A ledger entry still alive at the first probe after a rebuild's or restart's release that
    ended within the phases' `settle_s` (5 s for the real phases), so not a leak
    ([restart.md](restart.md#the-ledger))."""

    resource: Resource
    state: Annotated[str, Meta(description="the state that made it")]
    lingered_s: Annotated[float, Meta(description="how long it stayed alive")]


class RestartsExhausted(Record, frozen=True, kw_only=True, tag="restarts_exhausted"):
    """The in-process restart wrapper gave up; `RestartsExhausted` names the last fault
    ([restart.md](restart.md))."""

    cycles: Annotated[int, Meta(description="the cycles run")]
    max_cycles: Annotated[int, Meta(description="the wrapper's `max_cycles`")]
    min_world_size: Annotated[int, Meta(description="the fewest ranks a cycle may have")]
    reason: Annotated[str, Meta(description="`max_cycles` or `min_world_size`")]
    cause_rank: CauseRank
    cause: Cause


class LaunchEnded(Record, frozen=True, kw_only=True, tag="launch_ended"):
    """Written by `lifecycle run --nproc N` (one per node agent, not per rank) to
    `<log_dir>/launcher-<node>.jsonl` when its torchrun ended: how the ranks it launched ended, as
    torchrun saw them. Its envelope's `rank` is the node's (`node_rank`)
    ([failures](failures.md#the-verdict-and-the-fault-corpus))."""

    node_rank: Annotated[int, Meta(description="the node's rank (`--node-rank`; 0 on one node)")]
    host: Annotated[str, Meta(description="the host name")]
    nproc: Annotated[int, Meta(description="ranks launched on this node")]
    exit: Annotated[
        int, Meta(description="the launch's exit status: torchrun's, or 128 + N when signal N stopped `lifecycle run`")
    ]
    signal: Annotated[
        str | None, Meta(description="the signal `lifecycle run` itself took (`SIGTERM`, `SIGINT`), or null")
    ]
    ended: Annotated[
        list[dict[str, object]],
        Meta(
            description="the ranks torchrun reported failed, the first it observed first: `rank`, `local_rank`, "
            "`exitcode`, `signal` (its name when a signal ended the rank, else null), `ts` (when torchrun saw it, "
            "Unix seconds; null when not reported); empty when every rank exited 0 or the launch was stopped"
        ),
    ]


class SimulationStarted(Record, frozen=True, kw_only=True, tag="simulation_started"):
    """Written by `lifecycle simulate` before the first state ([simulate.md](simulate.md#in-the-startup-log))."""

    simulated: Annotated[int, Meta(description="how many ranks this simulation drives")]
    selection: Annotated[str, Meta(description="`ranks 0,37,4095`, `sample 16 (seed 0)`, `all`")]
    until: Annotated[str, Meta(description="the state it simulates up to")]


class RankSimulated(Record, frozen=True, kw_only=True, tag="rank_simulated"):
    """Written by `lifecycle simulate` once the rank reached `until`
    ([simulate.md](simulate.md#in-the-startup-log))."""

    placement: Annotated[
        dict[str, object], Meta(description="coordinates, `first_stage`, `last_stage`, `embedding_group`")
    ]
    agrees: Annotated[bool, Meta(description="megatron's placement agrees with the expected one")]
    mismatches: Annotated[list[str], Meta(description="where they differ")]
    parameters: Annotated[int | None, Meta(description="parameters of the rank's model chunks (MODEL_BUILT)")]
    counts: Annotated[
        dict[str, dict[str, int]],
        Meta(
            description="per state entered: `process_groups` created, `collectives` issued, counted by wrapping "
            "`torch.distributed`'s functions, and `store_ops` made on the store given to `init_process_group`: 0 "
            "on the fake backend, whose groups never touch the store, see "
            "[observability.md](observability.md#simulated-ranks)"
        ),
    ]
