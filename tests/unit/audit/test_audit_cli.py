"""`lifecycle audit` as users run it: exit codes, JSON, --select/--ignore, stdin, blame and the
critical chain, parallel reading, and no torch or megatron import."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from audit_logs import clean_events, clean_run, engine_rank, write_events

from lifecycle.audit import audit
from lifecycle.cli import main
from states import State

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from benchmarks.audit import ChainWriter, rank_records, write_run  # noqa: E402


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight ranks from the benchmark's writer: rank 2 died, 4 was tampered, 6 bound the wrong
    target, 7 built its model 10x slower than the rest."""
    log_dir = tmp_path_factory.mktemp("faulty")
    write_run(log_dir, 8, steps=3, faults={2: "died", 4: "tampered", 6: "wrong_target", 7: "straggler"})
    return log_dir


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_clean_run_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean_run(tmp_path, world=2)
    code, out, _ = cli(capsys, "audit", str(tmp_path))
    assert code == 0 and "ranks 0-1 (2 ranks): clean" in out


def test_violations_exit_1_and_name_file_line_rank_and_rule(faulty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "audit", str(faulty))
    assert code == 1
    assert f"{faulty / 'rank-00006.jsonl'}:" in out and "rank 6 LA003 [binding-wrong-target]" in out
    assert "rank 2 LA010 [rank-died] log stops in state SERVICES_READY during 'init_distributed'" in out
    assert "rank 4 LA009" in out


def test_json_output_lists_findings_and_timing(faulty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "audit", str(faulty), "--format", "json")
    doc = orjson.loads(out)
    assert code == doc["exit_code"] == 1
    assert {(f["rule"], f["rank"]) for f in doc["findings"]} >= {("LA003", 6), ("LA010", 2), ("LA009", 4)}
    assert doc["stragglers"][0]["rank"] == 7 and doc["stragglers"][0]["state"] == "MODEL_BUILT"
    assert doc["critical_chain"][-2]["state"] == "CALLBACKS_BOUND"


