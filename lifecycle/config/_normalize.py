"""Normalize a RunConfig the way Megatron-LM's `arguments.py` does, and say what changed and why.

Megatron-LM rewrites a few settings before it builds anything (`validate_args`): one virtual
pipeline stage is no virtual pipeline at all, and without a virtual pipeline the parameter
all-gather is not aligned across stages. The lifecycle applies the same rewrites at VALIDATED and
logs each one as a `config_normalized` record (`field`, `given`, `used`, `why`), so the config that
runs is never silently different from the config that was given. docs/validation.md lists them.
`align_param_gather` is rewritten only where it acts (with `overlap_param_gather`); elsewhere
megatron-core never reads it, and a record for it would be noise on every default run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lifecycle.config._records import RunConfig
from lifecycle.log import JSONValue


@dataclass(frozen=True, slots=True, kw_only=True)
class Normalization:
    """One rewrite: `field` was `given`, the run uses `used`, because `why`."""

    field: str
    given: JSONValue
    used: JSONValue
    why: str

    def log_fields(self) -> dict[str, JSONValue]:
        """The fields of the `config_normalized` record."""
        return {"field": self.field, "given": self.given, "used": self.used, "why": self.why}


VPP_ONE = (
    "one virtual stage per pipeline rank is the non-interleaved schedule; megatron-core would run "
    "the interleaved schedule with one chunk and fail (Megatron-LM arguments.py sets "
    "virtual_pipeline_model_parallel_size to None)"
)
ALIGN_WITHOUT_VPP = (
    "without a virtual pipeline no schedule calls param_sync_func and aligning stops the pre-hook "
    "from prefetching the next bucket (Megatron-LM arguments.py sets align_param_gather to False "
    "for the non-interleaved schedule)"
)


def normalize(config: RunConfig) -> tuple[RunConfig, tuple[Normalization, ...]]:
    """The config Megatron-LM would run for `config`, and every rewrite made to get there."""
    done: list[Normalization] = []
    parallel, ddp = config.parallel, config.ddp
    if parallel.vpp == 1:
        done.append(Normalization(field="parallel.vpp", given=1, used=None, why=VPP_ONE))
        parallel = dataclasses.replace(parallel, vpp=None)
    if parallel.vpp is None and ddp.align_param_gather and ddp.overlap_param_gather:
        done.append(Normalization(field="ddp.align_param_gather", given=True, used=False, why=ALIGN_WITHOUT_VPP))
        ddp = dataclasses.replace(ddp, align_param_gather=False)
    if not done:
        return config, ()
    return dataclasses.replace(config, parallel=parallel, ddp=ddp), tuple(done)
