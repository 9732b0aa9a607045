"""Who a process is in the job: SLURM's variables mapped onto torchrun's, never over what is set;
an identity that cannot be known is refused, not guessed."""

from __future__ import annotations

import pytest

from lifecycle import RunConfig
from lifecycle.errors import ConfigError
from lifecycle.testing import expand_nodelist, run_id_from_env, slurm_identity_env, world_size_of

SRUN = {
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "1",
    "SLURM_JOB_NODELIST": "gpu[07-08,11],cpu1",
    "SLURM_JOB_ID": "123456",
}


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node01", ["node01"]),
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("a[1-2],b3,c[9-10]", ["a1", "a2", "b3", "c9", "c10"]),
        ("rack[1-2]-n[1,3]", ["rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"]),
    ],
)
def test_slurm_host_lists_expand_like_scontrol_show_hostnames(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("nodelist", ["node[01-", "node]1[", "node[a-b]", ""])
def test_a_malformed_host_list_is_refused_naming_the_variable(nodelist: str) -> None:
    with pytest.raises(ConfigError, match="SLURM_JOB_NODELIST=.*set MASTER_ADDR"):
        expand_nodelist(nodelist)


def test_an_srun_task_maps_to_rank_world_local_rank_and_a_rendezvous_on_the_first_host() -> None:
    env = slurm_identity_env(SRUN)
    assert env == {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "gpu07",
        "MASTER_PORT": str(20000 + 123456 % 20000),
    }


def test_variables_already_set_win_over_slurms() -> None:
    env = slurm_identity_env({**SRUN, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"})
    assert "MASTER_ADDR" not in env and "MASTER_PORT" not in env and env["RANK"] == "5"
    assert slurm_identity_env({**SRUN, "RANK": "0", "WORLD_SIZE": "4"}) == {}  # torchrun inside srun


def test_several_processes_without_a_world_size_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    assert world_size_of(RunConfig()) == 1
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match="RANK=1 say several processes, but no world size"):
        world_size_of(RunConfig())
    assert world_size_of(RunConfig.from_dict({"parallel": {"world_size": 2}})) == 2
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    with pytest.raises(ConfigError, match="SLURM task 1 of 2 .*adopt_launcher_identity"):
        world_size_of(RunConfig())


def test_every_task_of_a_slurm_step_shares_one_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LIFECYCLE_RUN_ID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_STEP_ID", "2")
    assert run_id_from_env() == "slurm-77.2"
