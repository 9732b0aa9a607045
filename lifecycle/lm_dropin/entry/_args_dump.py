"""Megatron-LM's argument dump with credentials masked, as the startup log masks them.

`validate_args` ends by printing every argument on rank 0 (`_print_args` of
`megatron.training.arguments`, looked up in that module's globals when it is called). Where the
drop-in runs `validate_args` itself (`lifecycle run --megatron-config`, and VALIDATED when the
script did not run it), it runs it inside `masked_dump()`: the function found there then prints a
copy of the arguments in which a string under a secret-shaped name (`is_secret_key`: `hf_token`,
`api_key`, `password`, ... also Megatron-LM's `moe_token_dispatcher_type`) reads `<redacted>`, and
any other value whose text holds a credential (`redact_text`: a URL's `user:password@`, a
`password=` in a path, a token's known prefix) is printed as that text redacted. Numbers, flags and
`None` print as they are. A script's own replacement of `_print_args` is the one called, with the
masked copy. The dump a script's own `parse_and_validate_args` prints before it calls `pretrain` is
the script's: the drop-in is not running yet.

Cost: one `str()` and one `redact_text` per argument (about 800), once per `validate_args`.
"""

from __future__ import annotations

import threading
from argparse import Namespace
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from lifecycle.redaction import REDACTED, is_secret_key, redact_text

_MODULE = "megatron.training.arguments"
_SWAP = threading.Lock()  # one swap of the module's global at a time
_V = TypeVar("_V")


def masked(args: Namespace) -> Namespace:
    """A copy of `args` (Megatron-LM's Namespace) as the dump may show it."""
    return Namespace(**{name: _shown(name, value) for name, value in vars(args).items()})


def _shown(name: str, value: _V) -> _V | str:
    if isinstance(value, str) and value and is_secret_key(name):
        return REDACTED
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = str(value)
    clean = redact_text(text)
    return value if clean == text else clean


@contextmanager
def masked_dump() -> Iterator[None]:
    """While inside, `validate_args`'s dump prints `masked(args)`; the module's global is put back
    after (unless something else replaced it meanwhile: that one is left in place)."""
    import importlib

    module = importlib.import_module(_MODULE)
    found = getattr(module, "_print_args", None)  # Megatron-LM's private name, read as it reads it
    if found is None:  # a megatron.training that prints no dump there: nothing to mask
        yield
        return
    with _SWAP:

        def print_masked(title: str, args: Namespace) -> None:
            found(title, masked(args))

        setattr(module, "_print_args", print_masked)  # noqa: B010
        try:
            yield
        finally:
            if getattr(module, "_print_args") is print_masked:  # noqa: B009
                setattr(module, "_print_args", found)  # noqa: B010
