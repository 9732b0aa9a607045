"""SERVICES_READY: tokenizer, vocab size and writers, after validation and before distributed.

Nothing here touches torch.distributed. The default tokenizer is the null (synthetic) one,
`NullTokenizer`: megatron-core's null tokenizer (ids are the text's integers) without
`megatron.core.tokenizers`, whose package imports `transformers` (1.7 s) for
every library. A local HuggingFace-format directory (validation has checked it exists; nothing is
downloaded) goes through megatron-core's `MegatronTokenizer` and needs the `hf` extra.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from lifecycle.config import RunConfig, TokenizerConfig
from lifecycle.core_entry import compat
from lifecycle.core_entry.vocab import resolve_vocab_size
from lifecycle.errors import ExtraNotInstalled
from lifecycle.log import records
from lifecycle.runtime import Closeable, PhaseContext, Runtime
from states import SideEffect

if TYPE_CHECKING:
    from megatron.core.timers import Timers
    from megatron.core.tokenizers import MegatronTokenizer
    from torch.utils.tensorboard import SummaryWriter

HF_EXTRA = "pip install 'megatron-lifecycle[hf]'"


@dataclass(frozen=True, slots=True)
class NullTokenizer:
    """Synthetic tokenizer, as the installed megatron-core's null library: ids are the text's
    integers. Where end-of-document lies (one id past `size`, or `size`'s last id) follows the
    release (`compat.null_tokenizer_eod_in_vocab`)."""

    size: int
    eod_in_vocab: bool = dataclasses.field(default_factory=compat.null_tokenizer_eod_in_vocab)

    @property
    def library(self) -> str:
        return compat.null_tokenizer_library()

    @property
    def vocab_size(self) -> int:
        return self.size if self.eod_in_vocab else self.size + 1

    @property
    def eod(self) -> int:
        return self.size - 1 if self.eod_in_vocab else self.size

    def tokenize(self, text: str) -> list[int]:
        return [int(x) for x in text.split(" ")]

    def detokenize(self, ids: list[int]) -> str:
        return " ".join(str(x) for x in ids)

    @property
    def unique_identifiers(self) -> OrderedDict[str, str]:
        """What megatron-core's datasets key their caches by."""
        return OrderedDict(library=self.library, vocab_size=str(self.size))


def build_tokenizer(config: TokenizerConfig) -> NullTokenizer | MegatronTokenizer:
    """The tokenizer for `config`: `NullTokenizer`, or megatron-core's for a HuggingFace directory."""
    if config.type == "null":
        return NullTokenizer(config.vocab_size)
    try:
        import transformers  # noqa: F401  (megatron-core skips it silently, then fails later)
    except ImportError as exc:
        raise ExtraNotInstalled(
            f"tokenizer.type=huggingface needs `transformers`, which is not installed: {HF_EXTRA}, "
            "or use tokenizer.type=null",
            extra="hf",
            field="tokenizer.type",
        ) from exc
    from megatron.core.tokenizers import MegatronTokenizer

    return MegatronTokenizer.from_pretrained(tokenizer_path=config.path, metadata_path={"library": "huggingface"})


def build_writers(ctx: PhaseContext, config: RunConfig) -> dict[str, SummaryWriter | Timers]:
    """The writers and timers the config asks for: a TensorBoard writer, megatron's Timers."""
    writers: dict[str, SummaryWriter | Timers] = {}
    if config.logging.tensorboard_dir:
        from torch.utils.tensorboard import SummaryWriter

        ctx.side_effect(SideEffect.FILES)
        Path(config.logging.tensorboard_dir).mkdir(parents=True, exist_ok=True)
        ctx.side_effect(SideEffect.WRITERS)
        writers["tensorboard"] = SummaryWriter(log_dir=config.logging.tensorboard_dir)
    if config.logging.timers:
        from megatron.core.timers import Timers

        ctx.side_effect(SideEffect.WRITERS)
        writers["timers"] = Timers(log_level=2, log_option="minmax")
    return writers


def restored_vocab_size(config: RunConfig) -> int | None:
    """`checkpoint.vocab_size`, else the padded vocab size `checkpoint.load` was saved with."""
    if config.checkpoint.vocab_size is not None:
        return config.checkpoint.vocab_size
    from lifecycle.resume.checkpoint import checkpoint_vocab_size

    return checkpoint_vocab_size(config.checkpoint.load)


def enter(ctx: PhaseContext) -> Runtime:
    """Build the tokenizer (unless `tokenizer.build` is false), resolve the vocab, open writers."""
    config = ctx.runtime.config
    tokenizer = None
    if config.tokenizer.build:
        ctx.side_effect(SideEffect.TOKENIZER)
        tokenizer = build_tokenizer(config.tokenizer)
    size, source = resolve_vocab_size(
        explicit=config.model.vocab_size,
        restored=restored_vocab_size(config),
        tokenizer_vocab=None if tokenizer is None else int(tokenizer.vocab_size),
        divisible_by=config.model.make_vocab_size_divisible_by,
        tp=config.parallel.tp,
    )
    writers = build_writers(ctx, config)
    ctx.emit(
        records.ServicesReady(
            tokenizer=None if tokenizer is None else type(tokenizer).__name__, vocab_size=size, vocab_source=source
        )
    )
    return dataclasses.replace(
        ctx.runtime,
        services_ready=True,
        tokenizer=tokenizer,
        vocab_size=size,
        vocab_source=source,
        writers=MappingProxyType(writers),
    )


def release(ctx: PhaseContext, runtime: Runtime) -> Runtime:
    """Close the writers and drop the tokenizer; tolerates a partly built runtime."""
    writer = runtime.writers.get("tensorboard")
    if isinstance(writer, Closeable):
        writer.close()
    return without_services(runtime)


def without_services(runtime: Runtime) -> Runtime:
    """`runtime` with nothing of SERVICES_READY left in it (tokenizer, vocab, writers)."""
    return dataclasses.replace(
        runtime,
        services_ready=False,
        tokenizer=None,
        vocab_size=None,
        vocab_source=None,
        writers=MappingProxyType({}),
    )
