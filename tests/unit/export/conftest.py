from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from export_logs import clean_2_ranks, failed_run


@pytest.fixture(scope="session")
def clean_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clean_2_ranks(tmp_path_factory.mktemp("clean"))


@pytest.fixture(scope="session")
def failed_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return failed_run(tmp_path_factory.mktemp("failed"))
