"""Every credential shape in the one redaction table is removed in all four places text leaves the
process: the startup log, `lifecycle run`'s stderr, the message of an error handed to the caller, and
`lifecycle audit`'s output (text and JSON). Each sample's secret is checked absent, and the place
checked to carry the rest of the text (so a test that printed nothing could not pass)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from lifecycle import ConfigError, InProcessPhases, Lifecycle, PhaseFailed, RunConfig, Work
from lifecycle.audit import audit
from lifecycle.cli import main
from lifecycle.log import GENESIS
from lifecycle.redaction import is_secret_key, redact_text
from lifecycle.testing import REDACTED, SHAPES, as_json, text
from states import State

# shape name -> (text holding a credential, the credential)
SAMPLES: dict[str, tuple[str, str]] = {
    "pem_private_key": (
        "key -----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAzQ\n-----END RSA PRIVATE KEY----- end",
        "MIIEpAIBAAKCAQEAzQ",
    ),
    "url_userinfo": ("clone https://alice:PASS1111@host.example/repo", "PASS1111"),
    "scp_userinfo": ("clone alice:PASS2222@host.example:repo.git", "PASS2222"),
    "query_parameter": (
        "get https://b.s3.amazonaws.com/k?X-Amz-Signature=5ig5ig5ig&X-Amz-Date=20260101 "
        "https://a.blob.core.windows.net/c?sv=2020&sig=AzUr3sAS%2F "
        "https://storage.googleapis.com/b/o?X-Goog-Signature=g00gsig "
        "s3://bucket/x?token=T0KEN9",
        "5ig5ig5ig|AzUr3sAS|g00gsig|T0KEN9",
    ),
    "authorization_header": ("sent Authorization: Bearer b3arerT0ken.xyz", "b3arerT0ken"),
    "secret_assignment": (
        "env password=hunter22 AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENG private-key: pk998877",
        "hunter22|wJalrXUtnFEMIK7MDENG|pk998877",
    ),
    "hugging_face_token": ("token hf_" + "a1B2c3D4e5F6g7H8i9J0kLmN used", "a1B2c3D4e5F6g7H8i9J0kLmN"),
    "github_token": ("gh ghp_" + "Z" * 36 + " used", "Z" * 36),
    "gitlab_token": ("gl glpat-" + "x7" * 10 + " used", "x7" * 10),
    "slack_token": ("slack xoxb-1234567890-abcdefghij used", "1234567890-abcdefghij"),
    "google_api_key": ("google AIza" + "Sy" + "q" * 33 + " used", "q" * 33),
    "openai_key": ("key sk-proj" + "x" * 30 + " used", "x" * 30),
    "aws_access_key_id": ("aws AKIA" + "ABCDEFGHIJKLMNOP used", "ABCDEFGHIJKLMNOP"),
    "jwt": (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36P used",
        "SflKxwRJSMeKKF2QT4fwpMeJf36P",
    ),
}
NAMES = [shape.name for shape in SHAPES]


def secrets(name: str) -> list[str]:
    return SAMPLES[name][1].split("|")


def assert_clean(out: str, name: str) -> None:
    for secret in secrets(name):
        assert secret not in out, f"{name}: {secret!r} leaked"
    assert REDACTED in out


def test_every_shape_in_the_table_has_a_sample() -> None:
    assert sorted(SAMPLES) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_each_shape_is_redacted_by_the_one_function(name: str) -> None:
    assert_clean(redact_text(SAMPLES[name][0]), name)


def failing_run(tmp_path: Path, message: str) -> tuple[Path, PhaseFailed]:
    phases = InProcessPhases()

    def leak(_ctx: Any) -> Any:
        raise RuntimeError(message)

    phases.register(State.DISTRIBUTED, Work(leak))  # a phase that raises
    lc = Lifecycle(RunConfig(), log_dir=tmp_path, phases=phases, tripwires="off", run_id="leaky")
    with pytest.raises(PhaseFailed) as info:
        lc.advance_to(State.DISTRIBUTED)
    lc.shutdown()
    return tmp_path / "rank-00000.jsonl", info.value


@pytest.mark.parametrize("name", NAMES)
def test_each_shape_is_redacted_in_the_log_and_in_the_error_handed_back(tmp_path: Path, name: str) -> None:
    path, error = failing_run(tmp_path, SAMPLES[name][0])
    assert_clean(path.read_text(), name)
    assert_clean(str(error), name)
    assert_clean(str(ConfigError(f"bad value {SAMPLES[name][0]}", field="x", problems=[])), name)


@pytest.mark.parametrize("name", NAMES)
def test_each_shape_is_redacted_on_lifecycle_runs_stderr(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--provider", SAMPLES[name][0]]) == 2
    assert_clean(capsys.readouterr().err, name)


@pytest.mark.parametrize("name", NAMES)
def test_each_shape_is_redacted_when_the_command_line_parser_echoes_a_bad_value(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["run", "--plan", SAMPLES[name][0]])
    assert stop.value.code == 2
    assert_clean(capsys.readouterr().err, name)


def unredacted(path: Path, message: str) -> None:
    """Put `message` back, as written by a writer that did not redact, with the chain recomputed."""
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    prev, out = GENESIS, []
    for rec in records:
        if rec["event"] == "transition_failed":
            rec["error"] = message
        rec.pop("hash", None)
        rec["prev_hash"] = prev
        body = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
        prev = hashlib.sha256(body).hexdigest()
        out.append(body[:-1] + b',"hash":"' + prev.encode() + b'"}\n')
    path.write_bytes(b"".join(out))


@pytest.mark.parametrize("name", NAMES)
def test_each_shape_is_redacted_in_the_audits_text_and_json(tmp_path: Path, name: str) -> None:
    path, _ = failing_run(tmp_path, "placeholder")
    unredacted(path, SAMPLES[name][0])
    assert secrets(name)[0] in path.read_text(), "the log given to the audit holds the credential"
    result = audit([str(tmp_path)])
    assert result.findings, "the failure is reported, with its error text"
    assert_clean(text(result, show_blame=True), name)
    assert_clean(as_json(result).decode(), name)


@pytest.mark.parametrize(
    "key",
    [
        "private-key",
        "private_key",
        "privateKey",
        "PRIVATE.KEY",
        "aws_secret_access_key",
        "hf_token",
        "db_password",
        "Authorization",
    ],
)
def test_these_keys_are_secret(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "text_",
    [
        "/data/gpt/ckpt",
        "https://huggingface.co/gpt2?revision=main",
        "a=b",
        "user@example.com",
        "training.steps=3",
        "tokenizer.path=/x",
        "key: value",
        "host.example:path/file",
        "rank-00000.jsonl",
    ],
)
def test_ordinary_text_is_kept(text_: str) -> None:
    assert redact_text(text_) == text_


def test_a_secret_inside_the_value_of_an_ordinary_name_is_still_found() -> None:
    out = redact_text(f"tokenizer.path='/x/password=hunter22/{SAMPLES['hugging_face_token'][0]}' missing")
    assert "hunter22" not in out and "tokenizer.path='/x/password=" in out and out.endswith("' missing")
