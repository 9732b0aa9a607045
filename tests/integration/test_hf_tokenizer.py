"""SERVICES_READY with a local HuggingFace-format tokenizer directory (made here; nothing downloaded)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks

pytestmark = pytest.mark.slow
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog"]


def make_tokenizer_dir(path: Path) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[PAD]": 1, "<eos>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="<eos>"
    ).save_pretrained(str(path))
    return len(vocab)


def _convert_with_hf_tokenizer(tok_dir: str, log_dir: str) -> dict[str, Any]:
    os.environ["HF_HUB_OFFLINE"] = "1"
    from lifecycle import Lifecycle, RunConfig
    from states import State

    config = RunConfig.from_dict(
        {
            "plan": "convert",
            "tokenizer": {"type": "huggingface", "path": tok_dir},
            "model": {"make_vocab_size_divisible_by": 8},
        }
    )
    with Lifecycle(config, log_dir=log_dir, options={"keep_records": True}) as lc:
        lc.advance_to(State.SERVICES_READY)
        rt = lc.runtime
        ids = rt.tokenizer.tokenize("the lazy fox")
        [ready] = [r for r in lc.records if r["event"] == "services_ready"]
        return {"vocab_size": rt.vocab_size, "source": rt.vocab_source, "ids": list(ids), "event": ready}


def test_a_local_huggingface_tokenizer_directory_sets_the_padded_vocab(tmp_path: Path) -> None:
    size = make_tokenizer_dir(tmp_path / "tok")
    [r] = run_ranks(_convert_with_hf_tokenizer, 1, str(tmp_path / "tok"), str(tmp_path / "logs"))
    assert size == 11 and r["vocab_size"] == 16 and r["source"] == "tokenizer"
    assert r["ids"] == [3, 9, 6]
    assert r["event"]["vocab_size"] == 16 and r["event"]["vocab_source"] == "tokenizer"
