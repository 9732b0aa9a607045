"""The redaction table's decisions, pinned down for scripts/mutation: which names are secret, which
text is left alone, and how much of a match is replaced. Pure, no torch."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from lifecycle.redaction import is_secret_key, redact, redact_text
from lifecycle.testing import REDACTED, SHAPES, may_hold_credentials

# Each holds a credential and only one of the things the log writer's first look searches for.
ONE_MARK = {
    "a space": "Authorization: Bearer b3arerT0ken.xyz",
    "an @": "https://alice:PASS1111@host.example/repo",
    "an =": "password=hunter22",
    "a token prefix": "hf_a1B2c3D4e5F6g7H8i9J0kLmN",
}


@pytest.mark.parametrize("text", ONE_MARK.values(), ids=list(ONE_MARK))
def test_the_log_writers_first_look_passes_a_record_holding_any_one_mark(text: str) -> None:
    assert redact_text(text) != text
    assert may_hold_credentials(orjson.dumps({"msg": text})) is True


@pytest.mark.parametrize(
    "record", [{"event": "state_entered", "state": "VALIDATED", "seq": 3}, {"path": "/data/gpt/ckpt", "ok": True}]
)
def test_the_first_look_skips_a_record_with_none_of_them(record: dict[str, object]) -> None:
    assert may_hold_credentials(orjson.dumps(record)) is False


def test_a_secret_assignment_at_the_very_start_of_the_text_is_redacted() -> None:
    assert redact_text("password=hunter22") == f"password={REDACTED}"
    assert redact_text("token=a, password=b") == f"token={REDACTED}, password={REDACTED}"


def test_a_secret_keys_value_is_replaced_an_absent_one_kept_and_other_keys_only_scanned() -> None:
    given = {
        "hf_token": "abc",
        "api_key": None,
        "name": "x",
        "url": "https://u:PASS1111@h/r",
        "nested": [{"password": 3}, ("t", 1.5, True, None)],
    }
    assert redact(given) == {
        "hf_token": REDACTED,
        "api_key": None,
        "name": "x",
        "url": f"https://{REDACTED}@h/r",
        "nested": [{"password": REDACTED}, ["t", 1.5, True, None]],
    }


def test_the_shapes_of_the_table_cannot_be_changed_at_run_time() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SHAPES[0].name = "other"  # type: ignore[misc]


def test_secret_key_names() -> None:
    assert is_secret_key("db.password") and is_secret_key("SSH-KEY") and is_secret_key("x auth")
    assert not is_secret_key("tokenizer") and not is_secret_key("author")
