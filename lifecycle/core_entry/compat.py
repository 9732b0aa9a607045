"""Every branch on the installed megatron-core version, in one place, each saying why.

The project supports megatron-core 0.15.3 up to (not including) 0.20: 0.19 on Python 3.12 is the
main environment, 0.15.3 on Python 3.11 the tested floor. The version is read from the package's
metadata (no import of megatron), so asking costs nothing. Code elsewhere asks a question of this
module ("which null-tokenizer library name?"), never the version itself.
"""

from __future__ import annotations

import functools
import re
import types
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from megatron.core.tokenizers import MegatronTokenizer

FLOOR = (0, 15, 3)
"""The oldest megatron-core tested (pyproject.toml's lower bound)."""
CEILING = (0, 20)
"""The first megatron-core minor release not yet tested (pyproject.toml's upper bound)."""


def parse_version(text: str) -> tuple[int, ...]:
    """A megatron-core version string as the numbers every question here compares: '0.19.2' →
    (0, 19, 2); pre-release and local tails ('0.17.0rc1', '0.18.1+cu12.9') are ignored, so a build
    of a release answers as that release."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


@functools.cache
def megatron_core_version() -> tuple[int, ...]:
    """The installed megatron-core as numbers; (0,) when it is not installed."""
    try:
        return parse_version(dist_version("megatron-core"))
    except PackageNotFoundError:
        return (0,)


def at_least(*release: int, installed: tuple[int, ...] | None = None) -> bool:
    return (installed or megatron_core_version()) >= release


def versions() -> dict[str, str]:
    """The versions a run depends on, by distribution name (what `lifecycle --version` prints)."""
    out = {}
    for name in ("megatron-lifecycle", "torch", "megatron-core"):
        try:
            out[name] = dist_version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def null_tokenizer_library(installed: tuple[int, ...] | None = None) -> str:
    """megatron-core's metadata name for its null tokenizer: 0.17 renamed "null" to "null-text"
    (beside "null-multimodal"), and refuses the old name."""
    return "null-text" if at_least(0, 17, installed=installed) else "null"


def null_tokenizer_eod_in_vocab(installed: tuple[int, ...] | None = None) -> bool:
    """Whether the null tokenizer's end-of-document id lies inside `vocab_size` ids: from 0.18 its
    vocab size is the size asked for and end-of-document is its last id; before, end-of-document
    was one extra id (vocab size + 1)."""
    return at_least(0, 18, installed=installed)


def gpt_model_deprecated(installed: tuple[int, ...] | None = None) -> bool:
    """Whether the default providers build a HybridModel rather than a GPTModel: 0.19.0 deprecated
    GPTModel (its constructor logs "GPTModel IS DEPRECATED ... use HybridModel", Megatron-LM issue
    6071) for HybridModel, whose migration guide maps each GPT block onto the pattern `*-`.
    HybridModel exists from 0.18 and not on the 0.15 floor, where GPTModel is the current API."""
    return at_least(0, 19, installed=installed)


def gpt_checkpoint_interop(installed: tuple[int, ...] | None = None) -> types.ModuleType | None:
    """megatron-core's translator of a GPTModel checkpoint for a HybridModel
    (`dist_checkpointing.gpt_checkpoint_interop`, shipped with 0.19 beside GPTModel's deprecation);
    None on earlier releases, where the shipped providers still build GPTModel."""
    if not at_least(0, 19, installed=installed):
        return None
    import importlib

    return importlib.import_module("megatron.core.dist_checkpointing.gpt_checkpoint_interop")


def megatron_null_tokenizer(vocab_size: int) -> MegatronTokenizer:
    """megatron-core's own null tokenizer of `vocab_size` (imports `megatron.core.tokenizers`)."""
    from megatron.core.tokenizers import MegatronTokenizer

    return MegatronTokenizer.from_pretrained(metadata_path={"library": null_tokenizer_library()}, vocab_size=vocab_size)


def mend_model_parallel_config(module: types.ModuleType | None = None) -> None:
    """megatron-core 0.15's `ModelParallelConfig.__post_init__` calls `warnings.warn` (expert and
    tensor parallelism without sequence parallelism) in a module that never imports `warnings`,
    so building that config raises NameError instead of warning (0.16 imports it). Give the
    module the name it lacks; a no-op on other releases."""
    if at_least(0, 16):
        return
    import warnings

    if module is None:
        import megatron.core.model_parallel_config as real

        module = real
    module.__dict__.setdefault("warnings", warnings)
