"""Credentials never reach the startup log: secret-like keys, URL user-info, secret query
parameters and token shapes, in config values and exception texts."""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle import InProcessPhases, PhaseFailed, RunConfig, Work
from lifecycle.testing import REDACTED, is_secret_key, redact_text
from states import State

HF = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmN"
GH = "ghp_" + "Z" * 36
SK = "sk-" + "proj" + "x" * 30
AWS = "AKIA" + "ABCDEFGHIJKLMNOP"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"

CASES = [
    ("https://user:PASS@host/ckpt", "https://<redacted>@host/ckpt", "PASS"),
    ("s3://bucket/tb?token=abc123&region=eu", "s3://bucket/tb?token=<redacted>&region=eu", "abc123"),
    (
        "https://h/x?X-Amz-Signature=beef&api_key=k9",
        "https://h/x?X-Amz-Signature=<redacted>&api_key=<redacted>",
        "beef",
    ),
    (f"/data/{HF}/model", f"/data/{REDACTED}/model", HF),
    (f"git clone https://{GH}@github.com/o/r", f"git clone https://{REDACTED}@github.com/o/r", GH),
    (f"key {SK} refused", f"key {REDACTED} refused", SK),
    (f"aws {AWS}", f"aws {REDACTED}", AWS),
    (f"Authorization: Bearer {JWT}", f"Authorization: Bearer {REDACTED}", JWT),
]


@pytest.mark.parametrize(("text", "expected", "secret"), CASES, ids=[c[0][:24] for c in CASES])
def test_credentials_inside_strings_are_redacted_and_the_rest_kept(text: str, expected: str, secret: str) -> None:
    assert redact_text(text) == expected
    assert secret not in redact_text(text)


def test_ordinary_paths_and_urls_are_left_alone() -> None:
    for text in ("/data/gpt/ckpt", "https://huggingface.co/gpt2?revision=main", "a=b", "user@example.com"):
        assert redact_text(text) == text


@pytest.mark.parametrize("key", ["private_key", "authorization", "ssh_key", "hf_token", "db_password"])
def test_these_keys_are_secret(key: str) -> None:
    assert is_secret_key(key)


def test_config_values_and_exception_texts_are_redacted_in_the_log(make_lc: Any) -> None:
    config = RunConfig.from_dict(
        {
            "logging": {"tensorboard_dir": "s3://tb?token=SECRET1&x=1"},
            "checkpoint": {"save": "https://user:SECRET2@host/ckpt"},
        }
    )
    phases = InProcessPhases()
    lc = make_lc(config=config, phases=phases)
    lc.advance_to(State.SERVICES_READY)

    def leak(_ctx: Any) -> Any:
        raise RuntimeError(f"could not reach https://me:SECRET3@hub with {HF}")

    phases.register(State.DISTRIBUTED, Work(leak))
    with pytest.raises(PhaseFailed):
        lc.init_distributed()
    text = str(lc.records)
    for secret in ("SECRET1", "SECRET2", "SECRET3", HF):
        assert secret not in text
    failed = next(r for r in lc.records if r["event"] == "transition_failed")
    assert failed["error"] == f"could not reach https://{REDACTED}@hub with {REDACTED}"
