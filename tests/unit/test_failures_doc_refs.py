"""docs/failures.md's claims about the log directory, redaction and bad input hold: every test it
cites as showing a behaviour exists, every redaction shape is listed, and every check it names runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lifecycle.testing import LOCK_NAME, SHAPES, check_names

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "failures.md").read_text()
CITED = sorted(set(re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", DOC)))
# shape -> the words the Credentials section lists it by
LISTED = {
    "pem_private_key": "PEM private",
    "url_userinfo": "https://user:pass@",
    "scp_userinfo": "user:pass@host:path",
    "query_parameter": "X-Amz-Signature",
    "authorization_header": "Authorization: Bearer",
    "secret_assignment": "AWS_SECRET_ACCESS_KEY=",
    "hugging_face_token": "hf_",
    "github_token": "ghp_",
    "gitlab_token": "glpat-",
    "slack_token": "xoxb-",
    "google_api_key": "AIza",
    "openai_key": "sk-",
    "aws_access_key_id": "AKIA",
    "jwt": "JWT",
}


@pytest.mark.parametrize(("path", "test"), CITED, ids=[f"{p}::{t}" for p, t in CITED])
def test_every_test_the_doc_cites_exists(path: str, test: str) -> None:
    source = (ROOT / path).read_text()
    assert not test or re.search(rf"^def {test}\(", source, re.M), f"{path}::{test} does not exist"


def test_every_redaction_shape_is_listed_in_the_credentials_section() -> None:
    section = DOC[DOC.index("## Credentials") :]
    section = section[: section.index("\n## ", 4)]
    assert sorted(LISTED) == sorted(s.name for s in SHAPES)
    assert [name for name, words in LISTED.items() if words not in section] == []


def test_the_checks_and_the_lock_file_the_doc_names_are_the_real_ones() -> None:
    names = {name for name, _ in check_names()}
    assert {"bounds", "local_paths"} <= names
    assert f"<log_dir>/{LOCK_NAME}" in DOC
