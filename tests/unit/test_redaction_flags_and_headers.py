"""A command line's secret options (`--password X`, `--password=X`, `--hf-auth X`) and credential headers whatever
their scheme (`Cookie:`, `Set-Cookie:`, `Authorization: Digest`, as a header line or a mapping's text) are redacted by
the one function, in the startup log, in the error handed back, and when the command-line parser echoes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifecycle import InProcessPhases, Lifecycle, PhaseFailed, RunConfig, Work
from lifecycle.cli import main
from lifecycle.redaction import redact_text
from lifecycle.testing import REDACTED
from states import State

# text holding a credential -> the credential
SAMPLES = {
    "python train.py --password fl4gP4ss --lr 1": "fl4gP4ss",
    "python train.py --password=fl4gEqu4l --lr 1": "fl4gEqu4l",
    "launch --hf-auth fl4gAuth --nproc 2": "fl4gAuth",
    "request failed, sent Cookie: theme=dark; session=c00k1eS3ss": "c00k1eS3ss",
    "headers {'Cookie': 'session=qu0t3dS3ss', 'Host': 'h'}": "qu0t3dS3ss",
    'response {"Set-Cookie":"sid=js0nS1d; Path=/"}': "js0nS1d",
    'sent Authorization: Digest username="u", response="d1g3stR3sp"': "d1g3stR3sp",
}


def assert_clean(out: str, secret: str) -> None:
    assert secret not in out and REDACTED in out, out


@pytest.mark.parametrize("sample", SAMPLES)
def test_the_one_function_redacts_it_and_keeps_the_rest(sample: str) -> None:
    out = redact_text(sample)
    assert_clean(out, SAMPLES[sample])
    assert out.split()[0] == sample.split()[0]


@pytest.mark.parametrize("sample", SAMPLES)
def test_the_log_and_the_error_handed_back_are_redacted(tmp_path: Path, sample: str) -> None:
    phases = InProcessPhases()

    def leak(_ctx: Any) -> Any:
        raise RuntimeError(sample)

    phases.register(State.DISTRIBUTED, Work(leak))
    lc = Lifecycle(RunConfig(), log_dir=tmp_path, phases=phases, tripwires="off", run_id="leaky")
    with pytest.raises(PhaseFailed) as info:
        lc.advance_to(State.DISTRIBUTED)
    lc.shutdown()
    assert_clean((tmp_path / "rank-00000.jsonl").read_text(), SAMPLES[sample])
    assert_clean(str(info.value), SAMPLES[sample])


@pytest.mark.parametrize("sample", SAMPLES)
def test_the_command_line_parser_echoes_it_redacted(sample: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["audit", "logs", "--format", sample])
    assert stop.value.code == 2
    assert_clean(capsys.readouterr().err, SAMPLES[sample])
