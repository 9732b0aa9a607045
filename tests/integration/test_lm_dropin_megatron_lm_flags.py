"""Megatron-LM flags whose work lives in `pretrain` and `initialize_megatron` rather than in the code
the drop-in runs as is: the drop-in does that work as Megatron-LM does (`--logging-level`,
`--log-progress`; `--batch-invariant-mode` needs flash attention, a GPU's), or refuses the flag at VALIDATED, naming it
(`--enable-ft-package`, `--use-persistent-ckpt-worker`); it never trains without it in silence.
One rank in the test process, beside Megatron-LM's own `pretrain` of the same script."""

from __future__ import annotations

import contextlib
import io
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

import torch.distributed as dist

from lifecycle.errors import ConfigError
from lifecycle.lm_dropin import pretrain
from lifecycle.testing import cuda_as_cpu
from tests.integration.test_lm_dropin_pretrains_a_tiny_gpt_in_one_process import STEPS, _records, one_rank, script


@contextlib.contextmanager
def root_level_restored() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    try:
        yield
    finally:
        root.setLevel(level)


def _run(which: str, tmp: Path) -> dict[str, Any]:
    """The script with `--logging-level 10 --log-progress`: what each flag left."""
    save = tmp / f"saved-{which}"
    argv = [
        *STEPS,
        "--logging-level",
        "10",
        "--log-progress",
        "--save",
        str(save),
        "--save-interval",
        "1000",
    ]
    with one_rank(), root_level_restored():
        with contextlib.redirect_stdout(io.StringIO()):
            if which == "megatron":
                from megatron.training import pretrain as megatrons

                with cuda_as_cpu():
                    script.main(pretrain=megatrons, extra_argv=argv)
            else:
                script.main(pretrain=lambda *a: pretrain(*a, log_dir=tmp / "log"), extra_argv=argv)
        level = logging.getLogger().level
    progress = (save / "progress.txt").read_text().splitlines()
    return {"level": level, "progress": [line.split("\t")[-1] for line in progress]}


@pytest.fixture(scope="module")
def flagged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return {which: _run(which, tmp_path_factory.mktemp(which)) for which in ("dropin", "megatron")}


def test_logging_level_sets_the_root_loggers_level_as_megatron_lm_does(flagged: dict[str, dict[str, Any]]) -> None:
    assert flagged["dropin"]["level"] == flagged["megatron"]["level"] == logging.DEBUG


def test_log_progress_writes_megatron_lms_progress_lines_in_its_order(flagged: dict[str, dict[str, Any]]) -> None:
    def shape(lines: list[str]) -> list[str]:  # times and throughputs differ from run to run
        return [re.sub(r"[0-9.]+", "N", line) for line in lines]

    assert flagged["dropin"]["progress"][0] == "Starting job"
    assert shape(flagged["dropin"]["progress"]) == shape(flagged["megatron"]["progress"])


def test_flags_whose_work_the_drop_in_does_not_do_are_refused_at_validated_naming_each(tmp_path: Path) -> None:
    argv = [*STEPS, "--enable-ft-package", "--use-persistent-ckpt-worker"]
    with one_rank():
        with pytest.raises(ConfigError) as refused:
            script.main(pretrain=lambda *a: pretrain(*a, log_dir=tmp_path), extra_argv=argv)
        assert not dist.is_initialized()

    text = str(refused.value)
    assert "--enable-ft-package asks for nvidia-resiliency-ext's fault tolerance hooks" in text
    assert "--use-persistent-ckpt-worker asks for Megatron-LM's persistent checkpoint worker" in text
    assert "drop --enable-ft-package, or call megatron.training.pretrain" in text
    failed = [r["dest"] for r in _records(tmp_path) if r["event"] == "transition_completed"]
    assert failed == ["FAILED", "SHUT_DOWN"]
