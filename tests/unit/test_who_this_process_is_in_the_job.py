"""Who this process is in the job, decided through `lifecycle.runtime`'s public functions only: SLURM's
host lists, the variables a SLURM task implies, rank and world size from config or launcher, refusing
an identity that cannot be known, and the run id every rank agrees on. Pinned down for
scripts/mutation (`runtime.identity`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from lifecycle import RunConfig
from lifecycle.errors import ConfigError
from lifecycle.testing import (
    adopt_slurm_identity,
    expand_nodelist,
    new_run_id,
    rank_of,
    run_id_from_env,
    slurm_identity_env,
    world_size_of,
)
from lifecycle.testing import runtime_unknown_identity as unknown_identity

LAUNCHER_PREFIXES = ("SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_", "PMIX_", "FLUX_")
LAUNCHER_NAMES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LIFECYCLE_RUN_ID",
    "GROUP_RANK",
)


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No launcher variable; what a test's adopting writes into os.environ is undone after it."""
    saved = dict(os.environ)
    for name in list(os.environ):
        if name in LAUNCHER_NAMES or name.startswith(LAUNCHER_PREFIXES):
            monkeypatch.delenv(name)
    yield
    for name in set(os.environ) - set(saved):
        del os.environ[name]


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        (" a , b ,", ["a", "b"]),
        ("x[1-2]y", ["x1y", "x2y"]),
        ("x[3]", ["x3"]),
    ],
)
def test_host_lists_keep_zero_padding_include_the_range_end_and_ignore_blanks(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("nodelist", [",,", " ", "a[1-]", "a[x]", "a[1-x]", "a]b", "a[b", "a[1]]"])
def test_malformed_host_lists_are_refused(nodelist: str) -> None:
    with pytest.raises(ConfigError) as caught:
        expand_nodelist(nodelist)
    assert caught.value.field == "SLURM_JOB_NODELIST"  # type: ignore[attr-defined]


def test_outside_srun_or_under_a_launcher_that_set_rank_slurm_implies_nothing() -> None:
    assert slurm_identity_env({"SLURM_NTASKS": "4", "SLURM_JOB_ID": "9"}) == {}
    assert slurm_identity_env({"SLURM_PROCID": "1", "RANK": "1"}) == {}


def test_an_srun_task_with_few_variables_implies_only_what_they_give() -> None:
    assert slurm_identity_env({"SLURM_PROCID": "2"}) == {"RANK": "2"}
    assert slurm_identity_env({"SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "abc"}) == {
        "RANK": "2",
        "LOCAL_RANK": "0",
    }
    assert slurm_identity_env({"SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "", "SLURM_NODELIST": "b[2-3]"}) == {
        "RANK": "0",
        "MASTER_ADDR": "b2",
    }


@pytest.mark.parametrize(("job", "port"), [("0", 20000), ("19999", 39999), ("20000", 20000), ("20001", 20001)])
def test_every_task_of_a_job_derives_the_same_port_from_its_id(job: str, port: int) -> None:
    assert slurm_identity_env({"SLURM_PROCID": "0", "SLURM_JOB_ID": job})["MASTER_PORT"] == str(port)


def test_adopting_sets_only_the_variables_not_already_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert adopt_slurm_identity() == {"RANK": "3", "WORLD_SIZE": "4"}
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_PORT"]) == ("3", "4", "29500")
    assert adopt_slurm_identity() == {}  # RANK is set now: nothing more


def test_the_configs_rank_wins_even_when_it_is_0_then_the_launchers_then_0(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rank_of(RunConfig()) == 0
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert rank_of(RunConfig()) == 3
    assert rank_of(RunConfig.from_dict({"parallel": {"rank": 0, "world_size": 4}})) == 0
    assert rank_of(RunConfig.from_dict({"parallel": {"rank": 2, "world_size": 4}})) == 2


def test_the_world_size_comes_from_the_config_then_the_launcher_else_a_lone_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert world_size_of(RunConfig()) == 1
    monkeypatch.setenv("WORLD_SIZE", "6")
    monkeypatch.setenv("RANK", "0")
    assert world_size_of(RunConfig()) == 6
    assert world_size_of(RunConfig.from_dict({"parallel": {"world_size": 2}})) == 2


def test_an_unknowable_place_in_the_job_is_refused_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ConfigError, match="LOCAL_RANK=1 say several processes") as caught:
        world_size_of(RunConfig())
    assert caught.value.field == "parallel.world_size"  # type: ignore[attr-defined]


def test_an_srun_task_of_several_or_of_an_unreadable_count_must_adopt_slurms_identity_first() -> None:
    for ntasks in ("2", "x"):
        problem = unknown_identity({"SLURM_PROCID": "1", "SLURM_NTASKS": ntasks})
        assert problem is not None and "SLURM task 1 of" in problem
    one = unknown_identity({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert one is None or "SLURM task" not in one  # one task: nothing to adopt
    under_torchrun = unknown_identity({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "RANK": "1"})
    assert under_torchrun is None or "SLURM task" not in under_torchrun
    assert unknown_identity({}) is None


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"RANK": "1"}, "RANK=1 say several processes"),
        ({"LOCAL_RANK": "1"}, "LOCAL_RANK=1 say several processes"),
        ({"RANK": "1", "SLURM_PROCID": "1"}, "RANK=1, SLURM_PROCID=1 say several processes"),
    ],
)
def test_launcher_variables_without_a_world_size_say_several_processes(environ: dict[str, str], says: str) -> None:
    problem = unknown_identity(environ)
    assert problem is not None and says in problem


def test_the_run_id_is_lifecycles_then_torchruns_then_slurms_then_the_rendezvous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert run_id_from_env() == "localhost:29500"
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    assert run_id_from_env() == "10.0.0.1:29500"
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    assert run_id_from_env() == "10.0.0.1:29500"  # no SLURM_PROCID: not a task of that job
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert run_id_from_env() == "slurm-77.0"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default: not shared by anything
    assert run_id_from_env() == "slurm-77.0"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job5")
    assert run_id_from_env() == "job5"
    monkeypatch.setenv("LIFECYCLE_RUN_ID", "none")
    assert run_id_from_env() == "job5"
    monkeypatch.setenv("LIFECYCLE_RUN_ID", "mine")
    assert run_id_from_env() == "mine"


def test_a_lone_process_gets_a_fresh_run_id_each_time() -> None:
    first, second = run_id_from_env(), run_id_from_env()
    assert re.fullmatch(r"[0-9a-f]{12}", first) and first != second
    assert re.fullmatch(r"[0-9a-f]{12}", new_run_id())
