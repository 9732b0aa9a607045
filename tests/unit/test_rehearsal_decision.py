from __future__ import annotations

import pytest

from lifecycle.core_entry.distributed import decide_rehearsal


@pytest.mark.parametrize(
    ("flag", "cuda", "expected"),
    [
        (None, False, (True, "cuda absent")),
        (None, True, (False, "cuda available")),
        (True, True, (True, "forced by config")),
        (False, False, (False, "disabled by config")),
    ],
)
def test_rehearsal_is_automatic_without_cuda_and_the_flag_forces_either_way(
    flag: bool | None, cuda: bool, expected: tuple[bool, str]
) -> None:
    assert decide_rehearsal(flag, cuda) == expected


def test_importing_the_distributed_phase_imports_neither_torch_nor_megatron() -> None:
    import subprocess
    import sys

    code = "import lifecycle.core_entry.distributed, sys; print('torch' in sys.modules, 'megatron' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
