"""For tests: the Hypothesis fuzzer over the real engine, and the internals the project's own tests use.

    from lifecycle.testing import lifecycle_state_machine
    TestMine = lifecycle_state_machine(config=my_config, provider=my_provider).TestCase

The fuzzer (`lifecycle_state_machine`, `check_log`, ...) is shown in docs/fuzzing.md. Every other
name here is an internal of a package (a private module's name, or one a package re-exports only for
its sibling packages), gathered in this one module so that tests neither reach into `_private`
modules nor make the packages publish what only tests need. None of it carries a stability promise:
a name may change or go with the code it tests. What users import is each package's `__all__`
(docs/architecture.md, "The public surface"). The rank watch's private modules are reached for tests
of its decisions, one at a time and without a job: `_failure` (ranks in words), `_liveness` (host
keys, failure kinds, a gone process or store), `_ring` (the node leaders' ring), `_watched` (the work
under a deadline), `_board`, `_meeting` and `_sweep` (a node's directories and the sweep of those killed
ranks left); users meet them only through `RankWatch`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from bindings._bind import install, planned
from bindings._derivations import Derivation
from bindings._guard import FirstStepGuard
from bindings._protocol import SLOTS
from bindings._settings import Mismatch, Requested, SettingsReport, same_value
from bindings._settings import compare as compare_settings
from bindings._targets import settings_targets
from bindings._verdict import ConfigSeen
from bindings._watchdog import FIRST_STEP_FINALIZED, FIRST_STEP_NOT_FINALIZED, FirstStepWatchdog
from lifecycle.audit._audit import AuditResult, default_workers
from lifecycle.audit._cause import RootCause, Victim
from lifecycle.audit._cycles import attempts, diff
from lifecycle.audit._feed import RECORD_TYPES, decode_typed
from lifecycle.audit._handlers import HANDLERS
from lifecycle.audit._informational import INFORMATIONAL
from lifecycle.audit._launches import LaunchRead, read_launches
from lifecycle.audit._ordering import SHOWN_BY
from lifecycle.audit._rank import RankAudit
from lifecycle.audit._reads import READ_TYPES as AUDIT_READ_TYPES
from lifecycle.audit._reads import READS
from lifecycle.audit._records import Failure
from lifecycle.audit._render import as_json, text
from lifecycle.audit._rules import RuleId
from lifecycle.audit._verdict import VERSION as VERDICT_VERSION
from lifecycle.audit._verdict_follow import follow_verdict
from lifecycle.cli._launch import TorchrunReport
from lifecycle.cli._launch_record import ended_entry, launcher_path, run_id_of, write_launch_ended
from lifecycle.cli.verify_resume import _failed as verify_resume_failed
from lifecycle.config._bounds import LOCAL_PATHS
from lifecycle.config._checkpoints import LATEST, checkpoint_problem, iteration_dir, latest_step, partial_dir
from lifecycle.config._loading import preset_names
from lifecycle.config._normalize import Normalization
from lifecycle.config._records import DDPConfig, TokenizerConfig
from lifecycle.config._snapshot import Snapshot, flatten
from lifecycle.config._snapshot import diff as config_diff
from lifecycle.config._validation import check_names
from lifecycle.core_entry._hybrid import layer_pattern, local_stack_spec
from lifecycle.core_entry._imports import ImportJob
from lifecycle.engine._failures import SignalTrap, track
from lifecycle.engine._ledger import Ledger, LedgerEntry
from lifecycle.engine._machine import MachineModel, build_raw_machine
from lifecycle.engine._tripwires import patched_targets
from lifecycle.engine._warnings import quiet_library_loggers
from lifecycle.export._chrome import write_chrome
from lifecycle.export._details import read_details
from lifecycle.export._encode import encode
from lifecycle.export._follow import follow
from lifecycle.export._live import LiveSpans, live_spans
from lifecycle.export._otlp import ROOT, spans, write_otlp
from lifecycle.export._reads import READERS as EXPORT_READERS
from lifecycle.export._report import report_data, rules_url_problem, write_report
from lifecycle.export._rows import rows
from lifecycle.launchers import (
    expand_nodelist,
    implied_identity,
    launcher_run_id,
    rendezvous,
    torchrun_env,
    unknown_identity,
)
from lifecycle.launchers._base import IDENTITY_VARIABLES, PORT_BASE, PORT_SPAN, Launcher
from lifecycle.launchers._openmpi import OpenMPI
from lifecycle.launchers._torchrun import Torchrun, agent_store, inside_torchrun
from lifecycle.log._chain import line_hash_matches
from lifecycle.log._files import (
    ChainEnd,
    existing_policy_problem,
    first_run_id,
    inspect_log,
    other_run,
    own_file_problem,
    rank_file,
    removable_ranks,
)
from lifecycle.log._lock import LOCK_NAME
from lifecycle.log._redact import REDACTED, is_secret_key, redact, redact_text
from lifecycle.log._schema import fields_described, fields_of
from lifecycle.log._schema_base import ENVELOPE
from lifecycle.log._tail import Tail
from lifecycle.log._writer import fields_written
from lifecycle.log.schema import GENERATED_BEGIN, GENERATED_END
from lifecycle.rankwatch._board import Board, board_root
from lifecycle.rankwatch._failure import rank_list
from lifecycle.rankwatch._liveness import host_key, kind_of, owner, process_alive, store_closed
from lifecycle.rankwatch._meeting import Meeting
from lifecycle.rankwatch._ring import Ring
from lifecycle.rankwatch._sweep import JUDGE_MAX, LIST_MAX, sweep
from lifecycle.rankwatch._watched import ActiveWork
from lifecycle.redaction._shapes import SHAPES, may_hold_credentials
from lifecycle.resilience._call import cycle_and_store, injectable
from lifecycle.resilience._compat import installed_problem, megatron_nvrx_minimum, pair_problem
from lifecycle.resilience._nvrx import is_restart_abort, is_restart_request
from lifecycle.resilience._nvrx import wrap as restart_wrap
from lifecycle.resilience._restart import refuse_incompatible
from lifecycle.resilience._sockets import CycleSockets
from lifecycle.resume._counts import saved_counts
from lifecycle.resume.checkpoint import damaged_file, load_at_build, load_failure_reason, publish_save
from lifecycle.runtime._identity import (
    adopt_slurm_identity,
    new_run_id,
    rank_of,
    run_id_from_env,
    slurm_identity_env,
    world_size_of,
)
from lifecycle.runtime._identity import unknown_identity as runtime_unknown_identity
from lifecycle.runtime._phases import Entry
from lifecycle.simulate._counting import counting
from lifecycle.simulate._groups import count_groups
from lifecycle.simulate._plan import PlanConstants, PlanCounts, measure_import, measure_store_rtt_s, plan_text, predict
from lifecycle.simulate._simulation import simulate_rank, warm_up
from lifecycle.simulate._store import CountingStore
from lifecycle.testing._fuzz import (
    check_log,
    check_written_log,
    fire_and_check,
    leaked,
    lifecycle_state_machine,
    reachable_states,
    read_log,
    seed_and_check,
)
from states._guards import (
    Guard,
    config_is_validated,
    distributed_is_initialized,
    model_is_built,
    plan_allows_restart,
    plan_reaches_destination,
    services_are_ready,
)
from states._ordering import (
    BINDING_NEEDS_A_MODEL,
    DISTRIBUTED_NEEDS_SERVICES,
    MODEL_NEEDS_DISTRIBUTED,
    SIDE_EFFECTS_NEED_VALIDATION,
)
from states._table import allowed_triggers, find

if TYPE_CHECKING:  # lifecycle.lm_dropin refuses import below megatron-core 0.17: loaded when asked for
    from lifecycle.lm_dropin.driver import refuse_bad_arguments
    from lifecycle.lm_dropin.entry._bound_once import bound_once
    from lifecycle.lm_dropin.entry._bound_once import short as slot_value_text
    from lifecycle.lm_dropin.entry._call import MegatronLMCall
    from lifecycle.lm_dropin.entry._cuda import Patched, cuda_as_cpu
    from lifecycle.lm_dropin.entry._derive import disagreements, lost_in_args, run_config, run_config_from_yaml
    from lifecycle.lm_dropin.entry._handover import HandOver, releasing_distributed, releasing_services
    from lifecycle.lm_dropin.entry._providers import KeywordProvider
    from lifecycle.lm_dropin.entry._providers import problem as provider_problem
    from lifecycle.lm_dropin.entry._quiet import quiet_library_loggers as lm_dropin_quiet_library_loggers
    from lifecycle.lm_dropin.entry._resources import dropping_scheduler, release_globals, release_services
    from lifecycle.lm_dropin.entry._resources import resources as lm_dropin_resources

_MEGATRON_LM = {  # name: its module, or "module:name" where it is known by another name there
    "HandOver": "lifecycle.lm_dropin.entry._handover",
    "KeywordProvider": "lifecycle.lm_dropin.entry._providers",
    "MegatronLMCall": "lifecycle.lm_dropin.entry._call",
    "Patched": "lifecycle.lm_dropin.entry._cuda",
    "bound_once": "lifecycle.lm_dropin.entry._bound_once",
    "cuda_as_cpu": "lifecycle.lm_dropin.entry._cuda",
    "disagreements": "lifecycle.lm_dropin.entry._derive",
    "dropping_scheduler": "lifecycle.lm_dropin.entry._resources",
    "lost_in_args": "lifecycle.lm_dropin.entry._derive",
    "lm_dropin_quiet_library_loggers": "lifecycle.lm_dropin.entry._quiet:quiet_library_loggers",
    "lm_dropin_resources": "lifecycle.lm_dropin.entry._resources:resources",
    "provider_problem": "lifecycle.lm_dropin.entry._providers:problem",
    "refuse_bad_arguments": "lifecycle.lm_dropin.driver",
    "release_globals": "lifecycle.lm_dropin.entry._resources",
    "release_services": "lifecycle.lm_dropin.entry._resources",
    "releasing_distributed": "lifecycle.lm_dropin.entry._handover",
    "releasing_services": "lifecycle.lm_dropin.entry._handover",
    "run_config": "lifecycle.lm_dropin.entry._derive",
    "run_config_from_yaml": "lifecycle.lm_dropin.entry._derive",
    "slot_value_text": "lifecycle.lm_dropin.entry._bound_once:short",
}


def __getattr__(name: str) -> object:
    """The drop-in's internals, imported on first use (raises `ExtraNotInstalled` where it is absent)."""
    if name not in _MEGATRON_LM:
        raise AttributeError(f"module 'lifecycle.testing' has no attribute {name!r}")
    module, _, there = _MEGATRON_LM[name].partition(":")
    return getattr(importlib.import_module(module), there or name)