def test_select_and_ignore_take_ids_prefixes_and_slugs(faulty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def rules(*args: str) -> set[str]:
        _, out, _ = cli(capsys, "audit", str(faulty), "--format", "json", *args)
        return {f["rule"] for f in orjson.loads(out)["findings"]}

    everything = rules()
    assert rules("--select", "LA003") == {"LA003"}
    assert rules("--select", "binding-wrong-target,rank-died") == {"LA003", "LA010"}
    assert rules("--ignore", "LA00") == everything - {f"LA00{i}" for i in range(10)}
    code, _, _ = cli(capsys, "audit", str(faulty), "--select", "LA011")
    assert code == 0


def test_blame_lists_states_slowest_first_and_names_the_straggler(
    faulty: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = cli(capsys, "audit", str(faulty), "--blame")
    blame = out.split("blame")[1]
    assert blame.index("MODEL_BUILT") < blame.index("DISTRIBUTED") < blame.index("CALLBACKS_BOUND")
    assert "rank 7      MODEL_BUILT" in out.split("slowest ranks:")[1].splitlines()[1]
    assert "rank 7      MODEL_BUILT" in out.split("stragglers (1")[1]


def test_the_critical_chain_names_the_rank_that_held_each_state_back(
    faulty: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = cli(capsys, "audit", str(faulty), "--critical-chain")
    chain = out.split("critical chain")[1]
    model_line = next(line for line in chain.splitlines() if "MODEL_BUILT" in line)
    assert model_line.rstrip().endswith("rank 7")


def audit_stdin(data: bytes) -> tuple[int, dict]:  # type: ignore[type-arg]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "lifecycle", "audit", "-", "--format", "json"],
        input=data,
        capture_output=True,
        env=env,
        check=False,
    )
    return out.returncode, orjson.loads(out.stdout)


def test_stdin_carries_every_ranks_log_concatenated(faulty: Path) -> None:
    code, doc = audit_stdin(b"".join(p.read_bytes() for p in sorted(faulty.glob("rank-*.jsonl"))))
    from_files = audit([str(faulty)], jobs=1)
    assert code == 1 and doc["ranks"] == 8
    assert {(f["rule"], f["rank"]) for f in doc["findings"]} == {(f.rule, f.rank) for f in from_files.findings}


def test_stdin_with_interleaved_ranks_is_routed_by_hash_chain(faulty: Path) -> None:
    per_rank = [p.read_bytes().splitlines(keepends=True) for p in sorted(faulty.glob("rank-*.jsonl"))]
    interleaved = [line for group in itertools.zip_longest(*per_rank) for line in group if line]
    code, doc = audit_stdin(b"".join(interleaved))
    from_files = audit([str(faulty)], jobs=1)
    assert code == 1 and doc["ranks"] == 8 and not doc["errors"]
    assert {(f["rule"], f["rank"]) for f in doc["findings"]} == {(f.rule, f.rank) for f in from_files.findings}


def test_parallel_reading_gives_the_same_result_as_one_process(faulty: Path) -> None:
    one = audit([str(faulty)], jobs=1)
    two = audit([str(faulty)], jobs=2)
    assert one.findings == two.findings
    assert [(r.rank, r.segments) for r in one.ranks] == [(r.rank, r.segments) for r in two.ranks]


def test_the_audit_plot_and_graph_commands_import_neither_torch_nor_megatron(faulty: Path, tmp_path: Path) -> None:
    code = (
        "import sys; from lifecycle.cli import main; "
        "rc = [main(['audit', sys.argv[1], '--blame', '--critical-chain', '--format', 'json']),"
        " main(['plot', sys.argv[1], '-o', sys.argv[2]]), main(['graph', '--format', 'svg'])]; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron')), rc)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(faulty), str(tmp_path / "t.svg")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert out.stdout.strip().splitlines()[-1] == "[] [1, 0, 0]"


def test_the_benchmark_writer_produces_exactly_the_audit_log_format(tmp_path: Path) -> None:
    """The benchmark's fast writer must be byte-compatible with AuditLog (same keys, same hash)."""
    from lifecycle.log import AuditLog

    w = ChainWriter("r", 0, 1)
    rank_records(w, 1.7e9, steps=1)
    log = AuditLog(run_id="r", rank=0, world_size=1, keep_records=True)
    for line in w.lines:
        rec = orjson.loads(line)
        fields = {
            k: v
            for k, v in rec.items()
            if k not in ("ts", "seq", "prev_hash", "hash", "run_id", "rank", "world_size", "generation", "event")
        }
        log.emit(rec["event"], **fields)
    ours = [orjson.loads(line) for line in w.lines]
    theirs = log.records
    assert [sorted(r) for r in ours] == [sorted(r) for r in theirs]
    assert audit([str(_write(tmp_path, w.lines))], jobs=1).exit_code == 0


def _write(tmp_path: Path, lines: list[bytes]) -> Path:
    path = tmp_path / "rank-00000.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def test_hand_written_and_engine_logs_of_one_rank_audit_alike(tmp_path: Path) -> None:
    write_events(tmp_path / "hand", clean_events())
    lc = engine_rank(tmp_path / "engine")
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.shutdown()
    hand, engine = audit([str(tmp_path / "hand")], jobs=1), audit([str(tmp_path / "engine")], jobs=1)
    assert hand.exit_code == engine.exit_code == 0
    assert hand.ranks[0].transitions[:5] == engine.ranks[0].transitions[:5]


def test_the_text_report_lists_a_few_findings_per_rule_then_the_other_ranks(tmp_path: Path) -> None:
    from lifecycle.testing import text

    write_run(tmp_path, 40, steps=1, faults={r: "wrong_target" for r in range(40)})
    result = audit([str(tmp_path)], jobs=1)
    assert len(result.findings) == 40
    report = text(result, per_rule=10)
    assert report.count("LA003 [binding-wrong-target] callbacks bound") == 10
    assert "LA003 [binding-wrong-target] also on ranks 10-39 (30 ranks)" in report


def test_without_worker_processes_the_files_are_read_in_this_one(faulty: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import concurrent.futures

    def no_processes(*_args: object, **_kwargs: object) -> None:
        raise OSError("fork: Resource temporarily unavailable")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_processes)
    assert audit([str(faulty)], jobs=2).findings == audit([str(faulty)], jobs=1).findings


def test_the_writers_bytes_are_hashed_as_laid_out_without_re_serializing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AuditLog appends `,"hash":"<hex>"}` to the sorted-keys body it hashed: the audit hashes the
    line minus that suffix plus `}` and never needs record_hash (the record's sorted-keys JSON made
    again) for an engine's log."""
    lc = engine_rank(tmp_path)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.rebuild()
    lc.restart()
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.shutdown()
    dumps = orjson.dumps

    def refuse_sorted(obj: object, default: object = None, option: int | None = None) -> bytes:
        if option is not None and option & orjson.OPT_SORT_KEYS:
            raise AssertionError("re-serialized a record the writer laid out")
        return dumps(obj, default, option)  # type: ignore[arg-type]

    monkeypatch.setattr(orjson, "dumps", refuse_sorted)
    result = audit([str(tmp_path)], jobs=1)
    assert (result.exit_code, result.findings) == (0, ())
