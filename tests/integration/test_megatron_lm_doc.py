"""docs/adopting.md's first section runs as written: its script is `examples/pretrain_gpt_tiny.py`
(one source), the one-import diff is the only change from Megatron-LM's import, and its `$` commands
(2 CPU ranks under torchrun, then `lifecycle audit`) exit 0 with a clean audit and one
`step_completed` per iteration on each rank."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "adopting.md"


def section() -> str:
    text = GUIDE.read_text()
    return text[text.index("## One import") : text.index("## Bring your provider")]


def test_the_guides_script_is_the_example_script_with_the_one_import() -> None:
    block = re.findall(r"```python\n(.*?)```", section(), flags=re.S)[0]
    assert block.startswith("# file: pretrain_gpt.py\n")
    assert block.removeprefix("# file: pretrain_gpt.py\n") == (ROOT / "examples" / "pretrain_gpt_tiny.py").read_text()
    diff = re.findall(r"```diff\n(.*?)```", section(), flags=re.S)[0]
    theirs, mine = "from megatron.training import pretrain", "from lifecycle.lm_dropin import pretrain"
    assert diff.splitlines() == [f"-{theirs}", f"+{mine}"]
    assert mine in block and theirs not in block.replace(f"# was: {theirs}", "")


def test_the_one_import_section_runs_as_written(tmp_path: Path) -> None:
    from lifecycle.launchers.local import free_port

    (tmp_path / "pretrain_gpt.py").write_text((ROOT / "examples" / "pretrain_gpt_tiny.py").read_text())
    commands = [
        line[2:]
        for block in re.findall(r"```bash\n(.*?)```", section(), flags=re.S)
        for line in block.splitlines()
        if line.startswith("$ ")
    ]
    bin_dir = Path(sys.executable).parent
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp")}
    outputs = []
    for command in commands:
        argv = shlex.split(command)
        env = dict(base)
        while "=" in argv[0]:
            key, value = argv.pop(0).split("=", 1)
            env[key] = value
        if argv[0] == "torchrun":
            argv[1:1] = ["--master-port", str(free_port())]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        outputs.append(done.stdout + done.stderr)
    assert [shlex.split(c)[1] for c in commands] == ["torchrun", "audit"]
    assert "iteration        5/       5" in outputs[0]
    assert "INFO:transitions" not in outputs[0]
    assert "clean" in outputs[1]
    for rank in (0, 1):
        recs = [json.loads(x) for x in (tmp_path / "runs/dropin" / f"rank-{rank:05d}.jsonl").read_text().splitlines()]
        assert [r["step"] for r in recs if r["event"] == "step_completed"] == [1, 2, 3, 4, 5]
