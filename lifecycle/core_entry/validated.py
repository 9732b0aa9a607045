"""VALIDATED: normalize the config as Megatron-LM does, check it (every problem at once) and
fingerprint it. No side effects.

Each normalization (`lifecycle.config.normalize`: `vpp=1` is no virtual pipeline, no aligned param
gather without one) is logged as `config_normalized`; the runtime carries the normalized config,
so every later state builds what Megatron-LM would. The fingerprint is of the config as given.

The convert plan runs the intrinsic checks only, so an offline conversion on a machine without
CUDA or optional packages is not refused for them.
"""

from __future__ import annotations

import dataclasses

from lifecycle.config import normalize, probe_environment, raise_for, validate
from lifecycle.log import records
from lifecycle.runtime import PhaseContext, Runtime
from states import Plan


def environment_checks(ctx: PhaseContext) -> bool:
    """Environment checks run unless the plan is an offline one or options turn them off."""
    return ctx.plan is not Plan.CONVERT and ctx.options.environment_checks


def enter(ctx: PhaseContext) -> Runtime:
    """Normalize and validate `ctx.runtime.config`; raise ConfigError listing every problem, or
    log the normalizations, fingerprint it and carry the normalized config on."""
    config = ctx.runtime.config
    environment = environment_checks(ctx)
    used, rewrites = normalize(config)
    raise_for(validate(used, environment=probe_environment(used, ctx.log_dir) if environment else False))
    for rewrite in rewrites:
        ctx.emit(records.ConfigNormalized(field=rewrite.field, given=rewrite.given, used=rewrite.used, why=rewrite.why))
    fingerprint = config.fingerprint()
    ctx.emit(
        records.ConfigValidated(
            fingerprint=fingerprint, config=records.redacted(config.to_dict()), environment=environment
        )
    )
    return dataclasses.replace(ctx.runtime, config=used, fingerprint=fingerprint)
