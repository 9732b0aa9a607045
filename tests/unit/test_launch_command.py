"""The torchrun command `lifecycle run` launches: multi-node options pass through, launch-only
options stay out of the ranks' command line, one run id for every rank."""

from __future__ import annotations

import sys

import pytest

from lifecycle.cli import build_parser, launch_env, launch_world_size, torchrun_command, wants_launch


def parse(*argv: str) -> object:
    args = build_parser().parse_args(list(argv))
    args.argv = list(argv)
    return args


def test_a_local_launch_uses_a_loopback_rendezvous_and_drops_nproc_from_the_ranks() -> None:
    args = parse("run", "--nproc", "2", "--steps", "3", "--set", "parallel.tp=2")
    cmd = torchrun_command(args, 29555)  # type: ignore[arg-type]
    assert cmd[:4] == [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    assert "--master-addr=127.0.0.1" in cmd and "--master-port=29555" in cmd
    assert cmd[cmd.index("lifecycle") :] == ["lifecycle", "run", "--steps", "3", "--set", "parallel.tp=2"]


def test_torchruns_multi_node_options_pass_through_and_stay_out_of_the_ranks_argv() -> None:
    args = parse(
        "run",
        "--nproc=4",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--rdzv-endpoint",
        "node0:29400",
        "--rdzv-backend=c10d",
        "--rdzv-id",
        "job7",
        "--max-restarts",
        "3",
        "--steps",
        "1",
    )
    cmd = torchrun_command(args, None)  # type: ignore[arg-type]
    launcher = cmd[: cmd.index("-m", 3)]
    assert launcher[3:] == [
        "--nproc-per-node=4",
        "--nnodes=2",
        "--node-rank=1",
        "--rdzv-endpoint=node0:29400",
        "--rdzv-backend=c10d",
        "--rdzv-id=job7",
        "--max-restarts=3",
    ]
    assert not any(a.startswith("--master") for a in cmd)
    assert cmd[cmd.index("lifecycle") :] == ["lifecycle", "run", "--steps", "1"]
    assert launch_world_size(args) == 8  # type: ignore[arg-type]


def test_an_elastic_node_range_has_no_fixed_world_size() -> None:
    args = parse("run", "--nproc", "2", "--nnodes", "1:4", "--rdzv-endpoint", "h:1")
    assert launch_world_size(args) is None  # type: ignore[arg-type]


def test_every_rank_shares_one_run_id_the_rendezvous_id_where_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIFECYCLE_RUN_ID", raising=False)
    assert launch_env(parse("run", "--nproc", "2", "--rdzv-id", "job7"))["LIFECYCLE_RUN_ID"] == "job7"  # type: ignore[arg-type]
    assert len(launch_env(parse("run", "--nproc", "2"))["LIFECYCLE_RUN_ID"]) == 12  # type: ignore[arg-type]
    many = launch_env(parse("run", "--nnodes", "2", "--rdzv-endpoint", "h:1"))  # type: ignore[arg-type]
    assert "LIFECYCLE_RUN_ID" not in many  # each node's ranks derive it from the shared rendezvous


def test_a_rank_inside_a_launch_never_launches_again(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse("run", "--nproc", "2")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert wants_launch(args)  # type: ignore[arg-type]
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert not wants_launch(args)  # type: ignore[arg-type]
