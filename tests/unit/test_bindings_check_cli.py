"""`lifecycle check-binding`'s input: a bad `--binder` or `--provider` is one line and exit 2,
before any rank starts (the runs themselves: tests/integration/test_check_binding_cli.py)."""

from __future__ import annotations

import pytest

from lifecycle.cli import main
from lifecycle.cli.check_binding import binder_problem


@pytest.mark.parametrize("spec", ["nonsense", "mod:", ":fn", "megatron_lm"])
def test_a_binder_that_is_neither_a_known_one_nor_module_function_is_refused(
    spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-binding", "--provider", "gpt", "--binder", spec]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--binder {spec!r}" in err[0] and "package.module:function" in err[0]


def test_known_binders_and_module_functions_pass_the_input_check() -> None:
    assert binder_problem("lifecycle") is None
    assert binder_problem("tests.integration.foreign_binders:bridge") is None


def test_a_bad_provider_is_refused_before_any_rank_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-binding", "--provider", "no-such-provider"]) == 2
    assert "lifecycle check-binding:" in capsys.readouterr().err


def test_a_bad_override_is_refused_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-binding", "--provider", "gpt", "--set", "ddp.no_such_field=1"]) == 2
    assert "no_such_field" in capsys.readouterr().err


def test_the_provider_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check-binding"])
    assert info.value.code == 2 and "--provider" in capsys.readouterr().err
