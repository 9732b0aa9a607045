"""`lifecycle plot`: the startup timeline, like `systemd-analyze plot`, drawn with matplotlib.

Up to `max_ranks` ranks, one row per rank with a bar per state's entry work. Above it, one row per
state with percentile bands across ranks (whisker min-max, light p10-p90, dark p25-p75, a tick at
the median), and the outlier ranks (stragglers and ranks that never reached their target) drawn
individually below.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.audit._output import write_output
from lifecycle.audit._rank import RankAudit
from lifecycle.audit._timing import stragglers
from lifecycle.errors import ExtraNotInstalled
from lifecycle.log import events
from states import STARTUP_ORDER, State

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from numpy.typing import NDArray

FORMATS = ("png", "svg", "pdf")
_PALETTE = ("#b07aa1", "#4e79a7", "#59a14f", "#f28e2b", "#e15759", "#76b7b2", "#edc948", "#ff9da7", "#9c755f")
_STARTUP = [events.IMPORTS] + [s.name for s in STARTUP_ORDER[1:]]
_ORDER = [*_STARTUP, State.FAILED.name, State.SHUT_DOWN.name]
_COLORS = {
    **{name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(_STARTUP)},
    State.FAILED.name: "#000000",
    State.SHUT_DOWN.name: "#bab0ac",
}  # a startup state's colour by its place
_MAX_OUTLIERS = 24
_CREATOR = "megatron-lifecycle plot"
_MAGIC = (b"\x89PNG", b"<?xml", b"%PDF")


class PlotNotWritten(OSError, ValueError):
    """The image could not be written (not ours to replace, a full disk): an OSError, and a ValueError
    too, which `lifecycle plot` reports in one line with exit status 2."""


def ours(sample: bytes) -> bool:
    """An image `plot` wrote (its metadata names us): the only file `plot` replaces."""
    return sample.startswith(_MAGIC) and _CREATOR.encode() in sample


def plot(ranks: Sequence[RankAudit], output: str | Path, *, max_ranks: int = 64) -> Path:
    """Draw the timeline of `ranks` to `output` (.png, .svg or .pdf); returns the path written. The
    file is written whole or not at all, and only over an image `plot` wrote (`write_output`)."""
    path = Path(output)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"output {str(path)!r} has no image suffix: use one of .{', .'.join(FORMATS)}")
    figure = _figure()
    timed = [r for r in ranks if r.rank is not None and r.first_ts is not None]
    if not timed:
        raise ValueError("no rank has a timed record: nothing to plot")
    t0 = min(r.first_ts for r in timed if r.first_ts is not None)
    if len(timed) <= max_ranks:
        height = _per_rank(figure, sorted(timed, key=lambda r: r.rank or 0), t0)
    else:
        height = _aggregated(figure, timed, t0)
    figure.set_size_inches(12, max(3.0, 0.8 + 0.28 * height))
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format=fmt, metadata={"Software" if fmt == "png" else "Creator": _CREATOR})
    try:
        return write_output(path, image.getvalue(), ours=ours)
    except OSError as exc:
        raise PlotNotWritten(exc.errno, exc.strerror or str(exc), str(path)) from exc


def _figure() -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ExtraNotInstalled(
            "lifecycle plot needs matplotlib, which is not installed: pip install megatron-lifecycle[plot]",
            extra="plot",
        ) from exc
    return Figure()


def _bars(ax: Axes, row: float, audit: RankAudit, t0: float) -> None:
    for seg in audit.segments:
        # the imports run on a thread beside VALIDATED: a thin bar at the top of the row
        low, height = (row - 0.45, 0.25) if seg.state == events.IMPORTS else (row - 0.4, 0.8)
        ax.broken_barh(
            [(seg.start - t0, max(seg.duration, 1e-4))], (low, height), color=_COLORS.get(seg.state, "#888888")
        )
    if _stopped_early(audit) and audit.last_ts is not None:
        ax.plot([audit.last_ts - t0], [row], marker="x", color="red", markersize=9)
        ax.annotate(f" log stops in {audit.state}", (audit.last_ts - t0, row), va="center", fontsize=7, color="red")


def _stopped_early(audit: RankAudit) -> bool:
    return audit.open_trigger is not None or (
        not audit.shut and audit.state not in (audit.target, State.SHUT_DOWN.name, State.FAILED.name)
    )


def _per_rank(figure: Figure, ranks: list[RankAudit], t0: float) -> int:
    ax = figure.add_subplot()
    for row, audit in enumerate(ranks):
        _bars(ax, row, audit, t0)
    ax.set_yticks(range(len(ranks)), [f"rank {r.rank}" for r in ranks])
    ax.invert_yaxis()
    _decorate(ax, f"startup timeline, {len(ranks)} ranks")
    return len(ranks)


def _aggregated(figure: Figure, ranks: list[RankAudit], t0: float) -> int:
    import numpy as np

    ax = figure.add_subplot()
    states = [s for s in _ORDER if any(seg.state == s for r in ranks for seg in r.segments)]
    counts = []
    for row, state in enumerate(states):
        starts, ends = _first_segments(ranks, state, t0)
        counts.append(len(starts))
        color = _COLORS[state]
        ax.hlines(row, np.min(starts), np.max(ends), color=color, lw=1)
        for low, high, alpha in ((10, 90, 0.35), (25, 75, 0.8)):
            left, right = np.percentile(starts, low), np.percentile(ends, high)
            ax.broken_barh([(left, max(right - left, 1e-4))], (row - 0.35, 0.7), color=color, alpha=alpha)
        ax.vlines(np.median(ends), row - 0.4, row + 0.4, color="black", lw=1)
    outliers = _outliers(ranks)
    for i, audit in enumerate(outliers):
        _bars(ax, len(states) + i, audit, t0)
    labels = [f"{s} ({n} ranks)" for s, n in zip(states, counts, strict=True)]
    labels += [f"rank {r.rank}" for r in outliers]
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    _decorate(
        ax,
        f"startup timeline, {len(ranks)} ranks: p10-p90 / p25-p75 bands, median end, "
        f"{len(outliers)} outlier ranks below",
    )
    return len(labels)


def _first_segments(ranks: list[RankAudit], state: str, t0: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    import numpy as np

    starts, ends = [], []
    for audit in ranks:
        seg = next((s for s in audit.segments if s.state == state), None)
        if seg is not None:
            starts.append(seg.start - t0)
            ends.append(seg.end - t0)
    return np.asarray(starts), np.asarray(ends)


def _outliers(ranks: list[RankAudit]) -> list[RankAudit]:
    by_rank = {r.rank: r for r in ranks}
    chosen: dict[int | None, RankAudit] = {}
    for straggler in stragglers(ranks):
        chosen.setdefault(straggler.rank, by_rank[straggler.rank])
    for audit in ranks:
        if _stopped_early(audit) or audit.state == State.FAILED.name:
            chosen.setdefault(audit.rank, audit)
    return sorted(chosen.values(), key=lambda r: r.rank or 0)[:_MAX_OUTLIERS]


def _decorate(ax: Axes, title: str) -> None:
    from matplotlib.patches import Patch

    ax.set_xlabel("seconds since the first rank started")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(
        handles=[Patch(color=c, label=s) for s, c in _COLORS.items()],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=7,
    )