__all__ = [
    "AUDIT_READ_TYPES",
    "BINDING_NEEDS_A_MODEL",
    "DISTRIBUTED_NEEDS_SERVICES",
    "ENVELOPE",
    "EXPORT_READERS",
    "FIRST_STEP_FINALIZED",
    "FIRST_STEP_NOT_FINALIZED",
    "GENERATED_BEGIN",
    "GENERATED_END",
    "HANDLERS",
    "IDENTITY_VARIABLES",
    "INFORMATIONAL",
    "JUDGE_MAX",
    "LATEST",
    "LIST_MAX",
    "LOCAL_PATHS",
    "LOCK_NAME",
    "MODEL_NEEDS_DISTRIBUTED",
    "PORT_BASE",
    "PORT_SPAN",
    "READS",
    "RECORD_TYPES",
    "REDACTED",
    "ROOT",
    "SHAPES",
    "SHOWN_BY",
    "SIDE_EFFECTS_NEED_VALIDATION",
    "SLOTS",
    "VERDICT_VERSION",
    "ActiveWork",
    "AuditResult",
    "Board",
    "ChainEnd",
    "ConfigSeen",
    "CountingStore",
    "CycleSockets",
    "DDPConfig",
    "Derivation",
    "Entry",
    "Failure",
    "FirstStepGuard",
    "FirstStepWatchdog",
    "Guard",
    "HandOver",
    "ImportJob",
    "KeywordProvider",
    "LaunchRead",
    "Launcher",
    "Ledger",
    "LedgerEntry",
    "LiveSpans",
    "MachineModel",
    "Meeting",
    "MegatronLMCall",
    "Mismatch",
    "Normalization",
    "OpenMPI",
    "Patched",
    "PlanConstants",
    "PlanCounts",
    "RankAudit",
    "Requested",
    "Ring",
    "RootCause",
    "RuleId",
    "SettingsReport",
    "SignalTrap",
    "Snapshot",
    "Tail",
    "TokenizerConfig",
    "Torchrun",
    "TorchrunReport",
    "Victim",
    "adopt_slurm_identity",
    "agent_store",
    "allowed_triggers",
    "as_json",
    "attempts",
    "board_root",
    "bound_once",
    "build_raw_machine",
    "check_log",
    "check_names",
    "check_written_log",
    "checkpoint_problem",
    "compare_settings",
    "config_diff",
    "config_is_validated",
    "count_groups",
    "counting",
    "cuda_as_cpu",
    "cycle_and_store",
    "damaged_file",
    "decode_typed",
    "default_workers",
    "diff",
    "disagreements",
    "distributed_is_initialized",
    "dropping_scheduler",
    "encode",
    "ended_entry",
    "existing_policy_problem",
    "expand_nodelist",
    "fields_described",
    "fields_of",
    "fields_written",
    "find",
    "fire_and_check",
    "first_run_id",
    "flatten",
    "follow",
    "follow_verdict",
    "host_key",
    "implied_identity",
    "injectable",
    "inside_torchrun",
    "inspect_log",
    "install",
    "installed_problem",
    "is_restart_abort",
    "is_restart_request",
    "is_secret_key",
    "iteration_dir",
    "kind_of",
    "latest_step",
    "launcher_path",
    "launcher_run_id",
    "layer_pattern",
    "leaked",
    "lifecycle_state_machine",
    "line_hash_matches",
    "live_spans",
    "lm_dropin_quiet_library_loggers",
    "lm_dropin_resources",
    "load_at_build",
    "load_failure_reason",
    "local_stack_spec",
    "lost_in_args",
    "may_hold_credentials",
    "measure_import",
    "measure_store_rtt_s",
    "megatron_nvrx_minimum",
    "model_is_built",
    "new_run_id",
    "other_run",
    "own_file_problem",
    "owner",
    "pair_problem",
    "partial_dir",
    "patched_targets",
    "plan_allows_restart",
    "plan_reaches_destination",
    "plan_text",
    "planned",
    "predict",
    "preset_names",
    "process_alive",
    "provider_problem",
    "publish_save",
    "quiet_library_loggers",
    "rank_file",
    "rank_list",
    "rank_of",
    "reachable_states",
    "read_details",
    "read_launches",
    "read_log",
    "redact",
    "redact_text",
    "refuse_bad_arguments",
    "refuse_incompatible",
    "release_globals",
    "release_services",
    "releasing_distributed",
    "releasing_services",
    "removable_ranks",
    "rendezvous",
    "report_data",
    "restart_wrap",
    "rows",
    "rules_url_problem",
    "run_config",
    "run_config_from_yaml",
    "run_id_from_env",
    "run_id_of",
    "runtime_unknown_identity",
    "same_value",
    "saved_counts",
    "seed_and_check",
    "services_are_ready",
    "settings_targets",
    "simulate_rank",
    "slot_value_text",
    "slurm_identity_env",
    "spans",
    "store_closed",
    "sweep",
    "text",
    "torchrun_env",
    "track",
    "unknown_identity",
    "verify_resume_failed",
    "warm_up",
    "world_size_of",
    "write_chrome",
    "write_launch_ended",
    "write_otlp",
    "write_report",
]
