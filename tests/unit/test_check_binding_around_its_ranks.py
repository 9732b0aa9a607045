"""`lifecycle check-binding` around its ranks (each test kills mutants of
`lifecycle/cli/check_binding.py` that the input tests let through): the binder each `--binder`
names, and the exit status and lines printed for what the ranks report (the ranks themselves are
tests/integration/test_check_binding*.py's, ~1 min: `run_ranks` stands in for them here)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lifecycle.cli import main
from lifecycle.cli.check_binding import binder, binder_problem, bridge_binding, megatron_lm_binding
from lifecycle.errors import RankFailed


def test_each_binder_name_gives_its_binding_and_a_module_function_is_imported() -> None:
    assert binder("megatron-lm") is megatron_lm_binding
    assert binder("bridge") is bridge_binding
    assert binder("json:dumps") is json.dumps


def test_a_known_binder_whose_package_is_not_installed_is_refused_saying_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    lm, bridge = binder_problem("megatron-lm"), binder_problem("bridge")
    assert lm is not None and "megatron.training" in lm and "megatron-core >= 0.17" in lm
    assert bridge is not None and "megatron.bridge" in bridge and "pip install megatron-bridge" in bridge
    assert binder_problem("lifecycle") is None


def _ranks(monkeypatch: pytest.MonkeyPatch, outcome: Any) -> list[tuple[Any, ...]]:
    """run_ranks answering `outcome` (a list of the ranks' results, or an exception to raise)."""
    import lifecycle.launchers.local as launch

    calls: list[tuple[Any, ...]] = []

    def run_ranks(target: Any, nproc: int, *args: Any, timeout_s: float) -> Any:
        calls.append((nproc, *args[1:], timeout_s))
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(launch, "run_ranks", run_ranks)
    return calls


def test_every_rank_ok_exits_0_printing_each_ranks_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _ranks(monkeypatch, [{"verdict": "ok", "text": "all bound"}, {"verdict": "ok", "text": "fine"}])
    assert main(["check-binding", "--provider", "gpt", "--settings", "--set", "startup.timeout_s=10"]) == 0
    assert capsys.readouterr().out.splitlines() == ["rank 0: all bound", "rank 1: fine"]
    assert calls == [(2, "gpt", "lifecycle", True, 300.0 + 8 * 10)]  # 2 ranks; the stages bounded, and more


def test_one_rank_not_ok_exits_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _ranks(monkeypatch, [{"verdict": "ok", "text": "a"}, {"verdict": "not-landed", "text": "b"}])
    assert main(["check-binding", "--provider", "gpt"]) == 1


def test_a_failed_rank_exits_1_with_each_ranks_error_on_one_line_and_no_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    errors = {1: "RuntimeError: store at http://u:pw-SECRET-9@h:1 gone", 0: "killed"}
    _ranks(monkeypatch, RankFailed("2 ranks failed", errors=errors))
    assert main(["check-binding", "--provider", "gpt"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[1] for line in err] == [" rank 0 failed", " rank 1 failed"]
    assert "SECRET-9" not in "\n".join(err) and "gone" in err[1]


def test_ctrl_c_during_the_ranks_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    _ranks(monkeypatch, KeyboardInterrupt())
    assert main(["check-binding", "--provider", "gpt"]) == 130


def test_a_repeated_override_is_refused_before_any_rank_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _ranks(monkeypatch, [])
    argv = ["check-binding", "--provider", "gpt", "--set", "ddp.overlap_grad_reduce=true"]
    assert main([*argv, "--set", "ddp.overlap_grad_reduce=false"]) == 2
    assert calls == [] and capsys.readouterr().err.startswith("lifecycle check-binding: ")
