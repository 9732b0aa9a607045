"""LA027 `resume-diverged`: the `streams_checked` record the first step after a checkpoint load writes
(`lifecycle.megatron.streams`), read back: a random stream drawn from or re-seeded between the load and
the first step, a first step that does not continue the checkpoint's, or an optimizer whose step counts
or loss scale at the first step are not those the checkpoint was saved with."""

from __future__ import annotations

from lifecycle.audit._fields import Record
from lifecycle.audit._rules import RuleId
from lifecycle.audit._state import RankState

READS = ("step", "restored_step", "moved", "optimizer", "saved_optimizer")
_SHOWN = 3  # streams named in the finding; the rest are counted


def _describe(entry: object) -> str:
    if not isinstance(entry, dict):
        return repr(entry)[:60]
    return f"{str(entry.get('stream', '?'))[:40]} by {str(entry.get('caller', '?'))[:160]}"


def streams_checked(audit: RankState, rec: Record, ts: float) -> None:
    moved, step, restored = rec.get("moved"), rec.get("step"), rec.get("restored_step")
    if isinstance(moved, list) and moved:
        shown = "; ".join(_describe(m) for m in moved[:_SHOWN])
        more = f"; and {len(moved) - _SHOWN} more" if len(moved) > _SHOWN else ""
        audit.flag(
            RuleId.RESUME_DIVERGED,
            f"{len(moved)} random stream{'s' if len(moved) != 1 else ''} moved between the checkpoint load (step "
            f"{restored}) and the first step: {shown}{more}; the resumed run is not the uninterrupted one. Draw "
            "or seed after the first step, or from a generator of your own",
        )
    if isinstance(step, int) and isinstance(restored, int) and step != restored + 1:
        audit.flag(
            RuleId.RESUME_DIVERGED,
            f"the first step after loading the checkpoint of step {restored} is step {step}, not {restored + 1}: "
            "the data position does not continue the saved one (an offset applied twice, or data from sample 0)",
        )
    optimizer, saved = rec.get("optimizer"), rec.get("saved_optimizer")
    if isinstance(optimizer, dict) and isinstance(saved, dict) and optimizer != saved:
        audit.flag(
            RuleId.RESUME_DIVERGED,
            f"the optimizer state at the first step is not the checkpoint's: step counts {optimizer.get('steps')} "
            f"and loss scale {optimizer.get('loss_scale')}, saved with {saved.get('steps')} and "
            f"{saved.get('loss_scale')} (an optimizer state not loaded, or built again after the load)",
        )
