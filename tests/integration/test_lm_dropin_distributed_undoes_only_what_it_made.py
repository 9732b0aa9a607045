"""The drop-in's DISTRIBUTED, failing on a world of one rank in the test process (gloo, no rank
launched), undoes what it made and only that: a rerun state machine the script made stays the
script's, and CPU stand-ins that cannot be installed leave no rehearsal behind. Each run fails
before the model is built (a few seconds each after megatron's import)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

import megatron.core.datasets
import torch
import torch.distributed as dist
from megatron.core import mpu, rerun_state_machine

from lifecycle.errors import PhaseFailed
from tests.integration.megatron_lm_cases import lifecycle_resources
from tests.integration.test_lm_dropin_pretrains_a_tiny_gpt_in_one_process import (
    _container_of_derived_arguments,
    _events,
    _pretrain_container,
    _records,
    one_rank,
)


def test_a_rerun_state_machine_the_script_made_is_refused_as_megatron_refuses_it_and_stays_the_scripts(
    tmp_path: Path,
) -> None:
    with one_rank():
        rerun_state_machine.initialize_rerun_state_machine()  # e.g. a get_rerun_state_machine() before pretrain
        scripts = rerun_state_machine._GLOBAL_RERUN_STATE_MACHINE
        with pytest.raises(PhaseFailed) as failed:
            _pretrain_container(_container_of_derived_arguments(), tmp_path)
        kept = rerun_state_machine._GLOBAL_RERUN_STATE_MACHINE is scripts
        left = (dist.is_initialized(), mpu.model_parallel_is_initialized(), lifecycle_resources()["rehearsal"])
    assert "init_distributed failed in SERVICES_READY: AssertionError: Rerun state machine is already" in str(
        failed.value
    )
    assert kept, "the script's rerun state machine was destroyed by the drop-in's failed DISTRIBUTED"
    assert left == (False, False, False)  # what DISTRIBUTED itself made is undone
    (failure,) = _events(_records(tmp_path), "transition_failed")
    assert failure["trigger"] == "init_distributed"


def test_cpu_stand_ins_that_cannot_be_installed_fail_distributed_and_leave_no_rehearsal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A megatron-core whose dataset utilities cannot be imported: the stand-in for their build
    function cannot be installed, after the rehearsal started; the rehearsal is closed with it."""
    with one_rank():
        container = _container_of_derived_arguments()
        monkeypatch.delattr(megatron.core.datasets, "utils")
        monkeypatch.setitem(sys.modules, "megatron.core.datasets.utils", None)
        with pytest.raises(PhaseFailed) as failed:
            _pretrain_container(container, tmp_path)
        monkeypatch.undo()
        own = lifecycle_resources()
        initialized = dist.is_initialized()
    assert "init_distributed failed in SERVICES_READY: ModuleNotFoundError: import of megatron.core.datasets" in str(
        failed.value
    )
    assert own == {"threads": [], "rehearsal": False, "cuda_available": False, "wrapped": []}
    assert not initialized and not torch.cuda.is_available()
