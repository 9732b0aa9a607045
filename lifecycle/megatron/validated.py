"""VALIDATED: check the config (every problem at once) and fingerprint it. No side effects.

The convert plan runs the intrinsic checks only, so an offline conversion on a machine without
CUDA or optional packages is not refused for them.
"""

from __future__ import annotations

import dataclasses

from lifecycle.config import raise_for, validate
from lifecycle.log import events, redact
from lifecycle.runtime import PhaseContext, Runtime
from states import Plan


def environment_checks(ctx: PhaseContext) -> bool:
    """Environment checks run unless the plan is an offline one or options turn them off."""
    return ctx.plan is not Plan.CONVERT and ctx.options.environment_checks


def enter(ctx: PhaseContext) -> Runtime:
    """Validate `ctx.runtime.config`; raise ConfigError listing every problem, or fingerprint it."""
    config = ctx.runtime.config
    environment = environment_checks(ctx)
    raise_for(validate(config, environment=environment))
    fingerprint = config.fingerprint()
    ctx.emit(
        events.CONFIG_VALIDATED,
        fingerprint=fingerprint,
        config=redact(config.to_dict()),
        environment=environment,
    )
    return dataclasses.replace(ctx.runtime, fingerprint=fingerprint)
