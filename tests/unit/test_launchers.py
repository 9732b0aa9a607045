"""The launcher seam: each launcher maps its own variables onto torchrun's, the innermost launcher is
asked first, what is set wins, and a new launcher is one class."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from lifecycle import RunConfig, launchers
from lifecycle.errors import ConfigError, DistributedError
from lifecycle.launchers import Slurm, port_for
from lifecycle.rankwatch import checked
from lifecycle.runtime import adopt_launcher_identity
from lifecycle.testing import (
    IDENTITY_VARIABLES,
    PORT_BASE,
    PORT_SPAN,
    Launcher,
    OpenMPI,
    Torchrun,
    implied_identity,
    launcher_run_id,
    rank_of,
    run_id_from_env,
    unknown_identity,
    world_size_of,
)

# What Open MPI 4.1 sets in rank 3 of `mpirun -n 4` on one node.
MPIRUN = {
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "3",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    "OMPI_MCA_ess_base_jobid": "3487367169",
}
SRUN = {
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_LOCALID": "0",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_JOB_ID": "55",
}


def test_the_launchers_are_asked_innermost_first() -> None:
    assert [type(x) for x in launchers.LAUNCHERS] == [Torchrun, OpenMPI, Slurm]


def test_an_mpirun_rank_on_one_node_maps_to_torchruns_identity_with_a_derived_rendezvous() -> None:
    assert implied_identity(MPIRUN) == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "3",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port_for("3487367169")),
    }


def test_mpirun_across_nodes_needs_master_addr_given_and_open_mpi_5_derives_the_port_from_its_namespace() -> None:
    across = {**MPIRUN, "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    assert "MASTER_ADDR" not in implied_identity(across)
    assert implied_identity({**across, "MASTER_ADDR": "node0"}).keys() == {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_PORT",
    }
    five = {k: v for k, v in MPIRUN.items() if k != "OMPI_MCA_ess_base_jobid"} | {"PMIX_NAMESPACE": "prterun-a-17@1"}
    port = int(implied_identity(five)["MASTER_PORT"])
    assert port == port_for("prterun-a-17@1")
    assert PORT_BASE <= port < PORT_BASE + PORT_SPAN
    assert port != port_for("prterun-a-18@1")  # another job, another port (for these two)


def test_variables_already_set_win_and_an_inner_launcher_owns_the_identity() -> None:
    assert implied_identity({**MPIRUN, "MASTER_PORT": "29500"}).get("MASTER_PORT") is None
    assert implied_identity({**MPIRUN, "RANK": "0", "WORLD_SIZE": "1"}) == {}  # torchrun inside mpirun
    assert implied_identity({**SRUN, **MPIRUN})["RANK"] == "3"  # mpirun inside a SLURM allocation
    assert implied_identity(SRUN)["RANK"] == "1" and implied_identity({}) == {}


def test_an_mpirun_rank_that_never_adopted_its_identity_is_refused_naming_the_fix() -> None:
    assert unknown_identity(MPIRUN) is not None
    assert "Open MPI rank 3 of 4" in (unknown_identity(MPIRUN) or "")
    assert "adopt_launcher_identity()" in (unknown_identity(MPIRUN) or "")
    assert unknown_identity({**MPIRUN, "OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}) is None  # -n 1
    assert "OMPI_COMM_WORLD_RANK=3 say several" in (unknown_identity({"OMPI_COMM_WORLD_RANK": "3"}) or "")
    assert unknown_identity({}) is None


def test_adopting_under_mpirun_gives_rank_world_size_and_one_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        *IDENTITY_VARIABLES,
        "LIFECYCLE_RUN_ID",
        "TORCHELASTIC_RUN_ID",
        "SLURM_PROCID",
        "SLURM_JOB_ID",
        "PMIX_NAMESPACE",
    ):
        monkeypatch.setenv(name, "")  # recorded, so what adopting sets is undone after the test
        monkeypatch.delenv(name)
    for name, value in MPIRUN.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match="Open MPI rank 3 of 4"):
        world_size_of(RunConfig())
    assert adopt_launcher_identity()["RANK"] == "3"
    assert (rank_of(RunConfig()), world_size_of(RunConfig())) == (3, 4)
    assert run_id_from_env() == "ompi-3487367169"
    assert adopt_launcher_identity() == {}  # adopted once: nothing left to set


class Acme(Launcher):
    """A launcher the project does not ship, added the documented way (docs/extending.md)."""

    name, task, rank_variable, size_variable = "acme run", "Acme task", "ACME_TASK_RANK", "ACME_JOB_SIZE"
    evidence = ("ACME_TASK_RANK",)

    def implied(self, environ: Mapping[str, str]) -> dict[str, str]:
        return {"RANK": environ["ACME_TASK_RANK"], "WORLD_SIZE": environ.get("ACME_JOB_SIZE", "1")}

    def run_id(self, environ: Mapping[str, str]) -> str | None:
        return f"acme-{environ['ACME_JOB_ID']}" if "ACME_JOB_ID" in environ else None


def test_a_new_launcher_is_one_class_in_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    acme = {"ACME_TASK_RANK": "1", "ACME_JOB_SIZE": "2", "ACME_JOB_ID": "a7"}
    assert implied_identity(acme) == {}
    monkeypatch.setattr(launchers, "LAUNCHERS", (*launchers.LAUNCHERS, Acme()))
    assert implied_identity(acme) == {"RANK": "1", "WORLD_SIZE": "2"}
    assert launcher_run_id(acme) == "acme-a7"
    assert "Acme task 1 of 2" in (unknown_identity(acme) or "")
    assert "ACME_JOB_SIZE (acme run does)" in (unknown_identity({"ACME_TASK_RANK": "1"}) or "")
    with pytest.raises(DistributedError, match="ACME_JOB_SIZE=4"):  # the one-world check asks it too
        checked(0, 2, 0, {"ACME_TASK_RANK": "1", "ACME_JOB_SIZE": "4", "RANK": "1"})


def test_torchruns_own_variables_read_from_a_given_environment_or_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from lifecycle.launchers import restart_count
    from lifecycle.testing import agent_store, inside_torchrun, rendezvous

    assert restart_count({"TORCHELASTIC_RESTART_COUNT": "2"}) == 2
    assert restart_count({"TORCHELASTIC_RESTART_COUNT": "x"}) is None and restart_count({}) is None
    assert agent_store({"TORCHELASTIC_USE_AGENT_STORE": "True"}) is True
    assert agent_store({"TORCHELASTIC_USE_AGENT_STORE": "False"}) is False and agent_store({}) is False
    assert inside_torchrun({"LOCAL_RANK": "0"}) and inside_torchrun({"TORCHELASTIC_RUN_ID": "r"})
    assert not inside_torchrun({"RANK": "0"})
    assert rendezvous({}) is None and rendezvous({"MASTER_ADDR": "h", "MASTER_PORT": "29500"}) == ("h", 29500)
    for name in ("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "3")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r")
    assert restart_count() == 3 and agent_store() is True and inside_torchrun() is True
