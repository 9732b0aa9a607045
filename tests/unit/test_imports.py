import subprocess
import sys


def test_importing_the_packages_pulls_in_neither_torch_nor_megatron() -> None:
    code = (
        "import sys, lifecycle, states, bindings, lifecycle.cli, lifecycle.auditlog;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
