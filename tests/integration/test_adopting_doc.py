"""docs/adopting.md runs as written: its script is written out and every `$` command of its console
block runs (2 CPU ranks under torchrun, then `lifecycle run` with the script's provider, then the
audits), each exiting 0."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]  # the floor skips it (scripts/test)
ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "adopting.md"
LOCK = ".lifecycle.lock"  # the log directory's owner lock (docs/failures.md)


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", GUIDE.read_text(), flags=re.S)


def test_the_adopting_guide_runs_as_written(tmp_path: Path) -> None:
    scripts = [b for b in blocks("python") if b.startswith("# file: ")]
    assert scripts, "the guide has no '# file:' block"
    for block in scripts:
        (tmp_path / block.splitlines()[0].removeprefix("# file: ").strip()).write_text(block)
    commands = [line[2:] for block in blocks("console") for line in block.splitlines() if line.startswith("$ ")]
    assert [c.split()[0] for c in commands] == ["torchrun", "lifecycle", "lifecycle", "lifecycle"]
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp")}
    outputs = []
    for command in commands:
        argv = shlex.split(command)
        if argv[0] == "torchrun":  # a port of our own: other runs may share the machine
            argv[1:1] = ["--master-port", str(_free_port())]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        outputs.append(done.stdout)
    assert "step 2: loss" in outputs[0] and "finalizer calls 1" in outputs[0]
    assert "✓ CALLBACKS_BOUND" in outputs[1] and "step 2/2: loss" in outputs[1]
    ranks = [LOCK, "rank-00000.jsonl", "rank-00001.jsonl"]
    assert sorted(p.name for p in (tmp_path / "runs/script").iterdir()) == ranks
    assert sorted(p.name for p in (tmp_path / "runs/cli").iterdir()) == [LOCK, "launcher-00000.jsonl", *ranks[1:]]


def _free_port() -> int:
    from lifecycle.launchers.local import free_port

    return free_port()


def test_the_readme_snippet_runs_with_two_ranks_as_the_readme_says(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    snippet = re.findall(r"```python\n(.*?)```", readme, flags=re.S)[0]
    assert "torchrun --nproc-per-node 2 snippet.py" in readme
    (tmp_path / "snippet.py").write_text(snippet)
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp")}
    done = subprocess.run(
        ["torchrun", "--master-port", str(_free_port()), "--nproc-per-node", "2", "snippet.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "runs" / "x").iterdir()) == [LOCK, "rank-00000.jsonl", "rank-00001.jsonl"]
