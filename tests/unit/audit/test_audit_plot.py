"""`lifecycle plot`: a timeline image per rank, aggregated for many ranks, and a clear message
naming the extra when matplotlib is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lifecycle.audit import audit
from lifecycle.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.audit import write_run

pytest.importorskip("matplotlib")


def test_a_few_ranks_get_one_row_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "logs", 6, steps=2, faults={3: "died"})
    out = tmp_path / "startup.svg"
    assert main(["plot", str(tmp_path / "logs"), "-o", str(out)]) == 0
    svg = out.read_text()
    assert all(f"rank {r}" in svg for r in range(6))
    assert "log stops in SERVICES_READY" in svg


def test_many_ranks_are_aggregated_with_outliers_drawn_individually(tmp_path: Path) -> None:
    write_run(tmp_path / "logs", 200, steps=1, faults={17: "straggler", 150: "died"})
    out = tmp_path / "startup.svg"
    assert main(["plot", str(tmp_path / "logs"), "-o", str(out), "--max-ranks", "64"]) == 0
    svg = out.read_text()
    assert "MODEL_BUILT (199 ranks)" in svg and "VALIDATED (200 ranks)" in svg
    assert "<!-- rank 17 -->" in svg and "<!-- rank 150 -->" in svg and "<!-- rank 16 -->" not in svg


def test_png_output_is_a_png(tmp_path: Path) -> None:
    write_run(tmp_path / "logs", 3, steps=1)
    out = tmp_path / "startup.png"
    assert main(["plot", str(tmp_path / "logs"), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_output_without_an_image_suffix_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "logs", 2, steps=1)
    assert main(["plot", str(tmp_path / "logs"), "-o", str(tmp_path / "startup.txt")]) == 2
    assert "use one of .png, .svg, .pdf" in capsys.readouterr().err


def test_without_matplotlib_the_error_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_run(tmp_path / "logs", 2, steps=1)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an absent package looks like to import
    assert main(["plot", str(tmp_path / "logs"), "-o", str(tmp_path / "x.png")]) == 2
    assert "pip install megatron-lifecycle[plot]" in capsys.readouterr().err


def test_unreadable_logs_are_not_plotted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "rank-00000.jsonl").write_bytes(b"nope\n")
    assert main(["plot", str(tmp_path), "-o", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()
    assert audit([str(tmp_path)]).exit_code == 2


def test_a_plot_replaces_its_own_image_but_never_a_link_or_a_file_it_did_not_write(tmp_path: Path) -> None:
    from lifecycle.audit import plot

    write_run(tmp_path / "logs", 2, steps=1)
    ranks = audit([str(tmp_path / "logs")]).ranks
    for suffix in ("png", "svg", "pdf"):
        out = tmp_path / f"startup.{suffix}"
        plot(ranks, out)
        plot(ranks, out)  # its own image: replaced
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\nsomeone else's")
    (tmp_path / "link.svg").symlink_to(photo)
    for target in (photo, tmp_path / "link.svg"):
        with pytest.raises(OSError, match="choose another path"):
            plot(ranks, target)
    assert photo.read_bytes() == b"\x89PNG\r\n\x1a\nsomeone else's"


def test_a_plot_it_cannot_write_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "logs", 2, steps=1)
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"someone else's")
    assert main(["plot", str(tmp_path / "logs"), "-o", str(photo)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an output we wrote" in err and str(photo) in err, err
    assert photo.read_bytes() == b"someone else's"
