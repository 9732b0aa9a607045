"""What the startup imports: the null tokenizer pulls in neither transformers nor megatron, a
HuggingFace tokenizer without transformers names the `hf` extra, and the audit shows the heavy
imports as their own row instead of inside the state that waited for them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle import ExtraNotInstalled, ImportHung, LifecycleError
from lifecycle.audit import audit, blame
from lifecycle.core_entry import compat, services_ready
from lifecycle.testing import TokenizerConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.audit import ChainWriter

ROOT = Path(__file__).resolve().parents[2]

SERVICES_ON_THE_NULL_PATH = """
import sys
from lifecycle import RunConfig
from lifecycle.core_entry import compat, services_ready
from states import Plan, Trigger
from tests.phase_context import RecordingContext
config = RunConfig.preset("tiny-gpt", ["plan=convert"])
ctx = RecordingContext.for_config(config, trigger=Trigger.START_SERVICES, plan=Plan.CONVERT)
runtime = services_ready.enter(ctx)
from lifecycle.core_entry.compat import null_tokenizer_eod_in_vocab
assert runtime.tokenizer.vocab_size == (1000 if null_tokenizer_eod_in_vocab() else 1001), runtime
assert runtime.vocab_size == 1024, runtime
print(sorted({m.split('.')[0] for m in sys.modules}))
"""


def test_services_with_the_null_tokenizer_import_neither_transformers_nor_torch_nor_megatron() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SERVICES_ON_THE_NULL_PATH], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert [m for m in loaded if m in ("transformers", "tokenizers", "torch", "megatron")] == []


def test_the_null_tokenizer_reads_ids_and_counts_the_end_of_document_id() -> None:
    tok = services_ready.build_tokenizer(TokenizerConfig(vocab_size=50))
    assert tok.tokenize("3 14 15") == [3, 14, 15] and tok.detokenize([3, 14, 15]) == "3 14 15"
    # megatron-core < 0.18: end-of-document is one id past the 50; from 0.18 it is the last of them
    assert (
        services_ready.NullTokenizer(50, eod_in_vocab=False).vocab_size,
        services_ready.NullTokenizer(50, eod_in_vocab=False).eod,
    ) == (51, 50)
    assert (
        services_ready.NullTokenizer(50, eod_in_vocab=True).vocab_size,
        services_ready.NullTokenizer(50, eod_in_vocab=True).eod,
    ) == (50, 49)
    assert tok.eod_in_vocab is compat.null_tokenizer_eod_in_vocab()


def test_a_huggingface_tokenizer_without_transformers_names_the_hf_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # what `import transformers` sees when not installed
    config = TokenizerConfig(type="huggingface", path="/some/tokenizer")
    with pytest.raises(ExtraNotInstalled, match=r"megatron-lifecycle\[hf\]") as caught:
        services_ready.build_tokenizer(config)
    assert caught.value.context["extra"] == "hf" and "tokenizer.type=null" in str(caught.value)


def test_an_import_that_never_finishes_fails_the_join_naming_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lifecycle.testing import ImportJob

    (tmp_path / "stuck_on_import.py").write_text("import time\ntime.sleep(2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    job = ImportJob.start(["json", "stuck_on_import"])
    with pytest.raises(ImportHung, match="still importing 'stuck_on_import'") as caught:
        job.join(timeout_s=0.2)
    assert (caught.value.module, caught.value.timeout_s) == ("stuck_on_import", 0.2)
    assert isinstance(caught.value, LifecycleError)
    report = job.join()  # it does finish: the second join reports it
    assert set(report.modules) == {"json", "stuck_on_import"} and report.modules["stuck_on_import"] >= 1.5


def _startup_with_imports(w: ChainWriter, t: float, *, imports_s: float, waited_s: float, validate_s: float) -> None:
    w.emit(
        t, "lifecycle_started", plan="convert", target="SERVICES_READY", policy="raise", pid=1, host="h", rehearsal=None
    )
    w.emit(t, "transition_started", trigger="validate", source="CONFIGURED")
    w.emit(t + validate_s, "config_validated", fingerprint="f" * 64, config={}, environment=True)
    w.emit(
        t + waited_s + validate_s,
        "imports",
        modules={"torch": 1.0, "megatron": imports_s - 1.0},
        started_ts=t,
        duration_s=imports_s,
        waited_s=waited_s,
        failed={},
    )
    end = t + waited_s + validate_s
    w.emit(
        end,
        "transition_completed",
        trigger="validate",
        source="CONFIGURED",
        dest="VALIDATED",
        duration_s=end - t,
        config_fingerprint=None,
    )
    w.emit(end, "transition_started", trigger="start_services", source="VALIDATED")
    w.emit(end + 0.02, "services_ready", tokenizer="NullTokenizer", vocab_size=1024, vocab_source="tokenizer")
    w.emit(
        end + 0.02,
        "transition_completed",
        trigger="start_services",
        source="VALIDATED",
        dest="SERVICES_READY",
        duration_s=0.02,
        config_fingerprint="f" * 64,
    )


def test_blame_shows_the_imports_as_their_own_row_and_validated_without_the_wait(tmp_path: Path) -> None:
    for rank in range(2):
        w = ChainWriter("run-i", rank, 2)
        _startup_with_imports(w, 1.7e9, imports_s=6.0 + rank, waited_s=5.9 + rank, validate_s=0.1)
        (tmp_path / f"rank-{rank:05d}.jsonl").write_bytes(b"".join(w.lines))
    result = audit([str(tmp_path)], jobs=1)
    rows = {b.state: b for b in blame(result.ranks)}
    assert rows["imports"].max == pytest.approx(7.0) and rows["imports"].slowest_rank == 1
    assert rows["VALIDATED"].max == pytest.approx(0.1)
    assert rows["SERVICES_READY"].max == pytest.approx(0.02)
    assert blame(result.ranks)[0].state == "imports"


def test_the_plot_draws_the_imports_as_their_own_row(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from lifecycle.cli import main

    for rank in range(3):
        w = ChainWriter("run-i", rank, 3)
        _startup_with_imports(w, 1.7e9, imports_s=6.0, waited_s=5.9, validate_s=0.1)
        (tmp_path / f"rank-{rank:05d}.jsonl").write_bytes(b"".join(w.lines))
    out = tmp_path / "startup.svg"
    assert main(["plot", str(tmp_path), "-o", str(out), "--max-ranks", "2"]) == 0
    svg = out.read_text()
    assert "imports (3 ranks)" in svg and "VALIDATED (3 ranks)" in svg


def test_an_imports_record_without_numbers_is_unreadable(tmp_path: Path) -> None:
    w = ChainWriter("run-i", 0, 1)
    w.emit(1.7e9, "imports", modules={}, started_ts="soon", duration_s=1.0, waited_s=0.0, failed={})
    (tmp_path / "rank-00000.jsonl").write_bytes(b"".join(w.lines))
    result = audit([str(tmp_path)], jobs=1)
    assert any("'started_ts'" in str(e) for e in result.errors), result.errors
