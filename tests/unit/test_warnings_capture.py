"""Library warnings go to the startup log as `warning` records, never to the console one by one (rank 0
prints one closing line), are listed by the audit, and the process's warning machinery is restored at
shutdown."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lifecycle.audit import audit
from lifecycle.log import events
from lifecycle.testing import as_json as audit_json
from states import State


def _megatron_warns_twice() -> None:
    for _ in range(2):
        warnings.warn("MimoModelConfig is experimental", UserWarning, stacklevel=1)
        logging.getLogger("megatron.core.models.gpt.gpt_model").warning(
            "GPTModel IS DEPRECATED (token hf_abcdefghijklmnopqrstuvwxyz123456)"
        )
        logging.getLogger("transitions.core").info("Entered state VALIDATED")


def test_library_warnings_are_logged_with_category_and_module_and_summed_up_in_one_line(
    make_lc: Callable[..., Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before = warnings.showwarning
    megatron = logging.getLogger("megatron")
    loggers_before = (megatron.propagate, list(megatron.handlers))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        lc = make_lc(log_dir=tmp_path / "logs")
        _megatron_warns_twice()
        lc.shutdown()
        assert warnings.showwarning is not None
    logged = [r for r in lc.records if r["event"] == events.WARNING]
    assert [(r["category"], r["module"]) for r in logged] == [
        ("UserWarning", __name__),
        ("logging.WARNING", "megatron.core.models.gpt.gpt_model"),
    ] * 2
    assert "hf_abcdefghij" not in str(logged)  # redacted before it is written
    err = capsys.readouterr().err
    assert "MimoModelConfig" not in err and "DEPRECATED" not in err and "Entered state" not in err
    assert err.splitlines() == [
        "lifecycle: 4 library warning(s), 2 distinct, are in the startup log as `warning` "
        "records: `lifecycle audit LOG_DIR` lists them."
    ]
    assert warnings.showwarning is before
    assert (megatron.propagate, megatron.handlers) == loggers_before


def test_ranks_other_than_0_log_warnings_without_printing_them(
    make_lc: Callable[..., Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    before = warnings.showwarning
    megatron = logging.getLogger("megatron")
    loggers_before = (megatron.propagate, list(megatron.handlers))
    lc = make_lc()
    assert warnings.showwarning is not before and megatron.handlers != loggers_before[1], "captured"
    logging.getLogger("megatron.core.utils").warning("a rank-1 warning")
    assert [r["message"] for r in lc.records if r["event"] == events.WARNING] == ["a rank-1 warning"]
    lc.shutdown()
    assert capsys.readouterr().err == "", "neither the warning nor a closing line"
    assert warnings.showwarning is before and (megatron.propagate, megatron.handlers) == loggers_before


def test_the_audit_lists_the_warnings_the_ranks_logged(make_lc: Callable[..., Any], tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        lc = make_lc(log_dir=tmp_path / "logs")
        lc.advance_to(State.CALLBACKS_BOUND)
        _megatron_warns_twice()
        lc.shutdown()
    result = audit([tmp_path / "logs"])
    assert result.exit_code == 0, result.findings
    import orjson

    listed = orjson.loads(audit_json(result))["warnings"]
    assert [(w["category"], w["module"], w["ranks"]) for w in listed] == [
        ("UserWarning", __name__, [0]),
        ("logging.WARNING", "megatron.core.models.gpt.gpt_model", [0]),
    ]


def test_the_command_drops_library_warnings_outside_a_lifecycle_and_keeps_the_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from lifecycle.testing import quiet_library_loggers

    shown: list[str] = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kwargs: shown.append(str(message)))
    for name in ("megatron", "transitions", "torch.distributed.checkpoint", "torch.utils.cpp_extension"):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "propagate", logger.propagate)
        monkeypatch.setattr(logger, "handlers", list(logger.handlers))
    quiet_library_loggers()
    quiet_library_loggers()  # idempotent: one filter, not two
    root = next(p for p in sys.path if p.endswith("site-packages"))
    warnings.showwarning("pynvml is deprecated", FutureWarning, f"{root}/torch/cuda/__init__.py", 64)
    warnings.showwarning("my provider warns", UserWarning, "/home/me/my_provider.py", 3)
    assert shown == ["my provider warns"]
    assert not logging.getLogger("megatron").propagate
