"""LA027 `resume-diverged`: the `streams_checked` record the first step after a checkpoint load writes
(`lifecycle.resume.streams`), read back: a random stream drawn from or re-seeded between the load and the
first step (a global one, or one of the data's own: `data:<path>`), a first step that does not continue the
checkpoint's, a data position (consumed samples, iteration) at the first step that is not the one the load
left, or an optimizer whose step counts or loss scale at the first step are not those the checkpoint was saved
with."""

from __future__ import annotations

from lifecycle.audit._reads import StreamsChecked
from lifecycle.audit._rules import RuleId
from lifecycle.audit._state import RankState

_SHOWN = 3  # streams named in the finding; the rest are counted


def _describe(entry: dict[str, str]) -> str:
    return f"{entry.get('stream', '?')[:40]} by {entry.get('caller', '?')[:160]}"


def streams_checked(audit: RankState, rec: StreamsChecked, ts: float) -> None:
    """One finding per record, each thing that diverged in it said in turn (a rank's later LA027 findings
    only count, so one that named the streams alone would hide a position that moved with them)."""
    said = [part for part in (_streams(rec), _step(rec), _position(rec), _optimizer(rec)) if part is not None]
    if said:
        audit.flag(RuleId.RESUME_DIVERGED, "; and ".join(said))


def _streams(rec: StreamsChecked) -> str | None:
    moved, restored = rec.moved, rec.restored_step
    if not moved:
        return None
    shown = "; ".join(_describe(m) for m in moved[:_SHOWN])
    more = f"; and {len(moved) - _SHOWN} more" if len(moved) > _SHOWN else ""
    data = any(m.get("stream", "").startswith("data:") for m in moved)
    return (
        f"{len(moved)} random stream{'s' if len(moved) != 1 else ''} moved between the checkpoint load (step "
        f"{restored}) and the first step: {shown}{more}; the resumed run is not the uninterrupted one. Draw "
        "or seed after the first step, or from a generator of your own" + (_DATA_FIX if data else "")
    )


_DATA_FIX = (
    "; a data: stream is the data's own generator or sampler position: create the data iterator before the "
    "load (or restore its generator's state after creating it), and draw from the dataset's generator only in a step"
)


def _step(rec: StreamsChecked) -> str | None:
    step, restored = rec.step, rec.restored_step
    if step is None or restored is None or step == restored + 1:
        return None
    return (
        f"the first step after loading the checkpoint of step {restored} is step {step}, not {restored + 1}: "
        "the data position does not continue the saved one (an offset applied twice, or data from sample 0)"
    )


def _position(rec: StreamsChecked) -> str | None:
    position, loaded = rec.position, rec.restored_position
    if position is None or loaded is None or position == loaded:
        return None
    keys = sorted(set(position) | set(loaded))
    changed = ", ".join(f"{k} {loaded.get(k)} → {position.get(k)}" for k in keys if position.get(k) != loaded.get(k))
    return (
        f"the data position at the first step is not the one the checkpoint load left ({changed[:200]}): the "
        "data does not continue the saved run's (an offset applied twice, or data from sample 0). Leave the "
        "position the load restored as it is"
    )


def _optimizer(rec: StreamsChecked) -> str | None:
    optimizer = rec.optimizer
    saved = rec.saved_optimizer
    if optimizer is None or saved is None or optimizer == saved:
        return None
    return (
        f"the optimizer state at the first step is not the checkpoint's: step counts {optimizer.get('steps')} "
        f"and loss scale {optimizer.get('loss_scale')}, saved with {saved.get('steps')} and "
        f"{saved.get('loss_scale')} (an optimizer state not loaded, or built again after the load)"
    )
