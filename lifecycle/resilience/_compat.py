"""Which nvidia-resiliency-ext may sit beside which megatron-core: decided without importing either.

megatron-core releases that ship `dist_checkpointing/strategies/nvrx.py` read
`nvidia_resiliency_ext.__version__` while `import megatron.core` runs, and want at least that
file's `NVRX_MIN_VERSION` (0.6.0 in megatron-core 0.19.2). nvidia-resiliency-ext 0.4.1 has no
`__version__`, so beside such a megatron-core `import megatron.core` itself raises AttributeError.
megatron-core 0.15.3 and 0.16.1 have no such file and import fine beside 0.4.1.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

NVRX = "nvidia-resiliency-ext"
_MIN = re.compile(r'^NVRX_MIN_VERSION\s*=\s*["\']([0-9][0-9.]*)["\']', re.MULTILINE)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    parts = re.match(r"[0-9]+(?:\.[0-9]+)*", version)
    return tuple(int(p) for p in parts.group(0).split(".")) if parts else ()


def megatron_nvrx_minimum() -> str | None:
    """The NVRX_MIN_VERSION the installed megatron-core checks at import, read from its source
    (None when it has no such check)."""
    spec = importlib.util.find_spec("megatron")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        path = Path(root) / "core" / "dist_checkpointing" / "strategies" / "nvrx.py"
        try:
            found = _MIN.search(path.read_text())
        except OSError:
            continue
        return found.group(1) if found else "0.6.0"
    return None


def pair_problem(megatron: str | None, nvrx: str | None, minimum: str | None) -> str | None:
    """One line when megatron-core `megatron` cannot be imported beside nvidia-resiliency-ext `nvrx`
    (`minimum`: the version that megatron-core checks for, None when it checks none); else None."""
    if megatron is None:
        return f"the resilience extra needs megatron-core; install it beside {NVRX} {nvrx or '(missing)'}"
    if nvrx is None:
        return (
            f"in-process restart needs {NVRX}, which is not installed beside megatron-core {megatron}: "
            "pip install 'megatron-lifecycle[resilience]'"
        )
    if minimum is not None and _release(nvrx) < _release(minimum):
        return (
            f"megatron-core {megatron} cannot be imported beside {NVRX} {nvrx} (it wants >= {minimum}): "
            f"install {NVRX}>={minimum}, or megatron-core<0.17 for {NVRX} 0.4 "
            "(pip install 'megatron-lifecycle[resilience-floor]')"
        )
    return None


def installed_problem() -> str | None:
    """`pair_problem` for what is installed in this environment."""
    return pair_problem(_version("megatron-core"), _version(NVRX), megatron_nvrx_minimum())
